// swift-tools-version:6.0
import PackageDescription

let package = Package(
    name: "prefetchd",
    products: [
        .executable(name: "prefetchd", targets: ["prefetchd"]),
        .executable(name: "prefetchctl", targets: ["prefetchctl"]),
        .library(name: "QueueCore", targets: ["QueueCore"]),
        .library(name: "PrefetchProtocol", targets: ["PrefetchProtocol"]),
    ],
    targets: [
        .systemLibrary(name: "CCurl", pkgConfig: "libcurl", providers: [.apt(["libcurl4-openssl-dev"])]),
        .systemLibrary(name: "CSQLite", pkgConfig: "sqlite3", providers: [.apt(["libsqlite3-dev"])]),
        .systemLibrary(name: "CSystem"),
        .systemLibrary(name: "CGdkPixbuf", pkgConfig: "gdk-pixbuf-2.0", providers: [.apt(["libgdk-pixbuf-2.0-dev"])]),
        // GIO (GDBus) comes with GLib, which gdk-pixbuf needs anyway.
        .systemLibrary(name: "CGio", pkgConfig: "gio-2.0", providers: [.apt(["libglib2.0-dev"])]),
        // OpenSSL's libcrypto, which libcurl links anyway: SHA-256 with the CPU's instructions.
        .systemLibrary(name: "CCrypto", pkgConfig: "libcrypto", providers: [.apt(["libssl-dev"])]),
        .target(name: "QueueCore"),
        .target(name: "PrefetchProtocol", dependencies: ["QueueCore"]),
        .executableTarget(
            name: "prefetchd",
            dependencies: ["QueueCore", "PrefetchProtocol", "CCurl", "CSQLite", "CGdkPixbuf", "CGio", "CCrypto", "CSystem"]
        ),
        .executableTarget(name: "prefetchctl", dependencies: ["PrefetchProtocol", "QueueCore", "CSystem"]),
        .testTarget(name: "QueueCoreTests", dependencies: ["QueueCore"]),
        .testTarget(name: "PrefetchProtocolTests", dependencies: ["PrefetchProtocol"]),
        .testTarget(name: "ImagesTests", dependencies: ["prefetchd"], exclude: ["Fixtures"]),
        .testTarget(name: "StoreTests", dependencies: ["prefetchd"]),
        .testTarget(
            name: "prefetchdTests",
            dependencies: ["PrefetchProtocol"],
            exclude: ["Fixtures"]
        ),
    ],
    swiftLanguageModes: [.v6]
)
