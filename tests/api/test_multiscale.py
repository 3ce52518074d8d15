"""Multi-scale FLIP: a list of pixels-per-degree values (and optional weights) gives the weighted
mean of the maps at each, the same in ldr_flip, hdr_flip, FLIPLoss eager, scripted and compiled;
one value in a list is the single-scale call, bit for bit; every bad list or weight is refused with
the same message on every path. On the CPU the LDR map comes from one op, _ldr_flip_multiscale,
which converts the inputs once for all scales: its map is the loop's, bit for bit (float16 and
bfloat16: the float32 loop's, rounded once), its gradients the loop's to rounding, and it passes
gradcheck and opcheck (tests/ops/test_op_tester.py, with every op)."""

import pytest
import torch

import flip_loss

ops = torch.ops.flip

PPDS = [15.0, 30.0, 67.02]


def images(dtype=torch.float64, shape=(2, 3, 18, 23), seed=0):
    g = torch.Generator().manual_seed(seed)
    a = torch.rand(shape, generator=g, dtype=dtype)
    b = (a + 0.1 * torch.randn(shape, generator=g, dtype=dtype)).clamp(0, 1)
    return a, b


def hdr_images(dtype=torch.float64):
    a, b = images(dtype)
    return a * 4, b * 4


def weighted(maps, weights):
    total = sum(weights)
    out = maps[0] * (weights[0] / total)
    for m, w in zip(maps[1:], weights[1:]):
        out = out + m * (w / total)
    return out


@pytest.mark.parametrize("weights", [None, [1.0, 2.0, 5.0], [0.0, 1.0, 0.0], (3, 3, 3)])
def test_ldr_map_is_the_weighted_mean_of_the_single_scale_maps(weights):
    a, b = images()
    maps = [flip_loss.ldr_flip(a, b, p) for p in PPDS]
    expected = weighted(maps, [1.0] * 3 if weights is None else list(weights))
    got = flip_loss.ldr_flip(a, b, PPDS, ppd_weights=weights)
    assert got.shape == maps[0].shape and got.dtype == torch.float64
    assert (got - expected).abs().max().item() < 1e-15
    assert 0 <= got.min().item() and got.max().item() <= 1


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_one_scale_in_a_list_is_the_single_scale_call_bit_for_bit(dtype):
    a, b = images(dtype)
    single = flip_loss.ldr_flip(a, b, 30.0)
    for value, weights in (([30.0], None), ((30.0,), [7.0]), ([30], [0.5])):
        assert torch.equal(flip_loss.ldr_flip(a, b, value, ppd_weights=weights), single)
    t, r = hdr_images(dtype)
    assert torch.equal(flip_loss.hdr_flip(t, r, [30.0]), flip_loss.hdr_flip(t, r, 30.0))
    module = flip_loss.FLIPLoss(pixels_per_degree=[30.0], reduction="none")
    assert torch.equal(module(a, b), single)
    assert torch.equal(torch.jit.script(module)(a, b), single)


def test_hdr_map_is_the_weighted_mean_with_exposures_shared_by_the_scales():
    t, r = hdr_images()
    for kwargs in ({}, {"start_exposure": -2.0, "stop_exposure": 3.0, "num_exposures": 4}):
        maps = [flip_loss.hdr_flip(t, r, p, **kwargs) for p in PPDS]
        got = flip_loss.hdr_flip(t, r, PPDS, ppd_weights=[1, 0, 3], **kwargs)
        assert (got - weighted(maps, [1, 0, 3])).abs().max().item() < 1e-15


def test_gradients_of_the_multi_scale_loss_in_both_inputs():
    # Inside (0, 1) and with the square roots regularised: away from the kinks, where finite
    # differences hold (docs/algorithm.md §7.4).
    g = torch.Generator().manual_seed(3)
    a = (0.1 + 0.8 * torch.rand(1, 3, 9, 11, generator=g, dtype=torch.float64)).requires_grad_()
    b = (0.1 + 0.8 * torch.rand(1, 3, 9, 11, generator=g, dtype=torch.float64)).requires_grad_()

    def multi(x, y):
        return flip_loss.ldr_flip(x, y, [3.0, 5.0], eps=1e-15, ppd_weights=[1, 2])

    assert torch.autograd.gradcheck(multi, (a, b), eps=1e-7, atol=1e-6)
    # The gradient is the weighted sum of the single-scale gradients.
    ga, gb = torch.autograd.grad(multi(a, b).sum(), (a, b))
    singles = [torch.autograd.grad(flip_loss.ldr_flip(a, b, p, eps=1e-15).sum(), (a, b)) for p in (3.0, 5.0)]
    assert (ga - (singles[0][0] / 3 + singles[1][0] * 2 / 3)).abs().max().item() < 1e-13
    assert (gb - (singles[0][1] / 3 + singles[1][1] * 2 / 3)).abs().max().item() < 1e-13


