"""flip_loss.pooling: the evaluator's pooled values and weighted histogram."""

import math
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from flip_loss.pooling import PooledValues, pool, weighted_histogram, weighted_percentile


# ----------------------------------------------------------------------------------------------
# Brute-force versions of the rules, element by element in plain Python
# ----------------------------------------------------------------------------------------------


def brute_percentile(values, p, acc):
    """Sort ascending, running sum of the values (accumulated with type ``acc``), first value whose
    running sum exceeds p * total (total accumulated in row-major order); 0 if the total is 0."""
    flat = [acc(v) for v in np.asarray(values).reshape(-1).tolist()]
    total = acc(0)
    for v in flat:
        total = acc(total + v)
    if total == 0:
        return 0.0
    run = acc(0)
    ordered = sorted(flat)
    for v in ordered:
        run = acc(run + v)
        if float(run) > float(p) * float(total):
            return float(v)
    return float(ordered[-1])


def brute_histogram(values, bins=100):
    flat = np.asarray(values).reshape(-1).tolist()
    step = float(np.float32(1.0 / bins))
    counts = [0] * bins
    for v in flat:
        if 0.0 <= v <= 1.0:
            counts[min(int(math.floor(v / step)), bins - 1)] += 1
    megapixels = len(flat) / (1024.0 * 1024.0)
    return [c * ((i + 0.5) * (1.0 / bins)) / megapixels for i, c in enumerate(counts)]


# ----------------------------------------------------------------------------------------------
# Hand cases
# ----------------------------------------------------------------------------------------------


def test_all_zero_map():
    p = pool(np.zeros(3, np.float32))
    assert isinstance(p, PooledValues)
    assert tuple(p) == (0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
    # max is 0, not FLT_MIN (documented deviation from the evaluator)
    assert pool(torch.zeros(2, 1, 4, 5)).max == 0.0


def test_hand_computed_small_array():
    # sorted: 0.125 0.125 0.25 0.5, running sums 0.125 0.25 0.5 1.0, total 1.0
    v = np.array([0.5, 0.125, 0.25, 0.125], np.float32)
    p = pool(v)
    assert p.weighted_median == 0.5  # 0.5 does not *exceed* 0.5: the next value is taken
    assert p.weighted_quartile_1 == 0.25  # 0.25 does not exceed 0.25
    assert p.weighted_quartile_3 == 0.5  # 1.0 > 0.75
    assert p.mean == 0.25 and p.min == 0.125 and p.max == 0.5
    assert weighted_percentile(v, 0.0) == 0.125
    assert weighted_percentile(v, 0.1) == 0.125
    assert weighted_percentile(v, 0.2) == 0.125  # running sum 0.25 at the second 0.125
    assert weighted_percentile(v, 0.3) == 0.25
    assert weighted_percentile(v, 1.0) == 0.5  # nothing exceeds the total: the largest value


def test_single_value_and_types_are_python_floats():
    p = pool(torch.tensor([[0.3]]))
    assert all(type(x) is float for x in p)
    assert p.weighted_median == pytest.approx(0.3) and p.min == p.max == p.weighted_median


def test_weighting_by_value():
    # 99 tiny errors and one large one: the large error carries most of the weight
    v = np.full(100, 0.001, np.float32)
    v[37] = 0.9
    p = pool(v)
    assert p.weighted_median == pytest.approx(0.9)
    assert p.weighted_quartile_1 == pytest.approx(0.9)
    assert p.mean == pytest.approx((99 * 0.001 + 0.9) / 100, rel=1e-6)


def test_shape_and_container_do_not_matter():
    rng = np.random.default_rng(3)
    a = rng.random((2, 1, 7, 9), dtype=np.float32)
    ref = pool(a)
    assert pool(a.reshape(-1)) == ref
    assert pool(torch.from_numpy(a)) == ref
    assert pool(torch.from_numpy(a).double()).min == ref.min


def test_mean_is_float64():
    # a float32 running sum would lose every 2**-25 added to 1.0 (half an ulp is 2**-24)
    v = np.concatenate([np.ones(1, np.float32), np.full(4096, 2.0**-25, np.float32)])
    assert pool(v).mean == (1.0 + 4096 * 2.0**-25) / 4097


def test_invalid_inputs():
    with pytest.raises(ValueError, match="empty"):
        pool(np.zeros((0, 3), np.float32))
    with pytest.raises(ValueError, match="NaN"):
        pool(np.array([0.1, np.nan], np.float32))
    with pytest.raises(ValueError, match="NaN or infinite"):
        pool(torch.tensor([0.1, float("inf")]))
    with pytest.raises(ValueError, match="p must"):
        weighted_percentile(np.ones(3), 1.5)
    with pytest.raises(ValueError, match="bins"):
        weighted_histogram(np.ones(3), bins=0)
    with pytest.raises(TypeError):
        pool(np.array(["a", "b"]))


# ----------------------------------------------------------------------------------------------
# Against the brute-force rule
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(6))
def test_percentiles_match_brute_force_float32(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 3000))
    v = (rng.random(n) ** rng.uniform(0.3, 4)).astype(np.float32)
    if seed % 2:  # many exact duplicates and zeros
        v = np.round(v * 20).astype(np.float32) / np.float32(20)
    p = pool(v)
    got = (p.weighted_median, p.weighted_quartile_1, p.weighted_quartile_3)
    want = tuple(brute_percentile(v, q, np.float32) for q in (0.5, 0.25, 0.75))
    assert got == want
    for q in (0.0, 0.01, 0.33, 0.9, 0.999):
        assert weighted_percentile(v, q) == brute_percentile(v, q, np.float32)
    assert p.min == float(v.min()) and p.max == float(v.max())
    assert p.mean == pytest.approx(math.fsum(v.tolist()) / n, rel=1e-12)


