import PrefetchProtocol
import QueueCore
import Testing
@testable import prefetchd

/// What views hold, as the views' budgets count it.
@Suite struct ViewRowsTests {
    @Test("a rejected row counts as what it holds, not as its text: 100,000 rows of \"\" a view counted 0 bytes, and 120 clients held 2.27 GB")
    func rejectedRowsCounted() throws {
        let keys = ViewKeys()
        let error = WireError(.invalidURL, "the URL is empty")
        do {
            let view = View(keys: keys)
            for _ in 0..<1_000 { view.reject("", error) }
            view.append(try CanonicalURL("http://a.example/x"))
            #expect(view.urlBytes == 1_000 * (error.message.utf8.count + 128) + "http://a.example/x".utf8.count)
            #expect(keys.bytes == view.urlBytes, "the budget of all views counts the same")
        }
        #expect(keys.bytes == 0, "given back when the view goes")
    }
}