@pytest.mark.parametrize("hdr", [False, True])
def test_flip_loss_module_eager_scripted_and_compiled_agree(hdr):
    a, b = hdr_images(torch.float32) if hdr else images(torch.float32)
    # Given exposures: automatic ones are computed outside torch.compile's graph (tests/hdr/test_hdr.py).
    exposures = dict(start_exposure=-2.0, stop_exposure=3.0, num_exposures=4) if hdr else {}
    kwargs = dict(hdr=hdr, pixels_per_degree=PPDS, ppd_weights=[2.0, 1.0, 1.0], reduction="per_image")
    module = flip_loss.FLIPLoss(**kwargs, **exposures)
    eager = module(a, b)
    maps = [
        (flip_loss.hdr_flip(a, b, p, **exposures) if hdr else flip_loss.ldr_flip(a, b, p)).mean(dim=(1, 2, 3))
        for p in PPDS
    ]
    assert (eager - weighted(maps, [2.0, 1.0, 1.0])).abs().max().item() < 1e-6
    assert torch.equal(torch.jit.script(module)(a, b), eager)
    # Inductor may fuse the weighted sum (another rounding order).
    assert torch.allclose(torch.compile(module, fullgraph=True)(a, b), eager, rtol=1e-6, atol=0)
    x = a.clone().requires_grad_()
    module(x, b).sum().backward()
    assert torch.isfinite(x.grad).all() and x.grad.abs().sum() > 0


def test_repr_names_the_scales_and_weights():
    text = repr(flip_loss.FLIPLoss(pixels_per_degree=[30, 67.02], ppd_weights=[1, 3]))
    assert "pixels_per_degree=[30.0000, 67.0200], ppd_weights=[1.0, 3.0]" in text


BAD = [
    ({"pixels_per_degree": []}, ValueError, "non-empty list"),
    ({"pixels_per_degree": [30.0, 0.0]}, ValueError, "pixels_per_degree must be a finite number from 0.001"),
    ({"pixels_per_degree": [30.0, float("nan")]}, ValueError, "pixels_per_degree must be a finite number"),
    ({"pixels_per_degree": 30.0, "ppd_weights": [1.0]}, ValueError, "only applies with a list"),
    ({"pixels_per_degree": [30.0, 40.0], "ppd_weights": [1.0]}, ValueError, "2 values, 1 weights"),
    ({"pixels_per_degree": [30.0, 40.0], "ppd_weights": [0.0, 0.0]}, ValueError, "must not all be 0"),
    ({"pixels_per_degree": [30.0, 40.0], "ppd_weights": [1.0, -1.0]}, ValueError, "finite and non-negative"),
    ({"pixels_per_degree": [30.0, 40.0], "ppd_weights": [1.0, float("inf")]}, ValueError, "finite and non-negative"),
    ({"pixels_per_degree": [30.0, True]}, TypeError, "must be a real number"),
    ({"pixels_per_degree": [30.0, "40"]}, TypeError, "must be a real number"),
    ({"pixels_per_degree": [30.0, 40.0], "ppd_weights": 3.0}, TypeError, "ppd_weights must be a list or tuple"),
]


@pytest.mark.parametrize("kwargs, error, message", BAD, ids=[m for _, _, m in BAD])
def test_bad_scales_and_weights_are_refused_everywhere(kwargs, error, message):
    a, b = images(torch.float32)
    t, r = hdr_images(torch.float32)
    for call in (
        lambda: flip_loss.ldr_flip(a, b, **kwargs),
        lambda: flip_loss.hdr_flip(t, r, **kwargs),
        lambda: flip_loss.FLIPLoss(**kwargs),
        lambda: flip_loss.FLIPLoss(hdr=True, **kwargs),
    ):
        with pytest.raises(error, match=message):
            call()


