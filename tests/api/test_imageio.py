"""flip_loss.imageio: loading PNG (every colour type and bit depth, row filters, interlacing,
transparent colours; 8-bit files decoded without Pillow, bit for bit as Pillow decodes them, and
Pillow's verdict on damaged ones), JPEG, BMP and TGA against the specifications and NVIDIA's evaluator, the
formats refused, the bundled example pair, loading errors, the PNG round trip and the command
line's note on compositing."""

import os
import re
import struct
import sys
import warnings
import zlib
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image, PngImagePlugin

import flip_loss
from flip_loss import imageio
from flip_loss.cli import example_paths, main
from flip_loss.imageio import alpha_convention, image_size, load_image, save_png
from png_files import write_png, write_png16


# ----------------------------------------------------------------------------------------------
# The bundled example and image I/O
# ----------------------------------------------------------------------------------------------


def test_example_files():
    ref, test = example_paths()
    assert os.path.isabs(ref) and os.path.isfile(ref) and os.path.isfile(test)
    assert os.path.getsize(ref) + os.path.getsize(test) < 200 * 1024
    a, b = Image.open(ref), Image.open(test)
    assert a.size == b.size and 200 <= a.size[0] <= 320 and 150 <= a.size[1] <= 320
    assert a.mode == b.mode == "RGB"
    licence = (Path(ref).parent / "LICENSE.md").read_text()
    assert "BSD-3-Clause" in licence and "NVIDIA" in licence
    d = np.abs(np.asarray(a).astype(int) - np.asarray(b).astype(int))
    assert 0 < d.mean() < 10  # a mild, visible distortion


@pytest.mark.parametrize("colour_type,channels", [(0, 1), (2, 3), (4, 2), (6, 4)])
@pytest.mark.parametrize("filter_type", [0, 1, 4])
def test_load_16_bit_png(tmp_path, colour_type, channels, filter_type):
    s = np.random.default_rng(colour_type).integers(0, 65536, (6, 9, channels)).astype(np.uint16)
    s[0, 0] = 0
    s[0, 1] = 65535
    path = tmp_path / "x16.png"
    write_png16(path, s if channels > 1 else s[..., 0], colour_type, filter_type)
    t = load_image(path)
    assert t.shape == (3, 6, 9) and t.dtype == torch.float32
    want = s[..., :3] if channels >= 3 else np.repeat(s[..., :1], 3, axis=2)
    np.testing.assert_array_equal(np.round(t.numpy().transpose(1, 2, 0) * 65535).astype(int), want)


@pytest.mark.parametrize(
    "fmt,mode",
    [
        ("PNG", "RGB"),
        ("PNG", "RGBA"),
        ("PNG", "L"),
        ("PNG", "LA"),
        ("PNG", "P"),
        ("BMP", "RGB"),
        ("TGA", "RGB"),
        ("JPEG", "RGB"),
        ("JPEG", "L"),
    ],
)
def test_load_8_bit_formats(tmp_path, fmt, mode):
    rng = np.random.default_rng(0)
    rgb = rng.integers(0, 256, (5, 7, 3)).astype(np.uint8)
    im = Image.fromarray(rgb)
    if mode == "RGBA":
        im = Image.fromarray(np.dstack([rgb, np.full((5, 7), 10, np.uint8)]))
    elif mode in ("L", "LA"):
        im = Image.fromarray(rgb[..., 0]).convert(mode)
    elif mode == "P":
        im = im.quantize(16)
    path = tmp_path / f"x.{fmt.lower()}"
    im.save(path, format=fmt)
    t = load_image(path)
    assert t.shape == (3, 5, 7) and t.dtype == torch.float32
    want = np.asarray(Image.open(path).convert("RGB")).astype(np.float32) / 255
    np.testing.assert_array_equal(t.numpy().transpose(1, 2, 0), want)
    if fmt != "JPEG":
        expect = np.asarray(im.convert("RGB"))
        np.testing.assert_array_equal(np.round(t.numpy().transpose(1, 2, 0) * 255), expect)


def test_load_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_image(tmp_path / "missing.png")
    (tmp_path / "bad.png").write_bytes(b"nope")
    with pytest.raises(ValueError, match="cannot read image"):
        load_image(tmp_path / "bad.png")
    (tmp_path / "x.exr").write_bytes(b"nope")
    with pytest.raises(ValueError, match="x.exr': not an OpenEXR file"):
        load_image(tmp_path / "x.exr")
    (tmp_path / "x.hdr").write_bytes(b"#?RADIANCE\n")
    with pytest.raises(ValueError, match=r"\.hdr files \(Radiance HDR / PFM\) are not supported"):
        load_image(tmp_path / "x.hdr")
    with pytest.raises(ValueError, match="directory"):
        load_image(tmp_path)


def test_save_png_round_trip(tmp_path):
    a = np.random.default_rng(0).integers(0, 256, (4, 6, 3)).astype(np.uint8)
    save_png(tmp_path / "a.png", a)
    np.testing.assert_array_equal(np.asarray(Image.open(tmp_path / "a.png")), a)
    save_png(tmp_path / "g.png", torch.from_numpy(a[..., 0]))
    assert Image.open(tmp_path / "g.png").mode == "L"
    with pytest.raises(TypeError):
        save_png(tmp_path / "f.png", a.astype(np.float32))
    with pytest.raises(ValueError):
        save_png(tmp_path / "f.png", a[..., :2])


