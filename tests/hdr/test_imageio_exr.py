"""OpenEXR input and output (flip_loss.imageio.load_exr / save_exr / exr_size, load_image's dispatch)."""

import numpy as np
import pytest
import torch

OpenEXR = pytest.importorskip("OpenEXR")

from flip_loss.imageio import exr_size, is_exr_path, load_exr, load_image, save_exr  # noqa: E402


def hdr_values(shape, seed=0):
    rng = np.random.default_rng(seed)
    return (np.exp2(rng.uniform(-8, 10, shape)) * rng.uniform(0, 1, shape)).astype(np.float32)


def write_channels(path, channels):
    OpenEXR.File({"compression": OpenEXR.ZIP_COMPRESSION, "type": OpenEXR.scanlineimage}, channels).write(str(path))


def test_round_trip_float32_is_exact(tmp_path):
    a = hdr_values((3, 7, 9))
    a[0, 0, 0] = 0.0
    a[1, 2, 3] = -0.5  # negative values are kept (HDR-FLIP counts them as 0)
    save_exr(tmp_path / "a.exr", a)
    t = load_exr(tmp_path / "a.exr")
    assert t.dtype == torch.float32 and t.shape == (3, 7, 9)
    np.testing.assert_array_equal(t.numpy(), a)
    assert exr_size(tmp_path / "a.exr") == (9, 7)
    # load_image dispatches on the extension (any case).
    save_exr(tmp_path / "b.EXR", torch.from_numpy(a))
    assert is_exr_path(tmp_path / "b.EXR")
    np.testing.assert_array_equal(load_image(tmp_path / "b.EXR").numpy(), a)


def test_half_and_float64_inputs(tmp_path):
    a = hdr_values((3, 4, 5), seed=1).astype(np.float64)
    save_exr(tmp_path / "h.exr", a, half=True)
    channels = OpenEXR.File(str(tmp_path / "h.exr"), separate_channels=True).channels()
    assert sorted(channels) == ["B", "G", "R"]
    assert all(c.pixels.dtype == np.float16 for c in channels.values())
    np.testing.assert_array_equal(load_exr(tmp_path / "h.exr").numpy(), a.astype(np.float16).astype(np.float32))
    save_exr(tmp_path / "f.exr", torch.from_numpy(a))  # float64 tensor -> float32
    np.testing.assert_array_equal(load_exr(tmp_path / "f.exr").numpy(), a.astype(np.float32))


def test_grey_files(tmp_path):
    g = hdr_values((6, 5), seed=2)
    save_exr(tmp_path / "g.exr", g)  # H x W -> channel Y
    save_exr(tmp_path / "g1.exr", g[None])  # 1 x H x W
    for name in ("g.exr", "g1.exr"):
        assert sorted(OpenEXR.File(str(tmp_path / name), separate_channels=True).channels()) == ["Y"]
        t = load_exr(tmp_path / name)
        assert t.shape == (3, 6, 5)
        for c in range(3):
            np.testing.assert_array_equal(t[c].numpy(), g)
    # Any single channel name, with or without alpha, is grey.
    write_channels(tmp_path / "z.exr", {"Z": g, "A": np.ones_like(g)})
    np.testing.assert_array_equal(load_exr(tmp_path / "z.exr")[2].numpy(), g)


def test_two_channel_files(tmp_path):
    u, v = hdr_values((4, 6), seed=3), hdr_values((4, 6), seed=4)
    write_channels(tmp_path / "uv.exr", {"U": u, "V": v})
    t = load_exr(tmp_path / "uv.exr").numpy()
    np.testing.assert_array_equal(t[0], u)
    np.testing.assert_array_equal(t[1], v)
    np.testing.assert_array_equal(t[2], 0)
    write_channels(tmp_path / "rg.exr", {"r": u, "g": v, "A": np.ones_like(u)})  # by name, any case
    np.testing.assert_array_equal(load_exr(tmp_path / "rg.exr").numpy(), t)


def test_channels_by_name_alpha_ignored_and_other_types(tmp_path):
    r, g, b = (hdr_values((5, 3), seed=s) for s in (5, 6, 7))
    write_channels(
        tmp_path / "x.exr",
        {"b": b.astype(np.float16), "G": g, "r": r, "A": np.full_like(r, 0.25), "Z": np.full_like(r, 9.0)},
    )
    t = load_exr(tmp_path / "x.exr").numpy()
    np.testing.assert_array_equal(t[0], r)
    np.testing.assert_array_equal(t[1], g)
    np.testing.assert_array_equal(t[2], b.astype(np.float16).astype(np.float32))
    save_exr(tmp_path / "rgba.exr", np.stack([r, g, b, np.zeros_like(r)]))
    np.testing.assert_array_equal(load_exr(tmp_path / "rgba.exr").numpy(), np.stack([r, g, b]))
    u = np.arange(15, dtype=np.uint32).reshape(5, 3) * 1000
    write_channels(tmp_path / "u.exr", {"R": u, "G": u, "B": u})
    np.testing.assert_array_equal(load_exr(tmp_path / "u.exr")[1].numpy(), u.astype(np.float32))


