"""Writing OpenEXR files that the ``openexr`` package cannot write: subsampled channels (luminance /
chroma images) and tiled images with mipmap or ripmap levels, uncompressed, by the file layout
of the OpenEXR specification (the image loading tests)."""

import struct
from pathlib import Path

import numpy as np

PIXEL_TYPES = {np.dtype(np.uint32): 0, np.dtype(np.float16): 1, np.dtype(np.float32): 2}
ONE_LEVEL, MIPMAP_LEVELS, RIPMAP_LEVELS = 0, 1, 2


def _attribute(name: str, kind: str, value: bytes) -> bytes:
    return name.encode() + b"\0" + kind.encode() + b"\0" + struct.pack("<i", len(value)) + value


def _header(channels, width: int, height: int, tiles=None) -> bytes:
    chlist = b"".join(
        name.encode() + b"\0" + struct.pack("<iB3xii", PIXEL_TYPES[a.dtype], 0, xs, ys)
        for name, (a, xs, ys) in sorted(channels.items())
    )
    window = struct.pack("<4i", 0, 0, width - 1, height - 1)
    out = _attribute("channels", "chlist", chlist + b"\0")
    out += _attribute("compression", "compression", b"\0")
    out += _attribute("dataWindow", "box2i", window) + _attribute("displayWindow", "box2i", window)
    out += _attribute("lineOrder", "lineOrder", b"\0")
    out += _attribute("pixelAspectRatio", "float", struct.pack("<f", 1.0))
    out += _attribute("screenWindowCenter", "v2f", struct.pack("<2f", 0.0, 0.0))
    out += _attribute("screenWindowWidth", "float", struct.pack("<f", 1.0))
    if tiles is not None:
        out += _attribute("tiles", "tiledesc", struct.pack("<IIB", *tiles))
    return out + b"\0"


def _levels(size: int) -> int:
    return size.bit_length()  # floor(log2(size)) + 1: the levels of a size rounded down


def write_exr(path, channels, tiles=None):
    """An uncompressed OpenEXR file. ``channels``: name -> H x W array (uint32, float16, float32)
    or (array, x sampling, y sampling) with the array holding the subsampled values; ``tiles``:
    None (scanlines) or (tile width, tile height, level mode): the level-0 image is the given
    array and every lower level holds the array's top-left pixels (any value will do there)."""
    channels = {n: (c if isinstance(c, tuple) else (c, 1, 1)) for n, c in channels.items()}
    height = max(a.shape[0] * ys for a, xs, ys in channels.values())  # sizes divisible by the sampling
    width = max(a.shape[1] * xs for a, xs, ys in channels.values())
    ordered = sorted(channels.items())
    chunks = []
    if tiles is None:
        for y in range(height):
            data = b"".join(a[y // ys].tobytes() for _, (a, xs, ys) in ordered if y % ys == 0)
            chunks.append(struct.pack("<ii", y, len(data)) + data)
    else:
        tw, th, mode = tiles
        if mode == ONE_LEVEL:
            levels = [(0, 0)]
        elif mode == MIPMAP_LEVELS:
            levels = [(lv, lv) for lv in range(_levels(max(width, height)))]
        else:
            levels = [(lx, ly) for ly in range(_levels(height)) for lx in range(_levels(width))]
        for lx, ly in levels:
            lw, lh = max(width >> lx, 1), max(height >> ly, 1)
            for ty in range(-(-lh // th)):
                for tx in range(-(-lw // tw)):
                    rows = range(ty * th, min(lh, (ty + 1) * th))
                    cols = slice(tx * tw, min(lw, (tx + 1) * tw))
                    data = b"".join(a[y, cols].tobytes() for y in rows for _, (a, _, _) in ordered)
                    chunks.append(struct.pack("<5i", tx, ty, lx, ly, len(data)) + data)
    flags = 2 | (0x200 if tiles is not None else 0)
    head = b"\x76\x2f\x31\x01" + struct.pack("<i", flags) + _header(channels, width, height, tiles)
    offset = len(head) + 8 * len(chunks)
    table = b""
    for chunk in chunks:
        table += struct.pack("<Q", offset)
        offset += len(chunk)
    Path(path).write_bytes(head + table + b"".join(chunks))
