import PrefetchProtocol
import QueueCore

/// Resized variants: answered from the index when made before, else made by `Variants` (once however many ask) and
/// answered when the job ends.
extension Daemon {
    /// Answers `recipient` on `connection` with the `spec` variant of the cached `entry`, making it when it does not
    /// exist.
    func deliverVariant(of entry: IndexEntry, _ spec: VariantSpec, on connection: Connection, to recipient: Recipient) {
        guard let format = entry.format else {
            return deliver(.failure(WireError(Failure(code: .notAnImage, message: "\(entry.key) is not an image; it has no variants",
                                                      isTransient: false))), to: recipient, on: connection)
        }
        let resolved = spec.resolved(forSource: format)
        let job = Variants.Job(key: entry.key, spec: resolved.spec)
        if let variant = variants.existing(job) {
            telemetry.variantHit()
            store.touch(entry.key, now: wallClockMilliseconds())
            return deliver(.success(wire(variant, of: entry, spec: job.spec)), to: recipient, on: connection)
        }
        // allowed_formats also says which decoders may run: narrowed by a reload or a restart, the files cached before
        // (and their variants made before) are still served, but no new variant of them is decoded.
        guard options.images.allows(format) else {
            return deliver(.failure(WireError(Failure.formatNotAllowed(format))), to: recipient, on: connection)
        }
        if recipient.isRequest, let full = connection.waitsFull {
            return deliver(.failure(full), to: recipient, on: connection)
        }
        connection.waitForVariant(job, recipient: recipient)
        variants.make(job, resolved, of: entry, for: connection.id)
    }

    /// A variant job ended (`Variants.onEnd`): the cache is kept under its limit, then everyone waiting for it is
    /// answered.
    func variantEnded(_ job: Variants.Job, _ outcome: Result<Variants.Made, Failure>) {
        telemetry.variantMade()
        let answer: Result<CacheEntry, Failure>
        do {
            let made = try outcome.get()
            try enforceCacheLimit(sparing: job.key)
            let variant = made.variant
            Log.info("made \(job.spec) of \(job.key) (\(variant.width)x\(variant.height), \(variant.bytes) bytes)")
            answer = .success(wire(variant, of: made.original, spec: job.spec))
        } catch let failure as Failure {
            answer = .failure(failure)
        } catch {
            answer = .failure(Failure(code: .internal, message: "cannot index the variant: \(error)", isTransient: true))
        }
        for connection in clients.all {
            for recipient in connection.takeVariantWaits(job) {
                deliver(answer.mapError { WireError($0) }, to: recipient, on: connection)
            }
        }
    }

    private func wire(_ variant: Store.Variant, of original: IndexEntry, spec: String) -> CacheEntry {
        var entry = CacheEntry(url: original.url, path: store.files.absolute(variant.file), bytes: variant.bytes,
                               sha256: variant.sha256, contentType: variant.format == "png" ? "image/png" : "image/jpeg",
                               format: variant.format, width: variant.width, height: variant.height,
                               fetchedAt: original.fetchedAt / 1000, freshUntil: original.freshUntil / 1000)
        entry.variant = spec
        return entry
    }
}
