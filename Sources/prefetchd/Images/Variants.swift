import Glibc
import QueueCore

/// Resized variants being made, shaped like `Fetches`: a keyed pool of jobs, one per (original, resolved spec)
/// however many ask for it. A job decodes and resizes the cached original on a worker, under the crash guard, indexes
/// the result and reports its end once, through `onEnd`; who waits for it is the daemon's to answer.
///
/// Jobs decode at most `max_pixels` at a time between them: a job holds its decoded picture and its output in memory
/// (3 or 4 bytes a pixel), so two of the largest originals at once would double the daemon's peak memory. (The
/// workers are the jobs' own: fetches check their bodies on other threads.) A job that would go over waits its turn;
/// one job always runs, however large. The clients take turns: a client's next job waits behind one of every other
/// client's waiting (so one client's batch of large resizes holds another's for about a job, not for the whole
/// batch: twenty 7000×7000 upscales held another client's variant 24 s), and each client's own jobs keep the order
/// it asked in. A small job (a thumbnail) passes the line while only
/// large jobs hold it up, within a sixteenth of the budget for all small jobs passing: it does not wait behind
/// another client's 50 Mpx resizes, and it cannot starve them (once large work no longer holds the first in line,
/// nothing passes it).
final class Variants {
    /// A variant being made: the original's key and the resolved spec.
    struct Job: Hashable {
        let key: String
        let spec: String
    }

    /// A variant made and indexed, and the original it was made of.
    struct Made {
        let variant: Store.Variant
        let original: IndexEntry
    }

    private let store: Store
    private let workers: WorkerPool
    /// One thread that reads what a job's cost needs of its original (`pixels`), off the loop thread: a GIF's
    /// extensions before its first image or a WebP's chunk headers may be tens of megabytes.
    private let costs: WorkerPool
    private let crashGuard: CrashGuard
    /// Jobs started (or held back by the crash guard) and not ended yet.
    private var jobs: Set<Job> = []
    private var maxPixels: Int64
    /// Pixels the running jobs hold (`pixels(of:spec:)`), those of them that small jobs hold which passed the line,
    /// and the jobs waiting for room under `maxPixels`, by round (`run` is told whether the job passed).
    private var pixelsInFlight: Int64 = 0
    private var passedInFlight: Int64 = 0
    private var waiting: [(pixels: Int64, round: UInt64, client: UInt64, run: (_ passed: Bool) -> Void)] = []
    /// The round of the last job that left the line at its front, and the next round of each client with jobs in the
    /// line: a client's jobs take consecutive rounds from the current one, and a round's jobs wait in the order they
    /// came.
    private var round: UInt64 = 0
    private var nextRounds: [UInt64: UInt64] = [:]
    /// Called on the loop thread once for every job that ends.
    var onEnd: (_ job: Job, _ outcome: Result<Made, Failure>) -> Void = { _, _ in }

    init(store: Store, workers: WorkerPool, costs: WorkerPool, crashGuard: CrashGuard, options: Options) {
        self.store = store
        self.workers = workers
        self.costs = costs
        self.crashGuard = crashGuard
        maxPixels = options.images.maxPixels
    }

    /// The settings a reload may change.
    func reconfigure(_ options: Options) {
        maxPixels = options.images.maxPixels
        startWaiting()
    }

    /// The originals of the variants being made: their files stay in the cache until then.
    var originalsInUse: Set<String> { Set(jobs.map(\.key)) }

    /// The variant `job` names, made before and still intact on disk.
    func existing(_ job: Job) -> Store.Variant? {
        guard let variant = try? store.variant(job.key, spec: job.spec),
              store.files.size(of: variant.file) == variant.bytes else { return nil }
        return variant
    }

