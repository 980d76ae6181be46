import CGdkPixbuf

/// A GError from a GLib or gdk-pixbuf call, copied into Swift (the GError itself is freed at once).
struct GLibError: Error, CustomStringConvertible, Sendable {
    let call: String
    let message: String
    let domain: GQuark
    let code: Int32

    /// Takes over `error`, which may be nil when the call failed without setting one, and frees it.
    init(_ call: String, taking error: UnsafeMutablePointer<GError>?) {
        self.call = call
        if let error {
            message = error.pointee.message.map { String(cString: $0) } ?? "no message"
            domain = error.pointee.domain
            code = error.pointee.code
            g_error_free(error)
        } else {
            message = "failed without saying why"
            domain = 0
            code = 0
        }
    }

    var description: String { "\(call): \(message)" }
}
