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
    /// The receive buffer of connections opened for background work (bytes), or 0 to leave it to the kernel. Holding
    /// a transfer's reading back does not stop the server while the TCP window is open, and Linux opens it to
    /// megabytes; a small buffer keeps the window small, so a held-back background transfer stops taking bandwidth
    /// from urgent ones almost at once. Its cost: background throughput at most this much per round trip.
    var backgroundWindow: Int64 = 16 * 1024
    /// An upstream proxy URL; without one curl honours `http_proxy`, `https_proxy` and `no_proxy`.
    var proxy: String?
    /// Certificate authorities trusted instead of the system's: a PEM bundle, and a directory of hashed certificates
    /// (`c_rehash`), for servers behind a private CA.
    var caFile: String?
    var caPath: String?
    /// Networks never connected to, checked on the address actually connected (link-local ones always are).
    var deniedNetworks: [IPNetwork] = []
}
