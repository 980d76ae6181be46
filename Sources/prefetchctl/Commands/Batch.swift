import PrefetchProtocol

/// `queue`, `demote`, `promote`, `cancel`, `evict`: URLs streamed in batches, one result per URL.
enum BatchCommand {
    static let batchSize = 500
    static let inFlight = 8

    static func run(_ op: Operation, _ arguments: Arguments, client: Client) throws(CLIError) -> Int32 {
        let urls = arguments.urls().makeIterator()
        var pending: [Int64] = []
        var tally: [String: Int] = [:]
        var exitCode = ExitCode.ok
        var exhausted = false
        var total = 0
        while !exhausted || !pending.isEmpty {
            while !exhausted, pending.count < inFlight {
                var batch: [String] = []
                while batch.count < batchSize, let url = urls.next() { batch.append(url) }
                if batch.count < batchSize { exhausted = true }
                if batch.isEmpty { break }
                total += batch.count
                pending.append(try client.send(op, urls: batch))
            }
            guard !pending.isEmpty else { break }
            guard let reply = try client.receive() else { continue }
            guard let id = reply.id, let position = pending.firstIndex(of: id) else { continue }
            pending.remove(at: position)
            for item in try client.decode(BatchResult.self, reply.line).results {
                tally[item.status, default: 0] += 1
                if let error = item.error, item.status == "rejected" {
                    exitCode = max(exitCode, ExitCode.rejected)
                    if !arguments.json { Output.message("\(item.url): \(error.code): \(error.message)") }
                }
                if arguments.json {
                    Output.json(item)
                } else if op != .queue {
                    Output.line("\(item.url) \(item.status)")
                }
            }
        }
        guard total > 0 else { throw .usage("\(op.rawValue) needs at least one URL (or - to read them from stdin)") }
        if op == .queue, !arguments.json {
            let order = ["queued", "already", "cached", "skipped", "rejected"]
            Output.message(order.compactMap { status in tally[status].map { "\($0) \(status)" } }.joined(separator: ", "))
        }
        return exitCode
    }
}
