import Testing
@testable import prefetchd

/// Every configuration key and flag takes the numbers a second administrator might type without a crash: refused
/// with a message, or taken and printed back.
@Suite struct OptionsNumbersTests {
    static let extremes = [
        "9223372036854775807", "9223372036854775808", "-9223372036854775808", "18446744073709551616",
        "99999999999999999999", "-1", "0", "1e400", "1e-300", "-0", "nan", "inf", "0x10", "8388607T", "8388608T",
        "9223372036854775807K", "-5K", "K", "", " 5", "1.5",
    ]

    @Test("every setting given the ends of Int64, huge sizes, 1e400, nan or 1e-300 refuses it or takes it and prints it back")
    func extremeValues() {
        for setting in Options.settings {
            for value in Self.extremes {
                var options = Options(environment: [:])
                do {
                    try setting.read(&options, value)
                } catch {
                    #expect(!error.message.isEmpty, "\(setting.key) = \(value)")
                    continue
                }
                var again = Options(environment: [:])
                #expect((try? setting.read(&again, setting.show(options))) != nil, "\(setting.key) = \(value)")
                #expect(setting.show(again) == setting.show(options), "\(setting.key) = \(value)")
                _ = options.schedulerConfiguration
            }
        }
    }

    @Test("deny_networks shows each network in its own form (10.1.2.3/8 is 10.0.0.0/8) and matches by it")
    func deniedNetworkForms() throws {
        let setting = Options.setting(key: "deny_networks")!
        var options = Options(environment: [:])
        try setting.read(&options, "10.1.2.3/8, 192.168.1.7, 2001:db8::1/32,fe80::1:2/10, 0.0.0.0/0")
        #expect(setting.show(options) == "10.0.0.0/8,192.168.1.7/32,2001:db8::/32,fe80::/10,0.0.0.0/0")
        let networks = options.fetch.deniedNetworks
        #expect(networks[0].contains("10.200.0.1") && !networks[0].contains("11.0.0.1"))
        #expect(networks[2].contains("2001:db8:ffff::9") && !networks[2].contains("2001:db9::1"))
        #expect(networks[4].contains("8.8.8.8") && !networks[4].contains("::1"))
        for bad in ["1.2.3.4/08", "1.2.3.4/+8", "1.2.3.4/", "1.2.3.4/33", "::/129", "fe80::1%lo/64", "1.2.3/8", "x/8"] {
            var again = Options(environment: [:])
            #expect((try? setting.read(&again, bad)) == nil, "deny_networks = \(bad)")
        }
    }

    @Test("host_start_rate is a decimal number: hex (0x10 was 16), exponents and words are refused")
    func hostStartRateDecimalOnly() {
        let setting = Options.setting(key: "host_start_rate")!
        for value in ["0x10", "0x1p4", "1e2", "inf", "nan", "+5", " 5", "1..2", ""] {
            var options = Options(environment: [:])
            #expect((try? setting.read(&options, value)) == nil, "host_start_rate = \(value)")
        }
        for (value, rate) in [("16", 16.0), ("0.5", 0.5), ("0", nil)] as [(String, Double?)] {
            var options = Options(environment: [:])
            #expect((try? setting.read(&options, value)) != nil && options.hostStartRate == rate, "\(value)")
        }
    }

    @Test("host_start_rate 1e-300 was taken, and a host waiting for its next start crashed the daemon")
    func hostStartRateWaitFits() {
        let setting = Options.setting(key: "host_start_rate")!
        for value in Self.extremes + ["0.001", "0.0009", "100000", "100000.5", "1e-17"] {
            var options = Options(environment: [:])
            guard (try? setting.read(&options, value)) != nil, let rate = options.hostStartRate else { continue }
            // The scheduler waits (1 - tokens) * 1000 / rate ms for the next token, as an Int64.
            #expect(1000 / rate < 1e15, "host_start_rate = \(value) makes a wait of \(1000 / rate) ms")
        }
    }
}
