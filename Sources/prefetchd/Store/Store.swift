import CSQLite
import Glibc
import QueueCore

/// The SQLite index, the durable slow-lane backlog and the negative cache, plus the files they describe.
///
/// Writes made during one loop turn share one transaction: `commit()` ends it (callers reply after it).
final class Store {
    let files: CacheFiles
    private let lock: CacheLock
    private let db: Database
    private let indexPath: String
    /// The index file opened: writes to one deleted (or replaced) behind the daemon's back are lost at the next start.
    private let indexIdentity: FileIdentity?
    /// SQLite's write-ahead log beside the index, and the file SQLite has open there.
    private let logPath: String
    private var logIdentity: FileIdentity?
    private var inTransaction = false
    /// Space held for the index, given up when the disk is full (`SpaceReserve`); taken again at most every 5 s.
    private let reserve: SpaceReserve
    private var reserveHeld = false
    private var nextReserveAttempt: Int64 = 0
    /// Whether the last stop left the index and the files agreeing (`markStoppedCleanly`): then the start need not
    /// compare every row with its file (`sweepStep`), nor read the index through (`openIndex`), seconds for a large
    /// cache. An index made anew has no mark.
    private(set) var stoppedCleanly = false
    /// A turn was undone since the start: files it moved into place may be named by no row.
    private var rolledBack = false
    /// Called after the turn's writes were abandoned (a failed commit, or `rollback()`): rows the turn deleted, such
    /// as queue entries whose fetch ended, are back in the index.
    var onRollback: () -> Void = {}
    /// Last accesses not yet written: key → Unix ms.
    private var touched: [String: Int64] = [:]
    /// What the index holds, counted as it changes.
    private var counts = Counts()
    private struct Counts {
        /// Disk space the cached files and variants take (allocated blocks, what `du` shows).
        var bytes: Int64 = 0
        var entries: Int64 = 0
        /// URLs in the durable queue.
        var queued: Int64 = 0
    }

    /// Disk space the cached files and variants take: `max_cache_bytes` bounds it.
    var totalBytes: Int64 { counts.bytes }
    var entryCount: Int64 { counts.entries }
    var backlogCount: Int64 { counts.queued }

    /// The highest `seq` the queue has held since the store opened: a URL queued later is read after every row a
    /// backlog read has passed, even when the newest rows were dequeued or rolled back meanwhile.
    private var lastSeq: Int64 = 0

    /// Downloads in progress that a resume can continue from, asked at every start, park and end of a transfer: the
    /// validator a resume sends, the file's length when the server announced it, and whether the `partials` table
    /// records it (only recorded ones outlive a crash).
    private var partials: [String: Partial] = [:]
    private struct Partial: Equatable {
        var validator: String
        var length: Int64?
        var recorded: Bool
    }

    static let migrations = [
        """
        CREATE TABLE entries(
            key TEXT PRIMARY KEY, url TEXT NOT NULL, file TEXT NOT NULL UNIQUE, bytes INTEGER NOT NULL,
            sha256 TEXT NOT NULL, content_type TEXT, format TEXT, width INTEGER, height INTEGER,
            etag TEXT, last_modified TEXT, fresh_until INTEGER NOT NULL, fetched_at INTEGER NOT NULL,
            last_access INTEGER NOT NULL, hits INTEGER NOT NULL DEFAULT 0);
        CREATE INDEX entries_lru ON entries(last_access);
        CREATE TABLE queue(seq INTEGER PRIMARY KEY AUTOINCREMENT, key TEXT NOT NULL UNIQUE, url TEXT NOT NULL, queued_at INTEGER NOT NULL);
        CREATE TABLE failures(key TEXT PRIMARY KEY, code TEXT NOT NULL, message TEXT NOT NULL, status INTEGER,
            until INTEGER NOT NULL);
        """,
        """
        ALTER TABLE entries ADD COLUMN must_revalidate INTEGER NOT NULL DEFAULT 0;
        ALTER TABLE entries ADD COLUMN no_store INTEGER NOT NULL DEFAULT 0;
        CREATE TABLE partials(key TEXT PRIMARY KEY, validator TEXT NOT NULL);
        CREATE TABLE hosts(host TEXT PRIMARY KEY, paused_until INTEGER NOT NULL, failures INTEGER NOT NULL);
        """,
        """
        CREATE TABLE variants(key TEXT NOT NULL, spec TEXT NOT NULL, file TEXT NOT NULL UNIQUE, bytes INTEGER NOT NULL,
            sha256 TEXT NOT NULL, format TEXT NOT NULL, width INTEGER NOT NULL, height INTEGER NOT NULL,
            PRIMARY KEY(key, spec));
        """,
        """
        CREATE TABLE working(key TEXT PRIMARY KEY, deaths INTEGER NOT NULL, active INTEGER NOT NULL);
        """,
        """
        ALTER TABLE entries ADD COLUMN allocated INTEGER NOT NULL DEFAULT 0;
        ALTER TABLE variants ADD COLUMN allocated INTEGER NOT NULL DEFAULT 0;
        """,
        // The queue's `seq` comes from `lastSeq`: AUTOINCREMENT rewrote `sqlite_sequence` on every insert. Its `url`
        // was always its `key`. Together about a fifth of the daemon's time per queued URL.
        """
        CREATE TABLE queue_v6(seq INTEGER PRIMARY KEY, key TEXT NOT NULL UNIQUE, queued_at INTEGER NOT NULL);
        INSERT INTO queue_v6(seq, key, queued_at) SELECT seq, key, queued_at FROM queue;
        DROP TABLE queue;
        ALTER TABLE queue_v6 RENAME TO queue;
        """,
        // A row while the index and the files agree: written by a clean stop in its last transaction, deleted when
        // the index is opened (`stoppedCleanly`).
        """
        CREATE TABLE clean_stop(at INTEGER NOT NULL);
        """,
        // A partial download's file length: a resume answered with the rest of a file of another length is another
        // version's, whatever its validator says.
        """
        ALTER TABLE partials ADD COLUMN length INTEGER;
        """,
    ]

