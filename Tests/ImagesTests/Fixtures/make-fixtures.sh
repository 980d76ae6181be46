#!/bin/sh
# Regenerates the committed image fixtures (gdk-pixbuf cannot write GIF; WebP and AVIF come from their reference
# encoders so the tests read files that gdk-pixbuf did not write itself).
# Needs: apt-get install imagemagick webp libavif-bin
# Each image is 48x32: the left half red, the right half blue.
set -eu
cd "$(dirname "$0")"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
/usr/bin/convert -size 24x32 xc:'#ff0000' -size 24x32 xc:'#0000ff' +append "PNG24:$work/source.png"
/usr/bin/convert "$work/source.png" -strip halves.gif
cwebp -quiet -q 80 -metadata none "$work/source.png" -o halves.webp
avifenc --speed 10 --min 20 --max 30 "$work/source.png" halves.avif >/dev/null
ls -l halves.gif halves.webp halves.avif
