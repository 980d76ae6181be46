/// Where the items of an ISO base media file (AVIF, HEIF) keep their data, from the `iloc` box of its `meta` box:
/// what libavif follows to decode, and so what tells a whole file from a cut one (bytes after the data are ignored).
struct ISOItemLocations: Equatable {
    /// How far into the file the items' data reaches (construction method 0, in this file).
    var fileReach: UInt64
    /// How far into the `idat` box's data the items' data reaches (construction method 1).
    var idatReach: UInt64
    /// The length of the `idat` box's data, if there is one.
    var idatLength: UInt64?

    /// Whether the data the items point to lies within `fileSize` bytes and within the `idat` box.
    func fits(fileSize: Int64) -> Bool { fileReach <= UInt64(max(0, fileSize)) && idatFits }

    /// Whether the data kept in the meta box itself lies within its `idat` box.
    var idatFits: Bool { idatReach == 0 || idatReach <= idatLength ?? 0 }

    /// What a `meta` box's body is short of or malformed in.
    enum Problem: Error, Equatable {
        /// A box in it runs past its end.
        case overrun
        /// It has no `iloc` box.
        case noLocations
        /// Its `iloc` box cannot be read.
        case malformedLocations
    }

    /// The locations in `meta`, a `meta` box's body, version and flags included.
    static func read(meta: ArraySlice<UInt8>) throws(Problem) -> ISOItemLocations {
        var locations: ISOItemLocations?
        var idatLength: UInt64?
        var at = meta.startIndex + 4
        while at < meta.endIndex {
            guard meta.endIndex - at >= 8 else { throw .overrun }
            var size = UInt64(Self.number(meta, at, 4))
            var header = 8
            if size == 1 {
                guard meta.endIndex - at >= 16 else { throw .overrun }
                size = Self.number(meta, at + 8, 8)
                header = 16
            } else if size == 0 {
                size = UInt64(meta.endIndex - at)
            }
            guard size >= UInt64(header), size <= UInt64(meta.endIndex - at) else { throw .overrun }
            let body = meta[(at + header)..<(at + Int(size))]
            let type = meta[(at + 4)..<(at + 8)]
            if type.elementsEqual("iloc".utf8), locations == nil {
                guard let read = Self.reach(iloc: body) else { throw .malformedLocations }
                locations = read
            } else if type.elementsEqual("idat".utf8), idatLength == nil {
                idatLength = UInt64(body.count)
            }
            at += Int(size)
        }
        guard var locations else { throw .noLocations }
        locations.idatLength = idatLength
        return locations
    }

    /// How far the items of an `iloc` box's body reach; nil when it cannot be read (ISO/IEC 14496-12, 8.11.3).
    private static func reach(iloc b: ArraySlice<UInt8>) -> ISOItemLocations? {
        var at = b.startIndex
        /// The next `size` bytes as a big-endian number; nil past the end.
        func read(_ size: Int) -> UInt64? {
            guard b.endIndex - at >= size else { return nil }
            defer { at += size }
            return Self.number(b, at, size)
        }
        guard let version = read(1), version <= 2, read(3) != nil, let sizes = read(1), let more = read(1) else { return nil }
        let offsetSize = Int(sizes >> 4), lengthSize = Int(sizes & 15), baseSize = Int(more >> 4)
        let indexSize = version == 0 ? 0 : Int(more & 15)
        guard [offsetSize, lengthSize, baseSize, indexSize].allSatisfy({ [0, 4, 8].contains($0) }),
              let items = read(version < 2 ? 2 : 4) else { return nil }
        var reach = ISOItemLocations(fileReach: 0, idatReach: 0)
        // Each item takes at least 6 bytes, each extent (when it has a field) 4: the loops end with the box.
        for _ in 0..<items {
            guard read(version < 2 ? 2 : 4) != nil else { return nil }
            var method: UInt64 = 0
            if version > 0 {
                guard let word = read(2) else { return nil }
                method = word & 15
            }
            guard let reference = read(2), let base = read(baseSize), let extents = read(2) else { return nil }
            var end = base
            if offsetSize + lengthSize + indexSize > 0 {
                for _ in 0..<extents {
                    guard read(indexSize) != nil, let offset = read(offsetSize), let length = read(lengthSize) else { return nil }
                    let (start, late) = base.addingReportingOverflow(offset)
                    let (last, later) = start.addingReportingOverflow(length)
                    end = max(end, late || later ? .max : last)
                }
            }
            switch method {
            case 0 where reference == 0: reach.fileReach = max(reach.fileReach, end)
            case 1: reach.idatReach = max(reach.idatReach, end)
            default: break  // another file's data, or another item's
            }
        }
        return reach
    }

    /// `size` bytes (at most 8) at `at` as a big-endian number.
    private static func number(_ bytes: ArraySlice<UInt8>, _ at: Int, _ size: Int) -> UInt64 {
        bytes[at..<(at + size)].reduce(0) { $0 << 8 | UInt64($1) }
    }
}
