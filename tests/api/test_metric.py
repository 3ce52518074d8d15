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


# --- FLIPTorchMetric as torchmetrics and Lightning use it ------------------------------------------

STATE_DTYPES = {
    "count": torch.int64,
    "limbs": torch.int64,
    "bin_min": torch.float64,
    "bin_max": torch.float64,
    "min_value": torch.float64,
    "max_value": torch.float64,
    "settings": torch.int64,
}


def torchmetric(**options):
    pytest.importorskip("torchmetrics")
    from flip_loss.torchmetrics import FLIPTorchMetric

    return FLIPTorchMetric(**options)


def plain_result(pairs, **options):
    """FLIPMetric's result over ``pairs`` (the reference the torchmetrics form must equal)."""
    metric = FLIPMetric(**options)
    for t, r in pairs:
        metric.update(t, r)
    return metric.compute()


def assert_same_result(got, want):
    assert got.pooled == want.pooled
    assert torch.equal(got.per_image_means, want.per_image_means)
    assert (got.num_images, got.num_pixels) == (want.num_images, want.num_pixels)


def assert_state_dtypes(metric):
    for name, dtype in STATE_DTYPES.items():
        assert getattr(metric, name).dtype == dtype, name
        assert metric._defaults[name].dtype == dtype, name
    assert all(m.dtype == torch.float64 for m in metric.per_image_means)


CONVERSIONS = {
    "to(bfloat16)": lambda m: m.to(torch.bfloat16),  # Lightning's bf16-true
    "to(float16)": lambda m: m.to(torch.float16),  # 16-true
    "to(float64)": lambda m: m.to(torch.float64),  # 64-true
    "half()": lambda m: m.half(),
    "double()": lambda m: m.double(),
    "bfloat16()": lambda m: m.bfloat16(),
    "float()": lambda m: m.float(),
    "set_dtype(bfloat16)": lambda m: m.set_dtype(torch.bfloat16),
    "parent.to(bfloat16)": lambda m: torch.nn.ModuleDict({"metric": m}).to(torch.bfloat16)["metric"],
    "to(cpu, float16)": lambda m: m.to("cpu", torch.float16),
}


@pytest.mark.parametrize("conversion", list(CONVERSIONS))
def test_torchmetric_states_keep_their_dtypes_under_every_precision(conversion):
    """A module conversion (what Lightning's precision settings do to the LightningModule and its
    metrics) leaves the states' dtypes as they are made: the statistics before it are kept exactly,
    and later updates, in float32 or in the converted dtype, accumulate as FLIPMetric's do."""
    data = [(t, r) for t, r, _ in batches(seed=11, sizes=((2, 12, 14), (1, 12, 14)))]
    metric = torchmetric(bins=256)
    metric.update(*data[0])
    before = metric.compute()
    metric = CONVERSIONS[conversion](metric)
    assert_state_dtypes(metric)
    assert metric.dtype == torch.float64
    assert_same_result(metric.compute(), before)
    low = torch.bfloat16 if "bfloat16" in conversion else torch.float16
    narrow = tuple(x.to(low) for x in data[1])
    metric.update(*data[1])
    metric.update(*narrow)
    assert_state_dtypes(metric)
    assert_same_result(metric.compute(), plain_result([data[0], data[1], narrow], bins=256))
    # reset() brings back the defaults, in their own dtypes too.
    metric.reset()
    assert_state_dtypes(metric)
    metric.update(*data[1])
    assert_same_result(metric.compute(), plain_result([data[1]], bins=256))


# Each option alone differs between the two metrics; the first batch is a pair of identical images,
# whose map is 0 whatever the options, so that every statistic of the two metrics is equal after it.
OPTION_PAIRS = [
    ({"pixels_per_degree": 30.0}, {"pixels_per_degree": 30.0001}),
    ({"input_space": "srgb"}, {"input_space": "linear"}),
    ({"data_range": 1.0}, {"data_range": (0.0, 1.0000001)}),
    ({"alpha": "straight"}, {"alpha": "premultiplied"}),
    ({"alpha": "straight", "background": "white"}, {"alpha": "straight", "background": [1.0, 1.0, 0.999]}),
]


