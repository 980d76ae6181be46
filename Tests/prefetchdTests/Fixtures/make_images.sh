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
cp "$fixtures/halves.gif" "$fixtures/halves.webp" "$fixtures/halves.avif" "$fixtures/grid-bomb.avif" \
    "$fixtures/tile-swarm.avif" "$fixtures/small-tiles.avif" "$dir/"
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
convert -size 1x1 xc:red -define webp:lossless=true "$dir/pixel.webp"
python3 - "$dir/pixel.webp" "$dir/frames.webp" "$dir/scans.jpg" "$dir/forty-frames.webp" <<'PY'
import struct, sys
# Animated WebPs on a 1000x1000 canvas of one lossless pixel a frame: 100 frames (1.5 KB) and 40. gdk-pixbuf's
# loader decodes every frame onto a canvas of its own: 100 and 40 megapixels.
pixel = open(sys.argv[1], "rb").read()[12:]  # its VP8L chunk
def chunk(kind, data):
    return kind + struct.pack("<I", len(data)) + data + (b"\0" if len(data) % 2 else b"")
def frame(i):
    # X/2, Y/2, width - 1, height - 1 (3 bytes each), a duration of 10 ms, no flags
    return chunk(b"ANMF", (i % 100).to_bytes(3, "little") + bytes(9) + (10).to_bytes(3, "little") + b"\0" + pixel)
def animation(frames):
    body = b"WEBP" + chunk(b"VP8X", bytes([2, 0, 0, 0]) + (999).to_bytes(3, "little") * 2) + chunk(b"ANIM", bytes(6))
    body += b"".join(frame(i) for i in range(frames))
    return b"RIFF" + struct.pack("<I", len(body)) + body
open(sys.argv[2], "wb").write(animation(100))
open(sys.argv[4], "wb").write(animation(40))
# A progressive 64x64 JPEG of 300 scans, each one end-of-band run over every block: libjpeg decodes each scan over
# the whole picture (4,000 such scans of 8000x6000 took 90 s).
def segment(marker, data):
    return b"\xff" + bytes([marker]) + struct.pack(">H", len(data) + 2) + data
jpeg = b"\xff\xd8" + segment(0xDB, b"\0" + b"\1" * 64) + segment(0xC2, struct.pack(">BHHB", 8, 64, 64, 1) + bytes([1, 0x11, 0]))
jpeg += segment(0xC4, b"\x10" + bytes([1] + [0] * 15) + b"\xe0")
scan = segment(0xDA, bytes([1, 1, 0, 1, 63, 0])) + bytes([0x7F, 0xFF, 0])  # an EOB run of 32767 blocks; FF stuffed
open(sys.argv[3], "wb").write(jpeg + scan * 300 + b"\xff\xd9")
PY
rm "$dir/pixel.webp"
