import CGdkPixbuf
import Glibc

/// One GdkPixbufLoader: of the format the daemon checked (never one gdk-pixbuf guesses from the bytes, which can name
/// another: `<!DOCTYPE svg` in a PNG's first row or a JPEG's Exif text made it SVG), and a size handler may ask it to
/// decode at a smaller size (JPEG then decodes at 1/2, 1/4 or 1/8 directly in libjpeg; other loaders decode at
/// full size and scale afterwards). Closed and unreferenced in `deinit`; confined to the thread that made it.
final class PixbufLoader {
    /// Called once the loader knows the stored size; returns the size to decode at, or nil for the stored size.
    /// Returning (0, 0) makes the loader give up (the next write or the close fails).
    typealias SizeHandler = (_ width: Int, _ height: Int) -> (width: Int, height: Int)?

    /// Formats whose loader hands out the new pixbuf before writing to it and may then leave rows unwritten without
    /// an error (libpng treats a broken zlib stream inside whole chunks as a benign warning): their pixbuf is cleared
    /// to transparent black when it is prepared, so no stale heap memory can reach a variant. Not every loader may
    /// be cleared there: the AVIF one fills the pixbuf before announcing it.
    static let clearedOnPrepare: Set<String> = ["png"]

    private let handle: UnsafeMutablePointer<GdkPixbufLoader>
    /// The signals' user data, kept alive as long as the loader.
    private let state: LoaderState
    private var closed = false

    /// A loader of `format` (a name `ImageFormats.normalise` gives, which is gdk-pixbuf's own); fails when no
    /// loader of that name is installed.
    init(format: String, onSizePrepared handler: SizeHandler? = nil) throws(GLibError) {
        var error: UnsafeMutablePointer<GError>?
        guard let handle = gdk_pixbuf_loader_new_with_type(format, &error) else {
            throw GLibError("gdk_pixbuf_loader_new_with_type", taking: error)
        }
        self.handle = handle
        state = LoaderState(handler)
        let data = Unmanaged.passUnretained(state).toOpaque()
        prefetchd_loader_on_size_prepared(handle, sizePrepared, data)
        prefetchd_loader_on_area_prepared(handle, areaPrepared, data)
        prefetchd_loader_on_area_updated(handle, areaUpdated, data)
    }

    deinit {
        // gdk-pixbuf warns about a loader finalized without a close; its error no longer matters here.
        if !closed { gdk_pixbuf_loader_close(handle, nil) }
        g_object_unref(UnsafeMutableRawPointer(handle))
    }

    /// The stored size the loader reported, once it has.
    var storedSize: (width: Int, height: Int)? { state.stored }

    /// The end of the lowest row any "area-updated" signal reported (0 when none did). Loaders that report rows as
    /// they decode them (PNG, JPEG) reach the pixbuf's height only when every row arrived; others report at the end
    /// or not at all (AVIF), so this only means something per format.
    var updatedRowsEnd: Int { state.updatedRowsEnd }

    func write(_ bytes: UnsafeRawBufferPointer) throws(GLibError) {
        guard let base = bytes.baseAddress, bytes.count > 0 else { return }
        var error: UnsafeMutablePointer<GError>?
        guard gdk_pixbuf_loader_write(handle, base.assumingMemoryBound(to: UInt8.self), gsize(bytes.count), &error) != 0
        else { throw GLibError("gdk_pixbuf_loader_write", taking: error) }
    }

    /// Tells the loader the data has ended; fails when the image could not be decoded.
    func close() throws(GLibError) {
        closed = true
        var error: UnsafeMutablePointer<GError>?
        guard gdk_pixbuf_loader_close(handle, &error) != 0 else { throw GLibError("gdk_pixbuf_loader_close", taking: error) }
    }

    /// A part of what `feed` writes: a range of the file (to its end at most), or bytes of its own.
    enum Piece {
        case file(Range<Int64>)
        case bytes([UInt8])
    }

