/// Where the items of an ISO base media file (AVIF, HEIF) keep their data, from the `iloc` box of its `meta` box:
/// what libavif follows to decode, and so what tells a whole file from a cut one (bytes after the data are ignored).
struct ISOItemLocations: Equatable {
    /// How far into the file the items' data reaches (construction method 0; libavif reads it from this file
    /// whatever its data reference says); `UInt64.max` when an offset and a length pass 2^64.
    var fileReach: UInt64 = 0
    /// How far into the `idat` box's data the items' data reaches (construction method 1).
    var idatReach: UInt64 = 0
    /// How many items the box lists.
    var itemCount: UInt64 = 0
    /// The ids of the items it lists.
    var items: Set<UInt32> = []
    /// Where each item's data lies, by item id, for the items kept in the file or the `idat` box (the first
    /// `mostExtents` extents in all).
    var extents: [UInt32: [Extent]] = [:]
    static let mostExtents = 1 << 16

    /// An extent of an item's data: in the `idat` box's data or in the file, at `offset`, `length` bytes long
    /// (0: to the end).
    struct Extent: Equatable {
        let inIdat: Bool
        let offset: UInt64
        let length: UInt64
    }

    /// Reads the body of an `iloc` box (version and flags included; ISO/IEC 14496-12, 8.11.3); nil when it cannot
    /// be read.
    init?(iloc b: ArraySlice<UInt8>) {
        var at = b.startIndex
        /// The next `size` bytes (at most 8) as a big-endian number; nil past the end.
        func read(_ size: Int) -> UInt64? {
            guard b.endIndex - at >= size else { return nil }
            defer { at += size }
            return b[at..<(at + size)].reduce(0) { $0 << 8 | UInt64($1) }
        }
        guard let version = read(1), version <= 2, read(3) != nil, let sizes = read(1), let more = read(1) else { return nil }
        let offsetSize = Int(sizes >> 4), lengthSize = Int(sizes & 15), baseSize = Int(more >> 4)
        let indexSize = version == 0 ? 0 : Int(more & 15)
        guard [offsetSize, lengthSize, baseSize, indexSize].allSatisfy({ [0, 4, 8].contains($0) }),
              let items = read(version < 2 ? 2 : 4) else { return nil }
        itemCount = items
        var recorded = 0
        // Each item takes at least 6 bytes, each extent (when it has a field) 4: the loops end with the box.
        for _ in 0..<items {
            guard let item = read(version < 2 ? 2 : 4) else { return nil }
            self.items.insert(UInt32(item))
            var method: UInt64 = 0
            if version > 0 {
                guard let word = read(2) else { return nil }
                method = word & 15
            }
            guard read(2) != nil, let base = read(baseSize), let extents = read(2) else { return nil }  // data reference
            var end = base
            var kept: [Extent] = []
            if offsetSize + lengthSize + indexSize > 0 {
                for _ in 0..<extents {
                    guard read(indexSize) != nil, let offset = read(offsetSize), let length = read(lengthSize) else { return nil }
                    let (start, late) = base.addingReportingOverflow(offset)
                    let (last, later) = start.addingReportingOverflow(length)
                    end = max(end, late || later ? .max : last)
                    if !late, recorded < Self.mostExtents {
                        kept.append(Extent(inIdat: method == 1, offset: start, length: length))
                        recorded += 1
                    }
                }
            }
            if method <= 1, !kept.isEmpty, self.extents[UInt32(item)] == nil { self.extents[UInt32(item)] = kept }
            switch method {
            case 0: fileReach = max(fileReach, end)
            case 1: idatReach = max(idatReach, end)
            default: break  // another item's data
            }
        }
    }
}
