#!/bin/sh
# Builds the libFuzzer targets into DIR (default /tmp/prefetchd-fuzz-targets-$UID): QueueCore and PrefetchProtocol
# as static libraries, then each target from its Fuzz/ file and the daemon's source files it exercises, as one module
# against them, all with `swiftc -sanitize=fuzzer`. A target is skipped when it is newer than every input.
#   DIR/request   Fuzz/FuzzRequest.swift: LineBuffer, the JSON request decoder, CanonicalURL
#   DIR/headers   Fuzz/FuzzHeaders.swift + Fetch/ResponseHeaders.swift (links libcurl for curl_getdate)
#   DIR/numbers   Fuzz/FuzzRequestNumbers.swift + Server/Request+Numbers.swift + Images/VariantSpec.swift
# Usage: stress/build_fuzz.sh [DIR]
set -e
cd "$(dirname "$0")/.."
out=${1:-/tmp/prefetchd-fuzz-targets-$(id -u)}
mkdir -p "$out"
swiftc="nice -n 10 swiftc -sanitize=fuzzer -parse-as-library -O"

# stale OUTPUT FILE...: whether OUTPUT is missing or older than one of the files.
stale() {
    target=$1
    shift
    [ ! -e "$target" ] || [ -n "$(find "$@" -newer "$target")" ]
}

library() {  # library NAME SOURCES...
    name=$1
    shift
    if stale "$out/lib$name.a" "$@"; then
        $swiftc -module-name "$name" -emit-module -emit-module-path "$out/$name.swiftmodule" -emit-library -static \
            -I "$out" "$@" -o "$out/lib$name.a"
    fi
}

target() {  # target NAME SOURCES...
    name=$1
    shift
    if stale "$out/$name" "$@" "$out/libQueueCore.a" "$out/libPrefetchProtocol.a"; then
        $swiftc -module-name "Fuzz_$name" -I "$out" -I Sources/CCurl -L "$out" -lPrefetchProtocol -lQueueCore "$@" \
            -o "$out/$name.tmp"
        mv "$out/$name.tmp" "$out/$name"
    fi
}

library QueueCore Sources/QueueCore/*.swift
# PrefetchProtocol uses QueueCore's types (ErrorCode): built again whenever QueueCore was.
if [ "$out/libQueueCore.a" -nt "$out/libPrefetchProtocol.a" ]; then rm -f "$out/libPrefetchProtocol.a"; fi
library PrefetchProtocol Sources/PrefetchProtocol/*.swift
target request Fuzz/FuzzRequest.swift
target headers Fuzz/FuzzHeaders.swift Sources/prefetchd/Fetch/ResponseHeaders.swift
target numbers Fuzz/FuzzRequestNumbers.swift Sources/prefetchd/Server/Request+Numbers.swift \
    Sources/prefetchd/Images/VariantSpec.swift
