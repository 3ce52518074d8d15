"""Rules that every face of the Python API keeps (eager, torch.compile, TorchScript):

* values that cannot be right are refused: error maps outside [0, 1] in the metrics, options
  beyond the limits where the results stop being right (tiny pixels per degree, exposures whose
  2^c is not a float32 number, data ranges of infinite width); at every accepted extreme of every
  option, float32 and float64 give the same map and finite gradients;
* a number is a number: Python, NumPy and 0-dim tensor numbers alike, for every public function;
* a forward call cannot be misread: a 0-dim weight (a pixels per degree passed as NVIDIA's loss
  takes it) is refused with a message saying where pixels per degree goes;
* FLIPLoss takes the per-image exposure tensors that hdr_flip takes, eager, compiled and scripted;
* tensors without values (meta, FakeTensor) and functorch transforms (vmap) work, and no result
  depends on what was called before (the once-per-process out-of-range warning included);
* one rule for FLIPLoss's options set after construction, eager, scripted and compiled alike: the
  attribute holds what was assigned, and the module normalises (names in any case) and checks it
  when it runs, with the constructor's rules.
"""

import io
import math
import warnings

import numpy as np
import pytest
import torch

import flip_loss
from flip_loss import functional, hdr
from flip_loss.constants import (
    DEFAULT_EPS,
    DEFAULT_PPD,
    MAX_EPS,
    MAX_EXPOSURE_STOPS,
    MAX_EXPOSURES,
    MAX_PPD,
    MIN_EXPOSURE_STOPS,
    MIN_PPD,
    TONE_MAPPERS,
)
from flip_loss.modules import weighted_reduce
from flip_loss.pooling import weighted_histogram, weighted_percentile

from range_warnings import range_warnings


