import CCurl

/// The TLS sessions every transfer shares (a libcurl share handle): a new connection to a server the daemon spoke
/// to before resumes its session, as the curl tool's transfers do, instead of a full handshake (the certificate
/// chain sent and verified again, and on TLS 1.2 one more round trip). Sessions only: connections stay in their
/// pool. Used on the loop thread alone, so it needs no locks; each transfer holds the one it started with, so a
/// reload's new set (`CurlFetcher.reconfigure`) frees the old one once its last transfer ends.
final class TLSSessions {
    /// nil when libcurl could not make one: each transfer then keeps its own sessions, as before.
    let share: UnsafeMutableRawPointer?

    init() {
        share = curl_share_init()
        if let share { pf_share_setopt_long(share, CURLSHOPT_SHARE, Int(CURL_LOCK_DATA_SSL_SESSION.rawValue)) }
    }

    deinit {
        if let share { curl_share_cleanup(share) }
    }
}
