import Foundation
import Testing

/// Image servers behind a private certificate authority (`ca_file`, `ca_path`).
@Suite(.serialized)
struct TLSTests {
    /// A CA of the test's own and a certificate it signed for 127.0.0.1, made with openssl.
    struct PrivateCA {
        let directory: TemporaryDirectory
        var caFile: String { directory.path + "/ca.pem" }
        var certificate: String { directory.path + "/server.pem" }
        var key: String { directory.path + "/server.key" }

        /// `names`: the certificate's subjectAltName (another host's name makes a certificate for another host).
        init(names: String = "IP:127.0.0.1") throws {
            directory = try TemporaryDirectory()
            let d = directory.path
            let steps: [[String]] = [
                ["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=prefetchd test CA",
                 "-keyout", d + "/ca.key", "-out", d + "/ca.pem"],
                ["req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1", "-keyout", d + "/server.key",
                 "-out", d + "/server.csr"],
                ["x509", "-req", "-in", d + "/server.csr", "-CA", d + "/ca.pem", "-CAkey", d + "/ca.key",
                 "-CAcreateserial", "-days", "2", "-extfile", d + "/san.cnf", "-out", d + "/server.pem"],
            ]
            try "subjectAltName = \(names)\n".write(toFile: d + "/san.cnf", atomically: true, encoding: .utf8)
            for step in steps {
                let result = run("/usr/bin/openssl", step)
                guard result.status == 0 else { throw HarnessError("openssl \(step[0]): \(result.stderr)") }
            }
        }
    }

    @Test("an image server behind a private CA fails with tls naming the cause, and works with ca_file; the daemon keeps serving")
    func privateCA() throws {
        let ca = try PrivateCA()
        let origin = try Origin(tls: (ca.certificate, ca.key))
        let url = origin.url("/private.jpg")

        let untrusting = try DaemonUnderTest()
        let refused = untrusting.ctl("get", "--json", url)
        #expect(errorCode(refused.stdout) == "tls", "\(refused.stdout) \(refused.stderr)")
        #expect(refused.stdout.contains("unable to get local issuer certificate"), "the message names the cause: \(refused.stdout)")
        #expect(untrusting.ctl("ping").status == 0)

        let trusting = try DaemonUnderTest(["--ca-file", ca.caFile])
        let fetched = trusting.ctl("get", url)
        #expect(fetched.status == 0, "\(fetched.stdout) \(fetched.stderr)")
        #expect(FileManager.default.fileExists(atPath: fetched.stdout.trimmingCharacters(in: .newlines)))
    }

    @Test("a new connection to a TLS server resumes the session an earlier one made, in either lane, as the curl tool's transfers do (every connection made a full handshake); a reload starts afresh")
    func sessionsResumed() throws {
        let ca = try PrivateCA()
        let origin = try Origin(tls: (ca.certificate, ca.key))
        let directory = try TemporaryDirectory()
        let config = directory.path + "/prefetchd.conf"
        try "ca_file = \(ca.caFile)\n".write(toFile: config, atomically: true, encoding: .utf8)
        let daemon = try DaemonUnderTest(["--config", config])
        // Connection: close: each fetch has a connection of its own; one after the other, each may resume the last.
        let url = { (name: String) in origin.url("/\(name).jpg?header=Connection:close") }
        for name in ["first", "second"] { #expect(daemon.ctl("get", url(name)).status == 0) }
        #expect(daemon.ctl("queue", "--wait", "--timeout", "30", url("background")).status == 0)
        kill(try #require(daemon.child?.pid), SIGHUP)
        #expect(waitUntil(seconds: 5) { daemon.log.contains("SIGHUP: reloaded") }, "\(daemon.log)")
        for name in ["reloaded", "after"] { #expect(daemon.ctl("get", url(name)).status == 0) }
        let log = try origin.stats().log
        let resumed = { (name: String) in log.first { $0.path == "/\(name).jpg" }?.tlsResumed }
        #expect(Set(log.map(\.client)).count == log.count, "a connection each: \(log.map(\.client))")
        #expect(resumed("first") == false && resumed("second") == true && resumed("background") == true,
                "\(log.map { ($0.path, $0.tlsResumed) })")
        #expect(resumed("reloaded") == false && resumed("after") == true, "\(log.map { ($0.path, $0.tlsResumed) })")
    }

    @Test("a certificate for another host name fails with tls naming the mismatch, even from a trusted CA")
    func certificateForAnotherName() throws {
        let ca = try PrivateCA(names: "DNS:images.example.com")
        let origin = try Origin(tls: (ca.certificate, ca.key))
        let daemon = try DaemonUnderTest(["--ca-file", ca.caFile])
        let refused = daemon.ctl("get", "--json", origin.url("/elsewhere.jpg"))
        #expect(errorCode(refused.stdout) == "tls", "\(refused.stdout) \(refused.stderr)")
        #expect(refused.stdout.contains("no alternative certificate subject name matches target host name '127.0.0.1'"),
                "the message names the cause: \(refused.stdout)")
    }

    @Test("ca_file naming a file that cannot be read is refused at start-up with the path and the reason")
    func unreadableCAFile() throws {
        let directory = try TemporaryDirectory()
        let missing = directory.path + "/no-such-ca.pem"
        let result = run(Paths.prefetchd, ["--check-config", "--ca-file", missing])
        #expect(result.status != 0)
        #expect(result.stderr.contains(missing) && result.stderr.contains("No such file"), "\(result.stderr)")
        let notAFile = run(Paths.prefetchd, ["--check-config", "--ca-file", directory.path])
        #expect(notAFile.status != 0 && notAFile.stderr.contains("is not a file"), "\(notAFile.stderr)")
    }
}