def test_percentiles_match_brute_force_float64():
    rng = np.random.default_rng(11)
    v = rng.random(2500)
    p = pool(torch.from_numpy(v))
    assert (p.weighted_median, p.weighted_quartile_1, p.weighted_quartile_3) == tuple(
        brute_percentile(v, q, np.float64) for q in (0.5, 0.25, 0.75)
    )


def test_float32_running_sum_is_reproduced():
    # The running sum and the total are float32, as in the evaluator. For this array an exact
    # (float64) sum picks another element for the 3rd quartile, 2e-5 away.
    v = np.random.default_rng(5).random(200_000).astype(np.float32)
    got = pool(v).weighted_quartile_3
    assert got == brute_percentile(v, 0.75, np.float32)
    ordered = np.sort(v.astype(np.float64))
    exact = ordered[np.flatnonzero(np.cumsum(ordered) > 0.75 * ordered.sum())[0]]
    assert got != exact and abs(got - exact) < 1e-4


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_compiled_walk_is_numpys(dtype):
    """The extension's walk of a map for its weighted percentiles (a radix sort of the floats'
    bits, the running sums in that order, the total in the map's order, both summed one value
    after another in the map's dtype) is NumPy's, bit for bit: for negative and positive values,
    -0 just before +0, subnormals, the extremes, duplicates, values sharing their high digits
    (sort passes skipped), a constant array, strided and read-only arrays; its input left alone."""
    from flip_loss import _ops
    from flip_loss.pooling import _order

    if not _ops.HAS_EXTENSION:
        pytest.skip("the compiled extension is not loaded: pooling walks the map with NumPy")
    rng = np.random.default_rng(7)
    info = np.finfo(dtype)
    special = np.array(
        [0.0, -0.0, info.tiny, -info.tiny, info.smallest_subnormal, -info.smallest_subnormal, 1.0, -1.0, 0.5, 0.5],
        dtype,
    )
    cases = [
        rng.random(5000),
        rng.normal(0, 1e3, 5001),
        1 + rng.random(3000),
        np.full(77, 0.25),
        special[:1],
        np.concatenate([special, rng.normal(0, 1, 300) ** 7, special, [info.max, -info.max]]),
    ]
    for case in cases:
        values = case.astype(dtype)
        rng.shuffle(values)
        for given in (values, values[::3]):  # contiguous and strided
            before = given.copy()
            given.flags.writeable = False
            got = _order(given)
            ordered = np.sort(given)
            assert got.ordered.dtype == got.running.dtype == dtype
            assert np.array_equal(got.ordered, ordered)
            zeros = got.ordered[got.ordered == 0]
            assert np.array_equal(np.signbit(zeros), np.arange(zeros.size) < np.signbit(given[given == 0]).sum())
            with np.errstate(over="ignore", invalid="ignore"):  # +-max sum to inf, then nan
                running = np.add.accumulate(ordered, dtype=dtype)
                total = np.add.accumulate(given, dtype=dtype)[-1]
            assert np.array_equal(got.running, running, equal_nan=True)
            assert got.total == total or (np.isnan(got.total) and np.isnan(total))
            assert np.array_equal(given, before) and np.array_equal(np.signbit(given), np.signbit(before))


