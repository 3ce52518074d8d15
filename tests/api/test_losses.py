"""FLIPLoss reductions with per-pixel weights / masks: values, errors, gradients, TorchScript."""

import pytest
import torch
from torch.autograd import gradcheck

import flip_loss
from flip_loss.modules import weighted_reduce

PPD_SMALL = 4.0  # small filter radii keep gradcheck quick


def images(shape=(2, 3, 10, 12), seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    a = torch.rand(shape, generator=g, dtype=dtype)
    b = (a + 0.15 * torch.randn(shape, generator=g, dtype=dtype)).clamp(0, 1)
    return a, b


def weights(shape, seed=1, dtype=torch.float32):
    return torch.rand(shape, generator=torch.Generator().manual_seed(seed), dtype=dtype) + 0.05


@pytest.fixture(scope="module")
def case():
    a, b = images()
    return a, b, flip_loss.ldr_flip(a, b)


def test_unweighted_reductions(case):
    a, b, e = case
    torch.testing.assert_close(flip_loss.FLIPLoss()(a, b), e.mean())
    torch.testing.assert_close(flip_loss.FLIPLoss(reduction="sum")(a, b), e.sum())
    torch.testing.assert_close(flip_loss.FLIPLoss(reduction="none")(a, b), e)
    per = flip_loss.FLIPLoss(reduction="per_image")(a, b)
    assert per.shape == (2,)
    torch.testing.assert_close(per, e.mean(dim=(1, 2, 3)))
    # An unbatched 3 x H x W pair gives a 0-dim per-image value.
    one = flip_loss.FLIPLoss(reduction="per_image")(a[0], b[0])
    assert one.shape == ()
    torch.testing.assert_close(one, e[0].mean())


@pytest.mark.parametrize("wshape", [(2, 1, 10, 12), (1, 1, 10, 12), (10, 12), (2, 1, 1, 1), (12,)])
def test_weighted_values(case, wshape):
    a, b, e = case
    w = weights(wshape)
    wf = w.expand(e.shape)
    total = (wf * e).sum()
    torch.testing.assert_close(flip_loss.FLIPLoss()(a, b, w), total / wf.sum())
    torch.testing.assert_close(flip_loss.FLIPLoss(reduction="sum")(a, b, w), total)
    torch.testing.assert_close(flip_loss.FLIPLoss(reduction="none")(a, b, w), wf * e)
    per = flip_loss.FLIPLoss(reduction="per_image")(a, b, w)
    torch.testing.assert_close(per, (wf * e).sum(dim=(1, 2, 3)) / wf.sum(dim=(1, 2, 3)))


def test_mask_selects_pixels(case):
    a, b, e = case
    mask = torch.zeros(2, 1, 10, 12, dtype=torch.bool)
    mask[0, :, 2:5, 3:9] = True
    mask[1, :, 6:, :4] = True
    torch.testing.assert_close(flip_loss.FLIPLoss()(a, b, mask), e[mask].mean())
    per = flip_loss.FLIPLoss(reduction="per_image")(a, b, mask)
    torch.testing.assert_close(per, torch.stack([e[0][mask[0]].mean(), e[1][mask[1]].mean()]))
    # A constant weight is the plain mean; a weight of ones per image as well.
    torch.testing.assert_close(flip_loss.FLIPLoss()(a, b, torch.full((1,), 3.0)), e.mean())


def test_float64_weight_with_float32_maps(case):
    a, b, e = case
    w = weights((2, 1, 10, 12), dtype=torch.float64)
    out = flip_loss.FLIPLoss()(a, b, w)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, (w.float() * e).sum() / w.float().sum())


@pytest.mark.parametrize("reduction", ["mean", "per_image", "sum", "none"])
def test_negative_or_nonfinite_weight_raises(case, reduction):
    a, b, _ = case
    loss = flip_loss.FLIPLoss(reduction=reduction)
    w = weights((2, 1, 10, 12))
    w[1, 0, 3, 4] = -0.5
    with pytest.raises(ValueError, match="non-negative"):
        loss(a, b, w)
    w[1, 0, 3, 4] = float("nan")
    with pytest.raises(ValueError, match="NaN"):
        loss(a, b, w)


def test_zero_total_weight_raises(case):
    a, b, _ = case
    zero = torch.zeros(2, 1, 10, 12)
    with pytest.raises(ValueError, match="sum to zero"):
        flip_loss.FLIPLoss()(a, b, zero)
    half = torch.ones(2, 1, 10, 12)
    half[1] = 0  # only the second image has no weight
    torch.testing.assert_close(flip_loss.FLIPLoss()(a, b, half), flip_loss.ldr_flip(a, b)[0].mean())
    with pytest.raises(ValueError, match="sum to zero"):
        flip_loss.FLIPLoss(reduction="per_image")(a, b, half)
    # "sum" and "none" are defined for zero weights.
    assert flip_loss.FLIPLoss(reduction="sum")(a, b, zero).item() == 0.0