def test_a_failed_save_png_leaves_the_file_there_as_it_was(tmp_path, monkeypatch):
    """The rows are deflated a block at a time; the file is opened only once the stream is whole, so
    an error in between (here the encoder's, on the second block) leaves an earlier file intact."""
    path = tmp_path / "map.png"
    path.write_bytes(b"an earlier file")

    class Failing:
        def __init__(self):
            self.calls = 0

        def compress(self, data):
            self.calls += 1
            if self.calls == 2:
                raise OSError("the encoder failed")
            return b""

        def flush(self):
            return b""

    monkeypatch.setattr(imageio, "png_encoder", lambda: ("failing", Failing))
    monkeypatch.setattr(imageio, "_PNG_BLOCK_BYTES", 1024)
    with pytest.raises(OSError, match="the encoder failed"):
        imageio.save_png(path, np.zeros((64, 64, 3), np.uint8))
    assert path.read_bytes() == b"an earlier file"


@pytest.mark.parametrize("encoder", ["isal", "zlib"])
def test_save_png_encoders_store_the_same_pixels(tmp_path, monkeypatch, encoder):
    """Either deflate encoder (ISA-L when installed, else zlib) writes the same pixels, and writing
    again writes the same bytes."""
    if encoder == "isal":
        pytest.importorskip("isal")
    else:
        monkeypatch.setitem(sys.modules, "isal", None)  # as if it were not installed
    imageio.png_encoder.cache_clear()
    try:
        assert imageio.png_encoder()[0] == encoder
        rng = np.random.default_rng(1)
        a = rng.integers(0, 256, (61, 83, 3), dtype=np.uint8)
        a[20:40] = a[20]  # long runs for the encoder's matches
        save_png(tmp_path / "a.png", a)
        save_png(tmp_path / "b.png", a)
        np.testing.assert_array_equal(np.asarray(Image.open(tmp_path / "a.png")), a)
        assert (tmp_path / "a.png").read_bytes() == (tmp_path / "b.png").read_bytes()
    finally:
        imageio.png_encoder.cache_clear()


# ----------------------------------------------------------------------------------------------
# Every PNG colour type and bit depth, transparent colours, the other formats
# ----------------------------------------------------------------------------------------------

# (colour type, bit depth): every pair the PNG specification allows.
PNG_FORMATS = [(0, 1), (0, 2), (0, 4), (0, 8), (0, 16), (2, 8), (2, 16), (3, 1), (3, 2), (3, 4), (3, 8)]
PNG_FORMATS += [(4, 8), (4, 16), (6, 8), (6, 16)]


def nvidia_load(path):
    """NVIDIA's evaluator's reading of ``path`` (H x W x 3), or None without flip-evaluator."""
    try:
        import flip_evaluator
    except ImportError:
        return None
    return flip_evaluator.load(str(path))


# Chunks that describe the colours: NVIDIA's evaluator ignores them (FLIP takes PNG values as
# sRGB-encoded), and so does load_image.
COLOUR_CHUNKS = [
    (b"gAMA", struct.pack(">I", 100000)),
    (b"cHRM", struct.pack(">8I", 31270, 32900, 64000, 33000, 30000, 60000, 15000, 6000)),
    (b"sRGB", b"\x00"),
    (b"iCCP", b"profile\x00\x00" + zlib.compress(bytes(128))),
]


@pytest.mark.parametrize("interlace", [False, True], ids=["progressive", "adam7"])
@pytest.mark.parametrize("colour_type,depth", PNG_FORMATS)
def test_png_every_colour_type_bit_depth_and_transparency(tmp_path, colour_type, depth, interlace):
    """The colour is the file's samples / (2^depth - 1) (a palette's entries / 255), interlaced or
    not, whatever its colour chunks say; NVIDIA's evaluator reads the same values (16-bit samples:
    it keeps their high byte). The alpha is the file's alpha samples, or by a tRNS chunk: 0 exactly
    where a grey or RGB pixel's own samples are the key (Pillow scales 1-, 2- and 4-bit grey
    samples to 8 bits, but not the key), each palette entry's alpha (entries beyond it opaque)."""
    rng = np.random.default_rng(colour_type * 100 + depth)
    channels = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}[colour_type]
    top = 2**depth if colour_type != 3 else min(2**depth, 6)
    s = rng.integers(0, top, (7, 10, channels))
    levels = np.arange(top) if top <= 16 else np.array([0, 1, top - 2, top - 1])
    s.reshape(-1, channels)[: len(levels), 0] = levels  # every level (palette entry), or the extremes
    s[-1, -1, 1:] = top - 1  # an opaque pixel (colour types 4 and 6)
    palette = rng.integers(0, 256, (top, 3)) if colour_type == 3 else None
    if colour_type == 3:
        colour = palette[s[..., 0]] / 255
        key = rng.integers(0, 256, top - 1)
        alpha = np.append(key, 255)[s[..., 0]] / 255
    else:
        codes = s[..., :3] if colour_type in (2, 6) else np.repeat(s[..., :1], 3, axis=2)
        colour = codes / (2**depth - 1)
        key = s.reshape(-1, channels)[top - 2 if top <= 16 else 20] if colour_type in (0, 2) else None
        if key is not None:
            alpha = np.where(np.all(s == key, axis=2), 0.0, 1.0)
            key = key if colour_type == 2 else key[0]
        else:
            alpha = s[..., -1] / (2**depth - 1)
    assert 0 < (alpha < 1).sum() < alpha.size
    path = tmp_path / "x.png"
    write_png(path, s, colour_type, depth, 4, key, palette, interlace, COLOUR_CHUNKS)
    t = load_image(path, keep_alpha=True).numpy().transpose(1, 2, 0).astype(np.float64)
    assert t.shape[2] == 4
    np.testing.assert_allclose(t[..., :3], colour, rtol=0, atol=1e-7)
    np.testing.assert_allclose(t[..., 3], alpha, rtol=0, atol=1e-7)
    np.testing.assert_array_equal(load_image(path).numpy().transpose(1, 2, 0), t[..., :3].astype(np.float32))
    nvidia = nvidia_load(path)
    if nvidia is not None:
        want = (codes >> 8) / 255 if depth == 16 else colour  # the high byte
        np.testing.assert_allclose(nvidia, want, rtol=0, atol=1e-7)