    /// The tables and columns this version reads and writes. An index whose `user_version` is this version's but that
    /// lacks one (a table dropped by hand, another program's file under the index's name) is damaged.
    static let schema = [
        ("entries", "key, url, file, bytes, sha256, content_type, format, width, height, etag, last_modified, fresh_until, "
            + "fetched_at, last_access, hits, must_revalidate, no_store, allocated"),
        ("queue", "seq, key, queued_at"),
        ("failures", "key, code, message, status, until"),
        ("partials", "key, validator, length"),
        ("hosts", "host, paused_until, failures"),
        ("variants", "key, spec, file, bytes, sha256, format, width, height, allocated"),
        ("working", "key, deaths, active"),
        ("clean_stop", "at"),
    ]

    /// `damage`: what a query found damaged in this index while the daemon served before (`StartAgain`); the index is
    /// then set aside as if the start had found it.
    init(directory: String, damage: DatabaseError? = nil) throws {
        files = CacheFiles(root: directory)
        do {
            try files.prepare()
        } catch let error as SystemError where [EACCES, EPERM, EROFS].contains(error.errno) {
            let user = "uid \(getuid()) (\(Options.userName(getuid())))"
            throw DaemonError("cannot make the cache in \(directory): \(error). The cache directory must be writable by "
                              + "the daemon's user, \(user): give it to that user, or choose another with --cache-dir")
        }
        lock = try CacheLock(directory: directory)
        let path = directory + "/" + CacheFiles.indexName
        var info = stat()
        if lstat(path, &info) == 0, (info.st_mode & S_IFMT) == S_IFREG, info.st_size == 0 {
            Log.warning("the index \(path) is empty (0 bytes: cut short by a crash, or by someone?): starting with an "
                        + "empty index; the cached files it no longer names are deleted")
        }
        // A disk this full could not take the index's shared-memory file or the writes of the start: the reserve
        // makes room for them.
        reserve = SpaceReserve(indexPath: path)
        if !reserve.hasRoom, reserve.release() {
            Log.warning("the disk of \(directory) is full: gave up the index's reserve (\(SpaceReserve.bytes / 1024) KiB) "
                        + "so that the index can be written")
        }
        let madeRoom = !reserve.hasRoom && Self.makeRoomToStart(files: CacheFiles(root: directory))
        var opened: (db: Database, cleanStop: Bool, totals: Totals)
        do {
            // Damage met by a query may lie where the start's check does not look (an index's content).
            if let damage { throw damage }
            opened = try Self.openIndex(path)
        } catch let error as DatabaseError where error.isCorrupt {
            // The index is a cache: set the broken one aside for inspection and start empty (recovery then sweeps
            // the files no row names), but for the queue, whose every URL was acknowledged: what of it can be read
            // is kept.
            let aside = path + ".corrupt-" + String(wallClockMilliseconds() / 1000)
            for suffix in ["", "-wal", "-shm"] { rename(path + suffix, aside + suffix) }
            opened = try Self.openIndex(path)
            let kept = try Self.salvageQueue(from: aside, into: opened.db)
            if kept > 0 { opened.totals = try Self.totals(in: opened.db) }
            Log.error("the index \(path) is corrupt (\(error.message)); moved it to \(aside) and starting with an empty index"
                      + (kept > 0 ? ", keeping the \(kept) queued URLs read from it" : ""))
        }
        db = opened.db
        indexPath = path
        indexIdentity = FileIdentity(path: path)
        logPath = path + "-wal"
        logIdentity = FileIdentity(path: logPath)
        // Files deleted to make room are still named by rows: the sweep drops them.
        stoppedCleanly = !madeRoom && opened.cleanStop
        take(opened.totals)
        try readPartials()
        db.onDiskFull = { [unowned self] in self.giveUpReserve() }
        keepReserve()
    }

    /// Keeps the cache's lock held into the start that follows (`StartAgain`).
    func handOverLock() { lock.handOver() }

    /// What of the cache was deleted or replaced behind the daemon's back since it started, if anything: the index,
    /// whose writes a restart would not find, or the lock, without which a second daemon may start on the directory
    /// and sweep this one's files.
    func removedBehindOurBack() -> String? {
        if indexIdentity?.isNamed(by: indexPath) != true { return "the index \(indexPath)" }
        if !lock.isInPlace { return "the lock \(lock.path)" }
        return nil
    }

    /// The first error by which a call found the index damaged since it was opened, if any.
    var damage: DatabaseError? { db.damage }

    /// Whether the write-ahead log SQLite writes into is no longer the file its path names: deleted behind the
    /// daemon's back (a cleaner of old files, a person tidying the cache), SQLite goes on writing into it, and what it
    /// holds would be lost at a crash, acknowledged queue entries included.
    var writeAheadLogWasDeleted: Bool { logIdentity?.isNamed(by: logPath) != true }

    /// Writes what the write-ahead log holds into the index and starts a new log, after committing the turn's writes.
    /// Nothing changes when the checkpoint cannot write every frame (a full disk): leaving WAL mode then would drop
    /// the rest with the deleted file. Called again later, it tries again.
    func replaceWriteAheadLog() throws(DatabaseError) {
        try commit()
        let checkpoint = try db.statement("PRAGMA wal_checkpoint(FULL)")
        _ = try checkpoint.step()
        let (busy, frames, written) = (checkpoint.int(0), checkpoint.int(1), checkpoint.int(2))
        db.resetStatements()
        guard busy == 0, written == frames else {
            throw DatabaseError(call: "wal_checkpoint", code: SQLITE_BUSY,
                                message: "\(written) of the log's \(frames) frames were written into the index")
        }
        // Out of WAL mode and back in; the new log is made at once, so that its identity is taken.
        try db.execute("PRAGMA journal_mode=DELETE; PRAGMA journal_mode=WAL; BEGIN IMMEDIATE; ROLLBACK;")
        logIdentity = FileIdentity(path: logPath)
    }

    /// What the index holds, counted at start and after a rollback undid the writes that changed it.
    private struct Totals {
        var entries: Int64
        var bytes: Int64
        var queued: Int64
        var lastSeq: Int64
    }

    private static func totals(in db: Database) throws(DatabaseError) -> Totals {
        let totals = try db.statement("""
            SELECT (SELECT count(*) FROM entries),
                   (SELECT coalesce(sum(allocated), 0) FROM entries) + (SELECT coalesce(sum(allocated), 0) FROM variants),
                   (SELECT count(*) FROM queue), (SELECT coalesce(max(seq), 0) FROM queue)
            """)
        defer { db.resetStatements() }
        _ = try totals.step()
        return Totals(entries: totals.int(0), bytes: totals.int(1), queued: totals.int(2), lastSeq: totals.int(3))
    }