    /// Writes `pieces` of `file` (all of it by default) in chunks of at most 64 KiB, stopping early when `stop` says
    /// so after a chunk. The file is read through the descriptor it was opened with, not opened again by its path.
    func feed(_ file: ImageFile, pieces: [Piece] = [.file(0 ..< .max)], stop: () -> Bool = { false }) throws(ImageReadError) {
        let fd = file.descriptor, path = file.path
        let chunk = UnsafeMutableRawBufferPointer.allocate(byteCount: 64 * 1024, alignment: 1)
        defer { chunk.deallocate() }
        for piece in pieces {
            switch piece {
            case .bytes(let bytes):
                guard !stop() else { return }
                let failure = bytes.withUnsafeBytes { bytes -> GLibError? in
                    do throws(GLibError) { try write(bytes) } catch { return error }
                    return nil
                }
                if let failure { throw .decode(failure) }
            case .file(let range):
                var offset = range.lowerBound
                while offset < range.upperBound, !stop() {
                    let count: Int
                    let wanted = Int(min(Int64(chunk.count), range.upperBound - offset))
                    do throws(SystemError) {
                        count = try syscall("pread", path) { pread(fd, chunk.baseAddress!, wanted, off_t(offset)) }
                    } catch {
                        throw .io(error)
                    }
                    if count == 0 { break }
                    offset += Int64(count)
                    do throws(GLibError) { try write(UnsafeRawBufferPointer(rebasing: chunk[..<count])) } catch {
                        throw .decode(error)
                    }
                }
            }
        }
    }

    /// The image decoded so far (the first frame of an animation), or nil when there is none yet.
    var pixbuf: Pixbuf? {
        gdk_pixbuf_loader_get_pixbuf(handle).map { Pixbuf(borrowing: $0) }
    }

    fileprivate static func formatName(_ loader: UnsafeMutablePointer<GdkPixbufLoader>) -> String? {
        guard let format = gdk_pixbuf_loader_get_format(loader), let name = gdk_pixbuf_format_get_name(format) else {
            return nil
        }
        defer { g_free(name) }
        return ImageFormats.normalise(String(cString: name))
    }
}

/// Why feeding a file to a loader failed: reading the file, or the loader refusing the bytes.
enum ImageReadError: Error {
    case io(SystemError)
    case decode(GLibError)
}

/// What the C signal handlers read and record for one loader.
private final class LoaderState {
    let sizeHandler: PixbufLoader.SizeHandler?
    var stored: (width: Int, height: Int)?
    var scaling = false
    var updatedRowsEnd = 0

    init(_ sizeHandler: PixbufLoader.SizeHandler?) { self.sizeHandler = sizeHandler }
}

private func state(_ data: gpointer?) -> LoaderState {
    Unmanaged<LoaderState>.fromOpaque(data!).takeUnretainedValue()
}

private func sizePrepared(_ loader: UnsafeMutablePointer<GdkPixbufLoader>?, _ width: gint, _ height: gint,
                          _ data: gpointer?) {
    let state = state(data)
    state.stored = (Int(width), Int(height))
    if let size = state.sizeHandler?(Int(width), Int(height)) {
        state.scaling = true
        gdk_pixbuf_loader_set_size(loader, gint(size.width), gint(size.height))
    }
}

private func areaPrepared(_ loader: UnsafeMutablePointer<GdkPixbufLoader>?, _ data: gpointer?) {
    // A scaling loader may announce its finished, scaled copy here: only an unscaled pixbuf is known to be blank.
    guard let loader, !state(data).scaling, let format = PixbufLoader.formatName(loader),
          PixbufLoader.clearedOnPrepare.contains(format), let pixbuf = gdk_pixbuf_loader_get_pixbuf(loader) else { return }
    gdk_pixbuf_fill(pixbuf, 0)
}

private func areaUpdated(_ loader: UnsafeMutablePointer<GdkPixbufLoader>?, _ x: gint, _ y: gint, _ width: gint,
                         _ height: gint, _ data: gpointer?) {
    let state = state(data)
    state.updatedRowsEnd = max(state.updatedRowsEnd, Int(y) + Int(height))
}
