import Testing
@testable import prefetchd

/// The `iloc` reading that tells a whole AVIF from a cut one: every version and field size, and hostile numbers.
@Suite struct ISOItemLocationsTests {
    func box(_ type: String, _ body: [UInt8]) -> [UInt8] { Bytes.bigEndian(UInt32(8 + body.count)) + Array(type.utf8) + body }
    func be16(_ value: Int) -> [UInt8] { [UInt8(value >> 8 & 0xFF), UInt8(value & 0xFF)] }
    func be64(_ value: UInt64) -> [UInt8] { Bytes.bigEndian(UInt32(value >> 32)) + Bytes.bigEndian(UInt32(value & 0xFFFF_FFFF)) }
    /// A meta body (version and flags, then `children`).
    func meta(_ children: [UInt8]...) -> ArraySlice<UInt8> { ([0, 0, 0, 0] + children.joined())[...] }

    @Test func fixtureReachesItsEnd() throws {
        let avif = Bytes.read(Fixtures.path("halves.avif"))  // meta 32..<274, its one item at 282 + 126 = 408
        let locations = try ISOItemLocations.read(meta: avif[40..<274])
        #expect(locations == ISOItemLocations(fileReach: 408, idatReach: 0, idatLength: nil))
        #expect(locations.fits(fileSize: 408) && !locations.fits(fileSize: 407))
    }

    @Test("versions 0, 1 and 2, with 4- and 8-byte fields, a base offset, extent indexes and several extents: the furthest byte counts")
    func versionsAndSizes() throws {
        // v0: offset 4, length 4, base 4; one item of two extents.
        let v0 = [0, 0, 0, 0, 0x44, 0x40] + be16(1) + be16(1) + be16(0) + Bytes.bigEndian(1000) + be16(2)
            + Bytes.bigEndian(10) + Bytes.bigEndian(5) + Bytes.bigEndian(100) + Bytes.bigEndian(50)
        #expect(try ISOItemLocations.read(meta: meta(box("iloc", v0))).fileReach == 1150)
        // v1: offset 8, length 8, base 0, index 4; construction method 1 (idat) and 0.
        let v1 = [1, 0, 0, 0, 0x88, 0x04] + be16(2)
            + be16(1) + be16(1) + be16(0) + be16(1) + Bytes.bigEndian(0) + be64(2) + be64(3)
            + be16(2) + be16(0) + be16(0) + be16(1) + Bytes.bigEndian(7) + be64(4000) + be64(96)
        let inIdat = try ISOItemLocations.read(meta: meta(box("iloc", v1), box("idat", [9, 9, 9, 9, 9])))
        #expect(inIdat == ISOItemLocations(fileReach: 4096, idatReach: 5, idatLength: 5) && inIdat.idatFits)
        #expect(try !ISOItemLocations.read(meta: meta(box("iloc", v1), box("idat", [9, 9, 9, 9]))).idatFits)
        #expect(try !ISOItemLocations.read(meta: meta(box("iloc", v1))).idatFits, "method 1 without an idat box")
        // v2: 32-bit item count and IDs; data in another file (data reference 1) does not count.
        let v2 = [2, 0, 0, 0, 0x44, 0x00] + Bytes.bigEndian(1) + Bytes.bigEndian(1) + be16(0) + be16(1) + be16(1)
            + Bytes.bigEndian(0) + Bytes.bigEndian(1 << 30)
        #expect(try ISOItemLocations.read(meta: meta(box("iloc", v2))).fileReach == 0)
    }

    @Test("offsets and lengths that pass 2^64 reach past any file, without an overflow trap; no iloc, a cut iloc, field sizes other than 0, 4 and 8, and boxes past the meta's end are refused")
    func hostileNumbers() throws {
        let huge = [1, 0, 0, 0, 0x88, 0x80] + be16(1) + be16(1) + be16(0) + be16(0) + be64(.max) + be16(1)
            + be64(.max) + be64(.max)
        let reach = try ISOItemLocations.read(meta: meta(box("iloc", huge)))
        #expect(reach.fileReach == .max && !reach.fits(fileSize: .max))
        #expect(throws: ISOItemLocations.Problem.noLocations) { try ISOItemLocations.read(meta: meta(box("hdlr", [1, 2]))) }
        #expect(throws: ISOItemLocations.Problem.noLocations) { try ISOItemLocations.read(meta: [0, 0][...]) }
        let cut = [0, 0, 0, 0, 0x44, 0x00] + be16(3) + be16(1) + be16(0) + be16(1)
        #expect(throws: ISOItemLocations.Problem.malformedLocations) { try ISOItemLocations.read(meta: meta(box("iloc", cut))) }
        let oddSize = [0, 0, 0, 0, 0x34, 0x00] + be16(0)
        #expect(throws: ISOItemLocations.Problem.malformedLocations) { try ISOItemLocations.read(meta: meta(box("iloc", oddSize))) }
        #expect(throws: ISOItemLocations.Problem.overrun) {
            try ISOItemLocations.read(meta: meta(Bytes.bigEndian(100) + Array("iloc".utf8) + [0, 0]))
        }
        #expect(throws: ISOItemLocations.Problem.overrun) {
            try ISOItemLocations.read(meta: meta(Bytes.bigEndian(1) + Array("iloc".utf8) + be64(.max)))
        }
        // 65,535 extents with no fields, in each of 10,000 items: no field is read, the loop is not run.
        let empty = [1, 0, 0, 0, 0x00, 0x00] + be16(10_000) + Array((0..<10_000).map { be16($0) + be16(0) + be16(0) + be16(0xFFFF) }.joined())
        #expect(try ISOItemLocations.read(meta: meta(box("iloc", empty))).fileReach == 0)
    }
}