    private func take(_ totals: Totals) {
        counts.entries = totals.entries
        counts.bytes = totals.bytes
        counts.queued = totals.queued
        lastSeq = max(lastSeq, totals.lastSeq)
    }

    /// The resumable downloads the index records.
    private func readPartials() throws(DatabaseError) {
        partials = partials.filter { !$0.value.recorded }
        let rows = try db.statement("SELECT key, validator, length FROM partials")
        while try rows.step() {
            partials[rows.text(0)] = Partial(validator: rows.text(1), length: rows.optionalInt(2), recorded: true)
        }
        db.resetStatements()
    }

    /// What SQLite's write-ahead log is cut back to once it starts over after a checkpoint: a turn that wrote much
    /// (a batch of 10,000 URLs, an upgrade that rewrites the queue) does not leave its size on the disk for as long as
    /// the daemon runs.
    static let writeAheadLogLimit: Int64 = 4 << 20

    /// Opens the index, migrates it, checks its tables against `schema` and counts what it holds. Unless the last stop
    /// was clean, it reads the file through once (`quick_check`: 0.85 s for 100,000 entries from a cold disk) so that
    /// damage is found here; after a clean stop damage shows where it is read (the counts read the largest tables),
    /// and a stop after damage was seen marks no clean stop (`Database.damage`). The clean stop's mark is taken away
    /// here, so that a start that fails on damage is followed by one that checks. An error that is not damage names
    /// the index.
    private static func openIndex(_ path: String) throws -> (db: Database, cleanStop: Bool, totals: Totals) {
        for file in [path, path + "-wal", path + "-shm"] {
            var info = stat()
            if stat(file, &info) == 0, info.st_mode & S_IFMT != S_IFREG {
                let kind = info.st_mode & S_IFMT == S_IFDIR ? "a directory" : "not a regular file"
                throw DaemonError("cannot open the index \(path): \(file) is \(kind), which SQLite cannot use: move it "
                                  + "away, or choose another --cache-dir")
            }
        }
        let db = try Database(path: path)
        guard !db.isReadOnly else {
            throw DaemonError("the index \(path) cannot be written (read-only for this user): the cache directory and "
                              + "the index in it must be writable by the user prefetchd runs as")
        }
        do {
            // Only the daemon reads the index (URLs in it may carry credentials); its WAL and shm files follow this mode.
            _ = try syscall("chmod", path) { chmod(path, 0o600) }
            try db.execute("PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA foreign_keys=ON; "
                           + "PRAGMA journal_size_limit=\(writeAheadLogLimit);")
            try migrate(db, at: path)
            for (table, columns) in schema {
                do throws(DatabaseError) {
                    guard try db.integer("SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = '\(table)'") == 1
                    else { throw DatabaseError(call: "schema check", code: SQLITE_ERROR, message: "no table \(table)") }
                    try db.execute("SELECT \(columns) FROM \(table) LIMIT 0")
                } catch {
                    throw DatabaseError(call: "schema check", code: SQLITE_CORRUPT,
                                        message: "its tables are not those of schema \(migrations.count): \(error.message)")
                }
            }
            // The daemon writes at once: a log or shared-memory file it cannot use is found here, with the index named.
            try db.execute("BEGIN IMMEDIATE; ROLLBACK;")
            let cleanStop = try db.integer("SELECT count(*) FROM clean_stop") > 0
            if cleanStop {
                try db.execute("DELETE FROM clean_stop")
            } else {
                let check = try db.statement("PRAGMA quick_check(1)")
                if try check.step(), check.text(0) != "ok" {
                    throw DatabaseError(call: "quick_check", code: SQLITE_CORRUPT, message: check.text(0))
                }
                db.resetStatements()
            }
            return (db, cleanStop, try totals(in: db))
        } catch let error as DatabaseError where error.isDiskFull {
            throw DaemonError("cannot open the index \(path): the disk is full (\(error.message)); what is queued stays "
                              + "queued: free some space, or choose another --cache-dir")
        } catch let error as DatabaseError where error.code & 0xFF == SQLITE_BUSY {
            throw DaemonError("cannot open the index \(path): \(error.message): another process holds a lock on it (an "
                              + "sqlite3 shell in a transaction, say): end that, or choose another --cache-dir")
        } catch let error as DatabaseError where !error.isCorrupt {
            throw DaemonError("cannot open the index \(path): \(error.message); the cache directory and the index in it "
                              + "must be writable by the user prefetchd runs as")
        }
    }

    /// Copies what of a damaged index's queue can be read into `db`, in its order: the rows are read from the front
    /// until a read fails; then reads are started further on (a seek by `seq` goes around a damaged page to the next
    /// one), at distances that double until one gets past its first row, and the first start that does is looked
    /// for between the two, so that each damaged page costs the rows on it and a few reads, however many there are
    /// and however far apart the rows' numbers (reading from both ends, three damaged pages of 164 cost 2,885 of
    /// 5,000 rows). The search begins after the last row read that a larger one followed: a row's number may be
    /// anything (a row of a damaged page, a flipped bit: 774 of 4,924 were kept). A row whose key is not a URL as this
    /// version writes it is dropped.
    /// Returns how many URLs it kept.
    private static func salvageQueue(from path: String, into db: Database) throws(DatabaseError) -> Int {
        guard let damaged = try? Database(path: path) else { return 0 }
        enum Read { case row(Statement), end, damaged }
        /// The queue from `start` on, on its first row.
        func read(from start: Int64) -> Read {
            guard let rows = try? damaged.statement("SELECT seq, key, queued_at FROM queue WHERE seq >= ?1 ORDER BY seq")
                .bind(start), let more = try? rows.step() else { return .damaged }
            return more ? .row(rows) : .end
        }
        /// Whether a read from `start` gets past its first row, to a second or to the end: one row, then damage, is no
        /// way past the damage.
        func passes(_ start: Int64) -> Bool {
            switch read(from: start) {
            case .row(let rows): (try? rows.step()) != nil
            case .end: true
            case .damaged: false
            }
        }
        var kept = 0
        try db.execute("BEGIN IMMEDIATE")
        // Sequence numbers start at 1 (`enqueue`): the distances of the reads past damage grow from the rows' scale.
        var next: Int64 = 0
        reading: while true {
            var failed = next
            switch read(from: next) {
            case .row(let rows):
                var previous: Int64?
                while true {
                    let seq = rows.int(0), key = rows.text(1)
                    if (try? CanonicalURL(key).key) == key {
                        try db.statement("INSERT OR IGNORE INTO queue(seq, key, queued_at) VALUES (?1, ?2, ?3)")
                            .bind(seq, key, rows.int(2)).run()
                        kept += db.changes
                    }
                    // A row is past once a larger one follows it: a number a flipped bit made far larger is not.
                    if let previous, previous < seq { failed = max(failed, previous + 1) }
                    previous = seq
                    guard let more = try? rows.step() else { break }  // damage after this row
                    guard more else { break reading }
                }
            case .end:
                break reading
            case .damaged:
                break
            }
            // No read from `failed` gets past the damage: go further until one does, then back to the first that does.
            var distance: Int64 = 1
            var good: Int64
            while true {
                let (probe, overflow) = failed.addingReportingOverflow(distance)
                guard !overflow else { break reading }
                if passes(probe) {
                    good = probe
                    break
                }
                failed = probe
                distance = min(distance, .max / 2) * 2
            }
            while good - failed > 1 {
                let middle = failed + (good - failed) / 2
                if passes(middle) { good = middle } else { failed = middle }
            }
            next = good
        }
        try db.execute("COMMIT")
        db.resetStatements()
        damaged.resetStatements()
        return kept
    }

