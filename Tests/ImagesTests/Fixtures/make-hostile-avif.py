#!/usr/bin/env python3
"""Hostile AVIFs made from a real one (avifenc's, one AV1 image, 8-bit offsets in its iloc), for make-fixtures.sh:

  make-hostile-avif.py grid TILE.avif OUT.avif ROWS COLUMNS WIDTH HEIGHT
      a grid of ROWS x COLUMNS references to TILE's one AV1 image (every tile's data the same bytes), whose ispe says
      WIDTH x HEIGHT while the grid descriptor says the tiles' whole size (a decompression bomb of a few KB)
  make-hostile-avif.py upscale TILE.avif OUT.avif WIDTH HEIGHT
      a 1x1 grid of TILE's size whose tile's ispe says WIDTH x HEIGHT (libavif scales the tile to it)
  make-hostile-avif.py ispe IMAGE.avif OUT.avif WIDTH HEIGHT
      IMAGE with its ispe property saying WIDTH x HEIGHT, its AV1 image unchanged
"""
import struct
import sys


def boxes(b, start, end):
    """(type, box start, body start, box end) of each box in b[start:end]."""
    found, at = [], start
    while at + 8 <= end:
        size, kind = struct.unpack(">I4s", b[at:at + 8])
        header = 8
        if size == 1:
            size, header = struct.unpack(">Q", b[at + 8:at + 16])[0], 16
        elif size == 0:
            size = end - at
        found.append((kind, at, at + header, at + size))
        at += size
    return found


def box(kind, body):
    return struct.pack(">I", 8 + len(body)) + kind + body


def full(kind, version, body):
    return box(kind, bytes([version, 0, 0, 0]) + body)


def parts(b):
    """The ftyp box, the meta box's children by type, ipco's properties by type, and the AV1 image's data."""
    top = {kind: (start, body, end) for kind, start, body, end in boxes(b, 0, len(b))}
    meta = top[b"meta"]
    children = {kind: (start, body, end) for kind, start, body, end in boxes(b, meta[1] + 4, meta[2])}
    iprp = children[b"iprp"]
    ipco = [x for x in boxes(b, iprp[1], iprp[2]) if x[0] == b"ipco"][0]
    properties = {kind: b[start:end] for kind, start, body, end in boxes(b, ipco[2], ipco[3])}
    iloc = b[children[b"iloc"][1]:children[b"iloc"][2]]
    assert iloc[0] == 0 and iloc[4] == 0x44 and iloc[5] >> 4 == 0, "expected avifenc's iloc: version 0, 4-byte fields"
    count, = struct.unpack(">H", iloc[6:8])
    item, reference, extents, offset, length = struct.unpack(">HHHII", iloc[8:22])
    return b[top[b"ftyp"][0]:top[b"ftyp"][2]], children, properties, b[offset:offset + length]


def grid(tile_path, out, rows, columns, width, height, tile_ispe=None):
    ftyp, children, properties, tile = parts(open(tile_path, "rb").read())
    tile_width, tile_height = struct.unpack(">II", properties[b"ispe"][12:20])
    if tile_ispe:
        properties[b"ispe"] = full(b"ispe", 0, struct.pack(">II", *tile_ispe))
    tiles = list(range(2, rows * columns + 2))
    descriptor = bytes([0, 0, rows - 1, columns - 1]) + struct.pack(">HH", tile_width * columns, tile_height * rows)
    infe = lambda item, kind: full(b"infe", 2, struct.pack(">HH", item, 0) + kind + b"\0")
    iinf = full(b"iinf", 0, struct.pack(">H", len(tiles) + 1) + infe(1, b"grid") + b"".join(infe(t, b"av01") for t in tiles))
    iref = full(b"iref", 0, box(b"dimg", struct.pack(">HH", 1, len(tiles)) + b"".join(struct.pack(">H", t) for t in tiles)))
    # Properties: 1 the tiles' ispe, 2 av1C, 3 pixi, 4 the grid's ispe (the lie).
    ipco = box(b"ipco", properties[b"ispe"] + properties[b"av1C"] + properties[b"pixi"]
               + full(b"ispe", 0, struct.pack(">II", width, height)))
    ipma = full(b"ipma", 0, struct.pack(">I", len(tiles) + 1) + struct.pack(">HB", 1, 2) + bytes([4, 3])
                + b"".join(struct.pack(">HB", t, 3) + bytes([1, 0x82, 3]) for t in tiles))
    hdlr = full(b"hdlr", 0, b"\0" * 4 + b"pict" + b"\0" * 13)

    def meta(data_at):
        entries = struct.pack(">HHHII", 1, 0, 1, data_at, len(descriptor))
        entries += b"".join(struct.pack(">HHHII", t, 0, 1, data_at + len(descriptor), len(tile)) for t in tiles)
        iloc = full(b"iloc", 0, bytes([0x44, 0]) + struct.pack(">H", len(tiles) + 1) + entries)
        return full(b"meta", 0, hdlr + full(b"pitm", 0, struct.pack(">H", 1)) + iloc + iinf + iref
                    + box(b"iprp", ipco + ipma))

    data_at = len(ftyp) + len(meta(0)) + 8
    open(out, "wb").write(ftyp + meta(data_at) + box(b"mdat", descriptor + tile))


def ispe(image_path, out, width, height):
    b = bytearray(open(image_path, "rb").read())
    ftyp, children, properties, data = parts(bytes(b))
    at = bytes(b).index(properties[b"ispe"])
    b[at + 12:at + 20] = struct.pack(">II", width, height)
    open(out, "wb").write(b)


if __name__ == "__main__":
    if sys.argv[1] == "grid":
        grid(sys.argv[2], sys.argv[3], *map(int, sys.argv[4:8]))
    elif sys.argv[1] == "upscale":
        size = open(sys.argv[2], "rb").read()
        tile_size = struct.unpack(">II", parts(size)[2][b"ispe"][12:20])
        grid(sys.argv[2], sys.argv[3], 1, 1, *tile_size, tile_ispe=tuple(map(int, sys.argv[4:6])))
    else:
        ispe(sys.argv[2], sys.argv[3], *map(int, sys.argv[4:6]))