def test_png_transparent_colour_out_of_the_files_range_matches_nothing(tmp_path):
    """A key beyond the bit depth names no sample (Pillow reads a 1-bit key of 2 as 1, and a
    2-bit key of 85 as the level 1 it scales to 85)."""
    levels = np.array([[0, 1, 2, 3]])
    for depth, samples, key in ((1, levels % 2, 2), (2, levels, 85)):
        write_png(tmp_path / "k.png", samples, 0, depth, transparent=key)
        t = load_image(tmp_path / "k.png", keep_alpha=True)
        assert t.shape[0] == 3 or bool((t[3] == 1).all()), (depth, key)


def test_png_damaged_transparency_chunk_is_a_clear_error(tmp_path):
    write_png(tmp_path / "k.png", np.array([[0, 1]]), 0, 8, transparent=1)
    data = (tmp_path / "k.png").read_bytes()
    at = data.index(b"tRNS") - 4
    short = struct.pack(">I", 1) + b"tRNS\x00" + struct.pack(">I", zlib.crc32(b"tRNS\x00"))
    (tmp_path / "k.png").write_bytes(data[:at] + short + data[at + 14 :])
    with pytest.raises(ValueError, match=r"cannot read image '.*k.png': the file is damaged \(Truncated tRNS"):
        load_image(tmp_path / "k.png", keep_alpha=True)


@pytest.mark.parametrize("extension", [".png", ".jpg", ".bmp", ".tga", ".img"])
@pytest.mark.parametrize("content", [b"", b"B", b"BM", b"\x89PN"])
def test_a_file_of_a_few_bytes_is_a_clear_error(tmp_path, extension, content):
    """A renderer that crashed leaves an empty or truncated file: an error naming it, never an
    exception from inside a format's check of the first bytes (BMP's read four of them)."""
    (tmp_path / f"short{extension}").write_bytes(content)
    what = "the file is empty" if not content else "not an image format Pillow recognises"
    with pytest.raises(ValueError, match=rf"cannot read image '.*short{re.escape(extension)}': {what}"):
        load_image(tmp_path / f"short{extension}")


def write_tga(path, pixels: bytes, width, height, depth, alpha_bits, image_type=2, attributes=None):
    """A TGA file, top row first; ``attributes``: the TGA 2.0 extension area's attribute type."""
    data = struct.pack("<BBBHHBHHHHBB", 0, 0, image_type, 0, 0, 0, 0, 0, width, height, depth, 0x20 | alpha_bits)
    data += pixels
    extension = 0
    if attributes is not None:
        extension = len(data)
        data += struct.pack("<H", 495) + bytes(492) + bytes([attributes])
    Path(path).write_bytes(data + struct.pack("<II", extension, 0) + b"TRUEVISION-XFILE.\0")


