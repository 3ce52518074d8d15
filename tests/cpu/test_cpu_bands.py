"""The CPU kernels' banded stages (csrc/flip/cpu/pipeline.h, banded_stages): each thread keeps the
horizontal filters' rows in a ring of 32 + 2r rows and computes a row when the first band of 32
rows that reads it comes. On images several bands tall (the ring wraps) the maps and gradients
follow the float64 oracle, and every thread count, which moves where the threads' shares of bands
(at least 3 bands each at ppd 67) and their recomputed halo rows begin, gives the same bits."""

import pytest
import torch

import flip_loss  # noqa: F401  (registers torch.ops.flip)
from flip_loss import oracle

ops = torch.ops.flip
SHAPE = (2, 3, 300, 150)  # 10 bands, 2 tile columns; the ring holds 52 rows at ppd 67, 36 at ppd 10


def inputs(dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    a = torch.rand(SHAPE, generator=g, dtype=dtype)
    b = (a + 0.1 * torch.randn(SHAPE, generator=g, dtype=dtype)).clamp(0, 1)
    return a, b


@pytest.fixture
def restore_threads():
    n = torch.get_num_threads()
    yield
    torch.set_num_threads(n)


@pytest.mark.parametrize("ppd", [10.0, 67.0])
def test_tall_images_follow_the_oracle(ppd):
    a, b = inputs(torch.float64)
    x = a.clone().requires_grad_()
    m = ops.ldr_flip(x, b, ppd, "srgb", 1e-15)
    (g,) = torch.autograd.grad(m.mean(), x)
    y = a.clone().requires_grad_()
    want = oracle.ldr_flip(y, b, ppd, "srgb", 1e-15)
    (g_want,) = torch.autograd.grad(want.mean(), y)
    torch.testing.assert_close(m, want, rtol=0, atol=1e-12)
    torch.testing.assert_close(g, g_want, rtol=1e-9, atol=1e-15)


def outputs(a, b, ppd):
    x = a.clone().requires_grad_()
    m = ops.ldr_flip(x, b, ppd, "srgb", 1e-15)  # the forward that keeps the sensitivities
    (g,) = torch.autograd.grad(m.sum(), x)
    with torch.no_grad():
        plain = ops.ldr_flip(a, b, ppd, "srgb", 1e-15)
    recomputed = ops.ldr_flip_backward(torch.ones_like(plain), a, b, ppd, "srgb", 1e-15, [True, True])
    ex = torch.tensor([[-1.0, 0.5], [0.0, 1.0]], dtype=a.dtype)
    hdr = ops.hdr_flip(4 * a, 4 * b, ex, torch.tensor([2, 2]), ppd, "aces", 1e-15)
    return [m, g, plain, *recomputed, *hdr]


@pytest.mark.parametrize("ppd", [10.0, 67.0])
def test_every_thread_count_gives_the_same_bits(restore_threads, ppd):
    a, b = inputs(torch.float32, seed=1)
    results = []
    for n in (1, 2, 3):
        torch.set_num_threads(n)
        results.append(outputs(a, b, ppd))
    for other in results[1:]:
        for x, y in zip(results[0], other):
            assert torch.equal(x, y)
