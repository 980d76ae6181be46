/// Limits every transfer shares.
struct FetchSettings {
    /// Largest body accepted, in bytes.
    var maxBytes: Int64 = 50 * 1024 * 1024
    var connectTimeout: Int64 = 10_000
    /// Abort when fewer than `lowSpeedLimit` bytes/s arrive for `lowSpeedTime` seconds.
    var lowSpeedLimit: Int64 = 1024
    var lowSpeedTime: Int64 = 30
    var connectionsPerHost: Int = 6
    /// The rate a running background transfer is held to while urgent work runs (bytes/s).
    var backgroundRateWhileSuspended: Int64 = 32 * 1024
    /// An upstream proxy URL; without one curl honours `http_proxy`, `https_proxy` and `no_proxy`.
    var proxy: String?
    /// Networks never connected to, checked on the address actually connected (link-local ones always are).
    var deniedNetworks: [IPNetwork] = []
}