def test_tga_alpha_only_where_the_header_gives_alpha(tmp_path):
    """Only a TGA whose header gives alpha bits (32-bit colour, 16-bit grey) has alpha, and not
    when its extension area says the bits are not alpha; a 16-bit colour image's one attribute
    bit, which Pillow reads inverted, is not alpha; the colours are as NVIDIA's evaluator reads them."""
    rng = np.random.default_rng(4)
    bgra = rng.integers(0, 256, (3, 5, 4)).astype(np.uint8)
    rgb = bgra[..., 2::-1].astype(np.float32) / 255
    cases = [  # (file name, pixels, depth, alpha bits, attribute type, expected alpha convention)
        ("a8.tga", bgra.tobytes(), 32, 8, None, "straight"),
        ("a0.tga", bgra.tobytes(), 32, 0, None, None),
        ("ext3.tga", bgra.tobytes(), 32, 8, 3, "straight"),
        ("ext4.tga", bgra.tobytes(), 32, 8, 4, "premultiplied"),
        ("ext0.tga", bgra.tobytes(), 32, 8, 0, None),
        ("ext2.tga", bgra.tobytes(), 32, 8, 2, None),
    ]
    for name, pixels, depth, bits, attributes, convention in cases:
        write_tga(tmp_path / name, pixels, 5, 3, depth, bits, attributes=attributes)
        t = load_image(tmp_path / name, keep_alpha=True).numpy()
        assert t.shape[0] == (3 if convention is None else 4), name
        np.testing.assert_array_equal(t[:3].transpose(1, 2, 0), rgb)
        if convention is not None:
            np.testing.assert_array_equal(t[3], bgra[..., 3] / np.float32(255))
            assert alpha_convention(tmp_path / name) == convention
    # 16 bits: x RRRRR GGGGG BBBBB, the attribute bit set (transparent as Pillow reads it)
    words = rng.integers(0, 1 << 15, (3, 5)).astype(np.uint16) | 0x8000
    write_tga(tmp_path / "c16.tga", words.astype("<u2").tobytes(), 5, 3, 16, 1)
    t = load_image(tmp_path / "c16.tga", keep_alpha=True)
    assert t.shape[0] == 3
    nvidia = nvidia_load(tmp_path / "c16.tga")
    if nvidia is not None:
        np.testing.assert_array_equal(t.numpy().transpose(1, 2, 0), nvidia)


def write_bmp(path, pixels: bytes, width, height, bpp, masks=None, header_size=40):
    """A bottom-up BMP; ``masks``: the R, G, B (and A) bit masks of BI_BITFIELDS, after a 40-byte
    header or inside a larger (V4) one."""
    compression = 0 if masks is None else 3
    in_header = struct.pack(f"<{len(masks)}I", *masks) if masks is not None and header_size > 40 else b""
    after = struct.pack(f"<{len(masks)}I", *masks) if masks is not None and header_size == 40 else b""
    info = struct.pack("<IiiHHIIiiII", header_size, width, height, 1, bpp, compression, len(pixels), 2835, 2835, 0, 0)
    info += in_header.ljust(header_size - 40, b"\0")
    offset = 14 + header_size + len(after)
    Path(path).write_bytes(b"BM" + struct.pack("<IHHI", offset + len(pixels), 0, 0, offset) + info + after + pixels)


def test_bmp_16_bit_values_are_widened_by_repeating_their_bits(tmp_path):
    """A 5- or 6-bit BMP value v becomes the 8-bit (v << 3) | (v >> 2) (or (v << 2) | (v >> 4)), as
    NVIDIA's evaluator and most decoders widen it (Pillow's floor(v * 255 / 31) is 1 lower for some);
    masks after a 40-byte header are read as such (NVIDIA's evaluator misreads that file)."""
    words = np.arange(1 << 16, dtype=np.uint32).reshape(256, 256)
    for name, masks, header, bits in (
        ("555.bmp", None, 40, (5, 5, 5)),
        ("565.bmp", (0xF800, 0x7E0, 0x1F, 0), 108, (5, 6, 5)),
        ("565v3.bmp", (0xF800, 0x7E0, 0x1F), 40, (5, 6, 5)),
    ):
        stored = words & 0x7FFF if masks is None else words
        write_bmp(tmp_path / name, stored.astype("<u2").tobytes(), 256, 256, 16, masks, header)
        top_first = stored[::-1].astype(np.int64)
        want = []
        shift = 0
        for n in bits[::-1]:  # blue in the low bits
            v = (top_first >> shift) & (2**n - 1)
            want.insert(0, ((v << (8 - n)) | (v >> (2 * n - 8))) / 255)
            shift += n
        t = load_image(tmp_path / name).numpy()
        np.testing.assert_allclose(t, np.stack(want), rtol=0, atol=1e-7)
        nvidia = nvidia_load(tmp_path / name) if header > 40 or masks is None else None
        if nvidia is not None:
            np.testing.assert_array_equal(t.transpose(1, 2, 0), nvidia)


@pytest.mark.parametrize("fmt,mode", [("GIF", "P"), ("TIFF", "RGB"), ("TIFF", "F"), ("WEBP", "RGB"), ("PPM", "RGB")])
def test_formats_nvidia_does_not_read_are_refused(tmp_path, fmt, mode):
    """NVIDIA's evaluator reads PNG, BMP, TGA (and OpenEXR); JPEG is read too, any other format
    Pillow knows is refused by name rather than read in whatever form Pillow gives it."""
    im = Image.fromarray(np.random.default_rng(5).integers(0, 256, (4, 6, 3)).astype(np.uint8))
    im = im.convert(mode) if mode != "P" else im.quantize(8)
    path = tmp_path / f"x.{fmt.lower()}"
    im.save(path, format=fmt, **({"lossless": True} if fmt == "WEBP" else {}))
    for read in (load_image, image_size):
        with pytest.raises(ValueError, match=rf"x.{fmt.lower()}': {fmt} images are not supported"):
            read(path)


def test_jpeg_in_cmyk_is_refused(tmp_path):
    Image.new("CMYK", (4, 3), (10, 20, 30, 40)).save(tmp_path / "cmyk.jpg")
    with pytest.raises(ValueError, match=r"cmyk.jpg': CMYK images are not supported \(convert it to RGB\)"):
        load_image(tmp_path / "cmyk.jpg")


