/// The CRC-32 of PNG chunks and zlib (ISO 3309, reflected, polynomial 0xEDB88320), eight bytes a step ("slicing by
/// 8"): a PNG's pixel data is checked whole before it is cached.
enum CRC32 {
    /// Eight tables of 256: the first is the byte-at-a-time table, table k advances a byte k more places.
    private static let tables: [UInt32] = {
        var tables = [UInt32](repeating: 0, count: 8 * 256)
        for byte in 0..<256 {
            var crc = UInt32(byte)
            for _ in 0..<8 { crc = crc & 1 == 1 ? (crc >> 1) ^ 0xEDB8_8320 : crc >> 1 }
            tables[byte] = crc
        }
        for table in 1..<8 {
            for byte in 0..<256 {
                let previous = tables[(table - 1) * 256 + byte]
                tables[table * 256 + byte] = (previous >> 8) ^ tables[Int(previous & 0xFF)]
            }
        }
        return tables
    }()

    /// The CRC of `bytes`.
    static func checksum(_ bytes: some Collection<UInt8>) -> UInt32 {
        var crc: UInt32 = 0
        if bytes.withContiguousStorageIfAvailable({ crc = update(0, UnsafeRawBufferPointer($0)) }) == nil {
            crc = Array(bytes).withUnsafeBytes { update(0, $0) }
        }
        return crc
    }

    /// The CRC of the bytes `crc` was the CRC of (0 for none) followed by `bytes`.
    static func update(_ crc: UInt32, _ bytes: UnsafeRawBufferPointer) -> UInt32 {
        var crc = ~crc
        tables.withUnsafeBufferPointer { table in
            var index = 0
            while index + 8 <= bytes.count {
                let low = crc ^ UInt32(littleEndian: bytes.loadUnaligned(fromByteOffset: index, as: UInt32.self))
                let high = UInt32(littleEndian: bytes.loadUnaligned(fromByteOffset: index + 4, as: UInt32.self))
                crc = table[7 * 256 + Int(low & 0xFF)] ^ table[6 * 256 + Int(low >> 8 & 0xFF)]
                    ^ table[5 * 256 + Int(low >> 16 & 0xFF)] ^ table[4 * 256 + Int(low >> 24)]
                    ^ table[3 * 256 + Int(high & 0xFF)] ^ table[2 * 256 + Int(high >> 8 & 0xFF)]
                    ^ table[256 + Int(high >> 16 & 0xFF)] ^ table[Int(high >> 24)]
                index += 8
            }
            while index < bytes.count {
                crc = table[Int((crc ^ UInt32(bytes[index])) & 0xFF)] ^ (crc >> 8)
                index += 1
            }
        }
        return ~crc
    }
}
