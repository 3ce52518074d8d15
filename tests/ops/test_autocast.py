"""Under torch.autocast the ops run in float32 without user casts (registered Autocast kernels)."""

import pytest
import torch

import flip_loss


def images(shape=(2, 3, 16, 20)):
    g = torch.Generator().manual_seed(0)
    a = torch.rand(shape, generator=g)
    return a, (a + 0.1 * torch.randn(shape, generator=g)).clamp(0, 1)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_ldr_flip_under_cpu_autocast(dtype):
    a, b = images()
    conv = torch.nn.Conv2d(3, 3, 1).eval()
    with torch.no_grad():
        conv.weight.copy_(torch.eye(3).view(3, 3, 1, 1))
        conv.bias.zero_()
    x = a.clone().requires_grad_()
    with torch.autocast("cpu", dtype=dtype):
        out = conv(x)  # low precision under autocast
        assert out.dtype == dtype
        error = torch.ops.flip.ldr_flip(out, b, 67.0, "srgb", 1e-15)  # mixed dtypes: no cast needed
        loss = error.mean()
    assert error.dtype == torch.float32
    loss.backward()
    assert x.grad is not None and torch.isfinite(x.grad).all()
    expected = torch.ops.flip.ldr_flip(out.detach().float(), b, 67.0, "srgb", 1e-15)
    torch.testing.assert_close(error.detach(), expected, rtol=0, atol=0)


def test_flip_loss_and_hdr_under_autocast():
    a, b = images()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        low = a.to(torch.bfloat16)
        assert flip_loss.FLIPLoss()(low, b).dtype == torch.float32
        out = torch.ops.flip.hdr_flip(low * 4, b * 4, torch.zeros(2, 2), torch.tensor([2, 2]), 30.0, "aces", 1e-15)
        assert out[0].dtype == torch.float32


@pytest.mark.cuda
def test_ldr_flip_under_cuda_autocast():
    if not torch._C._dispatch_has_kernel_for_dispatch_key("flip::ldr_flip", "CUDA"):
        pytest.skip("built without CUDA kernels")
    a, b = images()
    with torch.autocast("cuda", dtype=torch.float16):
        error = torch.ops.flip.ldr_flip(a.cuda().half(), b.cuda(), 67.0, "srgb", 1e-15)
    assert error.dtype == torch.float32
