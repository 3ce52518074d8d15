"""Writing PNG files that Pillow cannot write: every colour type at every bit depth the PNG
specification allows (1 to 16 bits), chosen row filters, Adam7 interlacing, a tRNS chunk and other
ancillary chunks (the image loading tests of the command line and of RGBA inputs)."""

import struct
import zlib
from pathlib import Path

import numpy as np

# The seven passes of Adam7 interlacing: (first column, first row, column step, row step).
ADAM7 = ((0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2))
CHANNELS = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}  # samples per pixel by colour type


def _chunk(tag: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data))


def _filtered(cur: np.ndarray, prev: np.ndarray, bpp: int, filter_type: int) -> np.ndarray:
    """One scanline's bytes ``cur`` (int64) filtered by ``filter_type`` (PNG specification, section
    9) against the row above, ``prev`` (zeros for the first row); ``bpp``: the distance to the left
    neighbour, whose bytes before the first pixel count as 0."""
    left = np.concatenate([np.zeros(bpp, np.int64), cur[:-bpp]])[: len(cur)]
    upleft = np.concatenate([np.zeros(bpp, np.int64), prev[:-bpp]])[: len(cur)]
    if filter_type == 0:
        return cur
    if filter_type == 1:
        return cur - left
    if filter_type == 2:
        return cur - prev
    if filter_type == 3:
        return cur - (left + prev) // 2
    assert filter_type == 4, filter_type
    p = left + prev - upleft
    pa, pb, pc = np.abs(p - left), np.abs(p - prev), np.abs(p - upleft)
    return cur - np.where((pa <= pb) & (pa <= pc), left, np.where(pb <= pc, prev, upleft))


def _rows(samples: np.ndarray, bit_depth: int, filter_type) -> bytes:
    """The filtered scanlines of one (sub-)image of H x W x C samples; ``filter_type``: one for
    every row, or a sequence of them repeated down the rows."""
    h, w, c = samples.shape
    if h == 0 or w == 0:
        return b""  # an empty pass has no scanlines
    if bit_depth == 16:
        raw = samples.reshape(h, -1).astype(">u2").view(np.uint8).reshape(h, -1)
    elif bit_depth == 8:
        raw = samples.reshape(h, -1).astype(np.uint8)
    else:  # packed, the leftmost sample in the high bits, each row padded to a whole byte
        per_byte = 8 // bit_depth
        flat = samples.reshape(h, -1).astype(np.uint8)
        padded = np.zeros((h, -(-flat.shape[1] // per_byte) * per_byte), np.uint8)
        padded[:, : flat.shape[1]] = flat
        groups = padded.reshape(h, -1, per_byte)
        shifts = np.arange(per_byte - 1, -1, -1, dtype=np.uint8) * bit_depth
        raw = np.bitwise_or.reduce(groups << shifts, axis=2).astype(np.uint8)
    raw = raw.astype(np.int64)
    bpp = max(1, c * bit_depth // 8)
    types = [filter_type] if np.isscalar(filter_type) else list(filter_type)
    out = []
    for y in range(h):
        cur = raw[y]
        prev = raw[y - 1] if y else np.zeros_like(cur)
        f = _filtered(cur, prev, bpp, types[y % len(types)])
        out.append(bytes([types[y % len(types)]]) + (f % 256).astype(np.uint8).tobytes())
    return b"".join(out)


def write_png(
    path,
    samples,
    colour_type: int,
    bit_depth: int,
    filter_type: int = 0,
    transparent=None,
    palette=None,
    interlace: bool = False,
    chunks=(),
    idat_chunks: int = 1,
):
    """A minimal PNG writer: ``samples`` H x W x C (or H x W for one sample per pixel) integers in
    the file's own range (0 .. 2^bit_depth - 1; palette indices for colour type 3); ``filter_type``:
    0 to 4 for every row, or a sequence of them repeated down the rows (of each Adam7 pass);
    ``transparent``: the tRNS chunk's content, a grey level or (r, g, b) in samples of the file's
    bit depth (colour types 0 and 2) or the alpha of each palette entry (colour type 3);
    ``palette``: N x 3 8-bit entries; ``chunks``: (tag, data) ancillary chunks before IDAT;
    ``idat_chunks``: the compressed stream cut into this many IDAT chunks (some empty when the
    stream is shorter)."""
    samples = np.asarray(samples)
    if samples.ndim == 2:
        samples = samples[..., None]
    h, w, c = samples.shape
    assert c == CHANNELS[colour_type] and 0 <= samples.min() and samples.max() < 2**bit_depth
    if interlace:
        data = b"".join(_rows(samples[y0::dy, x0::dx], bit_depth, filter_type) for x0, y0, dx, dy in ADAM7)
    else:
        data = _rows(samples, bit_depth, filter_type)
    body = _chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, bit_depth, colour_type, 0, 0, int(interlace)))
    body += b"".join(_chunk(tag, payload) for tag, payload in chunks)
    if palette is not None:
        body += _chunk(b"PLTE", np.asarray(palette, np.uint8).tobytes())
    if transparent is not None:
        key = np.atleast_1d(transparent)
        fmt = f">{len(key)}B" if colour_type == 3 else f">{len(key)}H"
        body += _chunk(b"tRNS", struct.pack(fmt, *(int(v) for v in key)))
    stream = zlib.compress(data)
    cuts = [len(stream) * i // idat_chunks for i in range(idat_chunks + 1)]
    body += b"".join(_chunk(b"IDAT", stream[a:b]) for a, b in zip(cuts, cuts[1:])) + _chunk(b"IEND", b"")
    Path(path).write_bytes(b"\x89PNG\r\n\x1a\n" + body)


def write_png16(path, samples, colour_type, filter_type=0, transparent=None):
    """A 16-bit PNG (Pillow writes none in colour), row filters as :func:`write_png`'s;
    ``transparent``: the 16-bit grey level or (r, g, b) of a tRNS chunk (colour types 0 and 2)."""
    write_png(path, samples, colour_type, 16, filter_type, transparent)
