import CSQLite
import Glibc

/// A failed SQLite call, with SQLite's own message.
struct DatabaseError: Error, CustomStringConvertible {
    let call: String
    let code: Int32
    let message: String
    /// The system's errno of the call that failed, when SQLite read or wrote a file (0 otherwise).
    var systemErrno: Int32 = 0
    var description: String { "sqlite \(call): \(message) (code \(code))" }
    /// The disk or its quota is full: SQLite says `SQLITE_FULL` for `ENOSPC`, and an I/O error for `EDQUOT`. Any
    /// other I/O error is not (a log made immutable, a failing disk): making room would not help, and would delete.
    var isDiskFull: Bool {
        code & 0xFF == SQLITE_FULL || (code & 0xFF == SQLITE_IOERR && [ENOSPC, EDQUOT].contains(systemErrno))
    }
    /// The file is not an SQLite database, or a damaged one.
    var isCorrupt: Bool { code & 0xFF == SQLITE_CORRUPT || code & 0xFF == SQLITE_NOTADB }
}

/// One SQLite connection, confined to the loop thread.
final class Database {
    fileprivate let handle: OpaquePointer
    /// Prepared statements by the address of their SQL text: each is a literal, so the address names it, and finding
    /// one hashes a word, not the text.
    private var statements: [UInt: Statement] = [:]
    /// Called when a call failed because the disk or its quota is full (`DatabaseError.isDiskFull`).
    var onDiskFull: () -> Void = {}
    /// The first error by which a call found the file damaged (`DatabaseError.isCorrupt`).
    private(set) var damage: DatabaseError?
    /// SQLite's process-wide settings, made before the first connection opens (which fixes them).
    private static let configured: Void = { _ = pf_sqlite3_disable_memstatus() }()

    init(path: String) throws(DatabaseError) {
        Self.configured
        var db: OpaquePointer?
        let flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX
        let rc = sqlite3_open_v2(path, &db, flags, nil)
        guard rc == SQLITE_OK, let db else {
            let message = db.map { String(cString: sqlite3_errmsg($0)) } ?? "out of memory"
            sqlite3_close(db)
            throw DatabaseError(call: "open \(path)", code: rc, message: message)
        }
        handle = db
        sqlite3_busy_timeout(db, 5000)
        sqlite3_extended_result_codes(db, 1)
    }

    deinit {
        statements.removeAll()
        sqlite3_close(handle)
    }

    /// The first column of the first row of `sql`, an integer, for a query made once (it is not kept prepared).
    func integer(_ sql: String) throws(DatabaseError) -> Int64 {
        let statement = try Statement(database: self, sql: sql)
        return try statement.step() ? statement.int(0) : 0
    }

    /// SQLite opened the file read-only (it is not writable by this user).
    var isReadOnly: Bool { sqlite3_db_readonly(handle, "main") == 1 }

    /// Runs one or more statements without results.
    func execute(_ sql: String) throws(DatabaseError) {
        var error: UnsafeMutablePointer<CChar>?
        let rc = sqlite3_exec(handle, sql, nil, nil, &error)
        guard rc == SQLITE_OK else {
            let message = error.map { String(cString: $0) } ?? "error"
            sqlite3_free(error)
            throw noted(DatabaseError(call: "exec", code: rc, message: message, systemErrno: sqlite3_system_errno(handle)))
        }
    }

    /// A prepared statement for `sql`, cached for reuse.
    func statement(_ sql: StaticString) throws(DatabaseError) -> Statement {
        let address = UInt(bitPattern: sql.utf8Start)
        if let cached = statements[address] {
            cached.reset()
            return cached
        }
        let prepared = try Statement(database: self, sql: sql.description)
        statements[address] = prepared
        return prepared
    }

    /// Resets every cached statement, ending the read transactions that statements left after their first row
    /// keep open; without this the WAL is never checkpointed and grows for ever.
    func resetStatements() {
        for statement in statements.values { statement.reset() }
    }

    /// Rows changed by the last statement.
    var changes: Int { Int(sqlite3_changes(handle)) }

    fileprivate func error(_ call: String, _ code: Int32) -> DatabaseError {
        noted(DatabaseError(call: call, code: code, message: String(cString: sqlite3_errmsg(handle)),
                            systemErrno: sqlite3_system_errno(handle)))
    }

    private func noted(_ error: DatabaseError) -> DatabaseError {
        if error.isDiskFull { onDiskFull() }
        if error.isCorrupt, damage == nil { damage = error }
        return error
    }
}

/// A prepared statement: bind, step, read columns.
final class Statement {
    /// Unowned: the database holds its statements, and finalizes them before it closes.
    private unowned let database: Database
    private let handle: OpaquePointer

    fileprivate init(database: Database, sql: String) throws(DatabaseError) {
        var statement: OpaquePointer?
        let rc = sqlite3_prepare_v3(database.handle, sql, -1, UInt32(SQLITE_PREPARE_PERSISTENT), &statement, nil)
        guard rc == SQLITE_OK, let statement else { throw database.error("prepare \(sql)", rc) }
        self.database = database
        self.handle = statement
    }

    deinit { sqlite3_finalize(handle) }

    fileprivate func reset() {
        sqlite3_reset(handle)
        sqlite3_clear_bindings(handle)
    }

    /// Binds values to `?1`, `?2`, … in order.
    @discardableResult
    func bind(_ values: (any SQLValue)?...) -> Statement {
        for (index, value) in values.enumerated() {
            let position = Int32(index + 1)
            if let value { value.bind(to: handle, at: position) } else { sqlite3_bind_null(handle, position) }
        }
        return self
    }

    /// Steps once; true while a row is available.
    func step() throws(DatabaseError) -> Bool {
        let rc = sqlite3_step(handle)
        switch rc {
        case SQLITE_ROW: return true
        case SQLITE_DONE: return false
        default: throw database.error("step \(String(cString: sqlite3_sql(handle)))", rc)
        }
    }

    /// Runs a statement that returns no rows.
    func run() throws(DatabaseError) {
        while try step() {}
    }

    func int(_ column: Int32) -> Int64 { sqlite3_column_int64(handle, column) }
    func optionalInt(_ column: Int32) -> Int64? { isNull(column) ? nil : int(column) }
    func text(_ column: Int32) -> String { sqlite3_column_text(handle, column).map { String(cString: $0) } ?? "" }
    func optionalText(_ column: Int32) -> String? { isNull(column) ? nil : text(column) }
    private func isNull(_ column: Int32) -> Bool { sqlite3_column_type(handle, column) == SQLITE_NULL }
}

/// What `Statement.bind` accepts: each type binds itself, with no cast per value.
protocol SQLValue {
    func bind(to statement: OpaquePointer, at position: Int32)
}

extension Int64: SQLValue {
    func bind(to statement: OpaquePointer, at position: Int32) { sqlite3_bind_int64(statement, position, self) }
}

extension Int: SQLValue {
    func bind(to statement: OpaquePointer, at position: Int32) { sqlite3_bind_int64(statement, position, Int64(self)) }
}

extension String: SQLValue {
    func bind(to statement: OpaquePointer, at position: Int32) { pf_sqlite3_bind_text_copy(statement, position, self) }
}
