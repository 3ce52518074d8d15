"""The CUDA kernels' per-thread code (csrc/flip/passes.h), run on the CPU by the test-only emulator
(torch.ops.flip_emulator, tests/emulator), against the CPU kernels: this is how CPU-only CI checks
the GPU formulation (tiling, halos, transposed borders, plane layouts)."""
import pytest
import torch

from flip_loss import reference as ref_impl

SHAPES = [(2, 3, 23, 31), (1, 3, 5, 7), (1, 3, 1, 1), (1, 3, 3, 300), (1, 3, 130, 2)]


def inputs(shape, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    a = torch.rand(shape, generator=g, dtype=dtype)
    b = (a + 0.1 * torch.randn(shape, generator=g, dtype=dtype)).clamp(0, 1)
    return a, b


def close(x, y, dtype, grad=False):
    # float32: the two formulations sum the same terms in a different order, and the gradients'
    # chain amplifies that rounding.
    scale = max(y.abs().max().item(), 1.0)
    tol = 1e-12 if dtype == torch.float64 else (1e-4 if grad else 1e-5)
    assert (x - y).abs().max().item() <= tol * scale


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("ppd", [10.0, 67.0])
def test_ldr_flip_passes_match_cpu_kernels(ops, emulator, dtype, shape, ppd):
    a, b = inputs(shape, dtype)
    for space in ("srgb", "linear"):
        close(emulator.ldr_flip(a, b, ppd, space, 1e-15), ops.ldr_flip(a, b, ppd, space, 1e-15), dtype)
        g = torch.rand(shape[0], 1, *shape[2:], dtype=dtype)
        expected = ops.ldr_flip_backward(g, a, b, ppd, space, 1e-15, [True, True])
        for x, y in zip(emulator.ldr_flip_backward(g, a, b, ppd, space, 1e-15, [True, True]), expected):
            close(x, y, dtype, grad=True)
        # output_mask as the op reads it: no gradient computed for the image that needs none.
        g_test, g_ref = emulator.ldr_flip_backward(g, a, b, ppd, space, 1e-15, [True, False])
        assert g_ref.numel() == 0
        close(g_test, expected[0], dtype, grad=True)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_stage_passes_match_cpu_kernels(ops, emulator, dtype, shape):
    a, b = inputs(shape, dtype, seed=1)
    ppd = 30.0
    opp = ref_impl.linear_rgb_to_opponent(a)
    close(emulator.csf_filter(opp, ppd), ops.csf_filter(opp, ppd), dtype)
    g3 = torch.rand(shape, dtype=dtype)
    close(emulator.csf_filter_backward(g3, opp, ppd), ops.csf_filter_backward(g3, opp, ppd), dtype, True)
    ya, yb = a[:, 1:2], b[:, 1:2]
    close(emulator.feature_difference(ya, yb, ppd, 1e-15), ops.feature_difference(ya, yb, ppd, 1e-15), dtype)
    g1 = torch.rand(ya.shape, dtype=dtype)
    expected = ops.feature_difference_backward(g1, ya, yb, ppd, 1e-15, [True, True])
    for x, y in zip(emulator.feature_difference_backward(g1, ya, yb, ppd, 1e-15, [True, True]), expected):
        close(x, y, dtype, grad=True)


def test_wide_image_crosses_tile_borders(ops, emulator, crops):
    # 300 columns = three 128-wide tiles with a partial last one; the halo must cross tiles.
    img = crops["blocks"][:, :40, :].unsqueeze(0).double()
    wide = torch.cat([img, img.flip(-1)], dim=-1)[..., :300]
    other = wide.roll(3, dims=-1)
    close(emulator.ldr_flip(wide, other, 67.0, "srgb", 1e-15), ops.ldr_flip(wide, other, 67.0, "srgb", 1e-15),
          torch.float64)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("tm", ["aces", "hable", "reinhard"])
def test_hdr_passes_match_cpu_kernels(ops, emulator, dtype, tm):
    g = torch.Generator().manual_seed(2)
    ref = torch.exp2(6 * torch.rand(2, 3, 13, 140, generator=g, dtype=dtype) - 3)
    test = ref * (1 + 0.2 * torch.randn(ref.shape, generator=g, dtype=dtype)).clamp(min=0.1)
    # Item 1 uses only two of the three exposure columns.
    ex = torch.tensor([[-2.0, 0.0, 1.5], [0.0, 1.0, 1.0]], dtype=dtype)
    counts = torch.tensor([3, 2])
    expected = ops.hdr_flip(test, ref, ex, counts, 20.0, tm, 1e-15)
    got = emulator.hdr_flip(test, ref, ex, counts, 20.0, tm, 1e-15)
    close(got[0], expected[0], dtype)
    assert torch.equal(got[1], expected[1]) and torch.equal(got[2], expected[2])
    grad = torch.rand(expected[0].shape, generator=g, dtype=dtype)
    want = ops.hdr_flip_backward(grad, test, ref, ex, counts, expected[2], 20.0, tm, 1e-15, [True, True])
    have = emulator.hdr_flip_backward(grad, test, ref, ex, counts, expected[2], 20.0, tm, 1e-15, [True, True])
    for x, y in zip(have, want):
        close(x, y, dtype, grad=True)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("shape", SHAPES + [(1, 3, 40, 70), (2, 3, 17, 33)], ids=str)
@pytest.mark.parametrize("ppd", [10.0, 67.0])
def test_fused_forward_matches_cpu_kernels(ops, emulator, dtype, shape, ppd):
    # The fused forward kernel's tiles (32 x 16 with halos) against the CPU kernels.
    a, b = inputs(shape, dtype, seed=3)
    for space in ("srgb", "linear"):
        close(emulator.ldr_flip_fused(a, b, ppd, space, 1e-15), ops.ldr_flip(a, b, ppd, space, 1e-15), dtype)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("tm", ["aces", "reinhard"])
def test_fused_hdr_forward_matches_cpu_kernels(ops, emulator, dtype, tm):
    g = torch.Generator().manual_seed(5)
    ref = torch.exp2(6 * torch.rand(2, 3, 21, 45, generator=g, dtype=dtype) - 3)
    test = ref * (1 + 0.2 * torch.randn(ref.shape, generator=g, dtype=dtype)).clamp(min=0.1)
    ex = torch.tensor([[-2.0, 0.0, 1.5], [0.0, 1.0, 1.0]], dtype=dtype)
    counts = torch.tensor([3, 2])
    expected = ops.hdr_flip(test, ref, ex, counts, 30.0, tm, 1e-15)
    got = emulator.hdr_flip_fused(test, ref, ex, counts, 30.0, tm, 1e-15)
    close(got[0], expected[0], dtype)
    assert (got[2] != expected[2]).float().mean() < 1e-3  # float32 near-ties may pick the other exposure