def images(shape=(1, 3, 16, 16), seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    a = torch.rand(shape, generator=g, dtype=dtype)
    b = (a + 0.2 * torch.randn(shape, generator=g, dtype=dtype)).clamp(0, 1)
    return a, b


def hdr_images(shape=(1, 3, 16, 16), seed=0):
    """Linear HDR images over 10 stops, each with a black square where the other is not black."""
    a, b = images(shape, seed)
    a, b = torch.exp2(10 * a - 5), torch.exp2(10 * b - 5)
    a[..., 2:5, 2:5] = 0
    b[..., 9:12, 9:12] = 0
    return a, b


# --- values that cannot be right are refused ---


def test_metric_refuses_error_maps_outside_the_unit_range():
    metric = flip_loss.FLIPMetric()
    good = torch.tensor([0.0, 0.25, 1.0, 0.5]).reshape(1, 1, 2, 2)
    for bad in (1e12, -0.5, 1.0 + 1e-6, -1e-30):
        with pytest.raises(ValueError, match=r"outside \[0, 1\]"):
            metric.update_error_map(good.clone().fill_(0.5).index_fill_(3, torch.tensor([1]), bad))
    # Nothing of the refused maps was kept: the result is that of the good map alone, whose
    # extremes 0 and 1 are accepted.
    torch.testing.assert_close(metric.update_error_map(good), torch.tensor([0.4375], dtype=torch.float64))
    result = metric.compute()
    assert result.num_pixels == 4 and result.pooled.mean == 0.4375
    assert (result.pooled.min, result.pooled.max) == (0.0, 1.0)
    assert result.pooled.min <= result.pooled.weighted_median <= result.pooled.max


def test_torchmetrics_metric_refuses_maps_outside_the_unit_range(monkeypatch):
    tm = pytest.importorskip("flip_loss.torchmetrics")
    metric = tm.FLIPTorchMetric()
    a, b = images()
    monkeypatch.setattr(tm, "metric_error_map", lambda *args: torch.full((1, 1, 16, 16), 1e12))
    with pytest.raises(ValueError, match=r"outside \[0, 1\]"):
        metric.update(a, b)
    assert int(metric.count.sum()) == 0


# Every option at the extremes of its accepted range (and at ordinary values), LDR and HDR: the
# float32 map follows the float64 map of the same input values, both in [0, 1], with finite
# gradients. (Near a black region next to a saturated one the map is steep in its inputs and
# float32 rounding moves it by up to ~3e-4: those cases get a looser bound.)
EXTREMES = (
    [("ldr", dict(pixels_per_degree=p), None, 1e-5) for p in (MIN_PPD, 0.5, 8.0, MAX_PPD)]
    + [
        ("ldr", dict(eps=0.0), None, 1e-5),
        ("ldr", dict(eps=MAX_EPS), None, 1e-5),
        ("ldr", dict(input_space="linear"), None, 1e-5),
    ]
    + [("ldr", dict(data_range=d), d, 1e-5) for d in (255, (-1, 1), (1000.1, 1001.1), (0, 1e39), (-1e-30, 1e-30))]
    + [
        ("hdr", dict(start_exposure=s, stop_exposure=e, num_exposures=n), None, tol)
        for s, e, n, tol in (
            (MIN_EXPOSURE_STOPS, MIN_EXPOSURE_STOPS + 1, 2, 1e-5),
            (MAX_EXPOSURE_STOPS - 1, MAX_EXPOSURE_STOPS, 2, 1e-3),
            (MIN_EXPOSURE_STOPS, MAX_EXPOSURE_STOPS, MAX_EXPOSURES, 1e-5),
            (-1, 1, MAX_EXPOSURES, 1e-5),
        )
    ]
    + [("hdr", dict(pixels_per_degree=p), None, 1e-5) for p in (MIN_PPD, MAX_PPD)]
    + [("hdr", dict(eps=0.0), None, 1e-5)]
    + [("hdr", dict(tone_mapper=tm), None, 1e-5) for tm in TONE_MAPPERS]
)


@pytest.mark.parametrize("kind,options,data_range,tol", EXTREMES, ids=[f"{c[0]}-{c[1]}" for c in EXTREMES])
def test_option_extremes_agree_in_float32_and_float64(kind, options, data_range, tol):
    a, b = hdr_images() if kind == "hdr" else images()
    if data_range is not None:
        low, high = (0.0, float(data_range)) if not isinstance(data_range, tuple) else map(float, data_range)
        k = 0.3 if high > 3e38 else 1.0  # values float32 holds
        a, b = ((x.double() * k * (high - low) + low).float() for x in (a, b))
        assert torch.isfinite(a).all() and torch.isfinite(b).all()
    fn = flip_loss.hdr_flip if kind == "hdr" else flip_loss.ldr_flip
    maps = {}
    for dtype in (torch.float32, torch.float64):
        x, y = (t.to(dtype).detach().clone().requires_grad_() for t in (a, b))
        error = fn(x, y, **options)
        error.sum().backward()
        assert torch.isfinite(x.grad).all() and torch.isfinite(y.grad).all(), dtype
        maps[dtype] = error.detach().double()
    assert 0 <= maps[torch.float64].min() and maps[torch.float64].max() <= 1
    torch.testing.assert_close(maps[torch.float32], maps[torch.float64], rtol=0, atol=tol)


def test_black_pixels_stay_black_at_the_largest_exposure():
    # Where a float32 2^c is infinite (c >= 128, refused) the kernels turn black pixels white
    # (0 x inf); at the largest accepted exposure they stay black.
    a, b = hdr_images()
    for dtype in (torch.float32, torch.float64):
        error = flip_loss.hdr_flip(
            a.to(dtype),
            b.to(dtype),
            start_exposure=MAX_EXPOSURE_STOPS - 1,
            stop_exposure=MAX_EXPOSURE_STOPS,
            num_exposures=2,
        )
        # test black, reference saturated white: the largest possible error
        assert error[0, 0, 3, 3] > 0.9, dtype


@pytest.mark.parametrize("ppd", [MIN_PPD * 0.999, 1e-100, 1e-200, 5e-324])
def test_pixels_per_degree_below_the_minimum_is_refused_everywhere(ppd):
    a, b = images()
    for call in (
        lambda: flip_loss.ldr_flip(a, b, pixels_per_degree=ppd),
        lambda: flip_loss.hdr_flip(a, b, pixels_per_degree=ppd),
        lambda: flip_loss.FLIPLoss(pixels_per_degree=ppd),
        lambda: flip_loss.FLIPMetric(pixels_per_degree=ppd),
    ):
        with pytest.raises(ValueError, match="pixels_per_degree must be a finite number from 0.001"):
            call()
    scripted = torch.jit.script(flip_loss.FLIPLoss())
    scripted.pixels_per_degree = ppd
    with pytest.raises(torch.jit.Error, match="pixels_per_degree must be a finite number from 0.001"):
        scripted(a, b)
    # The minimum itself gives finite gradients.
    x = a.clone().requires_grad_()
    flip_loss.FLIPLoss(pixels_per_degree=MIN_PPD)(x, b).backward()
    assert torch.isfinite(x.grad).all()


@pytest.mark.parametrize("bound", ["start_exposure", "stop_exposure"])
@pytest.mark.parametrize("value", [MAX_EXPOSURE_STOPS + 0.5, 200.0, MIN_EXPOSURE_STOPS - 1, 1e30, 1e300])
def test_exposures_beyond_the_float32_powers_of_two_are_refused_everywhere(bound, value):
    t, r = hdr_images()
    other = {"start_exposure": "stop_exposure", "stop_exposure": "start_exposure"}[bound]
    pattern = bound + " must be a finite number from -149 to 127 stops"
    # A number, or a tensor of one value per image (float32 holds all but 1e300); the other bound
    # automatic or given, the count automatic or given.
    for given in (value, torch.tensor([value])) if abs(value) < 3e38 else (value,):
        for extra in ({}, {"num_exposures": 3}, {other: 0.0}, {other: 0.0, "num_exposures": 3}):
            with pytest.raises(ValueError, match=pattern):
                flip_loss.hdr_flip(t, r, **{bound: given}, **extra)
        with pytest.raises(ValueError, match=pattern):
            hdr.exposures_for(r, **{bound: given})
        with pytest.raises(ValueError, match=pattern):
            flip_loss.FLIPLoss(hdr=True, **{bound: given})
    scripted = torch.jit.script(flip_loss.FLIPLoss(hdr=True))
    setattr(scripted, bound, value)
    with pytest.raises(torch.jit.Error, match=pattern):
        scripted(t, r)


def test_a_data_range_of_infinite_width_is_refused():
    # (-1e308, 1e308) has finite bounds, but its width overflows: every value mapped to 0.
    a, b = images()
    for call in (
        lambda: flip_loss.ldr_flip(a, b, data_range=(-1e308, 1e308)),
        lambda: flip_loss.FLIPLoss(data_range=(-1e308, 1e308)),
        lambda: flip_loss.FLIPMetric(data_range=(-1e308, 1e308)),
    ):
        with pytest.raises(ValueError, match="data_range"):
            call()
    scripted = torch.jit.script(flip_loss.FLIPLoss())
    scripted.data_range = (-1e308, 1e308)
    with pytest.raises(torch.jit.Error, match="data_range"):
        scripted(a, b)


def test_float16_images_with_a_wide_data_range():
    # 65535 is infinite in float16; the mapping to [0, 1] runs in float32.
    a, b = images()
    x, y = (a * 60000).half(), (b * 60000).half()
    expected = flip_loss.ldr_flip(x.float() / 65535, y.float() / 65535)
    out = flip_loss.ldr_flip(x, y, data_range=65535)
    assert out.dtype == torch.float16
    torch.testing.assert_close(out.float(), expected, rtol=0, atol=2e-3)
    assert expected.max() > 0.1


# --- numbers are numbers ---

NUMBER_KINDS = [
    lambda v: v,
    np.float64,
    np.float32,
    lambda v: torch.tensor(v),
    lambda v: torch.tensor(v, dtype=torch.float64),
]
COUNT_KINDS = [lambda v: v, float, np.int64, np.int32, lambda v: torch.tensor(v), lambda v: torch.tensor(float(v))]


@pytest.mark.parametrize("kind", range(len(NUMBER_KINDS)))
def test_every_number_argument_takes_python_numpy_and_tensor_numbers(kind):
    number = NUMBER_KINDS[kind]
    # exactly representable values, so that every kind gives the same float
    assert flip_loss.pixels_per_degree(number(0.5), number(0.25), number(1024.0)) == flip_loss.pixels_per_degree(
        0.5, 0.25, 1024
    )
    v = np.linspace(0, 1, 37, dtype=np.float32)
    assert weighted_percentile(v, number(0.5)) == weighted_percentile(v, 0.5)
    a, b = images()
    expected = flip_loss.ldr_flip(a, b, pixels_per_degree=32.0, eps=0.0, data_range=(-1.0, 2.0))
    got = flip_loss.ldr_flip(
        a, b, pixels_per_degree=number(32.0), eps=number(0.0), data_range=(number(-1.0), number(2.0))
    )
    torch.testing.assert_close(got, expected, rtol=0, atol=0)
    metric = flip_loss.FLIPMetric(pixels_per_degree=number(32.0), data_range=number(2.0))
    assert metric.pixels_per_degree == 32.0 and metric.data_range == (0.0, 2.0)
    t, r = hdr_images()
    torch.testing.assert_close(
        flip_loss.hdr_flip(t, r, start_exposure=number(-2.0), stop_exposure=number(3.0)),
        flip_loss.hdr_flip(t, r, start_exposure=-2.0, stop_exposure=3.0),
        rtol=0,
        atol=0,
    )
    loss = flip_loss.FLIPLoss(hdr=True, start_exposure=number(-2.0), stop_exposure=number(3.0))
    assert (loss.start_exposure, loss.stop_exposure) == (-2.0, 3.0)


@pytest.mark.parametrize("kind", range(len(COUNT_KINDS)))
def test_every_count_argument_takes_whole_numbers_of_any_kind(kind):
    count = COUNT_KINDS[kind]
    v = np.linspace(0, 1, 37, dtype=np.float32)
    for got, want in zip(weighted_histogram(v, bins=count(10)), weighted_histogram(v, bins=10)):
        np.testing.assert_array_equal(got, want)
    assert flip_loss.FLIPMetric(bins=count(64)).bins == 64
    t, r = hdr_images()
    torch.testing.assert_close(
        flip_loss.hdr_flip(t, r, num_exposures=count(3)), flip_loss.hdr_flip(t, r, num_exposures=3), rtol=0, atol=0
    )
    assert flip_loss.FLIPLoss(hdr=True, num_exposures=count(3)).num_exposures == 3


@pytest.mark.parametrize(
    "bad,exc",
    [(True, TypeError), ("1", TypeError), (None, TypeError), (torch.tensor([1.0]), TypeError), (2.5, ValueError)],
)
def test_numbers_of_the_wrong_kind_are_refused(bad, exc):
    v = np.linspace(0, 1, 37, dtype=np.float32)
    with pytest.raises(exc, match="bins"):
        weighted_histogram(v, bins=bad)
    if bad != 2.5:
        with pytest.raises(TypeError, match="p must be a real number"):
            weighted_percentile(v, bad)
        # True is not a distance of 1 m
        with pytest.raises(TypeError, match="distance_m"):
            flip_loss.pixels_per_degree(bad, 0.5, 1000)


# --- a forward call cannot be misread ---


def test_a_zero_dim_weight_is_refused_with_where_pixels_per_degree_goes():
    # NVIDIA's loss takes pixels per degree as the third argument of its call; here that is the
    # weight, and a 0-dim weight would silently give the loss at the default ppd.
    a, b = images((2, 3, 16, 16))
    ppd = torch.tensor(30.0)
    where = r"FLIPLoss\(pixels_per_degree=\.\.\.\)"
    for reduction in ("mean", "sum", "per_image", "none"):
        loss = flip_loss.FLIPLoss(reduction=reduction)
        with pytest.raises(ValueError, match="0-dim tensor.*" + where):
            loss(a, b, ppd)
        with pytest.raises(ValueError, match="0-dim tensor.*" + where):
            weighted_reduce(flip_loss.ldr_flip(a, b), ppd, reduction)
    with pytest.raises(TypeError, match="got float.*" + where):
        flip_loss.FLIPLoss()(a, b, 30.0)
    with pytest.raises(torch.jit.Error, match="0-dim tensor.*" + where):
        torch.jit.script(flip_loss.FLIPLoss())(a, b, ppd)
    torch._dynamo.reset()
    with pytest.raises(ValueError, match="0-dim tensor.*" + where):
        torch.compile(flip_loss.FLIPLoss(), backend="aot_eager")(a, b, ppd)
    torch._dynamo.reset()
    with pytest.raises(Exception) as raised:
        torch.compile(flip_loss.FLIPLoss(), backend="aot_eager", fullgraph=True)(a, b, ppd)
    assert "FLIPLoss(pixels_per_degree=...)" in str(raised.value) + str(raised.value.__cause__)
    # The ppd goes to the constructor; weights that are maps still work.
    expected = flip_loss.ldr_flip(a, b, pixels_per_degree=30.0).mean()
    torch.testing.assert_close(flip_loss.FLIPLoss(pixels_per_degree=ppd)(a, b), expected)
    for shape in ((2, 1, 16, 16), (16, 16), (2, 1, 1, 1), (1,)):
        torch.testing.assert_close(flip_loss.FLIPLoss(pixels_per_degree=30.0)(a, b, torch.ones(shape)), expected)


# --- FLIPLoss takes what hdr_flip takes ---

PER_IMAGE = [
    dict(start_exposure=torch.tensor([-6.0, -2.0, -1.0])),
    dict(stop_exposure=torch.tensor([1.0, 2.0, 3.0])),
    dict(num_exposures=torch.tensor([2, 5, 7])),
    dict(
        start_exposure=torch.tensor([-3.0, -1.0, 0.5]),
        stop_exposure=torch.tensor([1.0, 2.0, 3.0]),
        num_exposures=torch.tensor([3, 4, 6]),
    ),
    dict(start_exposure=-2.0, stop_exposure=torch.tensor([1.0, 2.0, 3.0])),
]


@pytest.mark.parametrize("given", PER_IMAGE, ids=["start", "stop", "num", "all", "mixed"])
def test_flip_loss_takes_the_exposure_tensors_hdr_flip_takes(given):
    t, r = hdr_images((3, 3, 16, 16), seed=3)
    expected = flip_loss.hdr_flip(t, r, **given).flatten(1).mean(1)
    automatic = flip_loss.hdr_flip(t, r).flatten(1).mean(1)
    assert (expected - automatic).abs().max() > 1e-4  # the given exposures matter
    loss = flip_loss.FLIPLoss(hdr=True, reduction="per_image", **given)
    torch.testing.assert_close(loss(t, r), expected, rtol=0, atol=0)
    scripted = torch.jit.script(loss)
    torch.testing.assert_close(scripted(t, r), expected, rtol=0, atol=0)
    buffer = io.BytesIO()
    torch.jit.save(scripted, buffer)
    buffer.seek(0)
    torch.testing.assert_close(torch.jit.load(buffer)(t, r), expected, rtol=0, atol=0)
    torch._dynamo.reset()
    torch.testing.assert_close(torch.compile(loss, backend="aot_eager")(t, r), expected, rtol=0, atol=0)


def test_flip_loss_checks_exposure_tensors_as_hdr_flip_does():
    t, r = hdr_images((3, 3, 16, 16), seed=4)
    with pytest.raises(ValueError, match="must be finite"):
        flip_loss.FLIPLoss(hdr=True, start_exposure=torch.tensor([0.0, math.nan, 1.0]))
    with pytest.raises(TypeError, match="real numbers"):
        flip_loss.FLIPLoss(hdr=True, stop_exposure=torch.tensor([True, False]))
    with pytest.raises(ValueError, match="whole number"):
        flip_loss.FLIPLoss(hdr=True, num_exposures=torch.tensor([2.0, 2.5]))
    with pytest.raises(ValueError, match=r"must not exceed stop_exposure 0.0 \(image 1\)"):
        flip_loss.FLIPLoss(hdr=True, start_exposure=torch.tensor([-1.0, 1.0]), stop_exposure=torch.tensor([2.0, 0.0]))
    wrong_size = flip_loss.FLIPLoss(hdr=True, start_exposure=torch.tensor([-1.0, 1.0]))
    for call in (lambda: wrong_size(t, r), lambda: flip_loss.hdr_flip(t, r, start_exposure=torch.tensor([-1.0, 1.0]))):
        with pytest.raises(ValueError, match=r"one value per image \(3\)"):
            call()
    with pytest.raises(torch.jit.Error, match=r"one value per image \(3\)"):
        torch.jit.script(wrong_size)(t, r)
    # An attribute changed after scripting, to a tensor, is checked when used.
    scripted = torch.jit.script(flip_loss.FLIPLoss(hdr=True))
    scripted.start_exposure = torch.tensor([-3.0, 50.0, 0.5])
    with pytest.raises(torch.jit.Error, match=r"must not exceed stop_exposure.*\(image 1\)"):
        scripted(t, r)


# --- tensors without values, functorch transforms: no result depends on earlier calls ---


def test_meta_tensors_give_meta_results_and_use_up_nothing(fresh_warning):
    m = torch.empty(2, 3, 16, 16, device="meta")
    w = torch.empty(2, 1, 16, 16, device="meta")
    for out, shape in (
        (flip_loss.ldr_flip(m, m), (2, 1, 16, 16)),
        (flip_loss.ldr_flip(m[0], m[0]), (1, 16, 16)),
        (flip_loss.ldr_flip(m, m, data_range=255), (2, 1, 16, 16)),
        (flip_loss.FLIPLoss()(m, m), ()),
        (flip_loss.FLIPLoss()(m, m, w), ()),
        (flip_loss.FLIPLoss(reduction="per_image")(m, m, w), (2,)),
        (flip_loss.FLIPLoss(reduction="none")(m, m, w), (2, 1, 16, 16)),
        (flip_loss.hdr_flip(m, m), (2, 1, 16, 16)),
        (flip_loss.hdr_flip(m, m, start_exposure=-1.0, stop_exposure=1.0, num_exposures=3), (2, 1, 16, 16)),
        (flip_loss.hdr_flip(m, m, num_exposures=torch.tensor([3, 4], device="meta")), (2, 1, 16, 16)),
        (flip_loss.FLIPLoss(hdr=True, reduction="per_image")(m, m), (2,)),
        (flip_loss.exposure_range(m)[0], (2,)),
    ):
        assert out.device.type == "meta" and tuple(out.shape) == shape
    # ... and the out-of-range warning is still to come, on the first call with values.
    a, b = images()
    assert len(range_warnings(lambda: flip_loss.ldr_flip(a * 255, b * 255))) == 1


def test_fake_tensors_give_fake_results(fresh_warning):
    from torch._subclasses.fake_tensor import FakeTensorMode

    a, b = images((2, 3, 16, 16))
    x, y, w, counts = a * 255, b * 255, torch.ones(2, 1, 16, 16), torch.tensor([3, 4])
    with FakeTensorMode() as mode:
        fx, fy, fw, fc = (mode.from_tensor(v) for v in (x, y, w, counts))
        assert flip_loss.ldr_flip(fx, fy).shape == (2, 1, 16, 16)
        assert flip_loss.FLIPLoss(reduction="per_image")(fx, fy, fw).shape == (2,)
        assert flip_loss.hdr_flip(fx, fy).shape == (2, 1, 16, 16)
        assert flip_loss.hdr_flip(fx, fy, num_exposures=fc).shape == (2, 1, 16, 16)
    assert len(range_warnings(lambda: flip_loss.ldr_flip(x, y))) == 1


def test_vmap_gives_the_per_example_results_whatever_came_before(fresh_warning):
    a, b = images((3, 3, 16, 16), seed=5)
    t, r = hdr_images((3, 3, 16, 16), seed=6)
    w = torch.rand(3, 1, 16, 16, generator=torch.Generator().manual_seed(7)) + 0.1
    per_example = {
        "ldr": (
            lambda: torch.func.vmap(flip_loss.ldr_flip)(a, b),
            torch.stack([flip_loss.ldr_flip(a[i], b[i]) for i in range(3)]),
        ),
        "hdr": (
            lambda: torch.func.vmap(flip_loss.hdr_flip)(t, r),
            torch.stack([flip_loss.hdr_flip(t[i], r[i]) for i in range(3)]),
        ),
        "start": (
            lambda: torch.func.vmap(lambda x, y, s: flip_loss.hdr_flip(x, y, start_exposure=s))(
                t, r, torch.tensor([-6.0, -4.0, -2.0])
            ),
            torch.stack([flip_loss.hdr_flip(t[i], r[i], start_exposure=s) for i, s in enumerate([-6.0, -4.0, -2.0])]),
        ),
    }
    for reduction in ("mean", "per_image", "sum", "none"):
        loss = flip_loss.FLIPLoss(reduction=reduction)
        per_example[reduction] = (
            lambda loss=loss: torch.func.vmap(loss)(a, b, w),
            torch.stack([loss(a[i], b[i], w[i]) for i in range(3)]),
        )
    # First with the out-of-range warning still to come, then after it has been shown.
    functional._out_of_range_warned = False
    for state in ("before the warning", "after the warning"):
        for name, (vmapped, expected) in per_example.items():
            torch.testing.assert_close(vmapped(), expected, rtol=0, atol=0, msg=f"{name}, {state}")
        if state == "before the warning":
            shown = range_warnings(lambda: torch.func.vmap(flip_loss.ldr_flip)(a * 255, b * 255))
            assert len(shown) == 1 and f"from {min(a.min(), b.min()) * 255:.4g}" in shown[0]


def test_vmapped_checks_cover_every_example():
    a, b = images((3, 3, 16, 16), seed=8)
    t, r = hdr_images((3, 3, 16, 16), seed=9)
    w = torch.ones(3, 1, 16, 16)
    negative, empty = w.clone(), w.clone()
    negative[2, 0, 5, 5] = -1
    empty[1] = 0
    with pytest.raises(ValueError, match="non-negative"):
        torch.func.vmap(flip_loss.FLIPLoss())(a, b, negative)
    with pytest.raises(ValueError, match="sum to zero"):
        torch.func.vmap(flip_loss.FLIPLoss())(a, b, empty)
    # "sum" accepts an example without weight: its sum is 0.
    sums = torch.func.vmap(flip_loss.FLIPLoss(reduction="sum"))(a, b, empty)
    assert sums[1] == 0 and sums[0] > 0 and sums[2] > 0
    with pytest.raises(ValueError, match=r"start_exposure 5.0 must not exceed stop_exposure 2.0 \(image 1\)"):
        torch.func.vmap(lambda x, y, s: flip_loss.hdr_flip(x, y, start_exposure=s, stop_exposure=2.0))(
            t, r, torch.tensor([-3.0, 5.0, -1.0])
        )
    bad = r.clone()
    bad[2, 0, 1, 1] = math.nan
    with pytest.raises(ValueError, match="image 2 is undefined"):
        torch.func.vmap(flip_loss.hdr_flip)(t, bad)


# --- options set after construction: one rule on every path -------------------------------------------


def _option_inputs(kind):
    g = torch.Generator().manual_seed(40)
    if kind == "hdr":
        ref = torch.exp2(4 * torch.rand(1, 3, 12, 12, generator=g) - 2)
        return ref * 1.1, ref
    ref = torch.rand(1, 4 if kind == "rgba" else 3, 12, 12, generator=g)
    test = (ref + 0.1 * torch.randn(ref.shape, generator=g)).clamp(0, 1)
    if kind == "rgba":
        test[:, 3] = ref[:, 3]
    if kind == "ldr255":
        return test * 255, ref * 255
    return test, ref


# option: (constructor options, inputs, a valid value in another spelling than the constructor's,
# the constructor options it stands for, an invalid value, the message).
SETTABLE = {
    "pixels_per_degree": ({}, "ldr", [30.0], {"pixels_per_degree": 30.0}, -1.0, "pixels_per_degree must be"),
    "ppd_weights": (
        {"pixels_per_degree": [30.0, 40.0]},
        "ldr",
        [2.0, 6.0],
        {"pixels_per_degree": [30.0, 40.0], "ppd_weights": [1.0, 3.0]},
        [-1.0, 1.0],
        "ppd_weights must be finite and non-negative",
    ),
    "input_space": ({}, "ldr", "LINEAR", {"input_space": "linear"}, "rgb", "input_space must be one of"),
    "reduction": ({}, "ldr", "per_image", {"reduction": "per_image"}, "SUM", "reduction must be one of"),
    "eps": ({}, "ldr", -0.0, {"eps": 0.0}, -1.0, "eps must be a finite number from 0 to"),
    "data_range": ({}, "ldr255", (0.0, 255.0), {"data_range": 255}, (1.0, 0.0), "data_range must be finite"),
    "tone_mapper": (
        {"hdr": True},
        "hdr",
        "HaBlE",
        {"hdr": True, "tone_mapper": "hable"},
        "filmic",
        "tone_mapper must be one of",
    ),
    "start_exposure": (
        {"hdr": True},
        "hdr",
        torch.tensor([-2.0]),
        {"hdr": True, "start_exposure": -2.0},
        math.nan,
        "start_exposure must be a finite number",
    ),
    "stop_exposure": (
        {"hdr": True},
        "hdr",
        torch.tensor([2.0]),
        {"hdr": True, "stop_exposure": 2.0},
        math.inf,
        "stop_exposure must be a finite number",
    ),
    "num_exposures": (
        {"hdr": True},
        "hdr",
        torch.tensor([3]),
        {"hdr": True, "num_exposures": 3},
        1,
        "num_exposures must be",
    ),
    "alpha": (
        {"alpha": "straight"},
        "rgba",
        "PreMultiplied",
        {"alpha": "premultiplied"},
        "sideways",
        "alpha must be",
    ),
    "background": (
        {"alpha": "straight"},
        "rgba",
        "White",
        {"alpha": "straight", "background": "white"},
        "grey",
        "background must be",
    ),
    "hdr": ({}, "hdr", True, {"hdr": True}, None, None),  # a bool: nothing to misspell, see below
}
PATHS = ("eager", "scripted", "compiled")


def _on_path(module, path):
    if path == "scripted":
        return torch.jit.script(module)
    if path == "compiled":
        torch._dynamo.reset()
        return torch.compile(module, backend="eager")
    return module


def _same(a, b):
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and torch.equal(a, b)
    return a == b and type(a) is type(b)


def test_every_option_of_flip_loss_is_in_the_table():
    loss = flip_loss.FLIPLoss()
    settable = set(flip_loss.FLIPLoss.__annotations__) - {"exposure_anchors"}
    assert settable == set(SETTABLE)
    assert all(hasattr(loss, name) for name in settable)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("name", list(SETTABLE))
def test_an_option_set_after_construction_holds_the_value_and_runs_as_the_constructors(name, path):
    options, kind, value, canonical, _, _ = SETTABLE[name]
    test, reference = _option_inputs(kind)
    module = _on_path(flip_loss.FLIPLoss(**options), path)
    setattr(module, name, value)
    # The attribute holds what was assigned (scripted too: one value whatever the path) ...
    assert _same(getattr(module, name), value)
    # ... and the module runs as one built with the value in the constructor's spelling.
    want = flip_loss.FLIPLoss(**canonical)(test, reference)
    torch.testing.assert_close(module(test, reference), want, rtol=1e-6, atol=1e-7)
    assert _same(getattr(module, name), value)


@pytest.mark.parametrize("name", [n for n, row in SETTABLE.items() if row[4] is not None])
def test_an_invalid_option_set_after_construction_is_refused_alike_on_every_path(name):
    options, kind, _, _, bad, message = SETTABLE[name]
    test, reference = _option_inputs(kind)
    refused = {}
    for path in PATHS:
        module = _on_path(flip_loss.FLIPLoss(**options), path)
        setattr(module, name, bad)
        with pytest.raises(Exception) as info:
            module(test, reference)
        refused[path] = info.value
        assert message in str(info.value), (path, str(info.value))
    # The same class: TorchScript carries the Python exception's class in its torch.jit.Error.
    assert type(refused["eager"]) is type(refused["compiled"]) is ValueError
    assert str(refused["eager"]) == str(refused["compiled"])
    assert isinstance(refused["scripted"], torch.jit.Error)
    assert "builtins.ValueError: flip_loss: " + message in str(refused["scripted"])


def test_an_option_of_the_wrong_type_is_refused_on_every_path():
    """A value of the wrong type: eager and compiled refuse it when the module runs (hdr="no" would
    otherwise switch HDR-FLIP on), TorchScript when it is assigned (the attribute's type)."""
    test, reference = _option_inputs("ldr")
    for path in ("eager", "compiled"):
        module = _on_path(flip_loss.FLIPLoss(), path)
        module.hdr = "no"
        with pytest.raises(TypeError, match="hdr must be True or False, got no"):
            module(test, reference)
        module.tone_mapper = 5
        module.hdr = True
        with pytest.raises(TypeError, match="tone_mapper must be a string"):
            module(*_option_inputs("hdr"))
    scripted = torch.jit.script(flip_loss.FLIPLoss())
    for name, value in (("hdr", "no"), ("tone_mapper", 5)):
        with pytest.raises(RuntimeError, match=f"Could not cast attribute '{name}'"):
            setattr(scripted, name, value)


# Options that are wrong only together: the constructor's options, what is set after it, what it
# refuses; the scripted module takes a data_range as its attribute's type, a (low, high) pair.
ONE_MODE_OPTIONS = [
    ({}, "tone_mapper", "hable", "the HDR-FLIP options tone_mapper apply only with hdr=True"),
    ({"hdr": True}, "data_range", (0.0, 2.0), "data_range only applies to LDR-FLIP"),
    ({"data_range": 2}, "hdr", True, "data_range only applies to LDR-FLIP"),
    ({"hdr": True, "tone_mapper": "reinhard"}, "hdr", False, "options tone_mapper apply only with hdr=True"),
    ({"hdr": True, "num_exposures": 3}, "hdr", False, "options num_exposures apply only with hdr=True"),
    ({}, "start_exposure", -1.0, "options start_exposure apply only with hdr=True"),
]


@pytest.mark.parametrize("built, name, value, message", ONE_MODE_OPTIONS)
def test_options_wrong_only_together_are_refused_on_every_path(built, name, value, message):
    """An option of one mode set on a loss of the other (tone_mapper on LDR-FLIP, data_range on
    HDR-FLIP, hdr switched under a data_range or exposures) is refused when the loss runs, eager,
    scripted and compiled, as the constructor refuses it (before: the option was silently ignored)."""
    test, reference = _option_inputs("ldr")  # images in [0, 1]: valid input of either mode
    for path in PATHS:
        module = _on_path(flip_loss.FLIPLoss(**built), path)
        setattr(module, name, value)
        with pytest.raises(Exception, match=message) as info:
            module(test, reference)
        assert isinstance(info.value, torch.jit.Error if path == "scripted" else ValueError), path
    with pytest.raises(ValueError, match=message):
        flip_loss.FLIPLoss(**{**built, name: value})


def test_an_option_the_mode_leaves_unused_is_still_checked_on_every_path():
    """input_space, which HDR-FLIP does not use, is checked on an HDR loss as the constructor
    checks it (FLIPLoss(hdr=True, input_space="rgb") raises), on every path (before: eager and
    compiled ran, the bad value kept, and only the scripted module refused it); a reduction of the
    wrong type gets the constructor's TypeError, not a str concatenation's."""
    test, reference = _option_inputs("hdr")
    for path in PATHS:
        module = _on_path(flip_loss.FLIPLoss(hdr=True), path)
        module.input_space = "rgb"
        with pytest.raises(Exception, match="input_space must be one of") as info:
            module(test, reference)
        assert isinstance(info.value, torch.jit.Error if path == "scripted" else ValueError), path
    with pytest.raises(ValueError, match="input_space must be one of"):
        flip_loss.FLIPLoss(hdr=True, input_space="rgb")
    for path in ("eager", "compiled"):
        module = _on_path(flip_loss.FLIPLoss(), path)
        module.reduction = None
        with pytest.raises(TypeError, match="flip_loss: reduction must be a string, got NoneType"):
            module(*_option_inputs("ldr"))


def test_hdr_takes_only_true_or_false_in_the_constructor_too():
    for value in ("no", 1, None):
        with pytest.raises(TypeError, match="hdr must be True or False"):
            flip_loss.FLIPLoss(hdr=value)
    assert flip_loss.FLIPLoss(hdr=np.True_).hdr is True


NVIDIA_SETTABLE = [
    # (class, option, a valid value in another spelling, the constructor options it stands for,
    # an invalid value, the message)
    ("LDRFLIPLoss", "eps", -0.0, {"eps": 0.0}, -1.0, "eps must be a finite number from 0 to"),
    ("HDRFLIPLoss", "eps", -0.0, {"eps": 0.0}, 1.0, "eps must be a finite number from 0 to"),
    ("HDRFLIPLoss", "median", "UPPER", {"median": "upper"}, "middle", "median must be one of"),
    ("HDRFLIPLoss", "max_value", 2, {"max_value": 2.0}, -1.0, "max_value must be a positive finite number"),
]


@pytest.mark.parametrize("path", ["eager", "compiled"])
@pytest.mark.parametrize("cls, name, value, canonical, bad, message", NVIDIA_SETTABLE)
def test_nvidia_losses_check_options_set_after_construction(cls, name, value, canonical, bad, message, path):
    """NVIDIA's loss modules check an option set after construction by the constructor's rules, at
    the assignment (their options are properties, as NVIDIA's attributes are plain attributes): the
    value is normalised, a bad one is refused and leaves the option as it was (before: a max_value
    of -1 set on an HDRFLIPLoss clamped every value away and returned a number)."""
    make = getattr(flip_loss, cls)
    test, reference = _option_inputs("hdr" if cls == "HDRFLIPLoss" else "ldr")
    module = _on_path(make(), path)
    setattr(module, name, value)
    assert _same(getattr(module, name), canonical[name])
    torch.testing.assert_close(module(test, reference), make(**canonical)(test, reference), rtol=1e-6, atol=1e-7)
    with pytest.raises(ValueError, match=message):
        setattr(module, name, bad)
    assert _same(getattr(module, name), canonical[name])
    torch.testing.assert_close(module(test, reference), make(**canonical)(test, reference), rtol=1e-6, atol=1e-7)


def test_non_finite_inputs_the_rule_on_every_device(ops, fresh_warning):
    # One rule per device, the same on every path and every call (docs/algorithm.md §7.12): the CPU
    # kernels refuse NaN/Inf inputs; a GPU's pass them through (refusing there would synchronise
    # the host on every call), the map NaN around them. The look at device inputs, which reads
    # their extremes back on some calls only, warns (once per process) instead of refusing, so that
    # no call's outcome depends on the calls before it.
    x = torch.rand(1, 3, 8, 8)
    nan = x.clone()
    nan[0, 1, 2, 3] = float("nan")
    for _ in range(2):  # every call
        with pytest.raises(RuntimeError, match="flip::ldr_flip: an input contains NaN or infinite values"):
            ops.ldr_flip(nan, x, 67.0, "srgb", 1e-15)
    bad_ranges = ((float("nan"), float("nan")), (0.0, float("inf")), (float("-inf"), 1.0))
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        for lo, hi in bad_ranges:
            assert functional.warn_non_finite_on_device(lo, hi, "cuda")
            assert not functional.warn_non_finite_on_device(lo, hi, "cpu")  # the CPU kernels refuse them
        assert not functional.warn_non_finite_on_device(-5.0, 300.0, "cuda")  # out of range: the other warning
    assert len(seen) == 1 and "inputs on cuda hold NaN or infinite values" in str(seen[0].message)
    assert "the map, and a loss over it, is NaN around them" in str(seen[0].message)


@pytest.mark.skipif(
    "cuda" not in flip_loss._ops.KERNEL_DEVICES["ldr_flip"],
    reason="this build has no CUDA kernels (flip_loss._C_cuda); the oracle, which CUDA tensors then "
    "get, reads values and so cannot run on fake tensors",
)
def test_fake_cuda_inputs_are_not_refused(ops):
    # Fake CUDA tensors (torch.compile's tracing, shape propagation) have no values to look at:
    # nothing is refused, and the map's shape comes back.
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        test = torch.full((2, 3, 8, 8), float("nan"), device="cuda")
        ref = torch.zeros(2, 3, 8, 8, device="cuda")
        out = flip_loss.ldr_flip(test, ref)
    assert out.shape == (2, 1, 8, 8) and out.device.type == "cuda"


@pytest.mark.parametrize("value", [float("inf"), float("-inf")])
@pytest.mark.parametrize("api", ["ldr_flip", "FLIPLoss", "FLIPMetric"])
def test_a_refused_infinite_input_leaves_the_out_of_range_warning_unused(api, value, fresh_warning):
    # An infinite CPU input is refused by the kernels; it is no range to advise on, so the call
    # shows no "far outside [0, 1]" warning and does not use up the once-per-process one: the next
    # call with 0-255 values still gets it, with its advice.
    def run(test, ref):
        if api == "ldr_flip":
            return flip_loss.ldr_flip(test, ref)
        if api == "FLIPLoss":
            return flip_loss.FLIPLoss()(test, ref)
        metric = flip_loss.FLIPMetric()
        metric.update(test, ref)
        return metric.compute()

    x = torch.rand(1, 3, 8, 8)
    bad = x.clone()
    bad[0, 2, 1, 1] = value
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with pytest.raises(RuntimeError, match="flip::ldr_flip: an input contains NaN or infinite values"):
            run(bad, x)
        assert [str(w.message) for w in seen] == []
        run(x * 255, x.flip(-1) * 255)
    assert len(seen) == 1 and "If these are 0-255 images, pass data_range=255." in str(seen[0].message)


@pytest.mark.cuda
def test_non_finite_cuda_inputs_give_nan_on_every_path_and_call(fresh_warning):
    # The first eager call (the look: a warning), a later one, FLIPLoss's first call, the raw op,
    # TorchScript and torch.compile: the same NaN map, never an error.
    x = torch.rand(1, 3, 16, 16, device="cuda")
    nan = x.clone()
    nan[0, 1, 8, 8] = float("nan")
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        maps = [flip_loss.ldr_flip(nan, x), flip_loss.ldr_flip(nan, x)]
        maps.append(flip_loss.FLIPLoss(reduction="none")(nan, x))
    assert len(seen) == 1 and "NaN or infinite" in str(seen[0].message)
    maps.append(torch.ops.flip.ldr_flip(nan, x, DEFAULT_PPD, "srgb", DEFAULT_EPS))
    maps.append(torch.jit.script(flip_loss.FLIPLoss(reduction="none"))(nan, x))
    maps.append(torch.compile(flip_loss.ldr_flip, backend="aot_eager")(nan, x))
    assert bool(maps[0][0, 0, 8, 8].isnan())
    for m in maps[1:]:
        torch.testing.assert_close(m, maps[0], equal_nan=True)
