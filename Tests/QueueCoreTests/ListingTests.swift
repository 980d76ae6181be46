import Testing
@testable import QueueCore

@Suite("Listing tasks")
struct ListingTests {
    @Test("SmallestKeys keeps the smallest keys offered, in order, for every capacity; duplicates count")
    func smallestKeys() {
        var random = SplitMix64(seed: 7)
        for round in 0..<200 {
            let keys = (0..<Int(random.next() % 60)).map { _ in String(random.next() % 40, radix: 36) }
            let capacity = round % 2 == 0 ? Int(random.next() % 70) : keys.count
            var kept = SmallestKeys(capacity: capacity)
            for key in keys { kept.offer(key) }
            #expect(kept.sorted == Array(keys.sorted().prefix(capacity)), "\(keys), capacity \(capacity)")
        }
    }

    @Test("firstTasks(limit): the running tasks first, then the others, each in key order, as sorting them all would give")
    func firstTasks() {
        var s = makeScheduler(fast: 3, slow: 2)
        for index in 0..<40 {
            let u = url("http://h\(index % 3).example/\(String(index * 7919 % 97, radix: 16))")
            if index % 3 == 0 {
                _ = s.queue(u, cache: .missing, now: t(0))
            } else {
                _ = s.get(u, waiter: w(1, UInt64(index)), cache: .missing, now: t(0))
            }
        }
        let all = s.allTasks.sorted { ($0.state == .running ? 0 : 1, $0.key) < ($1.state == .running ? 0 : 1, $1.key) }
        let running = all.count { $0.state == .running }  // the first queued one started before the gets came
        #expect(running == 4 && all.count == 40)
        for limit in [0, 1, 3, 4, 5, 10, 39, 40, 41, 1_000] {
            #expect(s.firstTasks(limit) == Array(all.prefix(limit)), "limit \(limit)")
        }
        #expect(s.runningTasks == Array(all.prefix(running)))
    }
}
