"""Writing PNG files that Pillow cannot write: 16 bits per sample, chosen row filters, a tRNS chunk
(the image loading tests of the command line and of RGBA inputs)."""

import struct
import zlib
from pathlib import Path

import numpy as np


def write_png16(path, samples, colour_type, filter_type=0, transparent=None):
    """A minimal 16-bit PNG writer (no Pillow support for 16-bit colour), filters 0, 1 or 4;
    ``transparent``: the 16-bit grey level or (r, g, b) of a tRNS chunk (colour types 0 and 2)."""
    h, w = samples.shape[:2]
    raw = samples.reshape(h, -1).astype(">u2").view(np.uint8).reshape(h, -1).astype(np.int64)
    bpp = raw.shape[1] // w
    rows = []
    for y in range(h):
        cur = raw[y]
        prev = raw[y - 1] if y else np.zeros_like(cur)
        left = np.concatenate([np.zeros(bpp, np.int64), cur[:-bpp]])
        if filter_type == 1:
            f = cur - left
        elif filter_type == 4:
            upleft = np.concatenate([np.zeros(bpp, np.int64), prev[:-bpp]])
            p = left + prev - upleft
            pa, pb, pc = np.abs(p - left), np.abs(p - prev), np.abs(p - upleft)
            pred = np.where((pa <= pb) & (pa <= pc), left, np.where(pb <= pc, prev, upleft))
            f = cur - pred
        else:
            f = cur
        rows.append(bytes([filter_type]) + (f % 256).astype(np.uint8).tobytes())

    def chunk(tag, data):
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data))

    ihdr = struct.pack(">IIBBBBB", w, h, 16, colour_type, 0, 0, 0)
    key = () if transparent is None else np.atleast_1d(transparent)
    trns = chunk(b"tRNS", struct.pack(f">{len(key)}H", *(int(v) for v in key))) if len(key) else b""
    Path(path).write_bytes(
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", ihdr)
        + trns
        + chunk(b"IDAT", zlib.compress(b"".join(rows)))
        + chunk(b"IEND", b"")
    )