def test_pooling_without_the_extension_gives_the_same_values(monkeypatch):
    """An install without the compiled extension pools with NumPy alone: the same values and
    histogram, bit for bit."""
    from flip_loss import _ops
    from flip_loss.pooling import pool_with_histogram

    rng = np.random.default_rng(12)
    maps = [
        rng.random((90, 70)).astype(np.float32) ** 3,
        rng.random(999),
        rng.uniform(-0.1, 1.1, 4000).astype(np.float32),
    ]
    expected = [(pool_with_histogram(m, 100), weighted_percentile(m, 0.9)) for m in maps]
    monkeypatch.setattr(_ops, "HAS_EXTENSION", False)
    for m, ((pooled, (edges, weighted)), p90) in zip(maps, expected):
        got, (got_edges, got_weighted) = pool_with_histogram(m, 100)
        assert got == pooled and weighted_percentile(m, 0.9) == p90
        assert np.array_equal(got_edges, edges) and np.array_equal(got_weighted, weighted)


def test_pooling_takes_any_layout_and_byte_order_and_reports_no_negative_zero(monkeypatch):
    """Unaligned, big-endian and strided arrays pool as their native, aligned copies do (a
    big-endian float64 map in float64); the min and max of a map with -0 are +0; an extension
    built without the compiled walk falls back to NumPy's."""
    from flip_loss import _C, _ops

    rng = np.random.default_rng(21)
    v = rng.random(3001) ** 2
    want = pool(v)
    raw = b"\0" + v.tobytes()
    unaligned = np.frombuffer(raw, np.float64, offset=1)
    assert unaligned.ctypes.data % 8 != 0 and pool(unaligned) == want
    assert pool(v.astype(">f8")) == want and pool(np.repeat(v, 2)[::2]) == want
    assert pool(v.astype(np.float32).astype(">f4")) == pool(v.astype(np.float32))
    zeros = pool(np.array([0.0, -0.0, 0.0], np.float32))
    assert math.copysign(1.0, zeros.min) == 1.0 and math.copysign(1.0, zeros.max) == 1.0
    if _ops.HAS_EXTENSION:
        monkeypatch.delattr(_C, "pooling_order")
        assert pool(v) == want


@pytest.mark.parametrize("bins", [100, 7])
def test_histogram_matches_brute_force(bins):
    rng = np.random.default_rng(bins)
    v = rng.uniform(-0.1, 1.1, 5000).astype(np.float32)
    v[:4] = [0.0, 1.0, 0.01, 0.99]
    edges, weighted = weighted_histogram(torch.from_numpy(v.reshape(50, 100)), bins=bins)
    assert edges.shape == (bins + 1,) and weighted.shape == (bins,)
    assert edges[0] == 0.0 and edges[-1] == 1.0
    np.testing.assert_allclose(edges, np.linspace(0, 1, bins + 1))
    np.testing.assert_allclose(weighted, brute_histogram(v, bins), rtol=1e-14, atol=0)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_one_sort_gives_the_pooled_values_and_the_histogram_exactly(dtype):
    """pool_with_histogram (one sort of the map: the command line's report and histograms) gives
    pool's values and weighted_histogram's buckets bit for bit, for values on each side of every
    bucket edge, at 0 and 1, outside [0, 1], and negative ones (where the running sum shrinks)."""
    from flip_loss.pooling import pool_with_histogram

    rng = np.random.default_rng(3)
    for bins in (100, 7, 1):
        size = dtype(np.float32(1.0 / bins))
        edges = np.array([i * size for i in range(bins + 1)], dtype)
        near = np.concatenate([edges, np.nextafter(edges, dtype(-1)), np.nextafter(edges, dtype(2))])
        for low in (0.0, -0.2):
            v = np.concatenate([near, rng.uniform(low, 1.1, 3000).astype(dtype), dtype([0.0, 1.0, 0.0])])
            rng.shuffle(v)
            pooled, (e, w) = pool_with_histogram(v.reshape(3, -1), bins)
            assert pooled == pool(v)
            want_e, want_w = weighted_histogram(v, bins)
            assert np.array_equal(e, want_e) and np.array_equal(w, want_w), (bins, low)
            percentiles = (pooled.weighted_median, pooled.weighted_quartile_1, pooled.weighted_quartile_3)
            assert percentiles == tuple(brute_percentile(v, q, dtype) for q in (0.5, 0.25, 0.75))
    assert pool_with_histogram(np.zeros(5, dtype))[1] is None


def test_histogram_hand_case():
    v = np.array([0.0, 0.005, 0.01, 0.999, 1.0, 1.5, -0.1], np.float32)
    _, w = weighted_histogram(v)
    counts = np.round(w / ((np.arange(100) + 0.5) * 0.01) * (7 / 1024**2)).astype(int)
    expected = np.zeros(100, int)
    expected[0] = 2  # 0 and 0.005
    expected[1] = 1  # 0.01
    expected[99] = 2  # 0.999 and 1.0 (the last bucket includes 1); 1.5 and -0.1 are left out
    np.testing.assert_array_equal(counts, expected)
    assert w[99] == 2 * 0.995 / (7 / 1024**2)


