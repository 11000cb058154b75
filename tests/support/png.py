"""Pixels of a PNG screenshot, with the standard library only (no imaging package in the test
environment): enough of the format for what headless Chromium writes — 8-bit RGB or RGBA, not
interlaced."""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator
from pathlib import Path

SIGNATURE = b"\x89PNG\r\n\x1a\n"
#: Bytes per pixel by PNG colour type (2: RGB, 6: RGBA).
CHANNELS = {2: 3, 6: 4}


def _paeth(a: int, b: int, c: int) -> int:
    p = a + b - c
    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
    return a if pa <= pb and pa <= pc else b if pb <= pc else c


def _unfilter(kind: int, line: bytearray, previous: bytes, bpp: int) -> None:
    """Undo one scanline's filter in place (PNG spec, section 9)."""
    for i in range(len(line)):
        a = line[i - bpp] if i >= bpp else 0
        b = previous[i]
        c = previous[i - bpp] if i >= bpp else 0
        predictor = (0, a, b, (a + b) // 2, _paeth(a, b, c))[kind]
        line[i] = (line[i] + predictor) & 0xFF


def pixels(path: Path) -> Iterator[tuple[int, int, int]]:
    """Every pixel's (red, green, blue), row by row."""
    data = path.read_bytes()
    if not data.startswith(SIGNATURE):
        raise ValueError(f"{path}: not a PNG file")
    pos, chunks, header = len(SIGNATURE), bytearray(), b""
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            header = body
        elif kind == b"IDAT":
            chunks += body
        pos += 12 + length
    width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", header)
    if depth != 8 or colour not in CHANNELS or interlace:
        raise ValueError(f"{path}: only 8-bit RGB/RGBA PNGs without interlacing are read here")
    bpp = CHANNELS[colour]
    raw, stride = zlib.decompress(bytes(chunks)), width * bpp
    previous = bytes(stride)
    for row in range(height):
        start = row * (stride + 1)
        line = bytearray(raw[start + 1:start + 1 + stride])
        _unfilter(raw[start], line, previous, bpp)
        for x in range(0, stride, bpp):
            yield line[x], line[x + 1], line[x + 2]
        previous = bytes(line)