# ----------------------------------------------------------------------------------------------
# 8-bit PNGs decoded without Pillow (imageio._png8_samples), Pillow's verdict on the others
# ----------------------------------------------------------------------------------------------

PNG8 = [(0, 1), (4, 2), (2, 3), (6, 4)]  # (colour type, channels): grey, grey + alpha, RGB, RGBA
PNG8_SIZES = [(1, 1), (1, 6), (5, 1), (4, 7), (19, 33)]  # (height, width)


def awkward_samples(rng, shape) -> np.ndarray:
    """Random 8-bit samples, half of them from a few values: equal neighbours make the Paeth
    predictor's ties frequent, the extremes make the filters wrap around."""
    few = rng.choice(np.array([0, 1, 2, 127, 128, 254, 255]), shape)
    return np.where(rng.random(shape) < 0.5, few, rng.integers(0, 256, shape))


def block_pillow_decoding(monkeypatch):
    """Makes Pillow's decoding of a PNG's pixels fail: what load_image returns then was decoded
    without it."""

    def load(self):
        raise AssertionError("Pillow decoded the pixels")

    monkeypatch.setattr(PngImagePlugin.PngImageFile, "load", load)


def count_pillow_decoding(monkeypatch) -> list:
    """Counts Pillow's PngImageFile.load calls in the list returned."""
    calls = []
    original = PngImagePlugin.PngImageFile.load

    def load(self):
        calls.append(self)
        return original(self)

    monkeypatch.setattr(PngImagePlugin.PngImageFile, "load", load)
    return calls


def fast_samples(path):
    with imageio._open(str(path)) as im:
        return imageio._png8_samples(str(path), im)


@pytest.mark.parametrize("inflater", ["isal", "zlib"])
@pytest.mark.parametrize("colour_type,channels", PNG8)
def test_png8_decoded_without_pillow_matches_pillow_for_every_row_filter(
    tmp_path, monkeypatch, inflater, colour_type, channels
):
    """Every row filter (0-4) at the first row (a row of zeros above) and below it, on images one
    pixel wide or high (no left neighbour) and larger, the stream in several IDAT chunks (one
    empty): the samples are Pillow's, as its array (shape, type, values), and load_image gives the
    same tensor as through Pillow, Pillow's decoding blocked; with ISA-L's inflate or zlib's."""
    if not flip_loss.HAS_EXTENSION:
        pytest.skip("the compiled extension is not built: Pillow decodes every PNG")
    module = pytest.importorskip("isal.isal_zlib") if inflater == "isal" else zlib
    monkeypatch.setattr(imageio, "_png_inflate_module", lambda: module)
    rng = np.random.default_rng(colour_type)
    for height, width in PNG8_SIZES:
        for first in range(5):  # the filter of the first row; the rows below take the next ones
            s = awkward_samples(rng, (height, width, channels))
            path = tmp_path / f"x{height}x{width}f{first}.png"
            filters = [(first + y) % 5 for y in range(5)]
            idat_chunks = 3 if height * width > 1 else 4  # a one-pixel stream: an empty chunk too
            write_png(path, s, colour_type, 8, filters, idat_chunks=idat_chunks)
            with Image.open(path) as im:
                want = np.asarray(im)
            np.testing.assert_array_equal(want.reshape(height, width, channels), s)
            through_pillow = {alpha: load_image(path, keep_alpha=alpha) for alpha in (False, True)}
            with monkeypatch.context() as m:
                block_pillow_decoding(m)
                got = fast_samples(path)
                assert got is not None and got.shape == want.shape and got.dtype == want.dtype
                np.testing.assert_array_equal(got, want)
                for alpha, tensor in through_pillow.items():
                    assert torch.equal(load_image(path, keep_alpha=alpha), tensor), (height, width, first, alpha)


def test_png8_decoded_without_pillow_for_png_files_save_png_and_pillow_write(tmp_path, monkeypatch):
    """The PNG files most read: as save_png (filter 0, 1 MiB IDAT chunks) and Pillow (adaptive
    filters, 64 KiB chunks) write them."""
    if not flip_loss.HAS_EXTENSION:
        pytest.skip("the compiled extension is not built: Pillow decodes every PNG")
    rgb = awkward_samples(np.random.default_rng(5), (300, 400, 3)).astype(np.uint8)
    save_png(tmp_path / "ours.png", rgb)
    Image.fromarray(rgb).save(tmp_path / "pillow.png")
    block_pillow_decoding(monkeypatch)
    for name in ("ours.png", "pillow.png"):
        t = load_image(tmp_path / name)
        np.testing.assert_array_equal(t.numpy(), rgb.transpose(2, 0, 1).astype(np.float32) / 255)


def add_chunk_before_iend(path, tag: bytes, payload: bytes) -> None:
    data = Path(path).read_bytes()
    chunk = struct.pack(">I", len(payload)) + tag + payload + struct.pack(">I", zlib.crc32(tag + payload))
    Path(path).write_bytes(data[:-12] + chunk + data[-12:])


