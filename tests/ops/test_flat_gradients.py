"""float32 gradients in flat and smooth regions follow float64.

The feature detectors' derivative filters sum to zero. Summed as 2r + 1 plain products, their
float32 response to a constant neighbourhood was a rounding residue of about 1e-7 instead of 0, and
the square root of the feature difference (q_f = 1/2) turned it into a gradient of pure noise: in
the flat half of an image, cosine ~0 with the float64 gradient and ~100x its norm. The filters are
now summed as differences of samples, exactly 0 on constants, in the CPU kernels, the GPU per-thread
code (run here through its host emulator) and the pure-PyTorch oracle.

float64 is the yardstick on the same inputs: every image below holds float32-representable values,
so that the two precisions differ only in how they compute, not in what they are given.
"""

import pytest
import torch

import emulator
from flip_loss import FLIPLoss
from flip_loss import oracle

H, W = 48, 96
PPD = 67.0206451
EPS = 1e-15

cuda_kernels = pytest.mark.skipif(
    not torch._C._dispatch_has_kernel_for_dispatch_key("flip::ldr_flip", "CUDA"), reason="built without CUDA kernels"
)


def _f32_exact(x):
    return x.float().double()


def _colour(*c):
    return torch.tensor(c, dtype=torch.float64).view(1, 3, 1, 1)


