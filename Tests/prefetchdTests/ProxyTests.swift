import Foundation
import Testing

/// The scale-out path: daemons on several machines share one caching proxy tier.
@Suite(.serialized)
struct ProxyTests {
    /// Squid on 127.0.0.1 with a memory-only cache, configured in a temporary directory.
    final class Squid {
        let directory: TemporaryDirectory
        let child: ChildProcess
        let port: Int

        init() throws {
            directory = try TemporaryDirectory()
            port = try freePort()
            let config = """
                http_port 127.0.0.1:\(port)
                pid_filename \(directory.path)/squid.pid
                cache_log \(directory.path)/cache.log
                access_log none
                cache_store_log none
                cache_mem 64 MB
                maximum_object_size_in_memory 8 MB
                cache_dir null /tmp
                coredump_dir \(directory.path)
                http_access allow localhost
                http_access deny all
                shutdown_lifetime 0 seconds
                """
            try config.write(toFile: directory.path + "/squid.conf", atomically: true, encoding: .utf8)
            try FileManager.default.setAttributes([.ownerAccountName: "proxy"], ofItemAtPath: directory.path)
            child = try ChildProcess("/usr/sbin/squid", ["-N", "-f", directory.path + "/squid.conf"],
                                     stderrPath: directory.path + "/squid.err")
            for _ in 0..<100 {
                if (try? String(contentsOfFile: directory.path + "/cache.log", encoding: .utf8))?.contains("Accepting HTTP") == true { return }
                usleep(100_000)
            }
            throw HarnessError("squid did not start: \(child.stderrText)")
        }

        deinit { child.stop() }
    }

    @Test("two daemons with separate caches behind one caching proxy: the origin serves one request")
    func sharedProxy() throws {
        let origin = try Origin()
        let squid = try Squid()
        let environment = ["http_proxy": "http://127.0.0.1:\(squid.port)", "PATH": "/usr/bin:/bin"]
        let first = try DaemonUnderTest(environment: environment)
        let second = try DaemonUnderTest(environment: environment)
        let url = origin.url("/shared.jpg")
        let a = first.ctl("get", url)
        let b = second.ctl("get", url)
        #expect(a.status == 0 && b.status == 0, "\(a.stderr) \(b.stderr)")
        #expect(a.stdout != b.stdout, "separate caches")
        #expect(FileManager.default.contents(atPath: a.stdout.trimmingCharacters(in: .newlines))
                == FileManager.default.contents(atPath: b.stdout.trimmingCharacters(in: .newlines)))
        #expect(try origin.count("/shared.jpg") == 1)
    }
}

/// A TCP port nothing listens on right now.
func freePort() throws -> Int {
    let result = run("/usr/bin/env", ["python3", "-c",
                                      "import socket;s=socket.socket();s.bind(('127.0.0.1',0));print(s.getsockname()[1])"])
    guard let port = Int(result.stdout.trimmingCharacters(in: .whitespacesAndNewlines)) else {
        throw HarnessError("no free port: \(result.stderr)")
    }
    return port
}