@pytest.mark.parametrize("first, second", OPTION_PAIRS)
def test_collection_never_merges_metrics_with_different_options(first, second):
    from torchmetrics import MetricCollection

    channels = 4 if "alpha" in first else 3
    g = torch.Generator().manual_seed(12)
    same = torch.rand(1, channels, 10, 12, generator=g)
    ref = torch.rand(2, channels, 10, 12, generator=g)
    test = (ref + 0.3 * torch.randn(2, channels, 10, 12, generator=g)).clamp(0, 1)
    pairs = [(same, same), (test, ref)]
    collection = MetricCollection(
        {
            "a": torchmetric(bins=128, **first),
            "b": torchmetric(bins=128, **second),
            "c": torchmetric(bins=128, **first),
        },
        compute_groups=True,
    )
    for t, r in pairs:
        collection.update(t, r)
    # The metrics with equal options share one evaluation; the other is evaluated on its own.
    assert sorted(sorted(g) for g in collection.compute_groups.values()) == [["a", "c"], ["b"]]
    results = collection.compute()
    assert_same_result(results["a"], plain_result(pairs, bins=128, **first))
    assert_same_result(results["c"], plain_result(pairs, bins=128, **first))
    assert_same_result(results["b"], plain_result(pairs, bins=128, **second))
    assert results["a"].pooled.mean != results["b"].pooled.mean
    # reset and a second epoch: the groups stand, the values start afresh.
    collection.reset()
    collection.update(test, ref)
    results = collection.compute()
    assert_same_result(results["b"], plain_result([(test, ref)], bins=128, **second))
    assert_same_result(results["c"], plain_result([(test, ref)], bins=128, **first))


def test_torchmetric_forward_reset_compute_cycles():
    """forward (Lightning's self.metric(test, reference)) returns the batch's result and accumulates;
    compute() is over every batch since the last reset, epoch after epoch."""
    data = [(t, r) for t, r, _ in batches(seed=13)]
    metric = torchmetric(bins=512)
    for _epoch in range(2):
        for i, (t, r) in enumerate(data):
            assert_same_result(metric(t, r), plain_result([(t, r)], bins=512))
            assert_same_result(metric.compute(), plain_result(data[: i + 1], bins=512))
        assert_same_result(metric.compute(), plain_result(data, bins=512))
        metric.reset()
        with pytest.raises(RuntimeError, match="before any update"):
            metric.compute()


def test_torchmetric_state_dict_round_trip():
    data = [(t, r) for t, r, _ in batches(seed=14)]
    metric = torchmetric(pixels_per_degree=40.0, bins=64)
    metric.persistent(True)
    metric.update(*data[0])
    metric.update(*data[1])
    state = metric.state_dict()
    assert set(STATE_DTYPES) | {"per_image_means"} <= set(state)
    restored = torchmetric(pixels_per_degree=40.0, bins=64)
    restored.load_state_dict(state)
    assert_same_result(restored.compute(), metric.compute())
    restored.update(*data[2])
    assert_same_result(restored.compute(), plain_result(data, pixels_per_degree=40.0, bins=64))
    # A state of a metric with other options: refused, not mixed in (bins equal, so every shape
    # fits), and nothing of it loaded.
    other = torchmetric(pixels_per_degree=41.0, bins=64)
    other.update(*data[2])
    with pytest.raises(ValueError, match="comes from a metric with other options"):
        other.load_state_dict(state)
    assert_same_result(other.compute(), plain_result([data[2]], pixels_per_degree=41.0, bins=64))
    # Not persistent (torchmetrics' default): the state dict holds no state.
    assert torchmetric().state_dict() == {}


