"""OpenEXR input and output (flip_loss.imageio.load_exr / save_exr / exr_size, load_image's dispatch)."""

import numpy as np
import pytest
import torch

OpenEXR = pytest.importorskip("OpenEXR")

from exr_files import MIPMAP_LEVELS, ONE_LEVEL, RIPMAP_LEVELS, write_exr  # noqa: E402
from flip_loss.imageio import exr_size, is_exr_path, load_exr, load_image, save_exr  # noqa: E402


def hdr_values(shape, seed=0):
    rng = np.random.default_rng(seed)
    return (np.exp2(rng.uniform(-8, 10, shape)) * rng.uniform(0, 1, shape)).astype(np.float32)


def write_channels(path, channels):
    OpenEXR.File({"compression": OpenEXR.ZIP_COMPRESSION, "type": OpenEXR.scanlineimage}, dict(channels)).write(
        str(path)
    )


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


# Channel layouts NVIDIA's evaluator (flip-evaluator 1.7, flip_evaluator.load) reads, and how: the
# source of R, G and B (None: zeros). Its colour channels are R, G, B and A by whole name, any case;
# one of them alone (beside any other channels) is grey, even A.
NVIDIA_READS = [
    (["R"], "RRR"),
    (["G"], "GGG"),
    (["B"], "BBB"),
    (["r"], "rrr"),
    (["A"], "AAA"),
    (["R", "Z"], "RRR"),
    (["G", "Z"], "GGG"),
    (["B", "Y"], "BBB"),
    (["R", "alpha"], "RRR"),
    (["R", "diffuse.G"], "RRR"),
    (["R", "G"], ("R", "G", None)),
    (["G", "R", "Z"], ("R", "G", None)),
    (["R", "G", "B"], "RGB"),
    (["A", "B", "G", "R"], "RGB"),
    (["r", "g", "b", "a"], "rgb"),
    (["R", "G", "B", "alpha", "Z"], "RGB"),
    (["diffuse.R", "diffuse.G", "diffuse.B", "R", "G", "B"], "RGB"),
]


def layout_values(names, shape=(4, 6)):
    return {n: hdr_values(shape, seed=10 + i) for i, n in enumerate(names)}


@pytest.mark.parametrize("names,sources", NVIDIA_READS, ids=lambda v: "+".join(v) if isinstance(v, list) else None)
def test_channel_layouts_read_as_nvidia_reads_them(tmp_path, names, sources):
    """A single R, G or B channel (also beside channels of other names) is grey, as NVIDIA's
    evaluator reads it, not a pure red, green or blue image; so is a file of A alone."""
    values = layout_values(names)
    write_channels(tmp_path / "x.exr", values)
    t = load_exr(tmp_path / "x.exr").numpy()
    for c, source in enumerate(sources):
        np.testing.assert_array_equal(t[c], values[source] if source else 0)
    try:
        import flip_evaluator
    except ImportError:
        return
    np.testing.assert_array_equal(flip_evaluator.load(str(tmp_path / "x.exr")).transpose(2, 0, 1), t)


# Layouts NVIDIA's evaluator refuses, crashes on or reads its alpha channel as the picture of: read
# by the same rule (see docs/cli.md), with the alpha kept on request: (names, R G B sources, alpha).
READ_SENSIBLY = [
    (["Y"], "YYY", None),
    (["diffuse.R"], ["diffuse.R"] * 3, None),
    (["alpha"], ["alpha"] * 3, None),
    (["Y", "A"], "YYY", "A"),
    (["Z", "a"], "ZZZ", "a"),
    (["R", "A"], "RRR", "A"),
    (["B", "A", "Z"], "BBB", "A"),
    (["G", "B"], (None, "G", "B"), None),
    (["R", "B", "A"], ("R", None, "B"), "A"),
    (["R", "G", "A"], ("R", "G", None), "A"),
]