    /// Brings the index to this version's schema. One written by a newer version is left as it is: this version
    /// would not know what its rows mean, and setting it aside would lose them for that version.
    private static func migrate(_ db: Database, at path: String) throws {
        let version = try db.statement("PRAGMA user_version")
        _ = try version.step()
        let current = Int(version.int(0))
        db.resetStatements()
        guard current <= Self.migrations.count else {
            throw DaemonError("the index \(path) was written by a newer prefetchd (schema \(current); this one knows "
                              + "\(Self.migrations.count)): run that version, or give this one another cache directory")
        }
        guard current < Self.migrations.count else { return }
        if current > 0 {
            // Rewriting a table can take seconds (the queue's, 6 s for a million URLs): say why the start waits.
            Log.info("upgrading the index \(path) from schema \(current) to \(Self.migrations.count)")
        }
        for (index, sql) in Self.migrations.enumerated().dropFirst(current) {
            do {
                try db.execute("BEGIN IMMEDIATE; \(sql) PRAGMA user_version = \(index + 1); COMMIT;")
            } catch {
                try? db.execute("ROLLBACK")
                if error.code & 0xFF == SQLITE_ERROR {
                    // A table the upgrade changes is not there: not an index of ours, or one damaged by hand.
                    throw DatabaseError(call: "upgrade", code: SQLITE_CORRUPT,
                                        message: "schema \(index) cannot be upgraded to \(index + 1): \(error.message)")
                }
                guard error.isDiskFull else { throw error }
                throw DaemonError("cannot upgrade the index \(path) from schema \(index) to \(index + 1): \(error.message) "
                                  + "(an upgrade may rewrite a table, the durable queue's among them); nothing was changed: "
                                  + "free some space and start again")
            }
        }
    }

    // MARK: Transactions

    private func write() throws(DatabaseError) {
        guard !inTransaction else { return }
        try db.execute("BEGIN IMMEDIATE")
        inTransaction = true
    }

    /// Abandons the turn's writes.
    func rollback() {
        guard inTransaction else { return }
        try? db.execute("ROLLBACK")
        inTransaction = false
        rolledBack = true
        if let totals = try? Self.totals(in: db) { take(totals) }
        try? readPartials()
        onRollback()
    }

    /// What the start may write to the index before it takes its reserve again (crash records, recovery's changes).
    static let roomToStart: Int64 = 4 << 20

    /// The disk is still full with no reserve left to give up (a full disk earlier took it, and stayed full): opening
    /// the index (its shared-memory file) and the start's writes would fail. Partial downloads in `tmp/` go first,
    /// then the oldest cached files, by the time they were written, until `roomToStart` is free: the index cannot say
    /// which were used last without being opened (what a crash left in its write-ahead log is only read through the
    /// shared memory). Recovery drops their rows, whose files are missing. Nothing queued is touched.
    /// Returns whether it deleted any cached file.
    private static func makeRoomToStart(files: CacheFiles) -> Bool {
        var freed: Int64 = 0, partials = 0
        files.forEachTemporary { path in
            var info = stat()
            guard freed < roomToStart, lstat(path, &info) == 0, deleteEntry(path) else { return }
            freed += Int64(info.st_blocks) * 512
            partials += 1
        }
        if partials > 0 {
            Log.warning("the disk of \(files.root) is full: deleted \(partials) partial downloads (\(freed / 1024) KiB) "
                        + "so that the index can be opened and written")
        }
        guard freed < roomToStart else { return false }
        var cached: [(path: String, written: Int, allocated: Int64)] = []  // written: ns since the epoch
        files.forEachCachedFile { _, path in
            var info = stat()
            guard lstat(path, &info) == 0 else { return }
            cached.append((path, info.st_mtim.tv_sec &* 1_000_000_000 &+ info.st_mtim.tv_nsec, Int64(info.st_blocks) * 512))
        }
        var deleted = 0, freedCached: Int64 = 0
        for file in cached.sorted(by: { $0.written < $1.written }) where freed + freedCached < roomToStart {
            guard unlink(file.path) == 0 else { continue }
            freedCached += file.allocated
            deleted += 1
        }
        guard deleted > 0 else { return false }
        Log.warning("the disk of \(files.root) is full: deleted the \(deleted) oldest cached files (\(freedCached / 1024) KiB) "
                    + "so that the index can be opened and written; recovery drops their entries")
        return true
    }

    /// Ends the turn's transaction, if one is open, and the reads left open by statements.
    func commit() throws(DatabaseError) {
        db.resetStatements()
        guard inTransaction else { return }
        do {
            try db.execute("COMMIT")
        } catch {
            rollback()
            throw error
        }
        inTransaction = false
        uncheckpointed = true
        lastCommit = monotonicMilliseconds()
        keepReserve()
    }

    /// Commits since the last checkpoint, and when the last one was (monotonic ms).
    private var uncheckpointed = false
    private var lastCommit: Int64 = 0

