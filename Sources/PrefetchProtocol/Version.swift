/// The version both programs report.
public let prefetchVersion = "0.1.0"
