extension Unicode.Scalar {
    /// Whether a terminal acts on this rather than showing it: C0 and C1 controls, DEL, and the bidi overrides and
    /// isolates that reorder what follows. Text from outside (what a server sent, an environment variable) is written
    /// with these spelled out, so that it can neither move the cursor, retitle a window, forge a line nor disguise a
    /// URL.
    public var actsOnTerminal: Bool {
        value < 0x20 || (0x7F...0x9F).contains(value) || (0x202A...0x202E).contains(value)
            || (0x2066...0x2069).contains(value)
    }
}

extension String {
    /// False when no scalar of the text `actsOnTerminal`, judged by its UTF-8 bytes alone (true may be wrong: the
    /// scalars that lead with the same bytes).
    public var mayActOnTerminal: Bool {
        utf8.contains { $0 < 0x20 || $0 == 0x7F || $0 == 0xC2 || $0 == 0xE2 }
    }
}