def half_flat():
    """sRGB pair: the left half one flat colour in the reference and another in the test (a
    brightness and hue shift), the right half noise in the reference and a noisy copy in the test."""
    g = torch.Generator().manual_seed(1)
    ref = torch.empty(1, 3, H, W, dtype=torch.float64)
    ref[..., : W // 2] = _colour(0.45, 0.55, 0.35)
    ref[..., W // 2 :] = torch.rand(1, 3, H, W // 2, generator=g, dtype=torch.float64)
    test = ref.clone()
    test[..., : W // 2] += _colour(0.03, -0.02, 0.04)
    test[..., W // 2 :] = (
        test[..., W // 2 :] + 0.05 * torch.randn(1, 3, H, W // 2, generator=g, dtype=torch.float64)
    ).clamp(0, 1)
    return _f32_exact(test), _f32_exact(ref)


def smooth_ramp():
    """sRGB pair: a diagonal colour ramp, and the same ramp with less contrast and brighter."""
    x = torch.linspace(0, 1, W, dtype=torch.float64).view(1, 1, 1, W)
    y = torch.linspace(0, 1, H, dtype=torch.float64).view(1, 1, H, 1)
    ref = (0.2 + 0.5 * x + 0.2 * y) * _colour(1.0, 0.9, 0.7)
    return _f32_exact(0.9 * ref + 0.03), _f32_exact(ref)


def half_flat_hdr():
    """Linear HDR pair built like half_flat: flat halves 15 % apart, textured halves 10 % noise."""
    g = torch.Generator().manual_seed(2)
    ref = torch.empty(1, 3, H, W, dtype=torch.float64)
    ref[..., : W // 2] = _colour(0.8, 1.1, 0.5)
    ref[..., W // 2 :] = torch.exp2(4 * torch.rand(1, 3, H, W // 2, generator=g, dtype=torch.float64) - 2)
    test = ref.clone()
    test[..., : W // 2] *= 1.15
    test[..., W // 2 :] *= 1 + 0.1 * torch.randn(1, 3, H, W // 2, generator=g, dtype=torch.float64)
    return _f32_exact(test), _f32_exact(ref.clamp(min=0))


def _autograd(loss):
    def grad(test, ref):
        t = test.detach().clone().requires_grad_()
        loss(t, ref).backward()
        return t.grad

    return grad


def _emulated(test, ref):
    # The GPU formulation's backward (csrc/flip/cuda/tiled_backward.h) of the mean over the map, run
    # on the host.
    g = torch.full((1, 1, H, W), 1.0 / (H * W), dtype=test.dtype)
    return emulator.ops().ldr_flip_backward(g, test, ref, PPD, "srgb", EPS, [True, False])[0]


PATHS = {
    "cpu": _autograd(FLIPLoss(pixels_per_degree=PPD, eps=EPS)),
    "oracle": _autograd(lambda t, r: oracle.ldr_flip(t, r, PPD, "srgb", EPS).mean()),
    "gpu-emulation": _emulated,
}


def _agreement(path, test, ref):
    """float32 and float64 gradients w.r.t. the test image, in float64."""
    grad = PATHS[path] if isinstance(path, str) else path
    return grad(test.float(), ref.float()).double(), grad(test, ref)


def _assert_follows(g32, g64, min_cos=0.99, ratio=(0.5, 2.0)):
    a, b = g32.flatten(), g64.flatten()
    assert b.norm() > 0
    cos = (a @ b / (a.norm() * b.norm())).item()
    r = (a.norm() / b.norm()).item()
    assert cos >= min_cos and ratio[0] <= r <= ratio[1], f"cosine {cos:.4f}, norm ratio {r:.3f}"


@pytest.mark.parametrize("path", PATHS)
def test_float32_gradient_follows_float64_in_flat_half(ops, path):
    g32, g64 = _agreement(path, *half_flat())
    _assert_follows(g32[..., : W // 2], g64[..., : W // 2])
    # The textured half agreed before and still does.
    _assert_follows(g32[..., W // 2 :], g64[..., W // 2 :], min_cos=0.999, ratio=(0.99, 1.01))


@pytest.mark.parametrize("path", PATHS)
def test_float32_gradient_follows_float64_on_smooth_ramp(ops, path):
    g32, g64 = _agreement(path, *smooth_ramp())
    _assert_follows(g32, g64, min_cos=0.999, ratio=(0.99, 1.01))


@pytest.mark.cuda
@cuda_kernels
def test_float32_gradient_follows_float64_in_flat_half_on_cuda(ops):
    # The kernels themselves (CUDA's maths functions included), not their host emulation.
    grad = _autograd(FLIPLoss(pixels_per_degree=PPD, eps=EPS))
    g32, g64 = _agreement(lambda t, r: grad(t.cuda(), r.cuda()).cpu(), *half_flat())
    _assert_follows(g32[..., : W // 2], g64[..., : W // 2])
    _assert_follows(g32[..., W // 2 :], g64[..., W // 2 :], min_cos=0.999, ratio=(0.99, 1.01))


def test_float32_hdr_gradient_follows_float64_in_flat_half(ops):
    # HDR-FLIP runs the same filter banks once per exposure.
    loss = FLIPLoss(pixels_per_degree=PPD, eps=EPS, hdr=True, start_exposure=-2.0, stop_exposure=1.0, num_exposures=4)
    g32, g64 = _agreement(_autograd(loss), *half_flat_hdr())
    _assert_follows(g32[..., : W // 2], g64[..., : W // 2])
    _assert_follows(g32[..., W // 2 :], g64[..., W // 2 :], min_cos=0.999, ratio=(0.99, 1.01))


# ---- grey colours: the chroma difference is rounding noise, and passes no gradient ----


def half_flat_grey():
    """half_flat with grey (R = G = B) colours: flat halves 0.40 and 0.45, textured greyscale halves.
    Grey pixels have Hunt-Lab a = b = 0 in exact arithmetic; computed, they are rounding noise whose
    direction would otherwise decide the chroma term's gradient (docs/algorithm.md §7.11)."""
    g = torch.Generator().manual_seed(4)
    ref = torch.empty(1, 1, H, W, dtype=torch.float64)
    ref[..., : W // 2] = 0.40
    ref[..., W // 2 :] = torch.rand(1, 1, H, W // 2, generator=g, dtype=torch.float64)
    test = ref.clone()
    test[..., : W // 2] = 0.45
    test[..., W // 2 :] = (
        test[..., W // 2 :] + 0.05 * torch.randn(1, 1, H, W // 2, generator=g, dtype=torch.float64)
    ).clamp(0, 1)
    return _f32_exact(test.expand(1, 3, H, W).contiguous()), _f32_exact(ref.expand(1, 3, H, W).contiguous())


@pytest.mark.parametrize("path", PATHS)
def test_float32_gradient_follows_float64_on_grey_images(ops, path):
    g32, g64 = _agreement(path, *half_flat_grey())
    _assert_follows(g32[..., : W // 2], g64[..., : W // 2])
    _assert_follows(g32[..., W // 2 :], g64[..., W // 2 :], min_cos=0.99)


def test_float64_gradient_of_grey_images_is_stable():
    # Without the floor, a 1e-12 change of the reference turned float64's gradient around (cosine 0.4).
    test, ref = half_flat_grey()
    grad = PATHS["cpu"]
    _assert_follows(grad(test, ref + 1e-12), grad(test, ref), min_cos=0.999, ratio=(0.99, 1.01))


def test_chroma_floor_keeps_real_colour_differences():
    # A small but real chroma difference (a faint tint on grey) still gets its gradient.
    test, ref = half_flat_grey()
    tinted = test + _colour(0.004, 0.0, -0.004)
    for path in PATHS:
        g32, g64 = _agreement(path, _f32_exact(tinted), ref)
        _assert_follows(g32[..., : W // 2], g64[..., : W // 2])
        # the tint pulls red and blue apart: their gradients differ in the flat half
        assert (g64[0, 0, :, : W // 2] - g64[0, 2, :, : W // 2]).abs().max() > 1e-6


# ---- the cause: the feature filters' response to a constant image is exactly zero ----

# Constant images smaller than the filter (19 taps at 67 ppd, 75 at 300) and larger ones; each
# batch item holds another constant, a different one in test and reference.
SHAPES = [(1, 1), (2, 3), (5, 1), (7, 20), (24, 40)]
PPDS = [10.0, 20.0, PPD, 300.0]


def _constants(shape, dtype, values):
    return torch.tensor(values, dtype=dtype).view(-1, 1, 1, 1).expand(len(values), 1, *shape).contiguous()


FEATURE_PATHS = {
    "cpu": lambda t, r, ppd, eps: torch.ops.flip.feature_difference(t, r, ppd, eps),
    "oracle": lambda t, r, ppd, eps: oracle.feature_difference(t, r, ppd, eps),
    "gpu-emulation": lambda t, r, ppd, eps: emulator.ops().feature_difference(t, r, ppd, eps),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("ppd", PPDS)
@pytest.mark.parametrize("path", FEATURE_PATHS)
def test_feature_difference_of_constant_images_is_exactly_zero(ops, path, ppd, shape, dtype):
    # With eps = 0 the feature difference is sqrt(max(|d edge|, |d point|) / sqrt 2): exactly 0
    # only if every edge and point response of both images is exactly 0.
    test = _constants(shape, dtype, [0.137, 0.5, 0.862, 0.0731])
    ref = _constants(shape, dtype, [0.9, 0.26, 0.5003, 1.0])
    out = FEATURE_PATHS[path](test, ref, ppd, 0.0)
    assert torch.equal(out, torch.zeros_like(out))


@pytest.mark.cuda
@cuda_kernels
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_feature_difference_of_constant_images_is_exactly_zero_on_cuda(ops, dtype):
    for shape in SHAPES:
        for ppd in PPDS:
            test = _constants(shape, dtype, [0.137, 0.5, 0.862, 0.0731]).cuda()
            ref = _constants(shape, dtype, [0.9, 0.26, 0.5003, 1.0]).cuda()
            out = ops.feature_difference(test, ref, ppd, 0.0)
            assert torch.equal(out, torch.zeros_like(out)), (shape, ppd)


@pytest.mark.parametrize("shape", [(2, 3), (24, 40)], ids=str)
@pytest.mark.parametrize("ppd", [10.0, PPD])
def test_feature_difference_gradient_of_constant_images_is_exactly_zero(ops, ppd, shape):
    # The regularised square root has no slope below eps: no response, no gradient.
    test = _constants(shape, torch.float32, [0.137, 0.862])
    ref = _constants(shape, torch.float32, [0.9, 0.26])
    g = torch.rand(test.shape, generator=torch.Generator().manual_seed(0))
    got = [
        *ops.feature_difference_backward(g, test, ref, ppd, EPS, [True, True]),
        *emulator.ops().feature_difference_backward(g, test, ref, ppd, EPS, [True, True]),
    ]
    t = test.clone().requires_grad_()
    oracle.feature_difference(t, ref, ppd, EPS).backward(g)
    for x in got + [t.grad]:
        assert torch.equal(x, torch.zeros_like(x))


@pytest.mark.parametrize("shape", [(3, 5), (1, 4)], ids=str)
def test_feature_difference_gradcheck_on_images_smaller_than_the_filter(ops, shape):
    # The transposed filters (pair / centred differences plus the clamp-to-edge folds) are the
    # adjoint of the forward also when every sample's window is clamped on both sides: images no
    # larger than the filter radius (5 at 40 ppd).
    g = torch.Generator().manual_seed(3)
    a = (0.1 + 0.8 * torch.rand(2, 1, *shape, generator=g, dtype=torch.float64)).requires_grad_()
    b = (0.1 + 0.8 * torch.rand(2, 1, *shape, generator=g, dtype=torch.float64)).requires_grad_()
    assert torch.autograd.gradcheck(lambda x, y: ops.feature_difference(x, y, 40.0, EPS), (a, b), eps=1e-7, atol=1e-6)


# ---- the colour path needs no such change ----


@pytest.mark.parametrize("path", ["cpu", "oracle", "gpu-emulation"])
def test_csf_filter_of_constant_image_is_spatially_constant(ops, path):
    # The CSF filters are not zero-sum: on a flat region every pixel goes through the same float
    # operations on the same values, so the filtered colour is one value there, and HyAB's
    # sqrt(max(dL^2, eps)) sees no pixel-to-pixel noise to amplify.
    lin = _colour(0.45, 0.55, 0.35).float().expand(1, 3, 13, 37).contiguous()
    opp = oracle.linear_rgb_to_opponent(lin)
    run = {
        "cpu": lambda o: ops.csf_filter(o, PPD),
        "oracle": lambda o: oracle.csf_filter(o, PPD),
        "gpu-emulation": lambda o: emulator.ops().csf_filter(o, PPD),
    }[path]
    out = run(opp)
    assert torch.equal(out, out[..., :1, :1].expand_as(out))
    torch.testing.assert_close(out, lin, rtol=0, atol=1e-6)
