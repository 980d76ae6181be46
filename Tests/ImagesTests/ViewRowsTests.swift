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
            #expect(keys.bytes == view.urlBytes + ViewKeys.keyOverhead + ViewKeys.rowBytes,
                    "the budget of all views counts the same, and the key's place and its row's id")
        }
        #expect(keys.bytes == 0, "given back when the view goes")
    }

    @Test("the budget of all views counts every row (1,500 views of 100,000 rows of one URL held 629 MB, counted as one key) and a distinct key's place besides its bytes (short distinct keys held 5 times the budget)")
    func rowsAndKeysCounted() throws {
        let keys = ViewKeys()
        let url = try CanonicalURL("http://a/x")
        do {
            let views = (0..<3).map { _ in View(keys: keys) }
            for view in views { for _ in 0..<10_000 { view.append(url) } }
            #expect(keys.bytes == url.key.utf8.count + ViewKeys.keyOverhead + 30_000 * ViewKeys.rowBytes)
        }
        #expect(keys.bytes == 0, "given back when the views go")
    }
}
