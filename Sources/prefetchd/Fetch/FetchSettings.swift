/// Limits every transfer shares.
struct FetchSettings {
    /// Largest body accepted, in bytes.
    var maxBytes: Int64 = 50 * 1024 * 1024
    var connectTimeout: Int64 = 10_000
    /// Abort when fewer than `lowSpeedLimit` bytes/s arrive for `lowSpeedTime` seconds.
    var lowSpeedLimit: Int64 = 1024
    var lowSpeedTime: Int64 = 30
    /// The receive buffer of the background pool's connections (bytes), or 0 to leave it to the kernel. Not reading
    /// a held connection does not stop its server while the TCP window is open, and Linux opens it to megabytes; a
    /// buffer near the path's bandwidth-delay product lets about one window cross after the hold, so urgent work
    /// gets the link within a round trip. Its cost: background throughput at most about this much per round trip
    /// (docs/transport.md).
    var backgroundWindow: Int64 = 128 * 1024
    /// An upstream proxy URL; without one curl honours `http_proxy`, `https_proxy` and `no_proxy`.
    var proxy: String?
    /// Certificate authorities trusted instead of the system's: a PEM bundle, and a directory of hashed certificates
    /// (`c_rehash`), for servers behind a private CA.
    var caFile: String?
    var caPath: String?
    /// Networks never connected to, checked on the address actually connected (link-local ones always are).
    var deniedNetworks: [IPNetwork] = []
}
