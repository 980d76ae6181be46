import Testing
@testable import QueueCore

/// The negative cache: remembered permanent failures, expiring, at most `capacity` of them.
@Suite struct NegativeCacheTests {
    let gone = Failure.httpStatus(404)
    let refused = Failure.httpStatus(403)

    @Test("a failure is answered until it expires; past capacity the one remembered first goes, also when it expires last")
    func capacityAndExpiry() {
        var cache = NegativeCache(capacity: 3)
        cache.remember("a", gone, until: t(500))
        cache.remember("b", gone, until: t(100))
        cache.remember("c", refused, until: t(300))
        #expect(cache.failure("a", at: t(99)) == gone && cache.failure("c", at: t(99)) == refused)
        #expect(cache.failure("b", at: t(99)) == gone && cache.failure("b", at: t(100)) == nil, "expired at its until")
        cache.remember("d", gone, until: t(900))
        #expect(cache.count == 3 && cache.failure("a", at: t(0)) == nil, "a was remembered first")
        #expect(cache.failure("d", at: t(0)) == gone)
        cache.expire(at: t(300))
        #expect(cache.count == 1 && cache.failure("d", at: t(300)) == gone, "b and c expired")
    }

    @Test("a key remembered again keeps only its newest failure and place; expiry stops at the first entry still valid")
    func rememberedAgain() {
        var cache = NegativeCache(capacity: 2)
        cache.remember("a", gone, until: t(100))
        cache.remember("b", gone, until: t(200))
        cache.remember("a", refused, until: t(300))  // a is now newer than b
        #expect(cache.count == 2 && cache.failure("a", at: t(150)) == refused)
        cache.remember("c", gone, until: t(400))
        #expect(cache.failure("b", at: t(0)) == nil && cache.failure("a", at: t(0)) == refused, "b went, not a")
        cache.expire(at: t(350))
        #expect(cache.count == 1 && cache.failure("c", at: t(350)) == gone)
        cache.expire(at: t(1_000))
        #expect(cache.count == 0)
    }

    @Test("random operations agree with a plain dictionary model that drops the key remembered first, expired or not")
    func randomAgainstModel() {
        var random = SplitMix64(seed: 18)
        for round in 0..<200 {
            let capacity = 1 + Int(random.next() % 8)
            let keys = 1 + random.next() % 12  // fewer than the capacity, some: nothing pushes the oldest out
            var cache = NegativeCache(capacity: capacity)
            var model: [String: (failure: Failure, until: Int64, serial: Int)] = [:]
            var now: Int64 = 0, serial = 0
            if round % 3 == 0 {  // remembered first, valid to the end: expiry stops at it while the others come and go
                serial += 1
                cache.remember("first", gone, until: t(1_000_000))
                model["first"] = (gone, 1_000_000, serial)
            }
            for _ in 0..<(round % 10 == 0 ? 6_000 : 400) {  // long enough, some, to compact the order
                let key = "k\(random.next() % keys)"
                switch random.next() % 4 {
                case 0, 1:
                    serial += 1
                    let failure = random.next() % 2 == 0 ? gone : refused
                    let until = now + (random.next() % 100 == 0 ? 100_000 : Int64(random.next() % 50))  // some block expiry
                    cache.remember(key, failure, until: t(until))
                    model[key] = (failure, until, serial)
                    while model.count > capacity {
                        let oldest = model.min { $0.value.serial < $1.value.serial }!.key
                        model.removeValue(forKey: oldest)
                    }
                case 2:
                    now += Int64(random.next() % 20)
                    cache.expire(at: t(now))
                default:
                    let expected = model[key].flatMap { $0.until > now ? $0.failure : nil }
                    #expect(cache.failure(key, at: t(now)) == expected, "round \(round), \(key) at \(now)")
                }
                let valid = model.values.filter { $0.until > now }.count
                #expect(cache.count >= valid && cache.count <= capacity, "round \(round)")
            }
            cache.expire(at: t(2_000_000))
            #expect(cache.count == 0, "round \(round): every entry expired, none left behind")
        }
    }

    @Test("the scheduler remembers at most failuresRemembered failures: the first ones remembered are forgotten first")
    func schedulerBound() {
        var s = Scheduler(configuration: .init(retry: RetryPolicy(negativeTTL: 60_000)), seed: 1)
        let limit = Scheduler.failuresRemembered
        for n in 0...limit { s.remember("https://example.com/\(n)", gone, until: t(60_000)) }
        #expect(s.rememberedFailure("https://example.com/0", now: t(0)) == nil)
        #expect(s.rememberedFailure("https://example.com/1", now: t(0)) == gone)
        #expect(s.rememberedFailure("https://example.com/\(limit)", now: t(0)) == gone)
    }
}
