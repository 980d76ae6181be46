import Glibc

/// A failed system call, naming the call and what it was doing.
struct SystemError: Error, CustomStringConvertible {
    let call: String
    let errno: Int32
    let detail: String

    var description: String {
        let reason = String(cString: strerror(errno))
        return detail.isEmpty ? "\(call): \(reason)" : "\(call) \(detail): \(reason)"
    }
}

/// Runs a system call, retrying on EINTR; a negative result becomes a `SystemError` naming `call`.
/// EBADF and EFAULT are programmer errors and stop the process.
@discardableResult
func syscall<T: BinaryInteger>(_ call: String, _ detail: @autoclosure () -> String = "", _ body: () -> T) throws(SystemError) -> T {
    while true {
        let result = body()
        if result >= 0 { return result }
        let code = Glibc.errno
        if code == EINTR { continue }
        precondition(code != EBADF && code != EFAULT, "\(call) \(detail()): programmer error, errno \(code)")
        throw SystemError(call: call, errno: code, detail: detail())
    }
}

/// Opens the regular file at `path` for reading. Anything else there (a symbolic link, a FIFO, a directory: put in
/// place of a cache file behind the daemon's back) is refused at once, never followed nor waited on.
func openRegularFile(_ path: String) throws(SystemError) -> Int32 {
    var info = stat()
    return try openRegularFile(path, info: &info)
}

/// `openRegularFile`, also giving what `fstat` said of the file.
func openRegularFile(_ path: String, info: inout stat) throws(SystemError) -> Int32 {
    let fd = try syscall("open", path) { open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK) }
    guard fstat(fd, &info) == 0, (info.st_mode & S_IFMT) == S_IFREG else {
        close(fd)
        throw SystemError(call: "open", errno: EINVAL, detail: "\(path), which is not a regular file")
    }
    return fd
}

/// The bytes an unprivileged writer may still use on the file system of `directory` (as much as counts when that is
/// more than a `UInt` holds); nil when it cannot be told.
func availableBytes(under directory: String) -> UInt? {
    var disk = statvfs()
    guard statvfs(directory, &disk) == 0 else { return nil }
    let free = disk.f_bavail.multipliedReportingOverflow(by: disk.f_frsize)
    return free.overflow ? .max : free.partialValue
}

/// Creates `path` and its missing parents with `mode`.
func makeDirectories(_ path: String, mode: mode_t) throws(SystemError) {
    var prefix = ""
    for part in path.split(separator: "/", omittingEmptySubsequences: true) {
        prefix += "/" + part
        if mkdir(prefix, mode) != 0, Glibc.errno != EEXIST {
            throw SystemError(call: "mkdir", errno: Glibc.errno, detail: prefix)
        }
    }
}

/// How many descriptors the process has open (the entries of /proc/self/fd, less the one reading it).
func openDescriptorCount() -> Int {
    guard let directory = opendir("/proc/self/fd") else { return 0 }
    defer { closedir(directory) }
    var count = 0
    while let entry = readdir(directory) {
        if entry.pointee.d_name.0 != UInt8(ascii: ".") { count += 1 }
    }
    return max(0, count - 1)
}
