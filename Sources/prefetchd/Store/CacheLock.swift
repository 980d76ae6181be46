import Glibc

/// An exclusive lock on the cache directory (`<cache>/lock`, holding the owner's pid), held for the daemon's life:
/// a second daemon on the same directory would sweep the first one's downloads in progress at start-up. The
/// directory itself is locked too, so that a lock file someone deleted does not let a second daemon in.
final class CacheLock {
    private let fd: Int32
    private let directoryFD: Int32
    let path: String
    /// Descriptors left open for the program executed next (`StartAgain`), in `PREFETCHD_CACHE_LOCK`.
    private static let handedOverVariable = "PREFETCHD_CACHE_LOCK"
    private var handedOver = false
    /// The locked file: a lock file deleted (or replaced) no longer keeps a second daemon away.
    private let identity: FileIdentity?

    /// Another process holds the lock.
    struct Held: Error, CustomStringConvertible {
        let directory: String
        let holder: String
        var description: String {
            "the cache directory \(directory) is in use by another prefetchd (\(holder)); "
                + "stop it or give this one its own --cache-dir"
        }
    }

    init(directory: String) throws {
        let path = directory + "/lock"
        self.path = path
        if let (fd, directoryFD) = Self.takeHandedOver(path: path, directory: directory) {
            self.fd = fd
            self.directoryFD = directoryFD
            identity = FileIdentity(path: path)
            return
        }
        let fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0o600)
        if fd < 0 {
            let code = errno
            // Its pid would be written through the link (as root, into any file).
            if code == ELOOP {
                throw DaemonError("the lock \(path) is a symbolic link: remove it; prefetchd writes nothing through "
                                  + "links in its cache")
            }
            if code == EISDIR {
                throw DaemonError("the lock \(path) is a directory: remove it; prefetchd keeps its pid in a file of that "
                                  + "name")
            }
            if code == EACCES || code == EROFS {
                throw DaemonError("cannot open the lock \(path): \(String(cString: strerror(code))): the cache directory "
                                  + "must be writable by the user prefetchd runs as (uid \(getuid())), or choose another "
                                  + "--cache-dir")
            }
            throw SystemError(call: "open", errno: code, detail: path)
        }
        do {
            _ = try syscall("flock", path) { flock(fd, LOCK_EX | LOCK_NB) }
        } catch where error.errno == EWOULDBLOCK {
            let holder = Self.readPID(fd).map { "pid \($0)" } ?? "pid unknown"
            close(fd)
            throw Held(directory: directory, holder: holder)
        } catch {
            close(fd)
            throw error
        }
        do {
            directoryFD = try Self.lockDirectory(directory)
        } catch {
            close(fd)
            throw error
        }
        let text = Array("\(getpid())\n".utf8)
        _ = ftruncate(fd, 0)
        _ = pwrite(fd, text, text.count, 0)
        self.fd = fd
        identity = FileIdentity(path: path)
    }

    /// Whether the lock file is still the one locked, under its name.
    var isInPlace: Bool { identity?.isNamed(by: path) == true }

    deinit {
        guard !handedOver else { return }
        close(fd)
        close(directoryFD)
    }

    /// Keeps the lock held across `execv` (`StartAgain`): its descriptors stay open, named in the environment for
    /// the next start to take over, so that no second daemon gets the directory between the two runs.
    func handOver() {
        guard fcntl(fd, F_SETFD, 0) == 0, fcntl(directoryFD, F_SETFD, 0) == 0 else { return }
        handedOver = true
        setenv(Self.handedOverVariable, "\(getpid()):\(fd):\(directoryFD)", 1)
    }

    /// The lock the run before handed over in this process (`pid:fd:directoryFD`), if its descriptors still hold
    /// this directory's lock file and the directory itself; otherwise they are closed and the lock is taken anew.
    /// A value another process left in the environment names descriptors that are not the lock's: left alone.
    private static func takeHandedOver(path: String, directory: String) -> (Int32, Int32)? {
        guard let value = getenv(handedOverVariable).map({ String(cString: $0) }) else { return nil }
        unsetenv(handedOverVariable)
        let numbers = value.split(separator: ":").compactMap { Int32($0) }
        guard numbers.count == 3, numbers[0] == getpid(),
              numbers.dropFirst().allSatisfy({ $0 > 2 && fcntl($0, F_GETFD) >= 0 }) else { return nil }
        let (fd, directoryFD) = (numbers[1], numbers[2])
        let held = FileIdentity(descriptor: fd).map { $0.isEntry(path) } == true
            && FileIdentity(descriptor: directoryFD) == FileIdentity(path: directory)
            && flock(fd, LOCK_EX | LOCK_NB) == 0 && flock(directoryFD, LOCK_EX | LOCK_NB) == 0
        guard held else {
            close(fd)
            close(directoryFD)
            return nil
        }
        _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
        _ = fcntl(directoryFD, F_SETFD, FD_CLOEXEC)
        return (fd, directoryFD)
    }

    /// Locks the directory itself; held by another daemon only when its lock file was deleted (it locks the file
    /// first, where its pid is).
    private static func lockDirectory(_ directory: String) throws -> Int32 {
        let fd = try syscall("open", directory) { open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC) }
        do {
            _ = try syscall("flock", directory) { flock(fd, LOCK_EX | LOCK_NB) }
            return fd
        } catch where error.errno == EWOULDBLOCK {
            close(fd)
            throw Held(directory: directory, holder: "pid unknown: its lock file was deleted")
        } catch {
            close(fd)
            throw error
        }
    }

    private static func readPID(_ fd: Int32) -> Int32? {
        var buffer = [UInt8](repeating: 0, count: 32)
        let count = pread(fd, &buffer, buffer.count, 0)
        guard count > 0 else { return nil }
        return Int32(String(decoding: buffer[..<count], as: UTF8.self).trimmingCharacters(in: " \n"))
    }
}