    /// Makes `spec` (resolved, named by `job`) of the cached `original` in the turns of `client` (the first to ask),
    /// unless that job runs already.
    func make(_ job: Job, _ spec: VariantSpec, of original: IndexEntry, for client: UInt64) {
        guard jobs.insert(job).inserted else { return }
        // Named by the original's bytes too: a variant of a new body gets a new path, never the old one written over.
        let name = CacheFiles.name(forKey: job.key + "#" + job.spec, body: original.sha256)
        let relative = CacheFiles.relativePath(forName: name)
        let source = store.files.absolute(original.file)
        let destination = store.files.absolute(relative)
        store.files.willPlace(destination)
        let (maxPixels, placed, files) = (maxPixels, store.files.placed, store.files.filesDirectory)
        let make: @Sendable () -> Result<(ImageInfo, String), Failure> = {
            do {
                // Not written through a link in place of `files/` or of its `ab` directory.
                try CacheFiles.makeDirectory(replacing: files)
                try CacheFiles.makeDirectory(replacing: String(destination[..<destination.lastIndex(of: "/")!]))
                let info = try Resizer.makeVariant(source: source, spec: spec, destination: destination, maxPixels: maxPixels,
                                                   placed: placed)
                guard let sha256 = SHA256.hex(ofFile: destination) else {
                    return .failure(Failure(code: .internal, message: "cannot read the variant back", isTransient: true))
                }
                return .success((info, sha256))
            } catch let error as Failure {
                return .failure(error)
            } catch {
                return .failure(Failure(code: .internal, message: "\(error)", isTransient: true))
            }
        }
        let (width, height, format, sha256) = (original.width, original.height, original.format, original.sha256)
        costs.run({ Self.pixels(width: width, height: height, format: format, source: source, spec: spec, maxPixels: maxPixels) },
                  completion: { [unowned self] pixels in
            let turn = max(round, nextRounds[client] ?? 0)
            nextRounds[client] = turn + 1
            // Decoding an original is a risky step (`CrashGuard`).
            let place = waiting.firstIndex { $0.round > turn } ?? waiting.endIndex
            waiting.insert((pixels, turn, client, { [unowned self] passed in
                crashGuard.whenFree { [unowned self] in
                    crashGuard.begin([job.key])
                    workers.run(make, completion: { [unowned self] result in
                        pixelsInFlight -= pixels
                        if passed { passedInFlight -= pixels }
                        made(job, spec, from: sha256, relative: relative, for: client, result)
                        startWaiting()
                    })
                }
            }), at: place)
            startWaiting()
        })
    }

    /// Starts the waiting jobs, in order, while they fit under `maxPixels` with the running ones (or none runs); then
    /// the small ones that may pass the first in line.
    private func startWaiting() {
        while let next = waiting.first, pixelsInFlight == 0 || pixelsInFlight + next.pixels <= maxPixels {
            waiting.removeFirst()
            left(next.client, round: next.round)
            pixelsInFlight += next.pixels
            next.run(false)
        }
        let allowance = maxPixels / 16
        guard let first = waiting.first, pixelsInFlight - passedInFlight + first.pixels > maxPixels else { return }
        var index = 1
        while index < waiting.count, passedInFlight < allowance {
            let job = waiting[index]
            guard job.pixels <= allowance - passedInFlight else {
                index += 1
                continue
            }
            waiting.remove(at: index)
            left(job.client, round: nil)
            pixelsInFlight += job.pixels
            passedInFlight += job.pixels
            job.run(true)
        }
    }

    /// A job of `client` left the line, at its front in `jobRound` (a small job passing it ends no round): a client
    /// with no job left in the line takes the current round when it asks again.
    private func left(_ client: UInt64, round jobRound: UInt64?) {
        if let jobRound { round = max(round, jobRound) }
        if !waiting.contains(where: { $0.client == client }) { nextRounds[client] = nil }
    }