# ----------------------------------------------------------------------------------------------
# Against NVIDIA's tool (flip-evaluator): same map in, same printed values out
# ----------------------------------------------------------------------------------------------


def _flip_tool():
    exe = shutil.which("flip", path=str(Path(sys.executable).parent))
    return exe


def _evaluator_case(tmp_path, w, h, seed):
    fe = pytest.importorskip("flip_evaluator")
    from PIL import Image, ImageFilter

    exe = _flip_tool()
    if exe is None:
        pytest.skip("the flip-evaluator 'flip' command is not installed")
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:h, 0:w]
    base = np.stack([(xx / w), (yy / h), 0.5 + 0.4 * np.sin(xx / 7.0) * np.cos(yy / 5.0)], -1)
    noisy = base * 255 + rng.normal(0, 20, base.shape)
    ref = Image.fromarray(np.clip(noisy, 0, 255).astype(np.uint8))
    test = np.asarray(ref.filter(ImageFilter.GaussianBlur(1.2))).astype(float)
    test = Image.fromarray(np.clip(test + rng.normal(0, 12, test.shape), 0, 255).astype(np.uint8))
    ref.save(tmp_path / "r.png")
    test.save(tmp_path / "t.png")
    out = subprocess.run(
        [exe, "-r", "r.png", "-t", "t.png", "-nerm", "-hist", "-d", "h"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    printed = [float(x) for x in re.findall(r": (\d\.\d{6})\n", out)]
    assert len(printed) == 6, out
    emap = fe.evaluate(str(tmp_path / "r.png"), str(tmp_path / "t.png"), "LDR", applyMagma=False)[0][..., 0]
    script = (tmp_path / "h" / "weighted_histogram.flip.r.t.67ppd.ldr.py").read_text()
    return emap, printed, script


@pytest.mark.parametrize("w,h,seed", [(317, 229, 0), (1024, 768, 1)])
def test_pooled_values_match_the_flip_tool(tmp_path, w, h, seed):
    emap, printed, _ = _evaluator_case(tmp_path, w, h, seed)
    p = pool(emap)
    # weighted median, quartiles, min, max: the same 6 printed decimals
    assert [f"{x:.6f}" for x in p[1:]] == [f"{x:.6f}" for x in printed[1:]]
    # mean: float64 here, float32 running sum in the tool
    assert abs(p.mean - printed[0]) < 5e-6


def test_histogram_matches_the_flip_tool(tmp_path):
    emap, _, script = _evaluator_case(tmp_path, 300, 200, 2)
    counts = np.array([int(c) for c in re.search(r"dataFLIP = \[([^\]]*)\]", script).group(1).split(",")])
    num_pixels = int(re.search(r"numPixels = (\d+)", script).group(1))
    assert num_pixels == emap.size and counts.sum() == emap.size
    # the tool's plotting script: count * centre, then divided by megapixels
    expected = counts * ((np.arange(100) + 0.5) * 0.01)
    expected /= num_pixels / (1024 * 1024)
    np.testing.assert_array_equal(weighted_histogram(emap)[1], expected)


def test_one_table_names_every_pooled_value_everywhere():
    """pooling.STATISTICS is the one table of the pooled values: PooledValues' fields, the
    percentiles pool() computes, the terminal's lines, the CSV's columns, the report's columns and
    the gates' quantities all come from it, in its order."""
    from flip_loss import pooling
    from flip_loss.cli import CSV_HEADER, arguments, outputs, report

    table = pooling.STATISTICS
    assert pooling.PooledValues._fields == tuple(s.field for s in table)
    x = torch.rand(3, 1, 17, 23, generator=torch.Generator().manual_seed(5))
    pooled = pooling.pool(x)
    for s in table:
        if s.percentile is not None:
            assert getattr(pooled, s.field) == pooling.weighted_percentile(x, s.percentile), s
    assert (pooled.mean, pooled.min, pooled.max) == pytest.approx(
        (x.double().mean().item(), x.min().item(), x.max().item())
    )
    assert CSV_HEADER[2 : 2 + len(table)] == tuple(s.label for s in table)
    assert [line.split(":")[0] for line in outputs.pooled_lines(pooled)] == [s.label for s in table]
    assert len(outputs.csv_skipped_row("r", "t", "why", "", False)) == len(CSV_HEADER)
    assert [c.key for c in report.COLUMNS] == [s.key for s in table if s.report_column]
    assert arguments.GATE_QUANTITIES == tuple(s.key for s in table if s.gate)
    assert all(s.report_column for s in table if s.gate)  # the report sorts by a gate's quantity
