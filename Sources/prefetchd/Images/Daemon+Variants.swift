import Glibc
import PrefetchProtocol
import QueueCore

/// Resized variants: made on a worker from a cached original, once however many requests want the same one.
extension Daemon {
    /// A variant being made: the original's key and the resolved spec.
    struct VariantJob: Hashable {
        var key: String
        var spec: String
    }

    /// Answers `recipient` on `client` with the `spec` variant of the cached `entry`, making it when it does not exist.
    func deliverVariant(of entry: IndexEntry, _ spec: VariantSpec, client: UInt64, to recipient: Recipient) {
        guard let format = entry.format else {
            return answerVariant(client, recipient, .failure(Failure(code: .notAnImage,
                message: "\(entry.key) is not an image; it has no variants", isTransient: false)))
        }
        let resolved = spec.resolved(forSource: format)
        let job = VariantJob(key: entry.key, spec: resolved.spec)
        if let variant = try? store.variant(entry.key, spec: job.spec), store.files.size(of: variant.file) == variant.bytes {
            metrics.variantHits += 1
            store.touch(entry.key, now: wallClockMilliseconds())
            return answerVariant(client, recipient, .success(wire(variant, of: entry, spec: job.spec)))
        }
        guard variantJobs[job] == nil else {
            variantJobs[job]!.append((client, recipient))
            return
        }
        variantJobs[job] = [(client, recipient)]
        let relative = CacheFiles.relativePath(forName: CacheFiles.name(forKey: entry.key + "#" + job.spec))
        let source = store.files.absolute(entry.file)
        let destination = store.files.absolute(relative)
        let maxPixels = options.images.maxPixels
        let make: @Sendable () -> Result<(ImageInfo, String), Failure> = {
            do {
                try makeDirectories(String(destination[..<destination.lastIndex(of: "/")!]), mode: CacheFiles.directoryMode)
                let info = try Resizer.makeVariant(source: source, spec: resolved, destination: destination, maxPixels: maxPixels)
                guard let sha256 = SHA256.hex(ofFile: destination) else {
                    return .failure(Failure(code: .internal, message: "cannot read the variant back", isTransient: true))
                }
                return .success((info, sha256))
            } catch let error as Failure {
                return .failure(error)
            } catch {
                return .failure(Failure(code: .internal, message: "\(error)", isTransient: true))
            }
        }
        // Decoding an original is a risky step (`CrashGuard`).
        crashGuard.whenFree { [unowned self] in
            crashGuard.begin(job.key)
            workers.run(make, completion: { [unowned self] result in self.variantMade(job, relative: relative, result) })
        }
    }

    private func variantMade(_ job: VariantJob, relative: String, _ result: Result<(ImageInfo, String), Failure>) {
        crashGuard.end(job.key)
        let waiters = variantJobs.removeValue(forKey: job) ?? []
        metrics.variantDecodes += 1
        let outcome: Result<CacheEntry, Failure>
        do {
            switch result {
            case .success(let (info, sha256)):
                guard let original = try store.entry(job.key), let bytes = store.files.size(of: relative) else {
                    store.files.remove(relative)
                    throw Failure(code: .internal, message: "the original was evicted while its variant was made",
                                  isTransient: true)
                }
                let variant = Store.Variant(file: relative, bytes: bytes, sha256: sha256, format: info.format,
                                            width: info.width, height: info.height)
                try store.putVariant(job.key, spec: job.spec, variant)
                try enforceCacheLimit(sparing: job.key)
                Log.info("made \(job.spec) of \(job.key) (\(info.width)x\(info.height), \(bytes) bytes)")
                outcome = .success(wire(variant, of: original, spec: job.spec))
            case .failure(let failure):
                throw failure
            }
        } catch let failure as Failure {
            Log.info("cannot make \(job.spec) of \(job.key): \(failure.code): \(failure.message)")
            outcome = .failure(failure)
        } catch {
            outcome = .failure(Failure(code: .internal, message: "cannot index the variant: \(error)", isTransient: true))
        }
        for (client, recipient) in waiters { answerVariant(client, recipient, outcome) }
    }

    private func answerVariant(_ client: UInt64, _ recipient: Recipient, _ outcome: Result<CacheEntry, Failure>) {
        guard let connection = clients.connections[client] else { return }
        deliver(outcome.mapError { WireError($0) }, to: recipient, on: connection)
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