def test_torchmetric_sync_through_a_dist_sync_fn():
    """compute() syncs through torchmetrics' dist_sync_fn: two ranks that saw the same images give
    the result of one process that saw them twice, rank 0's per-image means first; ranks whose
    metrics have different options are refused."""
    data = [(t, r) for t, r, _ in batches(seed=15, sizes=((2, 10, 12), (1, 10, 12)))]

    def two_ranks(tensor, group=None):
        return [tensor, tensor.clone()]

    metric = torchmetric(bins=256, dist_sync_fn=two_ranks, distributed_available_fn=lambda: True)
    for t, r in data:
        metric.update(t, r)
    assert_same_result(metric.compute(), plain_result(data + data, bins=256))
    # compute() left the local state as it was.
    assert metric.count.sum() == sum(t[:, 0].numel() for t, _ in data)
    other = torchmetric(pixels_per_degree=30.0, bins=256)

    def other_options_on_rank_1(tensor, group=None):
        return [tensor, other.settings if tensor is mismatched.settings else tensor.clone()]

    mismatched = torchmetric(bins=256, dist_sync_fn=other_options_on_rank_1, distributed_available_fn=lambda: True)
    mismatched.update(*data[0])
    with pytest.raises(ValueError, match="ranks' metrics have different options"):
        mismatched.compute()


# --- options set after construction, and state no mode can poison ------------------------------


def both_metrics(**options):
    """A FLIPMetric and a FLIPTorchMetric with the same options (the latter when torchmetrics is
    installed)."""
    made = [FLIPMetric(**options)]
    try:
        made.append(torchmetric(**options))
    except pytest.skip.Exception:
        pass
    return made


# option: (a value set after construction the constructor refuses, the error, its message)
BAD_LATER = {
    "pixels_per_degree": ([30.0, 60.0], TypeError, "pixels_per_degree must be a real number"),
    "bins": (0, ValueError, "bins must be from 1 to"),
    "input_space": ("rgb", ValueError, "input_space must be one of"),
    "data_range": ((1.0, 0.0), ValueError, "data_range must be finite with low < high"),
    "background": ("white", ValueError, "background only applies to images with an alpha channel"),
    "alpha": ("sideways", ValueError, "alpha must be"),
}


@pytest.mark.parametrize("name", list(BAD_LATER))
def test_metrics_check_an_option_set_after_construction_by_the_constructors_rules(name):
    """Before: a list of pixels per degree set on a metric ran multi-scale FLIP, which the
    constructor refuses, and a bad bins or background met only a torch error or nothing."""
    value, exc, message = BAD_LATER[name]
    test, ref, _ = batches(seed=30)[0]
    with pytest.raises(exc, match=message):
        FLIPMetric(**{name: value})
    for metric in both_metrics():
        setattr(metric, name, value)
        with pytest.raises(exc, match=message):
            metric.update(test, ref)


def test_a_metrics_statistics_take_no_other_options():
    """Statistics gathered with one set of options refuse a batch, or a result, under another (before:
    bins set after the first update was ignored, a new pixels per degree mixed two metrics in one);
    FLIPMetric takes new options after reset(), FLIPTorchMetric's are those it was built with."""
    (t1, r1, _), (t2, r2, _) = batches(seed=31)[:2]
    for metric in both_metrics(bins=256):
        metric.update(t1, r1)
        for name, value in (("bins", 64), ("pixels_per_degree", 30.0)):
            setattr(metric, name, value)
            with pytest.raises(ValueError, match=f"{name}={value!r} was set after construction"):
                metric.update(t2, r2)
            with pytest.raises(ValueError, match=f"{name}={value!r} was set after construction"):
                metric.compute()
            setattr(metric, name, 256 if name == "bins" else flip_loss.DEFAULT_PPD)
        metric.update(t2, r2)
        assert_same_result(metric.compute(), plain_result([(t1, r1), (t2, r2)], bins=256))
    metric = FLIPMetric(bins=256)
    metric.update(t1, r1)
    metric.reset()
    metric.bins, metric.pixels_per_degree = 64, 30.0
    metric.update(t2, r2)
    assert_same_result(metric.compute(), plain_result([(t2, r2)], bins=64, pixels_per_degree=30.0))


