"""flip_loss.imageio: loading PNG (8 and 16 bits, every colour type and row filter), JPEG and BMP,
the bundled example pair, loading errors and the PNG round trip."""

import os
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from flip_loss.cli import example_paths
from flip_loss.imageio import load_image, save_png
from png_files import write_png16


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