    /// Once writes have paused for a second, writes what the write-ahead log holds into the index itself: the log
    /// deleted behind the daemon's back (a cleaner of old files) and a crash before the next check of it (every
    /// 5 s) lost every write since the last checkpoint, acknowledged queue entries included. While writes go on,
    /// SQLite's own checkpoint every 4 MiB of log does it.
    func checkpointWhenQuiet() throws(DatabaseError) {
        guard uncheckpointed, !inTransaction, monotonicMilliseconds() - lastCommit >= 1000 else { return }
        _ = try db.statement("PRAGMA wal_checkpoint(PASSIVE)").step()
        db.resetStatements()
        uncheckpointed = false
    }

    /// The index found the disk full: the reserve makes room for its next writes.
    private func giveUpReserve() {
        reserveHeld = false
        guard reserve.release() else { return }
        Log.warning("the disk is full: gave up the index's reserve (\(SpaceReserve.bytes / 1024) KiB) so that its next "
                    + "writes have room")
    }

    /// Takes the reserve again once the disk has room for it (`SpaceReserve.take`), trying at most every 5 s.
    private func keepReserve() {
        guard !reserveHeld else { return }
        let now = monotonicMilliseconds()
        guard now >= nextReserveAttempt else { return }
        nextReserveAttempt = now + 5000
        reserveHeld = reserve.take()
    }

    // MARK: Index

    func entry(_ key: String) throws(DatabaseError) -> IndexEntry? {
        let select = try db.statement("""
            SELECT key, url, file, bytes, sha256, content_type, format, width, height, etag, last_modified,
                   fresh_until, fetched_at, last_access, hits, must_revalidate, no_store FROM entries WHERE key = ?1
            """).bind(key)
        guard try select.step() else { return nil }
        return IndexEntry(
            key: select.text(0), url: select.text(1), file: select.text(2), bytes: select.int(3),
            sha256: select.text(4), contentType: select.optionalText(5), format: select.optionalText(6),
            width: select.optionalInt(7).map(Int.init), height: select.optionalInt(8).map(Int.init),
            etag: select.optionalText(9), lastModified: select.optionalText(10), freshUntil: select.int(11),
            fetchedAt: select.int(12), lastAccess: touched[key] ?? select.int(13), hits: select.int(14),
            mustRevalidate: select.int(15) != 0, noStore: select.int(16) != 0)
    }

    /// The entry, if its file is still there and of its size: a file deleted, truncated or replaced by a link
    /// behind the daemon's back drops its row (and variants), so that the caller fetches it again instead of handing
    /// out a path that does not hold what the entry says.
    func liveEntry(_ key: String) throws(DatabaseError) -> IndexEntry? {
        guard let entry = try entry(key) else { return nil }
        let size = files.size(of: entry.file)
        if size == entry.bytes { return entry }
        Log.warning("the cached file of \(key) is " + (size.map { "\($0) bytes, not \(entry.bytes)" } ?? "gone")
                    + " (\(files.absolute(entry.file))): its entry is dropped, and the URL is fetched again when asked for")
        try remove(key)
        return nil
    }

    /// Records a newly installed file, which takes `allocated` bytes of disk (its blocks, as `du` counts them);
    /// replaces any earlier row for the key.
    func put(_ entry: IndexEntry, allocated: Int64) throws(DatabaseError) {
        try write()
        if let old = try self.entry(entry.key) {
            counts.bytes -= try self.allocated(entry.key)
            counts.entries -= 1
            if old.file != entry.file { files.remove(old.file) }
            // Variants show the bytes they were made of: new bytes make them wrong.
            if old.sha256 != entry.sha256 { try removeVariants(of: entry.key) }
        }
        try db.statement("""
            INSERT OR REPLACE INTO entries(key, url, file, bytes, sha256, content_type, format, width, height, etag,
                last_modified, fresh_until, fetched_at, last_access, hits, must_revalidate, no_store, allocated)
            VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18)
            """).bind(entry.key, entry.url, entry.file, entry.bytes, entry.sha256, entry.contentType, entry.format,
                      entry.width, entry.height, entry.etag, entry.lastModified, entry.freshUntil, entry.fetchedAt,
                      entry.lastAccess, entry.hits, entry.mustRevalidate ? 1 : 0, entry.noStore ? 1 : 0, allocated).run()
        counts.bytes += allocated
        counts.entries += 1
    }

    /// The disk space an entry's file takes, as recorded.
    private func allocated(_ key: String) throws(DatabaseError) -> Int64 {
        let select = try db.statement("SELECT allocated FROM entries WHERE key = ?1").bind(key)
        return try select.step() ? select.int(0) : 0
    }

    /// A 304 confirmed the cached copy: new freshness and validators.
    /// The cached answer may be another URL's: stale at once, without the validators that came with it and not to
    /// be served stale, so that the next request for it fetches it anew.
    func distrust(_ key: String) throws(DatabaseError) {
        try write()
        try db.statement("""
            UPDATE entries SET fresh_until = 0, etag = NULL, last_modified = NULL, must_revalidate = 1 WHERE key = ?1
            """).bind(key).run()
    }

    func refresh(_ key: String, freshUntil: Int64, etag: String?, lastModified: String?, mustRevalidate: Bool,
                 now: Int64) throws(DatabaseError) {
        try write()
        try db.statement("""
            UPDATE entries SET fresh_until = ?2, etag = coalesce(?3, etag), last_modified = coalesce(?4, last_modified),
                fetched_at = ?5, must_revalidate = ?6 WHERE key = ?1
            """).bind(key, freshUntil, etag, lastModified, now, mustRevalidate ? 1 : 0).run()
    }

    /// Notes a cache hit; written in batches by `flushAccesses`.
    func touch(_ key: String, now: Int64) { touched[key] = now }

    func flushAccesses() throws(DatabaseError) {
        guard !touched.isEmpty else { return }
        try write()
        let update: StaticString = "UPDATE entries SET last_access = ?2, hits = hits + 1 WHERE key = ?1"
        for (key, time) in touched { try db.statement(update).bind(key, time).run() }
        touched.removeAll()
    }

    /// Deletes the row, its file and its variants; true when there was one.
    @discardableResult
    func remove(_ key: String) throws(DatabaseError) -> Bool {
        guard let old = try entry(key) else { return false }
        try write()
        counts.bytes -= try allocated(key)
        try removeVariants(of: key)
        try db.statement("DELETE FROM entries WHERE key = ?1").bind(key).run()
        files.remove(old.file)
        touched.removeValue(forKey: key)
        counts.entries -= 1
        return true
    }