def test_bad_weight_shape_dtype_device(case):
    a, b, _ = case
    with pytest.raises(ValueError, match="does not broadcast"):
        flip_loss.FLIPLoss()(a, b, torch.ones(3, 1, 10, 12))
    with pytest.raises(ValueError, match="does not broadcast"):
        flip_loss.FLIPLoss()(a, b, torch.ones(2, 3, 10, 12))  # one weight per pixel, not per channel
    with pytest.raises(ValueError, match="does not broadcast"):
        flip_loss.FLIPLoss()(a, b, torch.ones(1, 2, 1, 10, 12))
    with pytest.raises(TypeError, match="floating-point or bool"):
        flip_loss.FLIPLoss()(a, b, torch.ones(2, 1, 10, 12, dtype=torch.int64))
    with pytest.raises(ValueError, match="per_image"):
        flip_loss.FLIPLoss(reduction="per-image")


def test_torchscript_weighted_matches_eager(case):
    a, b, _ = case
    w = weights((2, 1, 10, 12))
    for reduction in ("mean", "sum", "none", "per_image"):
        module = flip_loss.FLIPLoss(reduction=reduction)
        scripted = torch.jit.script(module)
        torch.testing.assert_close(scripted(a, b, w), module(a, b, w), rtol=0, atol=0)
        torch.testing.assert_close(scripted(a, b), module(a, b), rtol=0, atol=0)
    scripted = torch.jit.script(flip_loss.FLIPLoss())
    with pytest.raises(torch.jit.Error, match="non-negative"):
        scripted(a, b, -w)
    with pytest.raises(torch.jit.Error, match="sum to zero"):
        scripted(a, b, torch.zeros_like(w))


def test_gradients_match_manual_weighting():
    # float64: the reduction divides the weights by their largest value first, which changes the
    # gradient of the map by float32 rounding, enough to move near-cancelling input gradients.
    a, b = images(dtype=torch.float64)
    w = weights((2, 1, 10, 12), dtype=torch.float64)
    x1, x2 = a.clone().requires_grad_(), a.clone().requires_grad_()
    flip_loss.FLIPLoss(reduction="per_image")(x1, b, w).sum().backward()
    e = flip_loss.ldr_flip(x2, b)
    ((w * e).sum(dim=(1, 2, 3)) / w.sum(dim=(1, 2, 3))).sum().backward()
    torch.testing.assert_close(x1.grad, x2.grad, rtol=1e-5, atol=1e-9)


@pytest.mark.parametrize("reduction", ["mean", "per_image", "sum"])
def test_gradcheck_weighted_through_the_op(ops, reduction):
    """float64 gradcheck through torch.ops.flip.ldr_flip, for test, reference and the weight."""
    a, b = images((2, 3, 5, 6), seed=3, dtype=torch.float64)
    a, b = 0.1 + 0.8 * a, 0.1 + 0.8 * b  # away from the input clamp
    w = weights((2, 1, 5, 6), seed=4, dtype=torch.float64)

    def f(x, y, wt):
        e = ops.ldr_flip(x, y, PPD_SMALL, "srgb", 1e-15)
        return weighted_reduce(e, wt, reduction)

    inputs = (a.requires_grad_(), b.requires_grad_(), w.requires_grad_())
    assert gradcheck(f, inputs, eps=1e-7, atol=1e-6)


def test_gradcheck_module_with_mask(ops):
    a, b = images((1, 3, 6, 5), seed=5, dtype=torch.float64)
    a, b = 0.1 + 0.8 * a, 0.1 + 0.8 * b
    mask = torch.rand(1, 1, 6, 5, generator=torch.Generator().manual_seed(6)) > 0.4
    loss = flip_loss.FLIPLoss(pixels_per_degree=PPD_SMALL)
    assert gradcheck(lambda x, y: loss(x, y, mask), (a.requires_grad_(), b.requires_grad_()), eps=1e-7, atol=1e-6)


def test_compile_with_weight(case):
    # fullgraph: the weight checks must not break the graph (the "eager" backend keeps this quick;
    # test_api.py covers the default backend). They raise the ValueError eager raises.
    a, b, e = case
    w = weights((2, 1, 10, 12))
    compiled = torch.compile(flip_loss.FLIPLoss(reduction="per_image"), fullgraph=True, backend="eager")
    torch.testing.assert_close(compiled(a, b, w), (w * e).sum(dim=(1, 2, 3)) / w.sum(dim=(1, 2, 3)))
    with pytest.raises(ValueError, match="sum to zero"):
        compiled(a, b, torch.zeros_like(w))


def test_eager_weighted_calls_leave_torch_compile_unloaded():
    # Loading torch._dynamo takes a second or more; an eager weighted loss has no use for it (the
    # weight checks' custom op, whose first call loads it, is for traced code only).
    import subprocess
    import sys

    code = (
        "import sys, torch, flip_loss\n"
        "t, r = torch.rand(2, 3, 16, 16), torch.rand(2, 3, 16, 16)\n"
        "w = torch.rand(2, 1, 16, 16)\n"
        "for reduction in ('mean', 'sum', 'per_image', 'none'):\n"
        "    flip_loss.FLIPLoss(reduction=reduction)(t, r, w)\n"
        "    flip_loss.FLIPLoss(reduction=reduction)(t, r, w > 0.5)\n"
        "flip_loss.FLIPLoss(hdr=True)(4 * t, 4 * r, w)\n"
        "print('torch._dynamo' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False"]