@pytest.mark.parametrize(
    "ppd, weights, message",
    [
        # (An empty list cannot even be assigned: TorchScript cannot type it.)
        ([30.0, 0.0], None, "pixels_per_degree must be a finite number from 0.001"),
        (30.0, [1.0], "only applies with a list"),
        ([30.0, 40.0], [1.0], "2 values, 1 weights"),
        ([30.0, 40.0], [0.0, 0.0], "must not all be 0"),
        ([30.0, 40.0], [-1.0, 1.0], "finite and non-negative"),
    ],
)
def test_a_scripted_loss_checks_scales_and_weights_set_after_construction(ppd, weights, message):
    # The attributes can be changed on the scripted module: its forward checks them as eager does.
    a, b = images(torch.float32)
    scripted = torch.jit.script(flip_loss.FLIPLoss(pixels_per_degree=[30.0, 40.0]))
    scripted.pixels_per_degree = ppd
    scripted.ppd_weights = weights
    with pytest.raises(torch.jit.Error, match=message):
        scripted(a, b)
    eager = flip_loss.FLIPLoss(pixels_per_degree=[30.0, 40.0])
    eager.pixels_per_degree, eager.ppd_weights = ppd, weights
    with pytest.raises(ValueError, match=message):
        eager(a, b)


def test_hdr_exposure_map_needs_one_scale():
    t, r = hdr_images()
    with pytest.raises(ValueError, match="return_exposure_map=True needs one pixels_per_degree"):
        flip_loss.hdr_flip(t, r, [30.0, 40.0], return_exposure_map=True)
    error, emap = flip_loss.hdr_flip(t, r, [30.0], return_exposure_map=True)
    assert torch.equal(error, flip_loss.hdr_flip(t, r, 30.0)) and emap.shape == error.shape


def test_weights_are_normalised_without_overflow():
    a, b = images()
    huge = flip_loss.ldr_flip(a, b, [15.0, 30.0], ppd_weights=[1e308, 1e308])
    assert torch.equal(huge, flip_loss.ldr_flip(a, b, [15.0, 30.0]))


# ---- the CPU op: _ldr_flip_multiscale and its backward ----


def loop(a, b, ppds, weights, space="srgb", eps=1e-15):
    out = ops.ldr_flip(a, b, ppds[0], space, eps) * weights[0]
    for ppd, w in zip(ppds[1:], weights[1:]):
        out = out + ops.ldr_flip(a, b, ppd, space, eps) * w
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("space", ["srgb", "linear"])
@pytest.mark.parametrize("keep", [[False, False], [True, False], [False, True], [True, True]])
def test_the_op_gives_the_loops_map_bit_for_bit(dtype, space, keep):
    a, b = images(dtype, shape=(2, 3, 21, 26))
    weights = [0.25, 0.0, 0.75]
    flip_map, sens = ops._ldr_flip_multiscale(a, b, PPDS, weights, space, 1e-15, keep)
    assert torch.equal(flip_map, loop(a, b, PPDS, weights, space))
    planes = 7 * (int(keep[0]) + int(keep[1]))
    assert list(sens.shape) == ([2, 3 * planes, 21, 26] if planes else [0])


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_images_are_summed_in_float32_and_rounded_once(dtype):
    # The op computes float16/bfloat16 images in float32, as ldr_flip does, and rounds the
    # weighted sum once: the float32 loop's map, rounded (a loop of half-precision calls rounds
    # each scale's map).
    a, b = images(dtype, shape=(2, 3, 21, 26))
    weights = [0.25, 0.35, 0.4]
    flip_map, _ = ops._ldr_flip_multiscale(a, b, PPDS, weights, "srgb", 1e-15, [False, False])
    assert flip_map.dtype == dtype
    assert torch.equal(flip_map, loop(a.float(), b.float(), PPDS, weights).to(dtype))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("space", ["srgb", "linear"])