    /// Deletes the variants of `key`, rows and files.
    private func removeVariants(of key: String) throws(DatabaseError) {
        let variants = try db.statement("SELECT file, allocated FROM variants WHERE key = ?1").bind(key)
        var variantFiles: [(String, Int64)] = []
        while try variants.step() { variantFiles.append((variants.text(0), variants.int(1))) }
        for (file, bytes) in variantFiles {
            files.remove(file)
            counts.bytes -= bytes
        }
        try db.statement("DELETE FROM variants WHERE key = ?1").bind(key).run()
    }

    /// Evicts least recently used entries until the total is at most `target` bytes, sparing `protected` keys.
    func evict(downTo target: Int64, protecting protected: Set<String>) throws(DatabaseError) -> Int {
        try flushAccesses()
        var evicted = 0
        while counts.bytes > target {
            // The 64 least recently used that are not protected, however many protected ones are older.
            let oldest = try db.statement("SELECT key FROM entries ORDER BY last_access")
            var victims: [String] = []
            while victims.count < 64, try oldest.step() {
                let key = oldest.text(0)
                if !protected.contains(key) { victims.append(key) }
            }
            if victims.isEmpty { break }
            for key in victims where counts.bytes > target {
                try remove(key)
                evicted += 1
            }
        }
        return evicted
    }

    /// The newest entry's row number: the entries cached up to now have this one or a lower one.
    func lastEntryRow() throws(DatabaseError) -> Int64 {
        let select = try db.statement("SELECT ifnull(max(rowid), 0) FROM entries")
        return try select.step() ? select.int(0) : 0
    }

    /// Up to `limit` entries after row `after` and up to row `last`, in row order: their keys and the last row.
    func entryKeys(after: Int64, through last: Int64, limit: Int) throws(DatabaseError) -> (keys: [String], last: Int64)? {
        let select = try db.statement("SELECT rowid, key FROM entries WHERE rowid > ?1 AND rowid <= ?2 ORDER BY rowid LIMIT ?3")
            .bind(after, last, Int64(limit))
        var keys: [String] = [], row = after
        while try select.step() {
            row = select.int(0)
            keys.append(select.text(1))
        }
        return keys.isEmpty ? nil : (keys, row)
    }

    // MARK: Variants

    /// A resized variant: where it is and what it is.
    struct Variant: Equatable {
        var file: String
        var bytes: Int64
        var sha256: String
        var format: String
        var width: Int
        var height: Int
    }

    func variant(_ key: String, spec: String) throws(DatabaseError) -> Variant? {
        let select = try db.statement("""
            SELECT file, bytes, sha256, format, width, height FROM variants WHERE key = ?1 AND spec = ?2
            """).bind(key, spec)
        guard try select.step() else { return nil }
        return Variant(file: select.text(0), bytes: select.int(1), sha256: select.text(2), format: select.text(3),
                       width: Int(select.int(4)), height: Int(select.int(5)))
    }

    /// Records a variant of a cached entry (its original must have a row).
    func putVariant(_ key: String, spec: String, _ variant: Variant) throws(DatabaseError) {
        try write()
        let old = try db.statement("SELECT allocated, file FROM variants WHERE key = ?1 AND spec = ?2").bind(key, spec)
        if try old.step() {
            counts.bytes -= old.int(0)
            // Made again under another path (a cache from before the one-level layout): the old file goes.
            if old.text(1) != variant.file { files.remove(old.text(1)) }
        }
        let allocated = files.allocated(variant.file) ?? variant.bytes
        try db.statement("""
            INSERT OR REPLACE INTO variants(key, spec, file, bytes, sha256, format, width, height, allocated)
            VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)
            """).bind(key, spec, variant.file, variant.bytes, variant.sha256, variant.format, variant.width, variant.height,
                      allocated).run()
        counts.bytes += allocated
    }

    // MARK: Durable backlog

    /// Adds a queued URL; false when the key was queued already.
    func enqueue(key: String, now: Int64) throws(DatabaseError) -> Bool {
        guard lastSeq < .max else {
            throw DatabaseError(call: "enqueue", code: SQLITE_ERROR, message: "the queue's sequence numbers are used up")
        }
        try write()
        try db.statement("INSERT OR IGNORE INTO queue(seq, key, queued_at) VALUES (?1, ?2, ?3)").bind(lastSeq + 1, key, now).run()
        let inserted = db.changes > 0
        if inserted {
            lastSeq += 1
            counts.queued += 1
        }
        return inserted
    }

    func dequeue(_ key: String) throws(DatabaseError) {
        try write()
        try db.statement("DELETE FROM queue WHERE key = ?1").bind(key).run()
        counts.queued -= Int64(db.changes)
    }

    func isQueued(_ key: String) throws(DatabaseError) -> Bool {
        try db.statement("SELECT 1 FROM queue WHERE key = ?1").bind(key).step()
    }

    /// Queued URLs after `seq`, oldest first.
    func backlog(after seq: Int64, limit: Int) throws(DatabaseError) -> [(seq: Int64, key: String)] {
        let select = try db.statement("SELECT seq, key FROM queue WHERE seq > ?1 ORDER BY seq LIMIT ?2").bind(seq, limit)
        var rows: [(Int64, String)] = []
        while try select.step() { rows.append((select.int(0), select.text(1))) }
        return rows
    }

    // MARK: Resumable downloads

    /// The validator noted for `key`'s download in progress, if it can be resumed.
    func partialValidator(_ key: String) -> String? { partials[key]?.validator }

    /// The length of the file whose first bytes `key`'s download in progress holds, when the server announced it.
    func partialLength(_ key: String) -> Int64? { partials[key]?.length }

    /// Records durably that `key`'s download can be resumed with `validator` (a file of `length` bytes, if known).
    func savePartial(_ key: String, validator: String, length: Int64? = nil) throws(DatabaseError) {
        let partial = Partial(validator: validator, length: length, recorded: true)
        guard partials[key] != partial else { return }
        try write()
        try db.statement("INSERT OR REPLACE INTO partials(key, validator, length) VALUES (?1, ?2, ?3)")
            .bind(key, validator, length).run()
        partials[key] = partial
    }

