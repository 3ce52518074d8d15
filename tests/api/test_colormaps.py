"""flip_loss.colormaps: the magma/viridis tables and how values are coloured."""

import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from flip_loss import colormaps
from flip_loss.colormaps import MAGMA, VIRIDIS, apply_colormap, colormap_indices, to_grey_uint8


def test_tables_shape_and_published_end_entries():
    for table in (MAGMA, VIRIDIS):
        assert len(table) == 256
        assert all(len(c) == 3 for c in table)
        a = np.asarray(table)
        assert a.min() >= 0.0 and a.max() <= 1.0
        assert np.array_equal(np.round(a, 6), a)  # 6-decimal literals
    # docs/algorithm.md §6.6
    assert MAGMA[0] == (0.001462, 0.000466, 0.013866)
    assert MAGMA[255] == (0.987053, 0.991438, 0.749504)
    assert VIRIDIS[0] == (0.267004, 0.004874, 0.329415)
    assert VIRIDIS[255] == (0.993248, 0.906157, 0.143936)


def test_tables_are_ordered_by_lightness():
    # both maps are designed with monotonically increasing lightness: catches swapped/reordered rows
    for table in (MAGMA, VIRIDIS):
        luma = np.asarray(table) @ np.array([0.2126, 0.7152, 0.0722])
        assert np.all(np.diff(luma) > 0)


def _u8(c):
    c = np.asarray(c, np.float32)
    return np.floor(np.float32(255.0) * c + np.float32(0.5)).astype(np.uint8)


def test_index_rule_and_colour_rounding():
    v = np.array([[0.0, 1.0, 0.5, 1 / 255, 0.5 / 255 - 1e-6, 0.5 / 255 + 1e-6, 254.5 / 255 + 1e-6]], np.float32)
    idx = colormap_indices(v)
    assert idx.tolist() == [[0, 255, 128, 1, 0, 1, 255]]
    out = apply_colormap(v, MAGMA)
    assert out.shape == (1, 7, 3) and out.dtype == np.uint8
    for j, i in enumerate(idx[0]):
        assert out[0, j].tolist() == _u8(MAGMA[i]).tolist()
    assert out[0, 0].tolist() == [0, 0, 4]  # 255 * (0.001462, 0.000466, 0.013866) + 0.5
    assert out[0, 1].tolist() == [252, 253, 191]


def test_every_index_is_reachable():
    v = np.arange(256, dtype=np.float32).reshape(16, 16) / np.float32(255)
    assert colormap_indices(v).reshape(-1).tolist() == list(range(256))
    out = apply_colormap(torch.from_numpy(v), VIRIDIS).reshape(256, 3)
    np.testing.assert_array_equal(out, _u8(VIRIDIS))


def test_out_of_range_values_are_clamped_not_wrapped():
    v = np.array([[-1.0, -0.004, 1.001, 1.5, 7.0, np.nan]], np.float32)
    assert colormap_indices(v).tolist() == [[0, 0, 255, 255, 255, 0]]
    out = apply_colormap(v, MAGMA)
    assert out[0, 2].tolist() == _u8(MAGMA[255]).tolist()  # the evaluator would wrap to dark here
    assert out[0, 5].tolist() == _u8(MAGMA[0]).tolist()


def test_grey():
    v = torch.tensor([[0.0, 1.0, 0.5, 0.2], [-0.3, 1.7, float("nan"), 1 / 255]])
    g = to_grey_uint8(v)
    assert g.dtype == np.uint8 and g.shape == (2, 4)
    assert g.tolist() == [[0, 255, 128, 51], [0, 255, 0, 1]]


def test_shapes():
    m = torch.rand(1, 1, 5, 6)
    assert apply_colormap(m).shape == (5, 6, 3)  # leading size-1 dims dropped; MAGMA default
    assert to_grey_uint8(m[0]).shape == (5, 6)
    with pytest.raises(ValueError, match="H x W"):
        apply_colormap(torch.rand(3, 5, 6))
    with pytest.raises(ValueError, match="256"):
        apply_colormap(np.zeros((4, 4)), np.zeros((10, 3)))
    custom = np.linspace(0, 1, 256)[:, None].repeat(3, axis=1)  # any 256 x 3 table
    out = apply_colormap(np.array([[0.0, 1.0]]), custom)
    assert out.tolist() == [[[0, 0, 0], [255, 255, 255]]]


# ----------------------------------------------------------------------------------------------
# Against NVIDIA's evaluator: same values in, same colours out
# ----------------------------------------------------------------------------------------------