    /// The pixels a job holds at once: the picture decoded (smaller than the original for loaders that scale while
    /// decoding; every frame of an animated WebP, each on a canvas of its own, and a GIF's first frame where it is
    /// larger than the screen, as `Resizer` decodes them) and the output, and for a progressive JPEG the coefficients
    /// libjpeg keeps for the whole picture (in pixels of 4 bytes: a 7071×7071 one held 300 MB to make a 100×100
    /// thumbnail, counted as 0.8 Mpx). From the size the index recorded (`width`, `height`); an original of unknown
    /// size counts as the largest allowed. An animated WebP of 40 frames of 1100×1100 (48 Mpx) was counted as its
    /// canvas, 1.2; an AVIF grid of 127×127 tiles of 8×8 (6.4 GB) as its 1 Mpx. Reads the original at `source`: on the
    /// `costs` thread.
    private static func pixels(width: Int?, height: Int?, format: String?, source: String, spec: VariantSpec,
                               maxPixels: Int64) -> Int64 {
        guard let width, let height, (1...Int(Int32.max)).contains(width),
              (1...Int(Int32.max)).contains(height) else { return maxPixels }
        let geometry = VariantGeometry(sourceWidth: width, sourceHeight: height, spec: spec)
        let stored = ImageInfo.pixels(width, height)
        var decoded = stored
        if Resizer.scalingLoaders.contains(format ?? ""),
           let smaller = geometry.decodeSize(storedWidth: width, storedHeight: height) {
            decoded = Int64(smaller.width) * Int64(smaller.height)
        }
        var extra: Int64 = 0
        // 64 KiB of a JPEG, the chunk headers of a WebP, a GIF up to its first image.
        switch format {
        case "jpeg":
            // A frame header past the first 64 KiB counts as progressive, 3 components.
            let head = (try? ImageFile(source, prefixLength: 64 * 1024)).map { Array($0.prefix) } ?? []
            extra = (ImageHeader.wholeImageCoefficientBytes(head) ?? stored.saturatingMultiply(6)) / 4
        case "webp":
            guard let frames = try? ImageIntegrity.webpFrames(ImageFile(source)) else { return maxPixels }
            decoded = Resizer.animationPixels(frames: frames, width: width, height: height)
        case "gif":
            guard let first = try? ImageIntegrity.gifFirstFrame(ImageFile(source)) else { return maxPixels }
            decoded = Int64(max(width, first.width)).saturatingMultiply(Int64(max(height, first.height)))
        case "avif":
            // Every tile of a grid and its decoder, an alpha plane, a frame scaled to its ispe (AVIFCodedSize).
            let coded: Result<AVIFCodedSize, AVIFCodedSize.Problem>?
            do { coded = try ImageIntegrity.avifCodedSize(ImageFile(source)) } catch { return maxPixels }
            switch coded {
            case .success(let size)?: decoded = max(decoded, size.decoded)
            case nil: break  // no AV1 image: the loader decodes none
            case .failure?: return maxPixels
            }
        default:
            break
        }
        // Sizes from the index, each up to 2^31: their products and sum saturate.
        return decoded.saturatingAdd(Int64(geometry.outputWidth).saturatingMultiply(Int64(geometry.outputHeight)))
            .saturatingAdd(extra)
    }

    /// The worker is done: the variant is indexed (if its original is still cached, with the body it was made
    /// from: `source`, its SHA-256), and the job ends.
    private func made(_ job: Job, _ spec: VariantSpec, from source: String, relative: String, for client: UInt64,
                      _ result: Result<(ImageInfo, String), Failure>) {
        crashGuard.end(job.key)
        jobs.remove(job)
        let outcome: Result<Made, Failure>
        do {
            switch result {
            case .success(let (info, sha256)):
                guard let original = try store.entry(job.key), let bytes = store.files.size(of: relative) else {
                    store.files.remove(relative)
                    throw Failure(code: .internal, message: "the original was evicted while its variant was made",
                                  isTransient: true)
                }
                guard original.sha256 == source else {
                    // A new body came while the old one was decoded: the job runs again, its waiters still waiting.
                    Log.info("\(job.key) changed while its \(job.spec) variant was made; making it again")
                    return make(job, spec, of: original, for: client)
                }
                let variant = Store.Variant(file: relative, bytes: bytes, sha256: sha256, format: info.format,
                                            width: info.width, height: info.height)
                try store.putVariant(job.key, spec: job.spec, variant)
                outcome = .success(Made(variant: variant, original: original))
            case .failure(let failure):
                throw failure
            }
        } catch let failure as Failure {
            Log.info("cannot make \(job.spec) of \(job.key): \(failure.code.rawValue): \(failure.message)")
            outcome = .failure(failure)
        } catch {
            outcome = .failure(Failure(code: .internal, message: "cannot index the variant: \(error)", isTransient: true))
        }
        onEnd(job, outcome)
    }
}