def test_other_pngs_are_decoded_by_pillow(tmp_path, monkeypatch):
    """Interlaced, 16-bit, palette, 1- to 4-bit grey files, a transparent colour (tRNS), a chunk
    after the image data, no compiled extension: Pillow decodes them (an 8-bit RGB file beside
    them is not)."""
    rng = np.random.default_rng(2)
    rgb = rng.integers(0, 256, (6, 9, 3))
    grey = rng.integers(0, 16, (6, 9))
    write_png(tmp_path / "plain.png", rgb, 2, 8, 4)
    write_png(tmp_path / "adam7.png", rgb, 2, 8, 4, interlace=True)
    write_png(tmp_path / "rgb16.png", rgb * 257, 2, 16)
    write_png(tmp_path / "palette.png", grey, 3, 8, palette=rng.integers(0, 256, (16, 3)))
    write_png(tmp_path / "grey4.png", grey, 0, 4)
    write_png(tmp_path / "grey_key.png", grey * 17, 0, 8, transparent=17)
    write_png(tmp_path / "rgb_key.png", rgb, 2, 8, transparent=tuple(rgb[0, 0]))
    write_png(tmp_path / "text_after.png", rgb, 2, 8)
    add_chunk_before_iend(tmp_path / "text_after.png", b"tEXt", b"Comment\0after the pixels")
    calls = count_pillow_decoding(monkeypatch)
    load_image(tmp_path / "plain.png")
    assert not calls
    for name in ("adam7", "rgb16", "palette", "grey4", "grey_key", "rgb_key", "text_after"):
        if not name.endswith("_key"):  # load_image leaves a file with a transparent colour to Pillow
            assert fast_samples(tmp_path / f"{name}.png") is None, name
        load_image(tmp_path / f"{name}.png", keep_alpha=True)
        assert calls, name
        calls.clear()
    monkeypatch.setattr(imageio, "_png_unfilter", lambda: None)  # an extension built before it
    assert fast_samples(tmp_path / "plain.png") is None
    np.testing.assert_array_equal(np.round(load_image(tmp_path / "plain.png").numpy() * 255), rgb.transpose(2, 0, 1))
    assert calls


def png_from_stream(path, width: int, height: int, colour_type: int, stream: bytes) -> None:
    """An 8-bit PNG file whose IDAT holds ``stream`` as it is."""

    def chunk(tag, payload):
        return struct.pack(">I", len(payload)) + tag + payload + struct.pack(">I", zlib.crc32(tag + payload))

    header = struct.pack(">IIBBBBB", width, height, 8, colour_type, 0, 0, 0)
    data = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", stream) + chunk(b"IEND", b"")
    Path(path).write_bytes(data)


def outcome(path):
    """What load_image makes of ``path``: ("pixels", the tensor's values) or ("error", message)."""
    try:
        return "pixels", load_image(path, keep_alpha=True).numpy().tobytes()
    except ValueError as exc:
        return "error", str(exc)