def _pair(tmp_path):
    from PIL import Image

    rng = np.random.default_rng(0)
    h, w = 40, 64
    ref = rng.random((h, w, 3))
    test = ref.copy()
    # error from nothing (left) to everything (right), so that most of the table is used
    mix = np.linspace(0, 1, w)[None, :, None]
    test = (1 - mix) * test + mix * (1 - ref)
    for name, a in (("r.png", ref), ("t.png", test)):
        Image.fromarray((a * 255 + 0.5).astype(np.uint8)).save(tmp_path / name)
    return tmp_path / "r.png", tmp_path / "t.png"


def test_magma_matches_the_evaluator(tmp_path):
    fe = pytest.importorskip("flip_evaluator")
    r, t = _pair(tmp_path)
    grey = fe.evaluate(str(r), str(t), "LDR", applyMagma=False)[0][..., 0]
    magma = fe.evaluate(str(r), str(t), "LDR", applyMagma=True)[0]
    idx = colormap_indices(grey)
    assert len(np.unique(idx)) > 100
    np.testing.assert_array_equal(np.asarray(MAGMA, np.float32)[idx], magma)


def test_png_matches_the_flip_tool(tmp_path):
    fe = pytest.importorskip("flip_evaluator")
    from PIL import Image

    exe = shutil.which("flip", path=str(Path(sys.executable).parent))
    if exe is None:
        pytest.skip("the flip-evaluator 'flip' command is not installed")
    r, t = _pair(tmp_path)
    grey = fe.evaluate(str(r), str(t), "LDR", applyMagma=False)[0][..., 0]
    subprocess.run(
        [exe, "-r", "r.png", "-t", "t.png", "-v", "0", "-b", "magma"], cwd=tmp_path, check=True, capture_output=True
    )
    subprocess.run(
        [exe, "-r", "r.png", "-t", "t.png", "-v", "0", "-b", "grey", "-nm"],
        cwd=tmp_path,
        check=True,
        capture_output=True,
    )
    np.testing.assert_array_equal(
        apply_colormap(grey, MAGMA), np.asarray(Image.open(tmp_path / "magma.png").convert("RGB"))
    )
    np.testing.assert_array_equal(to_grey_uint8(grey), np.asarray(Image.open(tmp_path / "grey.png").convert("L")))


@pytest.mark.parametrize("name", ["magma", "viridis"])
def test_tables_are_matplotlibs_colormaps(name):
    """The bundled tables are matplotlib's (to 6 decimals), without matplotlib being needed."""
    matplotlib = pytest.importorskip("matplotlib")
    ours = np.array(getattr(colormaps, name.upper()))
    theirs = np.array(matplotlib.colormaps[name].colors)
    assert ours.shape == (256, 3)
    np.testing.assert_allclose(ours, theirs, rtol=0, atol=5e-7)


def test_compiled_colours_are_numpys(monkeypatch):
    """The compiled extension's colour look-up (csrc/flip/cpu/byte_images.h) gives NumPy's colours
    for every value: each index's boundary v = (k - 0.5) / 255 and its float neighbours, values
    outside [0, 1], NaN, infinities, -0, subnormals; maps that are views, float64 and big-endian;
    tables in either memory order."""
    import flip_loss

    if not flip_loss.HAS_EXTENSION:
        pytest.skip("the compiled extension is not built")
    assert flip_loss._ops.extension_function("colour_map") is not None
    k = np.arange(257, dtype=np.float32)
    edges = (k - np.float32(0.5)) / np.float32(255)
    near = np.concatenate([np.nextafter(edges, np.float32(-1)), edges, np.nextafter(edges, np.float32(2))])
    odd = np.array([np.nan, np.inf, -np.inf, -0.0, 1e-45, -1e-45, -3.0, 7.0, 1.0, 0.0], np.float32)
    rng = np.random.default_rng(0)
    values = np.concatenate([near, odd, rng.uniform(-0.1, 1.1, 9000).astype(np.float32)])
    values = values[: values.size // 97 * 97].reshape(-1, 97)
    maps = [values, values[:, ::2], values.T, values.astype(np.float64), values.astype(">f4"), torch.from_numpy(values)]
    # users' tables too: column-major (a transposed 3 x 256 array) and float32
    tables = (MAGMA, VIRIDIS, np.asarray(VIRIDIS).T.copy().T, np.asfortranarray(MAGMA, dtype=np.float32))
    compiled = [apply_colormap(m, table) for m in maps for table in tables]
    monkeypatch.setattr(flip_loss._ops, "extension_function", lambda name: None)
    for got, want in zip(compiled, [apply_colormap(m, table) for m in maps for table in tables]):
        assert got.dtype == want.dtype == np.uint8
        np.testing.assert_array_equal(got, want)