def test_data_window_gives_the_size(tmp_path):
    header = {
        "dataWindow": (np.array([2, 3], np.int32), np.array([8, 6], np.int32)),
        "displayWindow": (np.array([0, 0], np.int32), np.array([9, 9], np.int32)),
    }
    OpenEXR.File(header, {"R": np.ones((4, 7), np.float32)}).write(str(tmp_path / "dw.exr"))
    assert exr_size(tmp_path / "dw.exr") == (7, 4)
    assert load_exr(tmp_path / "dw.exr").shape == (3, 4, 7)


@pytest.mark.parametrize("bad,count,nans", [((0, 1, 1), 1, 1), ((2, 0, 0), 1, 0), (None, 3, 2)])
def test_non_finite_values_are_an_error(tmp_path, bad, count, nans):
    a = hdr_values((3, 4, 4), seed=8)
    if bad is None:
        a[0, 0, 0] = np.nan
        a[1, 3, 3] = np.nan
        a[2, 1, 2] = -np.inf
    else:
        a[bad] = np.nan if nans else np.inf
    save_exr(tmp_path / "n.exr", a)
    with pytest.raises(ValueError) as info:
        load_exr(tmp_path / "n.exr")
    msg = str(info.value)
    assert "n.exr" in msg and f"holds {count} non-finite value(s) ({nans} NaN, {count - nans} infinite)" in msg
    with pytest.raises(ValueError, match="non-finite"):
        load_image(tmp_path / "n.exr")
    # A NaN in an ignored channel (alpha) does not matter.
    a = hdr_values((4, 4, 4), seed=9)
    a[3, 0, 0] = np.nan
    save_exr(tmp_path / "alpha_nan.exr", a)
    assert torch.isfinite(load_exr(tmp_path / "alpha_nan.exr")).all()


def test_half_infinity_is_an_error(tmp_path):
    a = hdr_values((3, 2, 2), seed=10)
    a[1, 1, 1] = 1e6  # above the largest half: stored as +inf
    save_exr(tmp_path / "inf.exr", a, half=True)
    with pytest.raises(ValueError, match=r"holds 1 non-finite value\(s\) \(0 NaN, 1 infinite\)"):
        load_exr(tmp_path / "inf.exr")


def test_read_errors(tmp_path, capfd):
    with pytest.raises(FileNotFoundError, match="missing.exr' does not exist"):
        load_exr(tmp_path / "missing.exr")
    with pytest.raises(FileNotFoundError):
        exr_size(tmp_path / "missing.exr")
    with pytest.raises(ValueError, match="it is a directory"):
        load_exr(tmp_path)
    (tmp_path / "text.exr").write_text("not an EXR file")
    with pytest.raises(ValueError, match="text.exr': not an OpenEXR file"):
        load_exr(tmp_path / "text.exr")
    (tmp_path / "magic.exr").write_bytes(b"v/1\x01" + b"\0" * 100)
    with pytest.raises(ValueError, match="damaged, truncated"):
        load_exr(tmp_path / "magic.exr")
    with pytest.raises(ValueError, match="damaged, truncated"):
        exr_size(tmp_path / "magic.exr")
    save_exr(tmp_path / "full.exr", hdr_values((3, 40, 30), seed=11))
    data = (tmp_path / "full.exr").read_bytes()
    (tmp_path / "trunc.exr").write_bytes(data[: len(data) - 200])
    assert exr_size(tmp_path / "trunc.exr") == (30, 40)  # the header is intact
    with pytest.raises(ValueError, match="trunc.exr': the OpenEXR file is damaged, truncated"):
        load_exr(tmp_path / "trunc.exr")
    # OpenEXR's own diagnostics do not reach the terminal: the exception says it all.
    assert capfd.readouterr() == ("", "")


def test_channel_errors(tmp_path):
    ones = np.ones((2, 3), np.float32)
    write_channels(tmp_path / "alpha.exr", {"A": ones})
    with pytest.raises(ValueError, match=r"alpha.exr': the OpenEXR file has no colour channel \(channels: A\)"):
        load_exr(tmp_path / "alpha.exr")
    with pytest.raises(ValueError, match="no colour channel"):
        exr_size(tmp_path / "alpha.exr")  # checked from the header too
    write_channels(tmp_path / "layers.exr", {"diffuse.R": ones, "diffuse.G": ones, "diffuse.B": ones})
    with pytest.raises(ValueError, match=r"no R, G, B channels \(channels: diffuse.B, diffuse.G, diffuse.R\)"):
        load_exr(tmp_path / "layers.exr")


def test_unsupported_hdr_formats(tmp_path):
    for name in ("x.hdr", "x.PFM"):
        (tmp_path / name).write_bytes(b"whatever")
        with pytest.raises(ValueError, match="are not supported; convert the image to OpenEXR"):
            load_image(tmp_path / name)


def test_save_errors(tmp_path):
    with pytest.raises(ValueError, match="C = 1, 3 or 4"):
        save_exr(tmp_path / "x.exr", np.zeros((2, 4, 4), np.float32))
    with pytest.raises(ValueError, match="C = 1, 3 or 4"):
        save_exr(tmp_path / "x.exr", np.zeros((3, 0, 4), np.float32))
    with pytest.raises(OSError, match="cannot write the OpenEXR file"):
        save_exr(tmp_path / "no" / "such" / "x.exr", np.zeros((3, 2, 2), np.float32))
    assert not (tmp_path / "x.exr").exists()
