import Foundation
import Glibc
import QueueCore
import Testing
@testable import prefetchd

/// What the index keeps across restarts besides the cache: the slow-lane backlog, remembered failures, resumable
/// downloads and the crash-loop guard.
@Suite struct StoreDurableStateTests {
    func keys(_ rows: [(seq: Int64, key: String)]) -> [String] { rows.map(\.key) }

    @Test("queued URLs come back oldest first, once each, also after a restart")
    func backlogOrderSurvivesRestart() throws {
        try withCacheDirectory { directory in
            let urls = ["https://example.com/c", "https://example.com/a", "https://example.com/b"]
            do {
                let store = try Store(directory: directory)
                for (index, url) in urls.enumerated() { #expect(try store.enqueue(key: url, now: Int64(index))) }
                #expect(try !store.enqueue(key: urls[1], now: 10))
                try store.commit()
                #expect(store.backlogCount == 3)
            }
            do {
                let store = try Store(directory: directory)
                #expect(store.backlogCount == 3)
                let rows = try store.backlog(after: 0, limit: 10)
                #expect(keys(rows) == urls)
                #expect(keys(try store.backlog(after: rows[0].seq, limit: 1)) == [urls[1]])
                try store.dequeue(urls[1])
                try store.dequeue("https://example.com/never-queued")
                try store.commit()
                #expect(store.backlogCount == 2)
            }
            let store = try Store(directory: directory)
            #expect(store.backlogCount == 2)
            #expect(keys(try store.backlog(after: 0, limit: 10)) == [urls[0], urls[2]])
            #expect(try !store.isQueued(urls[1]) && store.isQueued(urls[2]))
            // Queued again, it goes to the back of the line.
            #expect(try store.enqueue(key: urls[1], now: 20))
            #expect(keys(try store.backlog(after: 0, limit: 10)) == [urls[0], urls[2], urls[1]])
        }
    }

    @Test("a URL queued after the newest rows were dequeued or rolled back is read after every row a read passed")
    func sequenceNeverGoesBack() throws {
        try withCacheDirectory { directory in
            let store = try Store(directory: directory)
            for name in ["a", "b"] { #expect(try store.enqueue(key: "https://example.com/\(name)", now: 1)) }
            try store.commit()
            let passed = try #require(try store.backlog(after: 0, limit: 10).last?.seq)
            try store.dequeue("https://example.com/b")
            try store.commit()
            #expect(try store.enqueue(key: "https://example.com/c", now: 2))
            #expect(keys(try store.backlog(after: passed, limit: 10)) == ["https://example.com/c"])
            let read = try #require(try store.backlog(after: passed, limit: 10).last?.seq)
            store.rollback()
            #expect(try store.enqueue(key: "https://example.com/d", now: 3))
            #expect(keys(try store.backlog(after: read, limit: 10)) == ["https://example.com/d"])
        }
    }

    @Test("an index whose queue used up its sequence numbers refuses to queue more, with an error, and keeps what it has")
    func exhaustedSequence() throws {
        try withCacheDirectory { directory in
            do {
                let store = try Store(directory: directory)
                #expect(try store.enqueue(key: "https://example.com/a", now: 1))
                try store.commit()
            }
            try Database(path: directory + "/index.sqlite").execute("UPDATE queue SET seq = \(Int64.max)")
            let store = try Store(directory: directory)
            #expect(throws: DatabaseError.self) { try store.enqueue(key: "https://example.com/b", now: 2) }
            #expect(store.backlogCount == 1)
            #expect(keys(try store.backlog(after: 0, limit: 10)) == ["https://example.com/a"])
        }
    }

    @Test("a turn that is rolled back leaves nothing queued, and the counts say so")
    func rollbackRestoresCounts() throws {
        try withCacheDirectory { directory in
            let store = try Store(directory: directory)
            let kept = try cache("https://example.com/kept.png", in: store)
            try store.commit()
            let bytes = store.totalBytes
            #expect(try store.enqueue(key: "https://example.com/q", now: 1))
            try cache("https://example.com/new.png", in: store)
            try store.savePartial("https://example.com/q", validator: "\"etag\"")
            store.rollback()
            #expect(try !store.isQueued("https://example.com/q"))
            #expect(store.backlogCount == 0)
            #expect(try store.entry("https://example.com/new.png") == nil)
            #expect(store.entryCount == 1 && store.totalBytes == bytes)
            #expect(store.partialValidator("https://example.com/q") == nil)
            // Asked again after the failure, the same writes are made for real.
            #expect(try store.enqueue(key: "https://example.com/q", now: 2))
            try store.savePartial("https://example.com/q", validator: "\"etag\"")
            try store.commit()
            #expect(store.backlogCount == 1)
            #expect(try store.entry(kept.key) == kept)
            _ = consume store
            #expect(try Store(directory: directory).partialValidator("https://example.com/q") == "\"etag\"")
        }
    }

    @Test("a turn that is rolled back says so, and a rewound backlog window reads the rows it had dequeued again")
    func rollbackRewindsTheBacklog() throws {
        try withCacheDirectory { directory in
            let store = try Store(directory: directory)
            var window = BacklogWindow()
            var rollbacks = 0
            store.onRollback = { rollbacks += 1; window.rewind() }
            let urls = ["https://example.com/a", "https://example.com/b", "https://example.com/c"]
            for url in urls { #expect(try store.enqueue(key: url, now: 1)) }
            try store.commit()
            let rows = try store.backlog(after: window.readsAfter, limit: 10)
            window.read(rows.count, of: 10)
            for row in rows { window.passed(row.seq); window.hold(row.key) }
            #expect(window.rowsWanted(slowWaiting: 0, blocked: 0, window: 10) == nil)
            // The fetch of b ended: its row is dequeued in a turn whose commit then fails.
            try store.dequeue(urls[1])
            window.forget(urls[1])
            store.rollback()
            #expect(rollbacks == 1)
            #expect(try store.isQueued(urls[1]) && store.backlogCount == 3)
            #expect(window.rowsWanted(slowWaiting: 0, blocked: 0, window: 10) == 10)
            #expect(keys(try store.backlog(after: window.readsAfter, limit: 10)) == urls)
            #expect(window.onlyQueued(of: store.backlogCount) == 1)
            // A commit with nothing to undo says nothing.
            try store.commit()
            #expect(rollbacks == 1)
        }
    }

    @Test("tasks of paused hosts take no place in the backlog window, up to four windows in all; rows passed over for a paused host are read again once it is not")
    func pausedHostsInTheBacklogWindow() {
        var window = BacklogWindow()
        #expect(window.rowsWanted(slowWaiting: 600, blocked: 0, window: 1000) == nil, "more than half the window waits")
        #expect(window.rowsWanted(slowWaiting: 1000, blocked: 1000, window: 1000) == 1000)
        #expect(window.rowsWanted(slowWaiting: 3500, blocked: 3200, window: 1000) == 500, "up to four windows in all")
        #expect(window.rowsWanted(slowWaiting: 4000, blocked: 4000, window: 1000) == nil)
        window.passed(7)
        window.passedOver(8, host: "a:80")
        window.passedOver(9, host: "b:80")
        window.passedOver(10, host: "a:80")
        window.passed(11)
        window.read(5, of: 6)
        #expect(window.readsAfter == 11 && window.hostsPassedOver == ["a:80": 8, "b:80": 9])
        #expect(window.rowsWanted(slowWaiting: 0, blocked: 0, window: 10) == nil, "the read ran out")
        window.resumeHosts(["a:80"])
        #expect(window.readsAfter == 7 && window.hostsPassedOver == ["b:80": 9], "read again from a's first row passed over")
        #expect(window.rowsWanted(slowWaiting: 0, blocked: 0, window: 10) == 10)
        window.resumeHosts(["b:80", "c:80"])
        #expect(window.readsAfter == 7 && window.hostsPassedOver.isEmpty, "never forward")
    }

    @Test("a remembered failure is kept until it expires, then forgotten for good")
    func failuresExpire() throws {
        let notFound = Failure.httpStatus(404)
        let policy = Failure(code: .formatNotAllowed, message: "svg is not allowed", isTransient: false)
        try withCacheDirectory { directory in
            do {
                let store = try Store(directory: directory)
                try store.saveFailure("https://example.com/404", notFound, until: 2000, now: 0)
                try store.saveFailure("https://example.com/policy", policy, until: 5000, now: 0)
                try store.commit()
            }
            do {
                let store = try Store(directory: directory)
                let all = try store.failures(now: 1999).sorted { $0.key < $1.key }
                #expect(all.map(\.key) == ["https://example.com/404", "https://example.com/policy"])
                #expect(all.map(\.failure) == [notFound, policy])
                #expect(all.map(\.until) == [2000, 5000])
                #expect(try store.failures(now: 2000).map(\.key) == ["https://example.com/policy"])
                try store.commit()
            }
            let store = try Store(directory: directory)
            #expect(try store.failures(now: 0).map(\.key) == ["https://example.com/policy"])
            #expect(try store.failures(now: 5000).isEmpty)
        }
    }

    @Test("the failures table keeps what the scheduler remembers: expired rows and the oldest past the newest 10,000 are deleted every 1,000 saves and at start")
    func failuresPruned() throws {
        let notFound = Failure.httpStatus(404)
        let limit = Scheduler.failuresRemembered
        try withCacheDirectory { directory in
            let path = directory + "/index.sqlite"
            func rows(_ condition: String = "1") throws -> Int64 {
                try Database(path: path).integer("SELECT count(*) FROM failures WHERE \(condition)")
            }
            do {
                let store = try Store(directory: directory)
                for n in 0..<999 { try store.saveFailure("https://example.com/a\(n)", notFound, until: 1_000, now: 0) }
                try store.commit()
                #expect(try rows() == 999)
                // The thousandth save, later: the 999 before it have expired.
                try store.saveFailure("https://example.com/last", notFound, until: 9_000, now: 1_000)
                try store.commit()
                #expect(try rows() == 1)
                for n in 0..<(limit + 1_000) { try store.saveFailure("https://example.com/b\(n)", notFound, until: 9_000, now: 2_000) }
                try store.commit()
                #expect(try rows() == Int64(limit), "the newest \(limit)")
                #expect(try rows("key = 'https://example.com/b\(limit + 999)'") == 1)
                #expect(try rows("key IN ('https://example.com/b1000', 'https://example.com/b999')") == 1)
                for n in 0..<5 { try store.saveFailure("https://example.com/c\(n)", notFound, until: 9_000, now: 2_000) }
                try store.commit()
            }
            let store = try Store(directory: directory)
            let kept = try store.failures(now: 2_000)
            try store.commit()
            #expect(kept.count == limit)
            #expect(try rows() == Int64(limit))
            #expect(kept.last?.key == "https://example.com/c4" && kept.first?.key == "https://example.com/b1005", "oldest first")
        }
    }

    @Test("a queued download in progress can be resumed after a restart; a forgotten one loses its body")
    func partialsSurviveWhileQueued() throws {
        try withCacheDirectory { directory in
            let url = "https://example.com/big.png"
            let body = directory + "/tmp/" + CacheFiles.name(forKey: url)
            do {
                let store = try Store(directory: directory)
                #expect(try store.enqueue(key: url, now: 1))
                try writeFile(body, count: 1234)
                try store.savePartial(url, validator: "\"v1\"")
                #expect(store.partialValidator(url) == "\"v1\"")
                try store.commit()
            }
            let store = try Store(directory: directory)
            #expect(store.partialValidator(url) == "\"v1\"")
            #expect(try store.recover() == (0, 0, 0))
            #expect(store.partialValidator(url) == "\"v1\"")
            #expect(exists(body))
            // The body is still being written into the cache: the record goes, the file stays.
            try store.removePartial(url, deletingBody: false)
            #expect(store.partialValidator(url) == nil && exists(body))
            try store.savePartial(url, validator: "\"v2\"")
            try store.removePartial(url)
            try store.commit()
            #expect(store.partialValidator(url) == nil && !exists(body))
            _ = consume store
            #expect(try Store(directory: directory).partialValidator(url) == nil)
        }
    }

    @Test("a noted download resumes in this run only, also after a rollback; recorded, it outlives a restart with the latest validator and the file's length")
    func notedPartials() throws {
        try withCacheDirectory { directory in
            let small = "https://example.com/small.png", large = "https://example.com/large.png"
            do {
                let store = try Store(directory: directory)
                for url in [small, large] { #expect(try store.enqueue(key: url, now: 1)) }
                try store.commit()
                try store.notePartial(small, validator: "\"s\"")
                try store.notePartial(large, validator: "\"l1\"")
                try store.recordPartial(large)
                try store.commit()
                #expect(try store.enqueue(key: "https://example.com/other.png", now: 2))
                store.rollback()
                #expect(store.partialValidator(small) == "\"s\"" && store.partialValidator(large) == "\"l1\"")
                // Another response for the recorded one: the record follows it, its length too.
                try store.notePartial(large, validator: "\"l2\"", length: 19_419)
                try store.commit()
            }
            let store = try Store(directory: directory)
            #expect(store.partialValidator(small) == nil)
            #expect(store.partialValidator(large) == "\"l2\"" && store.partialLength(large) == 19_419)
        }
    }

    @Test("recovery drops resumable downloads no longer queued and those whose body is gone")
    func recoveryDropsStalePartials() throws {
        try withCacheDirectory { directory in
            let unqueued = "https://example.com/fast.png", bodiless = "https://example.com/lost.png"
            let unqueuedBody = directory + "/tmp/" + CacheFiles.name(forKey: unqueued)
            do {
                let store = try Store(directory: directory)
                #expect(try store.enqueue(key: bodiless, now: 1))
                try writeFile(unqueuedBody, count: 100)
                try store.savePartial(unqueued, validator: "\"a\"")
                try store.savePartial(bodiless, validator: "\"b\"")
                try store.commit()
            }
            let store = try Store(directory: directory)
            #expect(try store.recover() == (1, 0, 0))
            #expect(store.partialValidator(unqueued) == nil && store.partialValidator(bodiless) == nil)
            #expect(!exists(unqueuedBody))
            _ = consume store
            let reopened = try Store(directory: directory)
            #expect(reopened.partialValidator(unqueued) == nil && reopened.partialValidator(bodiless) == nil)
        }
    }

    @Test("a URL whose handling crashed the daemon twice (each death weighing 2) is quarantined; a clean stop is not a death")
    func deathsAreCounted() throws {
        try withCacheDirectory { directory in
            let poison = "https://example.com/poison.png", interrupted = "https://example.com/slow.png"
            // Handling `poison` starts, and the process dies (the store goes without a clean stop).
            do { try Store(directory: directory).startWorking([poison]) }
            do {
                let store = try Store(directory: directory)
                let found = try store.countDeaths(weight: 2, limit: 4)
                #expect(found.quarantine.isEmpty && found.suspects == [poison])
                try store.startWorking([poison])
            }
            do {
                let store = try Store(directory: directory)
                let found = try store.countDeaths(weight: 2, limit: 4)
                #expect(found.quarantine == [poison] && found.suspects.isEmpty)
                // A clean stop while `interrupted` is being handled.
                try store.startWorking([interrupted])
                try store.stopWorking()
                try store.commit()
            }
            let store = try Store(directory: directory)
            let found = try store.countDeaths(weight: 2, limit: 4)
            #expect(found.quarantine.isEmpty && found.suspects.isEmpty)
        }
    }

    @Test("deaths in a row add up by their weight: a URL killed from outside (weight 1) three times is a suspect, the fourth time quarantined")
    func deathsAddUpByWeight() throws {
        try withCacheDirectory { directory in
            let url = "https://example.com/unlucky.png"
            do { try Store(directory: directory).startWorking([url]) }
            for _ in 1...3 {
                let store = try Store(directory: directory)
                let found = try store.countDeaths(weight: 1, limit: 4)
                #expect(found.quarantine.isEmpty && found.suspects == [url])
                try store.startWorking([url])
            }
            let found = try Store(directory: directory).countDeaths(weight: 1, limit: 4)
            #expect(found.quarantine == [url] && found.suspects.isEmpty)
        }
    }

    @Test("the crash mark is believed only as its handler writes it (two digits of a fatal signal it handles, a newline) and only from a file of its own: any digits counted as a crash, and a hard link was written through")
    func crashMarkIsReadStrictly() throws {
        try withCacheDirectory { directory in
            let path = directory + "/index.sqlite-crash"
            for (text, signal) in [("11\n", SIGSEGV), ("06\n", SIGABRT), ("07\n", SIGBUS), ("--\n", nil), ("0\n", nil),
                                   ("zz7qq", nil), ("99\n", nil), ("15\n", nil), ("11", nil), ("", nil)] as [(String, Int32?)] {
                try writeFile(path, text: text)
                #expect(FatalSignalMark(directory: directory).signal == signal, "\(text.debugDescription)")
            }
            let other = directory + "/other"
            try writeFile(other, text: "11\n")
            unlink(path)
            #expect(link(other, path) == 0)
            #expect(FatalSignalMark(directory: directory).signal == nil, "a hard link is not the daemon's own")
            #expect(String(decoding: try #require(FileManager.default.contents(atPath: other)), as: UTF8.self) == "11\n")
        }
    }

    @Test("the keys of one batch are all durable when startWorking returns: a death counts against each")
    func batchedStartIsDurable() throws {
        try withCacheDirectory { directory in
            let keys = (1...5).map { "https://example.com/\($0).png" }
            do {
                let store = try Store(directory: directory)
                // A write of the turn, not committed yet, becomes durable with them.
                _ = try store.enqueue(key: "https://example.com/queued.png", now: 1)
                try store.startWorking(keys)
            }
            let store = try Store(directory: directory)
            let found = try store.countDeaths(weight: 2, limit: 4)
            #expect(found.quarantine.isEmpty && found.suspects == Set(keys))
            #expect(try store.isQueued("https://example.com/queued.png"))
        }
    }
    @Test("the index's log goes back to a few MiB after a large turn: a daemon that runs for weeks keeps no peak")
    func writeAheadLogShrinksAfterALargeTurn() throws {
        try withCacheDirectory { directory in
            let store = try Store(directory: directory)
            let log = directory + "/index.sqlite-wal"
            for index in 0..<80_000 {
                #expect(try store.enqueue(key: "https://example.com/\(index)/a-rather-long-path/of-an-image.jpg",
                                          now: Int64(index)))
            }
            try store.commit()
            let peak = try #require(allocatedOnDisk(log))
            #expect(peak > 8 << 20, "the test needs a turn larger than the limit")
            // The commit above checkpointed the log; the next turn starts it over from its beginning.
            try store.dequeue("https://example.com/0/a-rather-long-path/of-an-image.jpg")
            try store.commit()
            let after = try #require(allocatedOnDisk(log))
            #expect(after <= Store.writeAheadLogLimit, "log \(after) bytes after a peak of \(peak)")
            #expect(store.backlogCount == 79_999)
        }
    }

    @Test("a write-ahead log deleted while the store runs is replaced: what it held, and what is written after, survive a crash")
    func deletedWriteAheadLogIsReplaced() throws {
        try withCacheDirectory { directory in
            let store = try Store(directory: directory)
            #expect(try store.enqueue(key: "https://example.com/before", now: 1))
            try store.commit()
            #expect(!store.writeAheadLogWasDeleted)
            #expect(unlink(directory + "/index.sqlite-wal") == 0)
            #expect(store.writeAheadLogWasDeleted)
            try store.replaceWriteAheadLog()
            #expect(!store.writeAheadLogWasDeleted, "the new log is there at once")
            #expect(try store.enqueue(key: "https://example.com/after", now: 2))
            try store.commit()
            // What a crash would leave: the index and its log as they are on disk now, while the store still runs.
            try withCacheDirectory { crashed in
                for suffix in ["", "-wal"] where access(directory + "/index.sqlite" + suffix, F_OK) == 0 {
                    try FileManager.default.copyItem(atPath: directory + "/index.sqlite" + suffix,
                                                     toPath: crashed + "/index.sqlite" + suffix)
                }
                let reopened = try Store(directory: crashed)
                #expect(reopened.backlogCount == 2)
            }
            #expect(store.backlogCount == 2)
        }
    }
}
