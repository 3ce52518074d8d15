"""FLIPMetric: accumulated pooled values vs a direct computation on the concatenated maps."""

import numpy as np
import pytest
import torch

import flip_loss
from flip_loss import FLIPMetric


def batches(seed=0, sizes=((2, 20, 24), (1, 20, 24), (3, 12, 16)), ppd=flip_loss.DEFAULT_PPD):
    """(test, reference) batches of different sizes and the error maps ldr_flip gives them."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for n, h, w in sizes:
        ref = torch.rand(n, 3, h, w, generator=g)
        test = (ref + 0.2 * torch.randn(n, 3, h, w, generator=g)).clamp(0, 1)
        out.append((test, ref, flip_loss.ldr_flip(test, ref, ppd, eps=0.0)))
    return out


def concatenated(maps, dtype=torch.float64):
    return torch.cat([m.reshape(-1) for m in maps]).to(dtype)


def test_matches_direct_computation():
    data = batches()
    metric = FLIPMetric()
    returned = [metric.update(t, r) for t, r, _ in data]
    res = metric.compute()
    maps = [e for _, _, e in data]
    direct = flip_loss.pool(concatenated(maps))
    # mean, min and max are exact; with 2**16 buckets and ~1.5k pixels every bucket holds at most a
    # few values, so the percentiles are within one bucket width (usually exact).
    assert res.pooled.mean == pytest.approx(direct.mean, rel=1e-12)
    assert res.pooled.min == direct.min and res.pooled.max == direct.max
    for name in ("weighted_median", "weighted_quartile_1", "weighted_quartile_3"):
        assert abs(getattr(res.pooled, name) - getattr(direct, name)) <= 1 / 2**16, name
    expected_means = torch.cat([e.double().flatten(1).mean(1) for e in maps])
    torch.testing.assert_close(res.per_image_means, expected_means, rtol=1e-12, atol=0)
    torch.testing.assert_close(torch.cat(returned), expected_means, rtol=1e-12, atol=0)
    assert res.num_images == 6 and res.num_pixels == sum(e.numel() for e in maps)
    # The float32 map as the tool pools it (float32 running sums) agrees as closely.
    direct32 = flip_loss.pool(concatenated(maps, torch.float32))
    assert abs(res.pooled.weighted_median - direct32.weighted_median) <= 1 / 2**16 + 1e-6


@pytest.mark.parametrize("bins", [16, 256, 4096])
def test_coarse_histograms_stay_within_one_bucket(bins):
    data = batches(seed=1)
    metric = FLIPMetric(bins=bins)
    for t, r, _ in data:
        metric.update(t, r)
    res = metric.compute().pooled
    direct = flip_loss.pool(concatenated([e for _, _, e in data]))
    assert res.mean == pytest.approx(direct.mean, rel=1e-12)
    for name in ("weighted_median", "weighted_quartile_1", "weighted_quartile_3"):
        got, want = getattr(res, name), getattr(direct, name)
        assert abs(got - want) <= 1.0 / bins, (name, got, want)


def test_update_error_map_many_pixels_bounded_memory():
    """Accumulating many maps keeps the state at the histogram's size; values stay accurate."""
    rng = np.random.default_rng(3)
    metric = FLIPMetric()
    maps = []
    for _ in range(5):
        m = torch.from_numpy(rng.beta(0.8, 4.0, size=(2, 1, 64, 80)).astype(np.float32))
        maps.append(m)
        metric.update_error_map(m)
    state = metric._stats
    assert all(s.shape[-1] == 2**16 for s in (state.count, state.limbs, state.bin_min, state.bin_max))
    assert state.limbs.numel() == 4 * 2**16
    res = metric.compute()
    direct = flip_loss.pool(concatenated(maps))
    assert res.pooled.mean == pytest.approx(direct.mean, rel=1e-12)
    for name in ("weighted_median", "weighted_quartile_1", "weighted_quartile_3"):
        assert abs(getattr(res.pooled, name) - getattr(direct, name)) <= 1 / 2**16
    assert res.num_images == 10 and res.per_image_means.shape == (10,)