    /// Notes in memory that `key`'s download can be resumed with `validator`: after a crash it starts over, unless
    /// `recordPartial` made the note durable. A record of another validator or length is replaced by this one.
    func notePartial(_ key: String, validator: String, length: Int64? = nil) throws(DatabaseError) {
        guard let old = partials[key], old.recorded else {
            partials[key] = Partial(validator: validator, length: length, recorded: false)
            return
        }
        try savePartial(key, validator: validator, length: length)
    }

    /// Makes the note of `key`'s download durable, if there is one.
    func recordPartial(_ key: String) throws(DatabaseError) {
        guard let partial = partials[key], !partial.recorded else { return }
        try savePartial(key, validator: partial.validator, length: partial.length)
    }

    /// The recorded downloads whose bodies are on disk, with their sizes: at a start, those a stop kept.
    func recordedPartialBodies() -> [(key: String, bytes: Int64)] {
        partials.filter(\.value.recorded).compactMap { key, _ in partialBodyBytes(key).map { (key, $0) } }
    }

    /// The size of `key`'s download body on disk, if there is one.
    func partialBodyBytes(_ key: String) -> Int64? {
        var info = stat()
        guard stat(files.downloadPath(forName: CacheFiles.name(forKey: key)), &info) == 0 else { return nil }
        return Int64(info.st_size)
    }

    /// Forgets a download in progress, deleting its body unless it is still being written.
    func removePartial(_ key: String, deletingBody: Bool = true) throws(DatabaseError) {
        if deletingBody { unlink(files.downloadPath(forName: CacheFiles.name(forKey: key))) }
        guard let partial = partials.removeValue(forKey: key), partial.recorded else { return }
        try write()
        try db.statement("DELETE FROM partials WHERE key = ?1").bind(key).run()
    }

    // MARK: Negative cache

    /// Remembers a permanent failure until `until` (the negative cache), across restarts. Every thousandth one
    /// prunes the table (`pruneFailures`): it grew by every URL that ever failed while the daemon ran.
    func saveFailure(_ key: String, _ failure: Failure, until: Int64, now: Int64) throws(DatabaseError) {
        try write()
        try db.statement("INSERT OR REPLACE INTO failures(key, code, message, status, until) VALUES (?1, ?2, ?3, ?4, ?5)")
            .bind(key, failure.code.rawValue, failure.message, failure.httpStatus, until).run()
        failuresSaved += 1
        if failuresSaved % 1_000 == 0 { try pruneFailures(now: now) }
    }

    private var failuresSaved = 0

    /// Deletes the expired failures, and the oldest past the `Scheduler.failuresRemembered` newest (which the
    /// scheduler remembers; an INSERT OR REPLACE gives the row a new, larger rowid).
    private func pruneFailures(now: Int64) throws(DatabaseError) {
        try db.statement("DELETE FROM failures WHERE until <= ?1").bind(now).run()
        try db.statement("DELETE FROM failures WHERE rowid <= (SELECT rowid FROM failures ORDER BY rowid DESC LIMIT 1 OFFSET ?1)")
            .bind(Int64(Scheduler.failuresRemembered)).run()
    }

    /// Unexpired failures, the oldest first; the others are deleted (`pruneFailures`). A code this version does not
    /// know reads as `internal`.
    func failures(now: Int64) throws(DatabaseError) -> [(key: String, failure: Failure, until: Int64)] {
        try write()
        try pruneFailures(now: now)
        let select = try db.statement("SELECT key, code, message, status, until FROM failures ORDER BY rowid")
        var rows: [(String, Failure, Int64)] = []
        while try select.step() {
            let failure = Failure(code: ErrorCode(rawValue: select.text(1)) ?? .internal, message: select.text(2),
                                  isTransient: false, httpStatus: select.optionalInt(3).map(Int.init))
            rows.append((select.text(0), failure, select.int(4)))
        }
        return rows
    }

    // MARK: Circuit breaker

    func savePause(host: String, until: Int64) throws(DatabaseError) {
        try write()
        try db.statement("INSERT OR REPLACE INTO hosts(host, paused_until, failures) VALUES (?1, ?2, 0)").bind(host, until).run()
    }

    /// Hosts still paused at `now`; expired pauses are deleted.
    func pausedHosts(now: Int64) throws(DatabaseError) -> [(host: String, until: Int64)] {
        try write()
        try db.statement("DELETE FROM hosts WHERE paused_until <= ?1").bind(now).run()
        let select = try db.statement("SELECT host, paused_until FROM hosts")
        var rows: [(String, Int64)] = []
        while try select.step() { rows.append((select.text(0), select.int(1))) }
        return rows
    }

    // MARK: Crash-loop guard

    /// Records, durably before returning, that the daemon is about to handle each key's response or image (the steps
    /// that read what a server sent): if the process dies before `finishedWorking`, the next start knows.
    func startWorking(_ keys: [String]) throws(DatabaseError) {
        try write()
        let insert: StaticString = "INSERT INTO working(key, deaths, active) VALUES (?1, 0, 1) ON CONFLICT(key) DO UPDATE SET active = 1"
        for key in keys { try db.statement(insert).bind(key).run() }
        try commit()
    }

    func finishedWorking(_ key: String) throws(DatabaseError) {
        try write()
        try db.statement("DELETE FROM working WHERE key = ?1").bind(key).run()
    }

    /// At a clean stop, in its last transaction, when no file is on its way into place: the index and the files
    /// agree, unless a turn was undone since the start or the start-up sweep did not finish; and the index is sound,
    /// unless a call found it damaged (`damage`).
    func markStoppedCleanly() throws(DatabaseError) {
        guard !rolledBack, !sweeping, damage == nil, !CacheFiles.leftBehind.load(ordering: .relaxed) else { return }
        try write()
        try db.execute("DELETE FROM clean_stop; INSERT INTO clean_stop(at) VALUES (CAST(strftime('%s', 'now') AS INTEGER));")
    }

    /// At a clean stop: what was being handled did not kill the daemon.
    func stopWorking() throws(DatabaseError) {
        try write()
        try db.execute("UPDATE working SET active = 0")
    }

