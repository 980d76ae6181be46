#!/bin/sh
# Writes the images the image tests serve into DIR: real photos of each size the tests need (ImageMagick),
# the committed GIF/WebP/AVIF samples, and broken or hostile files.
set -eu
dir=$1
fixtures=$(dirname "$0")/../../ImagesTests/Fixtures
convert -size 4000x3000 gradient:navy-gold -quality 80 "$dir/photo.jpg"
convert -size 8000x5000 gradient:black-white -quality 70 "$dir/forty.jpg"
convert -size 64x48 gradient:red-blue "$dir/landscape.jpg"
convert -size 100x100 xc:teal "$dir/small.png"
cp "$fixtures/halves.gif" "$fixtures/halves.webp" "$fixtures/halves.avif" "$dir/"
head -c 20000 "$dir/photo.jpg" > "$dir/truncated.jpg"
: > "$dir/empty.jpg"
printf '<svg xmlns="http://www.w3.org/2000/svg" width="10" height="10"><rect width="10" height="10"/></svg>' > "$dir/vector.svg"
python3 - "$dir/landscape.jpg" "$dir/rotated.jpg" <<'PY'
import struct, sys
# An APP1 Exif segment whose only tag is Orientation = 6 (rotate 90 degrees clockwise to display).
tiff = b"MM\x00\x2a" + struct.pack(">I", 8) + struct.pack(">H", 1) + struct.pack(">HHII", 0x0112, 3, 1, 6 << 16) + struct.pack(">I", 0)
exif = b"Exif\x00\x00" + tiff
jpeg = open(sys.argv[1], "rb").read()
open(sys.argv[2], "wb").write(jpeg[:2] + b"\xff\xe1" + struct.pack(">H", len(exif) + 2) + exif + jpeg[2:])
PY
rm "$dir/landscape.jpg"
python3 - "$dir/huge.png" <<'PY'
import struct, sys, zlib
def chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
ihdr = struct.pack(">IIBBBBB", 100_000, 100_000, 8, 2, 0, 0, 0)
idat = zlib.compress(b"\0" * 16)
open(sys.argv[1], "wb").write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", idat) + chunk(b"IEND", b""))
PY
