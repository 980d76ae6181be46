import Testing
@testable import prefetchd

/// The `iloc` reading that tells a whole AVIF from a cut one: every version and field size, and hostile numbers.
@Suite struct ISOItemLocationsTests {
    func be16(_ value: Int) -> [UInt8] { [UInt8(value >> 8 & 0xFF), UInt8(value & 0xFF)] }
    func be64(_ value: UInt64) -> [UInt8] { Bytes.bigEndian(UInt32(value >> 32)) + Bytes.bigEndian(UInt32(value & 0xFFFF_FFFF)) }
    func reach(_ iloc: [UInt8]) -> [UInt64]? { ISOItemLocations(iloc: iloc[...]).map { [$0.fileReach, $0.idatReach] } }

    @Test func fixtureReachesItsEnd() throws {
        let avif = Bytes.read(Fixtures.path("halves.avif"))  // iloc 98..<128: its one item at 282 + 126 = 408
        #expect(reach(Array(avif[106..<128])) == [408, 0])
    }

    @Test("versions 0, 1 and 2, with 4- and 8-byte fields, a base offset, extent indexes and several extents: the furthest byte counts, in the file whatever the data reference (as libavif reads it) and in the idat")
    func versionsAndSizes() throws {
        // v0: offset 4, length 4, base 4; one item of two extents.
        let v0 = [0, 0, 0, 0, 0x44, 0x40] + be16(1) + be16(1) + be16(0) + Bytes.bigEndian(1000) + be16(2)
            + Bytes.bigEndian(10) + Bytes.bigEndian(5) + Bytes.bigEndian(100) + Bytes.bigEndian(50)
        #expect(reach(v0) == [1150, 0])
        // v1: offset 8, length 8, base 0, index 4; construction method 1 (idat) and 0.
        var v1 = [1, 0, 0, 0, 0x88, 0x04] + be16(2)
        v1 += be16(1) + be16(1) + be16(0) + be16(1) + Bytes.bigEndian(0) + be64(2) + be64(3)
        v1 += be16(2) + be16(0) + be16(0) + be16(1) + Bytes.bigEndian(7) + be64(4000) + be64(96)
        #expect(reach(v1) == [4096, 5])
        // v2: 32-bit item count and IDs; data reference 1.
        let v2 = [2, 0, 0, 0, 0x44, 0x00] + Bytes.bigEndian(1) + Bytes.bigEndian(1) + be16(0) + be16(1) + be16(1)
            + Bytes.bigEndian(0) + Bytes.bigEndian(1 << 30)
        #expect(reach(v2) == [1 << 30, 0])
    }

    @Test("offsets and lengths that pass 2^64 reach past any file, without an overflow trap; a cut iloc and field sizes other than 0, 4 and 8 cannot be read; 65,535 extents without fields are not walked")
    func hostileNumbers() throws {
        let huge = [1, 0, 0, 0, 0x88, 0x80] + be16(1) + be16(1) + be16(0) + be16(0) + be64(.max) + be16(1) + be64(.max) + be64(.max)
        #expect(reach(huge) == [.max, 0])
        #expect(reach([0, 0, 0, 0, 0x44, 0x00] + be16(3) + be16(1) + be16(0) + be16(1)) == nil, "cut in an extent")
        #expect(reach([0, 0, 0, 0, 0x34, 0x00] + be16(0)) == nil, "a 3-byte offset")
        #expect(reach([3, 0, 0, 0, 0x44, 0x00] + be16(0)) == nil, "version 3")
        #expect(reach([0, 0]) == nil)
        // 10,000 items of 65,535 extents with no fields: no field is read, the extents are not walked.
        let empty = [1, 0, 0, 0, 0x00, 0x00] + be16(10_000) + Array((0..<10_000).map { be16($0) + be16(0) + be16(0) + be16(0xFFFF) }.joined())
        #expect(reach(empty) == [0, 0])
    }
}
