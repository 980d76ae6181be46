#!/bin/sh
# Regenerates the committed image fixtures (gdk-pixbuf cannot write GIF; WebP and AVIF come from their reference
# encoders so the tests read files that gdk-pixbuf did not write itself).
# Needs: apt-get install imagemagick webp libavif-bin
# halves.*: 48x32, the left half red, the right half blue. grid.avif: 1200x900 in 3x3 tiles. Hostile AVIFs
# (make-hostile-avif.py): grid-bomb.avif, 16x16 references to one 512x512 tile (8192x8192 decoded) whose ispe says
# 100x100; tile-upscale.avif, a 1x1 grid of one 512x512 tile whose ispe says 8192x8192 (libavif scales it up);
# lying-size.avif, a 2000x2000 AV1 image whose ispe says 100x100; tile-swarm.avif, 32x32 tiles of 64x64 (a dav1d
# decoder each: 460 MB to decode 2048x2048); small-tiles.avif, 4x4 tiles of 8x8 (libavif refuses them, MIAF).
set -eu
cd "$(dirname "$0")"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
/usr/bin/convert -size 24x32 xc:'#ff0000' -size 24x32 xc:'#0000ff' +append "PNG24:$work/source.png"
/usr/bin/convert "$work/source.png" -strip halves.gif
cwebp -quiet -q 80 -metadata none "$work/source.png" -o halves.webp
avifenc --speed 10 --min 20 --max 30 "$work/source.png" halves.avif >/dev/null
/usr/bin/convert -size 1200x900 gradient:red-blue "PNG24:$work/gradient.png"
avifenc --speed 10 --grid 3x3 "$work/gradient.png" grid.avif >/dev/null
/usr/bin/convert -size 512x512 xc:'#336699' "PNG24:$work/tile.png"
avifenc --speed 10 "$work/tile.png" "$work/tile.avif" >/dev/null
python3 make-hostile-avif.py grid "$work/tile.avif" grid-bomb.avif 16 16 100 100
python3 make-hostile-avif.py upscale "$work/tile.avif" tile-upscale.avif 8192 8192
/usr/bin/convert -size 64x64 xc:'#336699' "PNG24:$work/tile64.png"
avifenc --speed 10 "$work/tile64.png" "$work/tile64.avif" >/dev/null
python3 make-hostile-avif.py grid "$work/tile64.avif" tile-swarm.avif 32 32 2048 2048
/usr/bin/convert -size 8x8 xc:'#336699' "PNG24:$work/tile8.png"
avifenc --speed 10 "$work/tile8.png" "$work/tile8.avif" >/dev/null
python3 make-hostile-avif.py grid "$work/tile8.avif" small-tiles.avif 4 4 32 32
/usr/bin/convert -size 2000x2000 xc:'#336699' "PNG24:$work/large.png"
avifenc --speed 10 "$work/large.png" "$work/large.avif" >/dev/null
python3 make-hostile-avif.py ispe "$work/large.avif" lying-size.avif 100 100
ls -l halves.gif halves.webp halves.avif grid.avif grid-bomb.avif tile-upscale.avif lying-size.avif tile-swarm.avif \
    small-tiles.avif