def test_damaged_png_gets_the_verdict_pillow_gives(tmp_path, monkeypatch):
    """A damaged or truncated 8-bit PNG: load_image raises the same ValueError (or reads the same
    pixels) as with Pillow decoding every file: deflate data with bytes flipped (checksum
    included), a file cut short anywhere, a row filter type beyond 4, a stream one row short or
    long, or without its checksum, a second IHDR chunk that changes the layout."""
    height, width = 12, 10
    s = awkward_samples(np.random.default_rng(3), (height, width, 3))
    good = tmp_path / "good.png"
    write_png(good, s, 2, 8, [0, 1, 2, 3, 4], idat_chunks=3)
    data = good.read_bytes()
    idat = [m.start() for m in re.finditer(b"IDAT", data)]
    variants = {}
    for i, at in enumerate(idat):  # flipped bytes at the start, middle and end of each chunk
        length = struct.unpack(">I", data[at - 4 : at])[0]
        for kind, where in (("first", at + 4), ("middle", at + 4 + length // 2), ("last", at + 3 + length)):
            variants[f"flip{i}_{kind}"] = data[:where] + bytes([data[where] ^ 0x5A]) + data[where + 1 :]
    for cut in sorted({12, 33, idat[0] + 2, idat[0] + 20, idat[1] - 6, idat[-1] + 9, len(data) - 14, len(data) - 3}):
        variants[f"cut{cut}"] = data[:cut]
    rows = bytearray(b"".join(bytes([0]) + s[y].astype(np.uint8).tobytes() for y in range(height)))
    streams = {"ok": bytes(rows), "long": bytes(rows) + rows[: 1 + 3 * width], "short": bytes(rows[: -(1 + 3 * width)])}
    rows[5 * (1 + 3 * width)] = 5  # the sixth row's filter type
    streams["filter5"] = bytes(rows)
    for name, raw in streams.items():
        png_from_stream(tmp_path / f"{name}.png", width, height, 2, zlib.compress(raw))
        variants[name] = (tmp_path / f"{name}.png").read_bytes()
    png_from_stream(tmp_path / "no_checksum.png", width, height, 2, zlib.compress(streams["ok"])[:-4])
    variants["no_checksum"] = (tmp_path / "no_checksum.png").read_bytes()
    # a second IHDR (Pillow reads the last): interlaced, or 16 bits, over rows stored plainly
    header_end = 8 + 8 + 13 + 4
    for name, depth, interlace in (("second_ihdr_adam7", 8, 1), ("second_ihdr_16bit", 16, 0)):
        payload = struct.pack(">IIBBBBB", width, height, depth, 2, 0, 0, interlace)
        second = struct.pack(">I", 13) + b"IHDR" + payload + struct.pack(">I", zlib.crc32(b"IHDR" + payload))
        variants[name] = variants["ok"][:header_end] + second + variants["ok"][header_end:]
    verdicts = {}
    for name, content in variants.items():
        path = tmp_path / f"{name}.png"
        path.write_bytes(content)
        verdict = outcome(path)
        with monkeypatch.context() as m:
            m.setattr(imageio, "_png8_samples", lambda path, im, planar=False: None)  # Pillow decodes every file
            assert outcome(path) == verdict, name
        verdicts[name] = verdict[0]
    # a flipped first byte of the stream names no compression method
    assert verdicts["ok"] == "pixels" and verdicts["filter5"] == verdicts["flip0_first"] == "error"
    assert sum(kind == "error" for kind in verdicts.values()) >= len(variants) // 2, verdicts


def test_png_unfilter_checks_its_arguments():
    if not flip_loss.HAS_EXTENSION:
        pytest.skip("the compiled extension is not built")
    from flip_loss import _C

    rows = np.array([[1, 10, 20, 30], [4, 1, 2, 3]], np.uint8)  # Sub, then Paeth, one byte a pixel
    out = np.zeros((2, 3), np.uint8)
    assert _C.png_unfilter(rows.ctypes.data, out.ctypes.data, 2, 3, 1, False) is True
    np.testing.assert_array_equal(out, [[10, 30, 60], [11, 32, 63]])
    rows[1, 0] = 5
    assert _C.png_unfilter(rows.ctypes.data, out.ctypes.data, 2, 3, 1, False) is False
    for height, row_bytes, bpp in ((-1, 3, 1), (2, 0, 1), (2, 3, 0), (2, 3, 5), (2, 3, 2)):
        with pytest.raises(ValueError, match="png_unfilter: expected two addresses"):
            _C.png_unfilter(rows.ctypes.data, out.ctypes.data, height, row_bytes, bpp, False)
    with pytest.raises(ValueError, match="png_unfilter: expected two addresses"):
        _C.png_unfilter(0, out.ctypes.data, 2, 3, 1, False)


@pytest.mark.parametrize("channels", [1, 2, 3, 4])
def test_png_unfilter_into_planes_deals_out_the_rows(channels):
    """Every filter type on every row (the Paeth rows' ties too): the planes are the rows' samples
    channel by channel, and a filter type beyond 4 stops both layouts alike."""
    if not flip_loss.HAS_EXTENSION:
        pytest.skip("the compiled extension is not built")
    from flip_loss import _C

    rng = np.random.default_rng(channels)
    height, width = 11, 9
    rows = rng.integers(0, 256, (height, 1 + width * channels), dtype=np.uint8)
    rows[:4, 1:] = rows[0, 1:] // 3  # repeated bytes: ties in the Paeth predictor
    rows[:, 0] = np.arange(height) % 5
    interleaved = np.zeros((height, width, channels), np.uint8)
    planes = np.zeros((channels, height, width), np.uint8)
    assert _C.png_unfilter(rows.ctypes.data, interleaved.ctypes.data, height, width * channels, channels, False)
    assert _C.png_unfilter(rows.ctypes.data, planes.ctypes.data, height, width * channels, channels, True)
    np.testing.assert_array_equal(planes, interleaved.transpose(2, 0, 1))
    rows[6, 0] = 7
    assert not _C.png_unfilter(rows.ctypes.data, planes.ctypes.data, height, width * channels, channels, True)


# ----------------------------------------------------------------------------------------------
# The command line's note that it composited
# ----------------------------------------------------------------------------------------------

COMPOSITED = re.compile(r"^flip-loss: note: an input image has an alpha channel: it is composited", re.M)


def test_cli_composites_a_low_bit_depth_transparent_grey_and_says_so_only_then(tmp_path, capsys):
    """A 2-bit grey PNG whose tRNS names a level its pixels have is composited (and the note says
    so); one whose key no pixel has is opaque: nothing is composited and no note claims it."""
    rng = np.random.default_rng(6)
    levels = rng.integers(0, 4, (16, 20))
    levels[0, :4] = np.arange(4)
    Image.fromarray((levels * 85).astype(np.uint8)).convert("RGB").save(tmp_path / "ref.png")
    write_png(tmp_path / "keyed.png", levels, 0, 2, transparent=2)
    write_png(tmp_path / "unused.png", np.minimum(levels, 2), 0, 2, transparent=3)
    reference = load_image(tmp_path / "ref.png")
    keyed = load_image(tmp_path / "keyed.png", keep_alpha=True)
    np.testing.assert_array_equal(keyed[3].numpy(), np.where(levels == 2, 0, 1))
    with torch.no_grad():
        composite = flip_loss.alpha.composite(keyed, "straight", "black", False)
        want = f"{flip_loss.pool(flip_loss.ldr_flip(composite, reference, eps=0.0)[0]).mean:.6f}"
    args = ["-r", str(tmp_path / "ref.png"), "-v", "1", "-nerm", "-t"]
    assert main(args + [str(tmp_path / "keyed.png")]) == 0
    out, err = capsys.readouterr()
    assert re.findall(r"^     Mean: (\d+\.\d{6})$", out, flags=re.M) == [want]
    assert COMPOSITED.search(err)
    assert main(args + [str(tmp_path / "unused.png")]) == 0
    out, err = capsys.readouterr()
    assert not COMPOSITED.search(err), err


def test_cli_composites_a_tga_as_premultiplied_where_its_extension_area_says_so(tmp_path, capsys):
    rng = np.random.default_rng(7)
    rgb = rng.integers(0, 256, (12, 16, 3)).astype(np.uint8)
    alpha = rng.integers(0, 256, (12, 16, 1)).astype(np.uint8)
    premultiplied = (rgb.astype(np.uint16) * alpha // 255).astype(np.uint8)
    Image.fromarray(rgb).save(tmp_path / "ref.png")
    bgra = np.concatenate([premultiplied[..., ::-1], alpha], axis=2)
    write_tga(tmp_path / "test.tga", bgra.tobytes(), 16, 12, 32, 8, attributes=4)
    image = load_image(tmp_path / "test.tga", keep_alpha=True)
    with torch.no_grad():
        composite = flip_loss.alpha.composite(image, "premultiplied", "white", False).clamp(max=1.0)
        want = f"{flip_loss.pool(flip_loss.ldr_flip(composite, load_image(tmp_path / 'ref.png'), eps=0.0)[0]).mean:.6f}"
    args = ["-r", str(tmp_path / "ref.png"), "-t", str(tmp_path / "test.tga"), "-v", "1", "-nerm"]
    assert main(args + ["--background", "white"]) == 0
    out, err = capsys.readouterr()
    assert re.findall(r"^     Mean: (\d+\.\d{6})$", out, flags=re.M) == [want]
    assert "composited over white as premultiplied alpha (as the TGA file says)" in err


def test_compiled_planes_are_numpys(monkeypatch):
    """8-bit samples become float planes in the compiled extension (csrc/flip/cpu/byte_images.h)
    with NumPy's values: every sample value, contiguous samples and the views load_image makes
    (RGB of RGBA, grey repeated); other layouts and 16-bit samples through NumPy."""
    if not flip_loss.HAS_EXTENSION:
        pytest.skip("the compiled extension is not built")
    assert flip_loss._ops.extension_function("byte_planes") is not None
    rng = np.random.default_rng(7)
    rgba = rng.integers(0, 256, (37, 29, 4), dtype=np.uint8)
    rgba[0, :, 0] = np.arange(29)
    rgba.reshape(-1)[:256] = np.arange(256)
    grey = rgba[..., 0]
    layouts = [rgba, rgba[..., :3], np.repeat(grey[..., None], 3, axis=2), rgba[:, ::-1, :3], rgba[::2, ::3]]
    layouts += [rgba[..., :1], rgba.transpose(1, 0, 2), (rgba.astype(np.uint16) * 257)[..., :3]]
    compiled = [imageio._planar_float(a, 65535.0 if a.dtype == np.uint16 else 255.0) for a in layouts]
    monkeypatch.setattr(flip_loss._ops, "extension_function", lambda name: None)
    for a, got in zip(layouts, compiled):
        want = imageio._planar_float(a, 65535.0 if a.dtype == np.uint16 else 255.0)
        assert got.dtype == want.dtype == torch.float32 and got.shape == want.shape
        assert torch.equal(got, want)


def test_byte_planes_and_colour_map_check_their_arguments():
    if not flip_loss.HAS_EXTENSION:
        pytest.skip("the compiled extension is not built")
    from flip_loss import _C

    samples = np.zeros((2, 3, 4), np.uint8)
    planes = np.zeros((4, 2, 3), np.float32)
    for height, width, channels, row, pixel in (
        (-1, 3, 4, 12, 4),
        (2, 3, 0, 12, 4),
        (2, 3, 4, 12, 3),
        (2, 3, 4, 11, 4),
    ):
        with pytest.raises(ValueError, match="byte_planes: expected two addresses"):
            _C.byte_planes(samples.ctypes.data, planes.ctypes.data, height, width, channels, row, pixel)
    with pytest.raises(ValueError, match="byte_planes: expected two addresses"):
        _C.byte_planes(0, planes.ctypes.data, 2, 3, 4, 12, 4)
    values = np.zeros(5, np.float32)
    colours = np.zeros((5, 3), np.uint8)
    table = np.zeros((256, 3), np.uint8)
    for count, address in ((-1, table.ctypes.data), (5, 0)):
        with pytest.raises(ValueError, match="colour_map: expected three addresses"):
            _C.colour_map(values.ctypes.data, count, address, colours.ctypes.data)


@pytest.mark.parametrize("suffix", [".png", ".bmp"])
def test_a_one_pixel_image_as_codes_is_its_own_writable_tensor(tmp_path, suffix):
    """Pillow's samples of a one-pixel image are already laid out as planes, and read-only: the
    codes come back as a copy, without torch's warning about a non-writable array."""
    path = tmp_path / f"pixel{suffix}"
    Image.fromarray(np.array([[[10, 20, 30]]], np.uint8)).save(path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        codes = load_image(path, codes=True)
    codes += 1
    assert codes.flatten().tolist() == [11, 21, 31]