def test_the_op_gives_the_loops_gradients(dtype, space):
    a, b = images(dtype, shape=(2, 3, 21, 26))
    g = torch.rand(2, 1, 21, 26, generator=torch.Generator().manual_seed(5), dtype=dtype)
    weights = [0.5, 0.2, 0.3]
    for want in ([True, True], [True, False], [False, True]):
        x, y = a.clone().requires_grad_(want[0]), b.clone().requires_grad_(want[1])
        inputs = [t for t, w in zip((x, y), want) if w]
        got = torch.autograd.grad(ops._ldr_flip_multiscale(x, y, PPDS, weights, space, 1e-15, want)[0], inputs, g)
        expected = torch.autograd.grad(loop(x, y, PPDS, weights, space), inputs, g)
        tol = 1e-13 if dtype == torch.float64 else 1e-5
        for p, q in zip(got, expected):
            assert (p - q).abs().max().item() <= tol * q.abs().max().item()


def test_one_gradient_of_two_kept():
    a, b = images(shape=(1, 3, 12, 13))
    x, y = a.clone().requires_grad_(), b.clone().requires_grad_()
    out = ops._ldr_flip_multiscale(x, y, PPDS, [1.0, 1.0, 1.0], "srgb", 1e-15, [True, True])[0]
    (gx,) = torch.autograd.grad(out.sum(), [x])
    (expected,) = torch.autograd.grad(loop(x, y, PPDS, [1.0, 1.0, 1.0]).sum(), [x])
    assert (gx - expected).abs().max().item() < 1e-13


def test_the_op_refuses_to_leave_out_an_input_that_requires_grad():
    a, b = images()
    with pytest.raises(ValueError, match="output_mask must keep the sensitivities of every input that requires grad"):
        ops._ldr_flip_multiscale(a.requires_grad_(), b, PPDS, [1.0] * 3, "srgb", 1e-15, [False, True])
    with torch.no_grad():  # no gradient will be taken: nothing needs keeping
        ops._ldr_flip_multiscale(a, b, PPDS, [1.0] * 3, "srgb", 1e-15, [False, False])


def test_double_backward_of_the_op():
    a, b = images(shape=(1, 3, 4, 5))
    inputs = (0.1 + 0.8 * a).requires_grad_(), 0.1 + 0.8 * b  # away from the clamps' kinks
    assert torch.autograd.gradgradcheck(
        lambda x, y: ops._ldr_flip_multiscale(x, y, PPDS, [1.0] * 3, "srgb", 1e-15, [True, False])[0],
        inputs,
        fast_mode=True,
    )


def test_a_non_finite_input_is_refused_by_the_op_as_by_ldr_flip():
    a, b = images()
    a[0, 1, 3, 4] = float("nan")
    with pytest.raises(RuntimeError) as single:
        ops.ldr_flip(a, b, 30.0, "srgb", 1e-15)
    with pytest.raises(RuntimeError) as multi:
        ops._ldr_flip_multiscale(a, b, PPDS, [1.0] * 3, "srgb", 1e-15, [False, False])
    assert str(multi.value) == str(single.value)


def test_under_autocast_the_multi_scale_loss_is_float32_like_the_single_scale_one():
    a, b = images(torch.bfloat16)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        single = flip_loss.ldr_flip(a, b, 30.0)
        multi = flip_loss.ldr_flip(a, b, [30.0, 67.02])
    assert single.dtype == multi.dtype == torch.float32
    a32, b32 = a.float(), b.float()
    assert torch.equal(multi, loop(a32, b32, [30.0, 67.02], [0.5, 0.5]))


def test_the_meta_device_gives_the_shape():
    a, b = (t.to("meta") for t in images())
    out = flip_loss.ldr_flip(a, b, PPDS)
    assert out.device.type == "meta" and out.shape == (2, 1, 18, 23)


# ---- the documented range and invariants, for every weight list, dtype and scale count ----


def _weight_lists():
    """(ppds, ppd_weights) pairs: equal weights (None and explicit) over 1 to 12 scales, and seeded
    random weights, zeros included, over 2 to 12."""
    g = torch.Generator().manual_seed(11)
    lists = []
    for n in range(1, 13):
        ppds = SCALES[:n]
        lists += [(ppds, None), (ppds, [3.0] * n)]
        if n > 1:
            w = torch.rand(n, generator=g, dtype=torch.float64)
            w[torch.rand(n, generator=g) < 0.2] = 0.0
            w[0] += 0.01  # not all zero
            lists.append((ppds, w.tolist()))
    return lists


# Twelve ppd values at each of which _maximal_pair's map is exactly 1 in float32 and float64 (at
# some others the filtered colours round 1 ulp off and the map is 1 - 1 ulp).
SCALES = [10.0, 11.0, 12.0, 13.0, 14.0, 15.0, 16.0, 18.0, 19.0, 20.0, 21.0, 8.0]
WEIGHT_LISTS = _weight_lists()


