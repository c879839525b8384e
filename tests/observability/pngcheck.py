"""A stdlib PNG decoder, just enough for Chromium screenshots (8-bit RGB/RGBA, no interlace)."""

from __future__ import annotations

import struct
import zlib


def decode_png(data: bytes) -> tuple[int, int, int, bytes]:
    """(width, height, channels, raw pixel bytes, rows concatenated)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat = 8, bytearray()
    width = height = depth = color = interlace = 0
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind = data[pos + 4 : pos + 8]
        body = data[pos + 8 : pos + 8 + length]
        pos += 12 + length
        if kind == b"IHDR":
            width, height, depth, color, _, _, interlace = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        elif kind == b"IEND":
            break
    channels = {2: 3, 6: 4, 0: 1, 4: 2}[color]
    assert depth == 8 and interlace == 0, (depth, interlace)
    raw = zlib.decompress(bytes(idat))
    stride = width * channels
    out = bytearray(stride * height)
    prev = bytearray(stride)
    i = 0
    for y in range(height):
        ftype = raw[i]
        line = bytearray(raw[i + 1 : i + 1 + stride])
        i += 1 + stride
        for x in range(stride):
            a = line[x - channels] if x >= channels else 0
            b = prev[x]
            c = prev[x - channels] if x >= channels else 0
            if ftype == 1:
                line[x] = (line[x] + a) & 0xFF
            elif ftype == 2:
                line[x] = (line[x] + b) & 0xFF
            elif ftype == 3:
                line[x] = (line[x] + (a + b) // 2) & 0xFF
            elif ftype == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                pred = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
                line[x] = (line[x] + pred) & 0xFF
        out[y * stride : (y + 1) * stride] = line
        prev = line
    return width, height, channels, bytes(out)


def color_stats(data: bytes) -> tuple[int, float]:
    """(distinct colours, share of pixels that differ from the most common colour)."""
    width, height, channels, pixels = decode_png(data)
    counts: dict[bytes, int] = {}
    for k in range(0, len(pixels), channels):
        px = pixels[k : k + min(3, channels)]
        counts[px] = counts.get(px, 0) + 1
    total = width * height
    return len(counts), 1 - max(counts.values()) / total
