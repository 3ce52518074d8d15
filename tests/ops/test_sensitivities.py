"""ldr_flip's autograd keeps the sensitivities (per pixel, the gradient of its error w.r.t. the
7 filtered responses of each image that requires grad) from the forward instead of recomputing
the whole pipeline in the backward (csrc/ops/autograd.cpp, the internal ops
_ldr_flip_with_sensitivities and _ldr_flip_backward_from_sensitivities): on the CPU always, on CUDA
within a memory budget (the rule: test_the_rule_for_keeping_them; the CUDA kernels:
test_cuda.py, test_gpu_emulation.py). On the CPU both backwards round alike, so everything here
compares against the recomputing op ldr_flip_backward bit for bit."""

import pytest
import torch

PPD = 30.0
PLANES = 7  # per image: filtered colour F0..F2, then the features dx, dy, ddx, ddy


def images(shape=(2, 3, 12, 17), dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    ref = torch.rand(shape, generator=g, dtype=torch.float64)
    test = (ref + 0.08 * torch.randn(shape, generator=g, dtype=torch.float64)).clamp(0, 1)
    weight = torch.rand(shape[:-3] + (1,) + shape[-2:], generator=g, dtype=torch.float64)
    return test.to(dtype), ref.to(dtype), weight.to(dtype)


def recomputed(weight, test, ref, space, mask):
    """The gradients of (map * weight).sum() from the op that recomputes everything."""
    return torch.ops.flip.ldr_flip_backward(weight, test, ref, PPD, space, 1e-15, mask)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("space", ["srgb", "linear"])
@pytest.mark.parametrize("mask", [(True, True), (True, False), (False, True)])
def test_autograd_gradients_equal_the_recomputing_backward(dtype, space, mask):
    test, ref, weight = images(dtype=dtype)
    x, y = test.clone().requires_grad_(mask[0]), ref.clone().requires_grad_(mask[1])
    out = torch.ops.flip.ldr_flip(x, y, PPD, space, 1e-15)
    assert "Sensitivities" in out.grad_fn.name()
    (out * weight).sum().backward()
    expected = recomputed(weight, test, ref, space, list(mask))
    for leaf, want, g in zip((x, y), mask, expected):
        if want:
            torch.testing.assert_close(leaf.grad, g, rtol=0, atol=0)
        else:
            assert leaf.grad is None


@pytest.mark.parametrize("space", ["srgb", "linear"])
def test_the_error_map_is_the_same_with_and_without_a_gradient(space):
    test, ref, _ = images()
    with torch.no_grad():
        plain = torch.ops.flip.ldr_flip(test, ref, PPD, space, 1e-15)
    kept = torch.ops.flip.ldr_flip(test.clone().requires_grad_(), ref, PPD, space, 1e-15)
    torch.testing.assert_close(kept.detach(), plain, rtol=0, atol=0)


def test_the_rule_for_keeping_them():
    # op_checks.keeps_sensitivities, which the Python Autograd kernel applies (the C++ one in
    # csrc/ops/autograd.cpp states the same rule): on fake CUDA tensors, which need no GPU.
    from torch._subclasses.fake_tensor import FakeTensorMode

    from flip_loss import op_checks

    def keeps(shape, dtype=torch.float32, device="cuda", both=False):
        with FakeTensorMode():
            test = torch.empty(shape, dtype=dtype, device=device).requires_grad_()
            ref = torch.empty(shape, dtype=dtype, device=device).requires_grad_(both)
            return op_checks.keeps_sensitivities(test, ref)

    budget = op_checks.CUDA_KEPT_SENSITIVITIES_BYTES
    assert budget == 256 << 20
    assert keeps((1, 3, 2160, 3840))  # 7 planes x 8 294 400 pixels x 4 bytes = 232 MB
    assert keeps((1, 3, 2160, 3840), torch.float16)  # kept in float32
    assert not keeps((1, 3, 2160, 3840), both=True)
    assert not keeps((1, 3, 2160, 3840), torch.float64)
    assert keeps((1, 3, 1080, 1920), both=True) and keeps((2, 3, 1080, 1920), torch.float64)
    assert not keeps((5, 3, 1080, 1920))
    # The boundary: exactly the budget is kept, one pixel more is not.
    pixels = budget // (7 * 4)
    assert keeps((1, 3, 1, pixels)) and not keeps((1, 3, 1, pixels + 1))
    assert keeps((3, 1080, 1920), device="cpu", both=True) and keeps((8, 3, 1080, 1920), device="cpu")
    assert not keeps((1, 3, 8, 8), device="meta")


def test_no_sensitivities_without_a_gradient():
    test, ref, _ = images()
    x = test.clone().requires_grad_()
    with torch.no_grad():
        assert torch.ops.flip.ldr_flip(x, ref, PPD, "srgb", 1e-15).grad_fn is None
    out = torch.ops.flip.ldr_flip(test, ref, PPD, "srgb", 1e-15)  # nothing requires grad
    assert out.grad_fn is None


def test_backward_inputs_subset_and_retained_graph():
    # backward(inputs=...) asks for one of the two kept gradients; a retained graph gives the same
    # gradients twice (the kept sensitivities are read, never overwritten).
    test, ref, weight = images()
    x, y = test.clone().requires_grad_(), ref.clone().requires_grad_()
    loss = (torch.ops.flip.ldr_flip(x, y, PPD, "srgb", 1e-15) * weight).sum()
    (gy,) = torch.autograd.grad(loss, [y], retain_graph=True)
    (gx,) = torch.autograd.grad(loss, [x], retain_graph=True)
    gx2, gy2 = torch.autograd.grad(loss, [x, y])
    expected = recomputed(weight, test, ref, "srgb", [True, True])
    for g in (gx, gx2):
        torch.testing.assert_close(g, expected[0], rtol=0, atol=0)
    for g in (gy, gy2):
        torch.testing.assert_close(g, expected[1], rtol=0, atol=0)


def test_batch_layout_and_unbatched_images():
    test, ref, weight = images(shape=(3, 3, 9, 10))
    out, sens = torch.ops.flip._ldr_flip_with_sensitivities(test, ref, PPD, "srgb", 1e-15, [True, True])
    assert sens.shape == (3, 2 * PLANES, 9, 10) and sens.dtype == torch.float32
    # Item n's planes are the test image's 7 then the reference's, whatever the batch around it.
    for n in range(3):
        _, alone = torch.ops.flip._ldr_flip_with_sensitivities(test[n], ref[n], PPD, "srgb", 1e-15, [True, True])
        assert alone.shape == (2 * PLANES, 9, 10)
        torch.testing.assert_close(alone, sens[n], rtol=0, atol=0)
        _, only_ref = torch.ops.flip._ldr_flip_with_sensitivities(test[n], ref[n], PPD, "srgb", 1e-15, [False, True])
        torch.testing.assert_close(only_ref, sens[n, PLANES:], rtol=0, atol=0)
    gt, gr = torch.ops.flip._ldr_flip_backward_from_sensitivities(weight, sens, test, ref, PPD, "srgb", [True, True])
    expected = recomputed(weight, test, ref, "srgb", [True, True])
    torch.testing.assert_close(gt, expected[0], rtol=0, atol=0)
    torch.testing.assert_close(gr, expected[1], rtol=0, atol=0)


def test_low_precision_images_keep_float32_sensitivities():
    test, ref, weight = images()
    for dtype in (torch.float16, torch.bfloat16):
        x = test.to(dtype).requires_grad_()
        out, sens = torch.ops.flip._ldr_flip_with_sensitivities(x, ref.to(dtype), PPD, "srgb", 1e-15, [True, False])
        assert out.dtype == dtype and sens.dtype == torch.float32
        (out.float() * weight).sum().backward()
        expected = recomputed(weight.to(dtype), test.to(dtype), ref.to(dtype), "srgb", [True, False])[0]
        assert x.grad.dtype == dtype
        torch.testing.assert_close(x.grad, expected, rtol=0, atol=0)


def test_non_contiguous_images():
    test, ref, weight = images()
    # The same values with transposed strides.
    x = test.transpose(-1, -2).contiguous().transpose(-1, -2).requires_grad_()
    r = ref.transpose(-1, -2).contiguous().transpose(-1, -2)
    assert not x.is_contiguous()
    (torch.ops.flip.ldr_flip(x, r, PPD, "srgb", 1e-15) * weight).sum().backward()
    torch.testing.assert_close(x.grad, recomputed(weight, test, ref, "srgb", [True, False])[0], rtol=0, atol=0)


def test_internal_forward_without_an_input_that_requires_grad_still_differentiates_it():
    # Called directly with an output_mask that leaves out an input requiring grad, the op's own
    # autograd recomputes what it did not keep: the gradient is right, not missing or zero.
    test, ref, weight = images()
    x, y = test.clone().requires_grad_(), ref.clone().requires_grad_()
    out, sens = torch.ops.flip._ldr_flip_with_sensitivities(x, y, PPD, "srgb", 1e-15, [True, False])
    assert not sens.requires_grad
    gx, gy = torch.autograd.grad((out * weight).sum(), [x, y])
    expected = recomputed(weight, test, ref, "srgb", [True, True])
    torch.testing.assert_close(gx, expected[0], rtol=0, atol=0)
    torch.testing.assert_close(gy, expected[1], rtol=0, atol=0)


def test_double_backward_through_the_kept_sensitivities():
    g = torch.Generator().manual_seed(1)  # values away from the clamps' kinks, for finite differences
    test, ref = (0.1 + 0.8 * torch.rand(1, 3, 4, 5, generator=g, dtype=torch.float64) for _ in range(2))
    inputs = (test.requires_grad_(), ref.requires_grad_())
    assert torch.autograd.gradgradcheck(
        lambda x, y: torch.ops.flip.ldr_flip(x, y, PPD, "srgb", 1e-15), inputs, fast_mode=True
    )


@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_bad_arguments_raise(device):
    test, ref, weight = (t.to(device) for t in images(shape=(1, 3, 6, 7)))
    sens = torch.zeros(1, PLANES, 6, 7, device=device)
    backward = torch.ops.flip._ldr_flip_backward_from_sensitivities
    with pytest.raises(ValueError, match="output_mask must ask for the sensitivities"):
        torch.ops.flip._ldr_flip_with_sensitivities(test, ref, PPD, "srgb", 1e-15, [False, False])
    with pytest.raises(ValueError, match="eps"):
        torch.ops.flip._ldr_flip_with_sensitivities(test, ref, PPD, "srgb", 1.0, [True, False])
    with pytest.raises(ValueError, match=r"sensitivities must have shape \[1, 14, 6, 7\]"):
        backward(weight, sens, test, ref, PPD, "srgb", [True, True])  # 7 planes kept, 14 asked for
    with pytest.raises(TypeError, match="sensitivities must be Float"):
        backward(weight, sens.double(), test, ref, PPD, "srgb", [True, False])
    with pytest.raises(ValueError, match="grad must have shape"):
        backward(weight[..., :3], sens, test, ref, PPD, "srgb", [True, False])
    with pytest.raises(ValueError, match="output_mask must ask for at least one gradient"):
        backward(weight, sens, test, ref, PPD, "srgb", [False, False])
    with pytest.raises(ValueError, match="input_space"):
        backward(weight, sens, test, ref, PPD, "rgb", [True, False])


def test_nan_input_raises_on_the_kept_path():
    test, ref, _ = images()
    test[0, 1, 3, 4] = float("nan")
    # The message names the op the user called, not the internal one.
    with pytest.raises(RuntimeError, match=r"flip::ldr_flip: an input contains NaN or infinite"):
        torch.ops.flip.ldr_flip(test.requires_grad_(), ref, PPD, "srgb", 1e-15)


@pytest.mark.parametrize("mask", [(True, False), (False, True)])
def test_backward_from_sensitivities_rejects_non_finite_images(mask):
    # Called directly with images that differ from the forward's, the backward still checks the
    # images it reads, as the recomputing ldr_flip_backward does.
    test, ref, weight = images()
    _, sens = torch.ops.flip._ldr_flip_with_sensitivities(test, ref, PPD, "srgb", 1e-15, list(mask))
    bad = (test if mask[0] else ref).clone()
    bad[1, 2, 5, 6] = float("inf")
    args = (bad, ref) if mask[0] else (test, bad)
    with pytest.raises(RuntimeError, match="NaN or infinite"):
        torch.ops.flip._ldr_flip_backward_from_sensitivities(weight, sens, *args, PPD, "srgb", list(mask))
    with pytest.raises(RuntimeError, match="NaN or infinite"):
        torch.ops.flip.ldr_flip_backward(weight, *args, PPD, "srgb", 1e-15, list(mask))


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_torch_compile_uses_the_same_gradients(backend):
    test, ref, weight = images()

    def loss(x, y):
        return (torch.ops.flip.ldr_flip(x, y, PPD, "srgb", 1e-15) * weight).sum()

    x = test.clone().requires_grad_()
    torch.compile(loss, backend=backend, fullgraph=True)(x, ref).backward()
    torch.testing.assert_close(x.grad, recomputed(weight, test, ref, "srgb", [True, False])[0], rtol=0, atol=0)


@pytest.mark.parametrize("dtype,h,w", [(torch.float64, 11, 40000), (torch.float32, 23, 29000)])
def test_wide_images_backward_in_short_bands_matches_the_oracle(dtype, h, w):
    """The backward's transposed stage runs in bands of rows whose whole-row scratch is capped per
    thread (csrc/flip/cpu/pipeline.h, transposed_band_rows): such wide images get bands of one
    (float64) and five (float32, with a last band of three) rows instead of 16. Their gradient must
    still be the pure-PyTorch oracle's."""
    from flip_loss import oracle

    test, ref, weight = images(shape=(1, 3, h, w), dtype=dtype, seed=3)
    x = test.clone().requires_grad_()
    (torch.ops.flip.ldr_flip(x, ref, PPD, "srgb", 1e-15) * weight).sum().backward()
    x64 = test.double().requires_grad_()
    (oracle.ldr_flip(x64, ref.double(), PPD, "srgb", 1e-15) * weight.double()).sum().backward()
    error = (x.grad.double() - x64.grad).norm() / x64.grad.norm()
    assert error < (1e-12 if dtype == torch.float64 else 1e-4), float(error)