    /// At start-up: counts a death of `weight` for every key that was being handled when the process ended without
    /// a clean stop. Returns the keys whose deaths in a row weigh `limit` or more, forgotten here (the caller
    /// quarantines them), and the others that died and have not been handled since (suspects).
    func countDeaths(weight: Int, limit: Int) throws(DatabaseError) -> (quarantine: [String], suspects: Set<String>) {
        try write()
        try db.statement("UPDATE working SET deaths = deaths + ?1, active = 0 WHERE active = 1").bind(Int64(weight)).run()
        var quarantine: [String] = [], suspects: Set<String> = []
        // Rows left by a clean stop (no death counted) are neither.
        let select = try db.statement("SELECT key, deaths FROM working WHERE deaths > 0")
        while try select.step() {
            if select.int(1) >= Int64(limit) { quarantine.append(select.text(0)) } else { suspects.insert(select.text(0)) }
        }
        for key in quarantine { try db.statement("DELETE FROM working WHERE key = ?1").bind(key).run() }
        try commit()
        return (quarantine, suspects)
    }

    // MARK: Recovery

    /// Start-up: drops temporary files (but resumable downloads) and returns how many went. Unless the last stop was
    /// clean (`stoppedCleanly`: the index and the files agreed, and a file gone since is found when it is asked for,
    /// `liveEntry`), it begins the sweep that compares them (`sweepStep`).
    func beginRecovery() throws -> Int {
        try write()
        try db.execute("DELETE FROM partials WHERE key NOT IN (SELECT key FROM queue)")
        var resumable: [String: String] = [:]
        let kept = try db.statement("SELECT key, validator, length FROM partials")
        partials = [:]
        while try kept.step() {
            partials[kept.text(0)] = Partial(validator: kept.text(1), length: kept.optionalInt(2), recorded: true)
            resumable[files.downloadPath(forName: CacheFiles.name(forKey: kept.text(0)))] = kept.text(0)
        }
        for (path, key) in resumable where access(path, F_OK) != 0 { try removePartial(key) }
        let temporaries = files.clearTemporaries(keeping: Set(resumable.keys))
        try commit()
        if !stoppedCleanly {
            sweep = Sweep()
            files.placed.begin()
        }
        return temporaries
    }

    /// Where the start-up sweep is: rows after a key, variants after a key and spec, then the entries of `files/`.
    private var sweep: Sweep?
    private struct Sweep {
        enum Phase {
            case entries(after: String)
            case variants(after: String, spec: String)
            case files(CachedFilesWalk)
        }
        var phase = Phase.entries(after: "")
        var badRows = 0
        var orphans = 0
    }

    /// Whether the start-up sweep has more to compare; a clean stop is not marked before it is done.
    var sweeping: Bool { sweep != nil }

    /// Compares up to `limit` more rows or files of the start-up sweep, in the turn's transaction: rows whose file is
    /// missing or of the wrong size go, the others get their disk usage measured again (rows from before it was
    /// recorded, or a file system that allocates differently); files no row names go, but those this run placed
    /// (`CacheFiles.placed`). Returns what it removed in all once the sweep is done, nil while it goes on.
    /// The daemon runs it in slices after it serves: 100,000 entries take seconds from a cold disk.
    func sweepStep(limit: Int) throws(DatabaseError) -> (badRows: Int, orphans: Int)? {
        guard var sweep else { return nil }
        try write()
        switch sweep.phase {
        case .entries(let after):
            var bad: [String] = [], remeasured: [(key: String, allocated: Int64)] = [], last: String?
            let rows = try db.statement("SELECT key, file, bytes, allocated FROM entries WHERE key > ?1 ORDER BY key LIMIT ?2")
                .bind(after, limit)
            while try rows.step() {
                last = rows.text(0)
                guard let usage = files.usage(of: rows.text(1)), usage.size == rows.int(2) else {
                    bad.append(rows.text(0))
                    continue
                }
                if usage.allocated != rows.int(3) { remeasured.append((rows.text(0), usage.allocated)) }
            }
            for key in bad { try remove(key) }
            for (key, allocated) in remeasured {
                counts.bytes += allocated - (try self.allocated(key))
                try db.statement("UPDATE entries SET allocated = ?2 WHERE key = ?1").bind(key, allocated).run()
            }
            sweep.badRows += bad.count
            sweep.phase = last.map { .entries(after: $0) } ?? .variants(after: "", spec: "")
        case .variants(let afterKey, let afterSpec):
            var bad: [(key: String, spec: String)] = []
            var remeasured: [(key: String, spec: String, allocated: Int64, was: Int64)] = []
            var last: (key: String, spec: String)?
            let rows = try db.statement("""
                SELECT key, spec, file, bytes, allocated FROM variants WHERE (key, spec) > (?1, ?2)
                ORDER BY key, spec LIMIT ?3
                """).bind(afterKey, afterSpec, limit)
            while try rows.step() {
                let key = rows.text(0), spec = rows.text(1), was = rows.int(4)
                last = (key, spec)
                if let usage = files.usage(of: rows.text(2)), usage.size == rows.int(3) {
                    if usage.allocated != was { remeasured.append((key, spec, usage.allocated, was)) }
                } else {
                    bad.append((key, spec))
                    counts.bytes -= was
                }
            }
            for (key, spec) in bad {
                try db.statement("DELETE FROM variants WHERE key = ?1 AND spec = ?2").bind(key, spec).run()
            }
            for (key, spec, allocated, was) in remeasured {
                try db.statement("UPDATE variants SET allocated = ?3 WHERE key = ?1 AND spec = ?2").bind(key, spec, allocated).run()
                counts.bytes += allocated - was
            }
            sweep.badRows += bad.count
            sweep.phase = last.map { .variants(after: $0.key, spec: $0.spec) } ?? .files(CachedFilesWalk(files))
        case .files(let walk):
            let found = walk.next(limit)
            for (name, path) in found {
                // The index names each file by its path (either layout: files/ab/<name>, or files/ab/cd/<name> before).
                let relative = String(path.dropFirst(files.root.count + 1))
                let known = name.utf8.count == 64 && ((try? db.statement("""
                    SELECT 1 FROM entries WHERE file = ?1 UNION ALL SELECT 1 FROM variants WHERE file = ?1
                    """).bind(relative).step()) ?? true)
                if !known, !files.placed.contains(name), deleteEntry(path) { sweep.orphans += 1 }
            }
            if found.isEmpty {
                walk.removeEmptied()
                self.sweep = nil
                files.placed.end()
                return (sweep.badRows, sweep.orphans + walk.junk)
            }
        }
        self.sweep = sweep
        return nil
    }
}
