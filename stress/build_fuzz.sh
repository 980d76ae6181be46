#!/bin/sh
# Builds the libFuzzer target Fuzz/FuzzRequest.swift with the sources it exercises (QueueCore, PrefetchProtocol) as
# one module; skipped when OUTPUT is newer than every input. Usage: stress/build_fuzz.sh OUTPUT
set -e
cd "$(dirname "$0")/.."
out=${1:-/tmp/prefetchd-fuzz}
sources="Sources/QueueCore/*.swift Sources/PrefetchProtocol/*.swift Fuzz/FuzzRequest.swift"
if [ -x "$out" ] && [ -z "$(find $sources -newer "$out")" ]; then exit 0; fi
nice -n 10 swiftc -sanitize=fuzzer -parse-as-library -O -module-name FuzzRequest $sources -o "$out.tmp"
mv "$out.tmp" "$out"