def test_sync_on_compute_takes_only_true_or_false():
    with pytest.raises(TypeError, match="sync_on_compute must be True or False"):
        FLIPMetric(sync_on_compute="no")
    metric = FLIPMetric()
    metric.update(*batches(seed=32)[0][:2])
    metric.sync_on_compute = "no"  # a truthy string would have synced
    with pytest.raises(TypeError, match="sync_on_compute must be True or False"):
        metric.compute()


def test_a_metric_first_used_under_inference_mode_works_outside_it():
    """Statistics made by a first update (FLIPMetric), a constructor or a reset (FLIPTorchMetric)
    under torch.inference_mode are normal tensors, so later updates outside it work (before:
    'Inplace update to inference tensor outside InferenceMode')."""
    data = [(t, r) for t, r, _ in batches(seed=33)]
    want = plain_result(data, bins=512)
    for metric in both_metrics(bins=512):
        with torch.inference_mode():
            metric.update(*data[0])
        for t, r in data[1:]:
            metric.update(t, r)
        assert_same_result(metric.compute(), want)
    pytest.importorskip("torchmetrics")
    with torch.inference_mode():
        built_inside = torchmetric(bins=512)
    reset_inside = torchmetric(bins=512)
    reset_inside.update(*data[0])
    with torch.inference_mode():
        reset_inside.reset()
    for metric in (built_inside, reset_inside):
        for t, r in data:
            metric.update(t, r)
        assert_same_result(metric.compute(), want)


def test_the_returned_means_are_the_callers_to_change():
    g = torch.Generator().manual_seed(11)
    test, ref = torch.rand(2, 3, 9, 10, generator=g), torch.rand(2, 3, 9, 10, generator=g)
    metric = FLIPMetric()
    kept = metric.update(test, ref).clone()
    metric.update_error_map(torch.rand(1, 1, 9, 10, generator=g)).mul_(100)
    metric.update(test, ref).mul_(100)
    assert torch.equal(metric.compute().per_image_means[:2], kept)
    assert bool((metric.compute().per_image_means <= 1).all())


@pytest.mark.parametrize("which", ["FLIPMetric", "FLIPTorchMetric"])
def test_an_update_stopped_midway_leaves_no_trace(which, monkeypatch):
    """Ctrl-C (KeyboardInterrupt) inside an update, after part of the maps was folded in: the
    statistics are those of the earlier updates, and later ones give what they would have."""
    if which == "FLIPTorchMetric":
        pytest.importorskip("torchmetrics")
        from flip_loss.torchmetrics import FLIPTorchMetric as make
    else:
        make = FLIPMetric
    import flip_loss.metric as metric_module

    stopped = torch.rand(1, 3, 40, 50, generator=torch.Generator().manual_seed(12))
    real_buckets = metric_module.buckets
    calls = []

    def buckets_then_stop(flat, bins):
        calls.append(1)
        if len(calls) == 2:  # the second block of the map: the first is already folded in
            raise KeyboardInterrupt
        return real_buckets(flat, bins)

    def run(metric, interrupted):
        test = torch.rand(1, 3, 8, 9, generator=torch.Generator().manual_seed(13))
        metric.update(test, test.flip(-1))
        if interrupted:
            monkeypatch.setattr(metric_module, "_CHUNK", 500)  # blocks of 500 pixels
            monkeypatch.setattr(metric_module, "buckets", buckets_then_stop)
            with pytest.raises(KeyboardInterrupt):
                metric.update(stopped, stopped.flip(-1))
            monkeypatch.undo()
        metric.update(test.flip(-2), test)
        return metric.compute()

    got, clean = run(make(), True), run(make(), False)
    assert len(calls) == 2
    assert all(torch.equal(torch.as_tensor(x), torch.as_tensor(y)) for x, y in zip(got, clean))