def _maximal_pair(dtype, shape=(2, 3, 5, 6)):
    """Uniform green against uniform blue: FLIP's largest colour difference (cmax), no feature
    difference, so every scale's map is exactly 1 at every pixel."""
    green, blue = torch.zeros(shape, dtype=dtype), torch.zeros(shape, dtype=dtype)
    green[:, 1] = 1
    blue[:, 2] = 1
    return green, blue


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_maps_of_one_at_every_scale_stay_within_one_for_every_weight_list(dtype):
    # Ten equal float32 weights (0.1 rounded up) used to sum maps of 1 to 1 + 2^-23, nine or eleven
    # float64 ones to 1 + 2^-52, which FLIPMetric then refused.
    green, blue = _maximal_pair(dtype)
    metric = flip_loss.FLIPMetric()
    for ppds, weights in WEIGHT_LISTS:
        for p in ppds:
            assert torch.all(flip_loss.ldr_flip(green, blue, p, eps=0.0) == 1)
        got = flip_loss.ldr_flip(green, blue, ppds, eps=0.0, ppd_weights=weights)
        assert got.dtype == dtype
        assert got.max().item() <= 1 and got.min().item() >= 1 - 16 * torch.finfo(dtype).eps, (ppds, weights)
        metric.update_error_map(got)
        # The Python sum (CUDA, HDR-FLIP and the oracle's loop) keeps the range alike.
        norm = flip_loss.options.pixels_per_degree_scales(ppds, weights)[1]
        ones = [torch.ones(2, 1, 5, 6, dtype=dtype)] * len(ppds)
        assert flip_loss.functional.weighted_sum(ones, norm).max().item() <= 1, (ppds, weights)
    assert metric.compute().pooled.max <= 1


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_the_op_and_the_python_sum_agree_bit_for_bit_where_the_cap_applies(dtype):
    ppds = SCALES[:10]
    green, blue = _maximal_pair(dtype)
    a, b = images(dtype, shape=(2, 3, 5, 6))
    # Half the batch at the largest error, half ordinary: the cap changes only the former.
    t, r = torch.cat([green[:1], a[:1]]), torch.cat([blue[:1], b[:1]])
    for weights in (None, [1.0] * 9 + [2.0]):
        norm = flip_loss.options.pixels_per_degree_scales(ppds, weights)[1]
        maps = [ops.ldr_flip(t, r, p, "srgb", 0.0) for p in ppds]
        expected = flip_loss.functional.weighted_sum(maps, norm)
        assert torch.equal(ops._ldr_flip_multiscale(t, r, ppds, norm, "srgb", 0.0, [False, False])[0], expected)
        assert torch.equal(flip_loss.ldr_flip(t, r, ppds, eps=0.0, ppd_weights=weights), expected)


def test_the_cap_keeps_the_gradient_of_the_weighted_mean():
    # Where the float32 sum of ten maps of 1 rounds past 1 the cap subtracts the excess as a
    # constant: each map's gradient is still its weight, as the op's backward gives it.
    weights = flip_loss.options.pixels_per_degree_scales([1.0] * 10, None)[1]
    maps = [torch.ones(1, 1, 2, 2, requires_grad=True) for _ in weights]
    total = flip_loss.functional.weighted_sum(maps, weights)
    assert torch.all(total == 1)
    grads = torch.autograd.grad(total.sum(), maps)
    for g, w in zip(grads, weights):
        assert torch.equal(g, torch.full_like(g, torch.tensor(w, dtype=torch.float32).item()))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_identical_images_give_zero_and_the_map_is_symmetric_for_every_weight_list(dtype):
    a, b = images(dtype, shape=(1, 3, 9, 11))
    for ppds, weights in WEIGHT_LISTS:
        zero = flip_loss.ldr_flip(a, a, ppds, eps=0.0, ppd_weights=weights)
        assert torch.all(zero == 0), (ppds, weights)
        ab = flip_loss.ldr_flip(a, b, ppds, ppd_weights=weights)
        assert torch.equal(ab, flip_loss.ldr_flip(b, a, ppds, ppd_weights=weights)), (ppds, weights)
        assert 0 <= ab.min().item() and ab.max().item() <= 1