@pytest.mark.parametrize(
    "names,sources,alpha", READ_SENSIBLY, ids=lambda v: "+".join(v) if isinstance(v, list) else None
)
def test_channel_layouts_nvidia_cannot_read(tmp_path, names, sources, alpha):
    values = layout_values(names)
    write_channels(tmp_path / "x.exr", values)
    t = load_exr(tmp_path / "x.exr", keep_alpha=True).numpy()
    assert t.shape == (3 if alpha is None else 4, 4, 6)
    for c, source in enumerate(sources):
        np.testing.assert_array_equal(t[c], values[source] if source else 0)
    if alpha is not None:
        np.testing.assert_array_equal(t[3], values[alpha])
    np.testing.assert_array_equal(load_exr(tmp_path / "x.exr").numpy(), t[:3])


@pytest.mark.parametrize(
    "names,message",
    [
        (["U", "V"], r"no R, G, B channels \(channels: U, V\)"),
        (["Y", "Z"], r"no R, G, B channels \(channels: Y, Z\)"),
        (["A", "Y", "Z"], r"no R, G, B channels \(channels: A, Y, Z\)"),
        (["X", "Y", "Z"], "no R, G, B channels"),
        (["diffuse.B", "diffuse.G", "diffuse.R"], r"no R, G, B channels .*layered files are not supported"),
        (["BY", "RY", "Y"], r"luminance/chroma OpenEXR images \(channels: BY, RY, Y\) are not supported"),
        (["A", "alpha"], r"no colour channel \(channels: A, alpha\)"),
        (["R", "r"], "two channels named 'R' and 'r'"),
        (["G", "R", "g"], "two channels named 'G' and 'g'"),
        (["A", "B", "G", "R", "a"], "two channels named 'A' and 'a'"),
    ],
)
def test_channel_layouts_that_are_refused(tmp_path, names, message):
    """What neither reader can take as colour is refused from the header, never read as some
    arbitrary colour (two channels of other names as R and G, one of two channels named alike)."""
    write_channels(tmp_path / "x.exr", layout_values(names))
    for load in (load_exr, exr_size, load_image):
        with pytest.raises(ValueError, match="x.exr': .*" + message):
            load(tmp_path / "x.exr")


def test_subsampled_and_tiled_files(tmp_path):
    """Luminance/chroma files (Y with subsampled RY, BY) are refused by name; a subsampled colour
    channel is refused, one that is not used does not matter; tiled files with or without mipmap or
    ripmap levels give their full-resolution image."""
    rgb = {c: hdr_values((8, 12), seed=20 + i) for i, c in enumerate("RGB")}
    chroma = np.zeros((4, 6), np.float16)
    write_exr(tmp_path / "yc.exr", {"Y": rgb["G"], "RY": (chroma, 2, 2), "BY": (chroma, 2, 2)})
    with pytest.raises(ValueError, match=r"yc.exr': luminance/chroma OpenEXR images .* not supported"):
        load_exr(tmp_path / "yc.exr")
    write_exr(tmp_path / "b2.exr", {"R": rgb["R"], "G": rgb["G"], "B": (rgb["B"][::2, ::2].copy(), 2, 2)})
    with pytest.raises(ValueError, match="channel 'B' is subsampled"):
        load_exr(tmp_path / "b2.exr")
    want = np.stack([rgb[c] for c in "RGB"])
    write_exr(tmp_path / "z2.exr", dict(rgb, Z=(np.ones((4, 6), np.float32), 2, 2)))
    np.testing.assert_array_equal(load_exr(tmp_path / "z2.exr").numpy(), want)
    for mode in (ONE_LEVEL, MIPMAP_LEVELS, RIPMAP_LEVELS):
        write_exr(tmp_path / "tiled.exr", rgb, tiles=(4, 4, mode))
        np.testing.assert_array_equal(load_exr(tmp_path / "tiled.exr").numpy(), want)


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
