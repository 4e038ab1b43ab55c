#!/usr/bin/python3
"""Checks a PNG written by `vkt plot`: the signature, every chunk's length and CRC-32
(zlib.crc32 over type and data), IHDR (WIDTH x HEIGHT, 8-bit RGB, no interlace), the
IDAT data inflating to HEIGHT rows of filter byte + 3*WIDTH bytes, IEND last; and that
the curves' colours appear: usage: png_check.py FILE.png WIDTH HEIGHT R,G,B [R,G,B ...]
Where the curves lie, by column X: `--at X,Y0,Y1,R,G,B` wants a pixel of that colour in
column X between rows Y0 and Y1 (inclusive, 0 at the top); `--only X,Y0,Y1,R,G,B` wants
at least one there and none elsewhere in the column.
"""
import struct
import sys
import zlib


def main(argv):
    path, width, height = argv[1], int(argv[2]), int(argv[3])
    colours, places, rest = [], [], argv[4:]
    while rest:
        arg = rest.pop(0)
        if arg in ("--at", "--only"):
            v = [int(t) for t in rest.pop(0).split(",")]
            places.append((arg, v[0], v[1], v[2], tuple(v[3:6])))
        else:
            colours.append(tuple(int(v) for v in arg.split(",")))
    data = open(path, "rb").read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise SystemExit("%s: not a PNG signature" % path)
    pos, chunks, idat = 8, [], b""
    while pos < len(data):
        if pos + 12 > len(data):
            raise SystemExit("%s: truncated chunk at %d" % (path, pos))
        (n,) = struct.unpack(">I", data[pos:pos + 4])
        kind, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + n]
        (crc,) = struct.unpack(">I", data[pos + 8 + n:pos + 12 + n])
        if zlib.crc32(kind + body) & 0xFFFFFFFF != crc:
            raise SystemExit("%s: CRC mismatch in chunk %r" % (path, kind))
        chunks.append(kind)
        if kind == b"IHDR":
            w, h, depth, ctype, comp, filt, inter = struct.unpack(">IIBBBBB", body)
            if (w, h, depth, ctype, comp, filt, inter) != (width, height, 8, 2, 0, 0, 0):
                raise SystemExit("%s: IHDR %r" % (path, (w, h, depth, ctype, comp, filt, inter)))
        if kind == b"IDAT":
            idat += body
        pos += 12 + n
    if chunks[0] != b"IHDR" or chunks[-1] != b"IEND" or b"IDAT" not in chunks:
        raise SystemExit("%s: chunk order %r" % (path, chunks))
    raw = zlib.decompress(idat)
    row = 1 + 3 * width
    if len(raw) != row * height:
        raise SystemExit("%s: image data %d bytes, want %d" % (path, len(raw), row * height))
    pixels, column = set(), {}
    for y in range(height):
        line = raw[y * row:(y + 1) * row]
        if line[0] != 0:
            raise SystemExit("%s: row %d filter %d (the writer uses 0)" % (path, y, line[0]))
        for x in range(width):
            pixels.add(tuple(line[1 + 3 * x:4 + 3 * x]))
            column.setdefault(x, []).append(tuple(line[1 + 3 * x:4 + 3 * x]))
    for c in colours:
        if c not in pixels:
            raise SystemExit("%s: no pixel of colour %r" % (path, c))
    for kind, x, y0, y1, c in places:
        rows = [y for y, p in enumerate(column[x]) if p == c]
        inside = [y for y in rows if y0 <= y <= y1]
        if not inside or (kind == "--only" and len(inside) != len(rows)):
            raise SystemExit("%s: column %d: colour %r in rows %s, want %s rows %d..%d"
                             % (path, x, c, rows, "only" if kind == "--only" else "some in",
                                y0, y1))
    print("png_check: %s valid, %dx%d, %d colours, curves present" % (path, width, height, len(pixels)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
