import PrefetchProtocol

/// `metrics`: the Prometheus text exposition, as node_exporter's textfile collector or a scraper reads it.
enum MetricsCommand {
    static func run(_ arguments: Arguments, client: Client) throws(CLIError) -> Int32 {
        let metrics = try client.call(Request(id: nil, op: .metrics), MetricsText.self)
        if arguments.json { Output.json(metrics) } else { print(metrics.text.forTerminal(keepingNewlines: true), terminator: "") }
        return ExitCode.ok
    }
}