def test_edge_cases_and_reset():
    metric = FLIPMetric()
    with pytest.raises(RuntimeError, match="before any update"):
        metric.compute()
    # Identical images: an all-zero map pools to zeros, like flip_loss.pool.
    a = torch.rand(1, 3, 8, 9)
    metric.update(a, a)
    res = metric.compute()
    assert tuple(res.pooled) == (0.0,) * 6
    # Values 0 and exactly 1 land in the first and last bucket.
    metric.reset()
    metric.update_error_map(torch.tensor([[[[0.0, 1.0, 1.0, 0.5]]]]))
    want = flip_loss.pool(torch.tensor([0.0, 1.0, 1.0, 0.5], dtype=torch.float64))
    assert metric.compute().pooled == want
    # A 3 x H x W pair counts as one image.
    metric.reset()
    t, r, e = batches(sizes=((1, 10, 11),))[0]
    metric.update(t[0], r[0])
    assert metric.compute().num_images == 1
    assert metric.compute().pooled.mean == pytest.approx(e.double().mean().item(), rel=1e-12)


def test_options_and_bad_input():
    data = batches(sizes=((2, 14, 15),), ppd=30.0)
    t, r, e = data[0]
    metric = FLIPMetric(pixels_per_degree=30.0)
    metric.update(t, r)
    assert metric.compute().pooled.mean == pytest.approx(e.double().mean().item(), rel=1e-12)
    linear = FLIPMetric(input_space="linear")
    linear.update(t, r)
    assert linear.compute().pooled.mean != pytest.approx(metric.compute().pooled.mean)
    with pytest.raises(ValueError, match="pixels_per_degree"):
        FLIPMetric(pixels_per_degree=-1)
    with pytest.raises(ValueError, match="bins"):
        FLIPMetric(bins=0)
    with pytest.raises(ValueError, match="N x 1 x H x W"):
        metric.update_error_map(torch.rand(2, 3, 4, 4))
    with pytest.raises(ValueError, match="NaN"):
        metric.update_error_map(torch.full((1, 1, 2, 2), float("nan")))
    with pytest.raises(ValueError, match="shapes differ"):
        metric.update(t, r[..., :5])
    # Inputs that require grad are fine: the metric never builds a graph.
    x = t.clone().requires_grad_()
    assert not metric.update(x, r).requires_grad


def test_a_refused_error_map_is_named_by_its_first_bad_value_and_where_it_is():
    # 1 + 2^-23 (a float32 map 1 ulp past 1) used to be reported as "from 0 to 1".
    metric = FLIPMetric()
    e = torch.zeros(3, 1, 4, 5)
    e[1, 0, 2, 3] = 1 + 2**-23
    e[2, 0, 0, 0] = -0.5
    message = (
        r"2 values, the first 1\.0000001192092896 at image 1, row 2, column 3, of a float32 map\); "
        r"FLIP error maps lie in \[0, 1\]"
    )
    with pytest.raises(ValueError, match=message):
        metric.update_error_map(e)
    nan = torch.zeros(1, 4, 5, dtype=torch.float64)  # one image, CHW
    nan[0, 3, 4] = float("nan")
    with pytest.raises(
        ValueError, match=r"NaN or infinite values \(1 value, the first nan at image 0, row 3, column 4"
    ):
        metric.update_error_map(nan)
    # Nothing of either map was kept.
    assert metric.update_error_map(torch.ones(1, 1, 2, 2)).tolist() == [1.0]
    assert metric.compute().num_pixels == 4


def test_exact_sums_do_not_depend_on_batches_or_order():
    """The bucket sums are exact integers: any split into batches, in any order, gives the same
    pooled values bit for bit, and the mean is the exact mean of the values rounded once."""
    from fractions import Fraction

    g = torch.Generator().manual_seed(9)
    maps = [torch.rand(1, 1, 13, 17, generator=g) ** 4 for _ in range(6)]
    whole = FLIPMetric()
    whole.update_error_map(torch.cat(maps))
    shuffled = FLIPMetric()
    for i in (4, 1, 5, 0, 3, 2):
        shuffled.update_error_map(maps[i])
    a, b = whole.compute(), shuffled.compute()
    assert a.pooled == b.pooled and a.num_pixels == b.num_pixels
    values = torch.cat([m.reshape(-1) for m in maps]).double().tolist()
    assert a.pooled.mean == float(sum(Fraction(v) for v in values) / len(values))
    for m, mean in zip(maps, a.per_image_means.tolist()):
        exact = sum(Fraction(v) for v in m.double().reshape(-1).tolist()) / m.numel()
        assert mean == float(exact)


def test_pixel_capacity():
    """Beyond 2**39 pixels the int64 limbs could overflow: refused before anything is folded in."""
    metric = FLIPMetric()
    metric.update_error_map(torch.rand(1, 1, 4, 4))
    metric._num_pixels = flip_loss.metric.MAX_PIXELS - 16
    before = metric.compute().pooled
    with pytest.raises(ValueError, match="2\\*\\*39 pixels"):
        metric.update_error_map(torch.rand(1, 1, 4, 5))
    assert metric.compute().pooled == before
