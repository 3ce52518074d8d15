"""The CUDA kernels, run on the CPU by the test-only emulator (torch.ops.flip_emulator,
tests/emulator: the launch sequences and block code of csrc/flip/cuda, one fiber per CUDA thread,
barriers and shared memory checked), against the CPU kernels: this is how CPU-only CI checks the
GPU formulation (tiling, halos, transposed borders, plane layouts). The checker's own tests, which
mutate the kernels, are in test_emulator_checks.py."""

import os
import re
import shutil
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch

from flip_loss import cuda_arches, gpu_agreement, nvidia, oracle
from flip_loss.constants import DEFAULT_PPD, MAX_PPD, TONE_MAPPERS
from hdr_cases import exposure_strips

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
        g = torch.rand(shape[0], 1, *shape[2:], dtype=dtype, generator=torch.Generator().manual_seed(2))
        expected = ops.ldr_flip_backward(g, a, b, ppd, space, 1e-15, [True, True])
        for x, y in zip(emulator.ldr_flip_backward(g, a, b, ppd, space, 1e-15, [True, True]), expected):
            close(x, y, dtype, grad=True)
        # output_mask as the op reads it: no gradient computed for the image that needs none.
        g_test, g_ref = emulator.ldr_flip_backward(g, a, b, ppd, space, 1e-15, [True, False])
        assert g_ref.numel() == 0
        close(g_test, expected[0], dtype, grad=True)
        g_test, g_ref = emulator.ldr_flip_backward(g, a, b, ppd, space, 1e-15, [False, True])
        assert g_test.numel() == 0
        close(g_ref, expected[1], dtype, grad=True)


@pytest.mark.parametrize("fused", [False, True])
def test_eight_bit_codes_take_the_values_k_over_255(emulator, fused):
    # The CUDA glue's conversion (csrc/ops/kernel_tensors.h, code_values), shared with the emulator:
    # k / 255 correctly rounded, so the map of the codes is that of their float32 values.
    g = torch.Generator().manual_seed(3)
    a, b = (torch.randint(0, 256, (2, 3, 23, 31), generator=g, dtype=torch.uint8) for _ in range(2))
    op = emulator.ldr_flip_fused if fused else emulator.ldr_flip
    for space in ("srgb", "linear"):
        out = op(a, b, 30.0, space, 1e-15)
        assert out.dtype == torch.float32
        values = [(x.double() / 255).float() for x in (a, b)]
        assert torch.equal(out, op(*values, 30.0, space, 1e-15))


def saturated_flat_pairs(count=24, seed=5):
    """Flat 1 x 3 x 6 x 7 image pairs whose channels are 0, 1 or a random value: the colour round
    trip puts a channel at 0 or 1 within rounding of the RGB cube's face, on a side that depends on
    the implementation (docs/algorithm.md §7.4, the gamut clamp)."""
    g = torch.Generator().manual_seed(seed)
    for _ in range(count):
        pair = []
        for _ in range(2):
            choice = torch.randint(0, 3, (3,), generator=g)
            value = torch.where(
                choice == 0, 0.0, torch.where(choice == 1, 1.0, torch.rand(3, generator=g, dtype=torch.float64))
            )
            pair.append(value.view(1, 3, 1, 1).expand(1, 3, 6, 7).contiguous())
        yield pair


@pytest.mark.parametrize("ppd", [10.0, 67.0])
def test_flat_saturated_channels_get_the_same_gradient_everywhere(ops, emulator, ppd):
    """A flat channel at 0 or 1 passes its colour gradient on every implementation and dtype (the
    gamut clamp's slack): the emulated device's float32 gradient meets the promised agreement with
    the CPU's, and both follow float64's. Without the slack the two sides of the cube's face gave
    gradients apart by the channel's whole colour gradient."""
    for t64, r64 in saturated_flat_pairs():
        for space in ("srgb", "linear"):
            g64 = torch.ones(1, 1, 6, 7, dtype=torch.float64)
            want = ops.ldr_flip_backward(g64, t64, r64, ppd, space, 1e-15, [True, True])
            t, r, g = t64.float(), r64.float(), g64.float()
            cpu = ops.ldr_flip_backward(g, t, r, ppd, space, 1e-15, [True, True])
            emulated = emulator.ldr_flip_backward(g, t, r, ppd, space, 1e-15, [True, True])
            emulated64 = emulator.ldr_flip_backward(g64, t64, r64, ppd, space, 1e-15, [True, True])
            for x, y, z, w in zip(emulated, cpu, emulated64, want):
                assert within_promise(x, y, torch.float32, grad=True), (t64[0, :, 0, 0], r64[0, :, 0, 0], space)
                assert within_promise(y, w, torch.float32, grad=True), (t64[0, :, 0, 0], r64[0, :, 0, 0], space)
                assert within_promise(z, w, torch.float64, grad=True), (t64[0, :, 0, 0], r64[0, :, 0, 0], space)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_stage_passes_match_cpu_kernels(ops, emulator, dtype, shape):
    a, b = inputs(shape, dtype, seed=1)
    ppd = 30.0
    opp = oracle.linear_rgb_to_opponent(a)
    close(emulator.csf_filter(opp, ppd), ops.csf_filter(opp, ppd), dtype)
    g3 = torch.rand(shape, dtype=dtype, generator=torch.Generator().manual_seed(3))
    close(emulator.csf_filter_backward(g3, opp, ppd), ops.csf_filter_backward(g3, opp, ppd), dtype, True)
    ya, yb = a[:, 1:2], b[:, 1:2]
    close(emulator.feature_difference(ya, yb, ppd, 1e-15), ops.feature_difference(ya, yb, ppd, 1e-15), dtype)
    g1 = torch.rand(ya.shape, dtype=dtype, generator=torch.Generator().manual_seed(4))
    expected = ops.feature_difference_backward(g1, ya, yb, ppd, 1e-15, [True, True])
    for x, y in zip(emulator.feature_difference_backward(g1, ya, yb, ppd, 1e-15, [True, True]), expected):
        close(x, y, dtype, grad=True)


def test_wide_image_crosses_tile_borders(ops, emulator, crops):
    # 300 columns = three 128-wide tiles with a partial last one; the halo must cross tiles.
    img = crops["blocks"][:, :40, :].unsqueeze(0).double()
    wide = torch.cat([img, img.flip(-1)], dim=-1)[..., :300]
    other = wide.roll(3, dims=-1)
    close(
        emulator.ldr_flip(wide, other, 67.0, "srgb", 1e-15),
        ops.ldr_flip(wide, other, 67.0, "srgb", 1e-15),
        torch.float64,
    )


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("tm", TONE_MAPPERS)
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
@pytest.mark.parametrize("tm", TONE_MAPPERS)
def test_fused_hdr_forward_matches_cpu_kernels(ops, emulator, dtype, tm):
    g = torch.Generator().manual_seed(5)
    ref = torch.exp2(6 * torch.rand(2, 3, 21, 45, generator=g, dtype=dtype) - 3)
    test = ref * (1 + 0.2 * torch.randn(ref.shape, generator=g, dtype=dtype)).clamp(min=0.1)
    ex = torch.tensor([[-2.0, 0.0, 1.5], [0.0, 1.0, 1.0]], dtype=dtype)
    counts = torch.tensor([3, 2])
    expected = ops.hdr_flip(test, ref, ex, counts, 30.0, tm, 1e-15)
    got = emulator.hdr_flip_fused(test, ref, ex, counts, 30.0, tm, 1e-15)
    close(got[0], expected[0], dtype)
    assert (
        got[2] != expected[2]
    ).float().mean() < gpu_agreement.HDR_INDEX_MISMATCH  # float32 near-ties may pick the other exposure


# ---- the tiled backward (tiled_backward.h: kTiledGrad = fused forward + adjoint into banded
# gradient planes, kTiledTranspose = transposed filters on a tile + halo in shared memory) ----

MASKS = [[True, True], [True, False], [False, True]]
ONE_BAND = 1 << 25  # the kernels' budget: every case below fits in one band
SMALLEST = 1  # bands of kTileH = 16 output rows, one batch item each


def one_item_budget(shape, dtype, images=2):
    # The scratch of one whole item: 7 gradient planes per wanted image (docs/algorithm.md §8.8).
    return images * 7 * shape[2] * shape[3] * torch.finfo(dtype).bits // 8


def check_tiled(tiled, rows, expected, dtype, mask):
    """Gradients of the tiled backward for `mask`: empty where not wanted, else the CPU kernels'
    (within the tolerance) and bit for bit the row passes' (`rows`, same mask): the tiles compute the
    same sums in the same order, so a tile, band or halo mistake cannot hide in the tolerance."""
    for want, x, r, y in zip(mask, tiled, rows, expected):
        if not want:
            assert x.numel() == 0
            continue
        close(x, y, dtype, grad=True)
        assert torch.equal(x, r)


def check_tiled_hdr(ops, emulator, args, dtype, budget):
    """HDR-FLIP's tiled backward on args (grad, test, ref, exposures, counts, index, ppd, tone
    mapper, eps) with the scratch budget named, for every gradient mask, as check_tiled."""
    scratch = ONE_BAND if budget == "one band" else SMALLEST
    expected = ops.hdr_flip_backward(*args, [True, True])
    for mask in MASKS:
        tiled = emulator.hdr_flip_backward_tiled(*args, mask, scratch)
        check_tiled(tiled, emulator.hdr_flip_backward(*args, mask), expected, dtype, mask)


TILED_SHAPES = SHAPES + [(2, 3, 70, 45), (1, 3, 17, 65)]


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("shape", TILED_SHAPES, ids=str)
@pytest.mark.parametrize("ppd", [10.0, 67.0])
@pytest.mark.parametrize("budget", ["one band", "row bands", "item bands"])
def test_tiled_backward_matches_cpu_kernels(ops, emulator, dtype, shape, ppd, budget):
    scratch = {"one band": ONE_BAND, "row bands": SMALLEST, "item bands": one_item_budget(shape, dtype)}[budget]
    a, b = inputs(shape, dtype, seed=6)
    g = torch.rand(shape[0], 1, *shape[2:], generator=torch.Generator().manual_seed(7), dtype=dtype)
    for space in ("srgb", "linear"):
        expected = ops.ldr_flip_backward(g, a, b, ppd, space, 1e-15, [True, True])
        for mask in MASKS:
            tiled = emulator.ldr_flip_backward_tiled(g, a, b, ppd, space, 1e-15, mask, scratch)
            check_tiled(tiled, emulator.ldr_flip_backward(g, a, b, ppd, space, 1e-15, mask), expected, dtype, mask)


KEPT_SHAPES = [(2, 3, 23, 31), (1, 3, 1, 1), (1, 3, 17, 65)]


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("shape", KEPT_SHAPES, ids=str)
@pytest.mark.parametrize("ppd", [10.0, DEFAULT_PPD])
def test_kept_sensitivities_match_cpu_kernels(ops, emulator, dtype, shape, ppd):
    # The CUDA autograd's pair (cuda.cpp): the forward that keeps the sensitivities (tiled: kTiledGrad
    # over the whole batch, for a unit gradient; rows: H, then V with the tail and its adjoint) and
    # the backward from them (tiled: kTiledTranspose scaling them by the gradient; rows: that product, then
    # VT and HT). Against the CPU's pair, whose layout they share, and bit for bit tiled against
    # rows. float32 at DEFAULT_PPD runs the build compiled for its radii.
    a, b = inputs(shape, dtype, seed=12)
    g = torch.rand(shape[0], 1, *shape[2:], generator=torch.Generator().manual_seed(13), dtype=dtype)
    for space in ("srgb", "linear"):
        full = ops.ldr_flip_backward(g, a, b, ppd, space, 1e-15, [True, True])
        for mask in MASKS:
            want_map, want_sens = ops._ldr_flip_with_sensitivities(a, b, ppd, space, 1e-15, mask)
            kept = {}
            for tiled in (True, False):
                flip_map, sens = emulator.ldr_flip_with_sensitivities(a, b, ppd, space, 1e-15, mask, tiled)
                close(flip_map, want_map, dtype)
                assert sens.shape == want_sens.shape and sens.dtype == want_sens.dtype
                close(sens, want_sens, dtype, grad=True)
                grads = emulator.ldr_flip_backward_from_sensitivities(g, sens, a, b, ppd, space, mask, tiled)
                expected = ops._ldr_flip_backward_from_sensitivities(g, want_sens, a, b, ppd, space, mask)
                for want, x, y, z in zip(mask, grads, expected, full):
                    assert x.numel() == (y.numel() if want else 0)
                    if want:
                        close(x, y, dtype, grad=True)
                        close(x, z, dtype, grad=True)
                kept[tiled] = (flip_map, sens, grads)
            for x, y in zip(kept[True][:2] + tuple(kept[True][2]), kept[False][:2] + tuple(kept[False][2])):
                assert torch.equal(x, y)


def test_tiled_backward_plan_has_the_bands_the_tests_ask_for(emulator):
    # The budgets above do split the work: several 16-row bands, or one item per band.
    plan = emulator.backward_plan(2, 70, 45, 3, 67.0, 8, SMALLEST).tolist()
    assert plan[:2] == [1, 16] and plan[3:] == [2, 5]
    plan = emulator.backward_plan(2, 70, 45, 3, 67.0, 8, one_item_budget((2, 3, 70, 45), torch.float64)).tolist()
    assert plan == [1, 70, 70, 2, 1]


def test_tiled_backward_halo_crosses_tiles_and_bands(ops, emulator):
    # One pixel's incoming gradient, on the last row of a 16-row band and the last column of a
    # 32-wide tile: its input gradient spreads R = 10 pixels into the next band and the next tile,
    # which only the halos (the next band's recomputed rows above it, kTiledTranspose's R-pixel ring)
    # carry there.
    a, b = inputs((1, 3, 70, 75), torch.float64, seed=8)
    g = torch.zeros(1, 1, 70, 75, dtype=torch.float64)
    g[0, 0, 31, 31] = 1.0
    expected = ops.ldr_flip_backward(g, a, b, 67.0, "srgb", 1e-15, [True, True])
    for budget in (SMALLEST, ONE_BAND):
        tiled = emulator.ldr_flip_backward_tiled(g, a, b, 67.0, "srgb", 1e-15, [True, True], budget)
        for x, y in zip(tiled, expected):
            close(x, y, torch.float64, grad=True)
            reach = x[0].abs().sum(0) != 0
            assert reach[21:42, 21:42].all() and not reach[:21].any() and not reach[42:].any()
            assert not reach[:, :21].any() and not reach[:, 42:].any()


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("tm", TONE_MAPPERS)
@pytest.mark.parametrize("budget", ["one band", "row bands"])
def test_tiled_hdr_backward_matches_cpu_kernels(ops, emulator, dtype, tm, budget):
    g = torch.Generator().manual_seed(9)
    ref = torch.exp2(6 * torch.rand(2, 3, 37, 70, generator=g, dtype=dtype) - 3)
    test = ref * (1 + 0.2 * torch.randn(ref.shape, generator=g, dtype=dtype)).clamp(min=0.1)
    # Three exposures, item 1 uses two: the gradient sums over exposures, band by band.
    ex = torch.tensor([[-2.0, 0.0, 1.5], [0.0, 1.0, 1.0]], dtype=dtype)
    counts = torch.tensor([3, 2])
    index = ops.hdr_flip(test, ref, ex, counts, 20.0, tm, 1e-15)[2]
    assert len(set(index.unique().tolist()) - {-1}) == 3  # every exposure wins somewhere
    grad = torch.rand(2, 1, 37, 70, generator=g, dtype=dtype)
    check_tiled_hdr(ops, emulator, (grad, test, ref, ex, counts, index, 20.0, tm, 1e-15), dtype, budget)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("budget", ["one band", "row bands"])
def test_tiled_hdr_backward_skips_tiles_an_exposure_does_not_win(ops, emulator, dtype, budget):
    # Brightness rising 14 stops from left to right: each exposure wins in a vertical strip, so
    # kTiledGrad skips the forward of the 32 x 16 tiles outside it and kTiledTranspose the tiles whose halo
    # (R = 3 at ppd 20) does not reach it. The gradients stay those of the CPU kernels and, bit for
    # bit, of the row passes, which skip nothing.
    test, ref, ex, counts, g = exposure_strips(dtype)
    index = ops.hdr_flip(test, ref, ex, counts, 20.0, "aces", 1e-15)[2]

    def skipped(i, halo):  # item 0's tile columns where exposure i won no pixel of the tiles + halo
        won = (index[0, 0] == i).any(0)
        assert won.any()
        return [x0 for x0 in range(0, 150, 32) if not won[max(0, x0 - halo) : x0 + 32 + halo].any()]

    assert all(skipped(i, 3) for i in range(3))  # both kernels skip tiles of every exposure
    grad = torch.rand(2, 1, 37, 150, generator=g, dtype=dtype)
    check_tiled_hdr(ops, emulator, (grad, test, ref, ex, counts, index, 20.0, "aces", 1e-15), dtype, budget)


@pytest.mark.parametrize("shape", [(1, 3, 23, 31), (2, 3, 9, 50)], ids=str)
def test_large_ppd_backward_matches_cpu_kernels(ops, emulator, shape):
    # ppd 300: radius 41, wider than these images. The tiled kernels' tiles do not fit an sm_90
    # block's shared memory then (the emulator refuses them as csrc/ops/cuda.cpp would not choose
    # them) and the row passes run; at ppd 96 (radius 13, the largest float64 tiles that fit) the
    # tiled backward runs with the radius still beyond the 9-row image.
    a, b = inputs(shape, torch.float64, seed=10)
    g = torch.rand(shape[0], 1, *shape[2:], generator=torch.Generator().manual_seed(11), dtype=torch.float64)
    for ppd in (300.0, 96.0):
        expected = ops.ldr_flip_backward(g, a, b, ppd, "srgb", 1e-15, [True, True])
        for mask in MASKS:
            rows = emulator.ldr_flip_backward(g, a, b, ppd, "srgb", 1e-15, mask)
            for want, x, y in zip(mask, rows, expected):
                if want:
                    close(x, y, torch.float64, grad=True)
            if ppd == 300.0:
                with pytest.raises(RuntimeError, match="do not fit"):
                    emulator.ldr_flip_backward_tiled(g, a, b, ppd, "srgb", 1e-15, mask, SMALLEST)
                continue
            tiled = emulator.ldr_flip_backward_tiled(g, a, b, ppd, "srgb", 1e-15, mask, SMALLEST)
            check_tiled(tiled, rows, expected, torch.float64, mask)


def radius(ppd):
    return max(oracle.csf_taps(ppd)["radius"], oracle.feature_taps(ppd)["radius"])


@pytest.mark.parametrize("budget", ["one band", "row bands"])
def test_hdr_at_the_default_ppd_matches_cpu_kernels(ops, emulator, budget):
    # float32 at the default ppd runs the tiled kernels compiled for its radii (launch_params.h,
    # DefaultRadii): HDR-FLIP's fused forward and tiled backward there, with brightness rising
    # across the width so that each exposure wins a strip and tiles skip the exposures they lose.
    g = torch.Generator().manual_seed(21)
    ramp = torch.exp2(torch.linspace(-4, 8, 75))
    ref = torch.rand(2, 3, 34, 75, generator=g) * ramp
    test = ref * (1 + 0.2 * torch.randn(ref.shape, generator=g)).clamp(min=0.1)
    ex = torch.tensor([[-2.0, 0.0, 3.0], [0.0, 1.0, 1.0]])
    counts = torch.tensor([3, 2])
    expected = ops.hdr_flip(test, ref, ex, counts, DEFAULT_PPD, "aces", 1e-15)
    got = emulator.hdr_flip_fused(test, ref, ex, counts, DEFAULT_PPD, "aces", 1e-15)
    close(got[0], expected[0], torch.float32)
    index = expected[2]
    assert len(set(index.unique().tolist()) - {-1}) == 3  # every exposure wins somewhere
    grad = torch.rand(2, 1, 34, 75, generator=g)
    args = (grad, test, ref, ex, counts, index, DEFAULT_PPD, "aces", 1e-15)
    check_tiled_hdr(ops, emulator, args, torch.float32, budget)


def test_the_kernels_compiled_for_fixed_radii_are_the_default_ppds():
    # The tiled kernels have a build for one set of radii (csrc/flip/cuda/launch_params.h,
    # DefaultRadii), which the launches choose whenever the taps have them: meant for flip_loss's
    # default ppd (and NVIDIA's loss's, the same display). Should either drift, the default ppd
    # would run the kernels that read their radii at run time: right, but slower.
    params = (Path(__file__).resolve().parents[2] / "csrc" / "flip" / "cuda" / "launch_params.h").read_text()
    csf, feat = (int(v) for v in re.search(r"using DefaultRadii = FixedRadii<(\d+), (\d+)>;", params).groups())
    for ppd in (DEFAULT_PPD, nvidia.NVIDIA_DEFAULT_PPD):
        assert (oracle.csf_taps(ppd)["radius"], oracle.feature_taps(ppd)["radius"]) == (csf, feat)


@pytest.mark.parametrize(
    "n, h, w, wanted, elem",
    [
        (1, 1080, 1920, 1, 4),
        (1, 1080, 1920, 3, 4),
        (1, 1080, 1920, 2, 8),
        (8, 512, 512, 3, 4),
        (1, 2160, 3840, 3, 4),
        (64, 256, 256, 1, 4),
        (1, 70000, 2, 1, 4),
        (3, 5, 7, 3, 8),
    ],
)
def test_backward_plan_bounds_the_scratch_and_covers_the_batch(emulator, n, h, w, wanted, elem):
    # The memory promise (docs/algorithm.md §8.8): the gradient planes of a band stay within the
    # 32 MiB budget, whatever the image size and batch; bands cover every item and row, each with
    # the R rows of gradient planes above and below that the transposed filters read.
    ppd = 67.02
    items, rows, buffer_rows, item_bands, row_bands = emulator.backward_plan(n, h, w, wanted, ppd, elem).tolist()
    images = bin(wanted).count("1")
    assert items * images * 7 * buffer_rows * w * elem <= ONE_BAND
    assert (item_bands - 1) * items < n <= item_bands * items
    assert (row_bands - 1) * rows < h <= row_bands * rows
    assert buffer_rows == (h if row_bands == 1 else min(h, rows + 2 * radius(ppd)))


@pytest.mark.slow
def test_a_lock_left_by_a_killed_build_does_not_stall_the_next_load(emulator, tmp_path):
    # A file named lock in the build directory, as a builder killed mid-build leaves it (or a newer
    # torch's load, which keeps it): the next load must go on (tests/emulator/__init__.py) instead
    # of waiting for it to go away, which is what torch 2.11's load does. A copy of the
    # built tree (mtimes kept, so ninja has nothing to rebuild) with such a lock in it:
    import emulator as emulator_build

    build = tmp_path / "emulator"
    shutil.copytree(emulator_build.BUILD_DIR, build)
    (build / "lock").touch()
    tests_dir = Path(__file__).resolve().parents[1]
    env = dict(os.environ, FLIP_LOSS_EMULATOR_BUILD_DIR=str(build))
    env["PYTHONPATH"] = os.pathsep.join(
        [str(tests_dir.parent), str(tests_dir), str(tests_dir / "helpers"), env.get("PYTHONPATH", "")]
    )
    script = "import emulator; emulator.ops().ldr_flip; print('LOADED')"
    proc = subprocess.run(
        [sys.executable, "-c", script],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0 and "LOADED" in proc.stdout, proc.stdout[-3000:]


# ---- cases at the edges of the tiled kernels' decisions ----


@pytest.mark.parametrize("budget", ["one band", "row bands"])
@pytest.mark.parametrize("spot", ["band edge", "R left of a tile", "last column"])
def test_tiled_hdr_backward_single_winning_pixels(ops, emulator, budget, spot):
    # One pixel wins exposure 1, every other exposure 0: whether a tile computes exposure 1 then
    # hangs on that pixel alone, at the edges of tile_won's reach (kTiledGrad without halo, kTiledTranspose
    # with R; bands of 16 rows; the last column). Random or striped winners cannot tell an edge
    # one pixel off.
    h, w, ppd = 48, 96, 20.0
    r = radius(ppd)
    y, x = {"band edge": (15, 40), "R left of a tile": (20, 32 - r), "last column": (20, w - 1)}[spot]
    gen = torch.Generator().manual_seed(15)
    ref = torch.exp2(4 * torch.rand(1, 3, h, w, generator=gen, dtype=torch.float64) - 2)
    test = ref * (1 + 0.2 * torch.randn(ref.shape, generator=gen, dtype=torch.float64)).clamp(min=0.1)
    ex = torch.tensor([[0.0, 1.0]], dtype=torch.float64)
    counts = torch.tensor([2])
    index = torch.zeros(1, 1, h, w, dtype=torch.int32)
    index[0, 0, y, x] = 1
    grad = torch.rand(1, 1, h, w, generator=gen, dtype=torch.float64)
    check_tiled_hdr(ops, emulator, (grad, test, ref, ex, counts, index, ppd, "aces", 1e-15), torch.float64, budget)


def test_tiled_backward_bands_of_several_tile_rows_and_an_uneven_batch(ops, emulator):
    # Bands of 32 rows whose gradient-plane rows start above the band (g0 > 0), and item bands of
    # two items over a batch of three: the last band is shorter than the others.
    shape = (3, 3, 70, 45)
    a, b = inputs(shape, torch.float64, seed=16)
    g = torch.rand(shape[0], 1, *shape[2:], generator=torch.Generator().manual_seed(17), dtype=torch.float64)
    rows_budget = 2 * 7 * (32 + 2 * radius(67.0)) * shape[3] * 8
    items, rows, _, item_bands, row_bands = emulator.backward_plan(
        *shape[:1], *shape[2:], 3, 67.0, 8, rows_budget
    ).tolist()
    assert items == 1 and rows == 32 and row_bands == 3
    items_budget = 2 * one_item_budget(shape, torch.float64)
    assert emulator.backward_plan(shape[0], *shape[2:], 3, 67.0, 8, items_budget).tolist()[0::3] == [2, 2]
    expected = ops.ldr_flip_backward(g, a, b, 67.0, "srgb", 1e-15, [True, True])
    for budget in (rows_budget, items_budget):
        for mask in MASKS:
            tiled = emulator.ldr_flip_backward_tiled(g, a, b, 67.0, "srgb", 1e-15, mask, budget)
            check_tiled(
                tiled, emulator.ldr_flip_backward(g, a, b, 67.0, "srgb", 1e-15, mask), expected, torch.float64, mask
            )


@pytest.mark.parametrize("pad", [-1.0, 0.5, 2.0])
def test_hdr_exposures_past_an_items_count_are_ignored(ops, emulator, pad):
    # Item 1 uses two of three exposure columns; its third holds a value that would win pixels
    # (unlike a copy of the last one, which ties): the kernels must skip it, map and exposure map
    # alike.
    gen = torch.Generator().manual_seed(18)
    ref = torch.exp2(6 * torch.rand(2, 3, 21, 45, generator=gen, dtype=torch.float64) - 3)
    test = ref * (1 + 0.2 * torch.randn(ref.shape, generator=gen, dtype=torch.float64)).clamp(min=0.1)
    ex = torch.tensor([[-2.0, 0.0, 1.5], [0.0, 1.0, pad]], dtype=torch.float64)
    counts = torch.tensor([3, 2])
    expected = ops.hdr_flip(test, ref, ex, counts, 30.0, "aces", 1e-15)
    for got in (
        emulator.hdr_flip(test, ref, ex, counts, 30.0, "aces", 1e-15),
        emulator.hdr_flip_fused(test, ref, ex, counts, 30.0, "aces", 1e-15),
    ):
        close(got[0], expected[0], torch.float64)
        assert torch.equal(got[1], expected[1]) and torch.equal(got[2], expected[2])


# ---- each GPU generation's shared memory (flip_loss/cuda_arches.py) ----
# csrc/ops/cuda.cpp picks LDR-/HDR-FLIP's formulation from the device's shared memory per block
# (flip::cuda::use_fused_forward, use_tiled_backward: the tiles where they fit, else the row passes)
# and refuses a ppd whose row passes do not fit. The emulator given a generation's limit chooses
# the same way (its op `plan`) and refuses every launch beyond the limit, so each generation's
# launch sequences run here: at the default ppd, and at the largest ppd the generation supports.

# Shared memory per block -> the compute capabilities with that limit.
GENERATIONS = {}
for _arch, _limit in cuda_arches.SHARED_MEMORY_PER_BLOCK.items():
    GENERATIONS.setdefault(_limit, []).append(_arch)
LIMITS = sorted(GENERATIONS)
LIMIT_IDS = [f"{limit // 1024}KB-sm_{'-'.join(a.replace('.', '') for a in GENERATIONS[limit])}" for limit in LIMITS]
# The tiles' shared memory at the default ppd (R = 10), as docs/algorithm.md §8.8 states it: the fused
# forward (and kTiledGrad), then kTiledTranspose.
TILE_BYTES = {torch.float32: (95_040, 75_712), torch.float64: (190_080, 151_424)}


@contextmanager
def device_with(emulator, shared_memory_per_block):
    """The emulated device with this much shared memory per block, the other settings kept."""
    before = emulator.configure().tolist()  # sets the defaults, returns the settings before
    before[5] = bool(before[5])
    emulator.configure(*before[:-1], shared_memory_per_block)
    try:
        yield
    finally:
        emulator.configure(*before)


def plan_of(emulator, ppd, dtype):
    """(fused forward, tiled backward, row passes fit) as cuda.cpp decides on the emulated device."""
    return tuple(bool(v) for v in emulator.plan(ppd, torch.finfo(dtype).bits // 8).tolist()[:3])


def largest_ppd(emulator, dtype):
    """The largest ppd (at most MAX_PPD) whose row passes fit the emulated device, and a ppd just
    beyond it that cuda.cpp refuses (None when MAX_PPD fits)."""
    if plan_of(emulator, MAX_PPD, dtype)[2]:
        return MAX_PPD, None
    lo, hi = DEFAULT_PPD, MAX_PPD
    while hi - lo > 1e-4 * lo:
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if plan_of(emulator, mid, dtype)[2] else (lo, mid)
    return lo, hi


def check_plan(ops, emulator, ppd, dtype, fused, tiled, shape):
    """LDR-FLIP's forward, backward and the pair that keeps the sensitivities, and HDR-FLIP's forward
    and backward, in the formulations chosen (`fused`, `tiled`; else the row passes), against the
    CPU kernels within the promised agreement; the tiled backward bit for bit against the row passes."""
    a, b = inputs(shape, dtype, seed=40)
    g = torch.rand(shape[0], 1, *shape[2:], generator=torch.Generator().manual_seed(41), dtype=dtype)
    forward = emulator.ldr_flip_fused if fused else emulator.ldr_flip
    assert within_promise(forward(a, b, ppd, "srgb", 1e-15), ops.ldr_flip(a, b, ppd, "srgb", 1e-15), dtype)
    want = ops.ldr_flip_backward(g, a, b, ppd, "srgb", 1e-15, [True, True])
    rows = emulator.ldr_flip_backward(g, a, b, ppd, "srgb", 1e-15, [True, True])
    got = emulator.ldr_flip_backward_tiled(g, a, b, ppd, "srgb", 1e-15, [True, True], SMALLEST) if tiled else rows
    for x, r, y in zip(got, rows, want):
        assert within_promise(x, y, dtype, grad=True) and torch.equal(x, r)
    flip_map, sens = emulator.ldr_flip_with_sensitivities(a, b, ppd, "linear", 1e-15, [True, False], tiled)
    want_map, want_sens = ops._ldr_flip_with_sensitivities(a, b, ppd, "linear", 1e-15, [True, False])
    assert within_promise(flip_map, want_map, dtype) and within_promise(sens, want_sens, dtype, grad=True)
    g_test, _ = emulator.ldr_flip_backward_from_sensitivities(g, sens, a, b, ppd, "linear", [True, False], tiled)
    want_test, _ = ops._ldr_flip_backward_from_sensitivities(g, want_sens, a, b, ppd, "linear", [True, False])
    assert within_promise(g_test, want_test, dtype, grad=True)
    gen = torch.Generator().manual_seed(42)
    ref = torch.exp2(6 * torch.rand(shape, generator=gen, dtype=dtype) - 3)
    test = ref * (1 + 0.2 * torch.randn(ref.shape, generator=gen, dtype=dtype)).clamp(min=0.1)
    ex = torch.tensor([[-2.0, 0.0, 1.5], [0.0, 1.0, 1.0]], dtype=dtype)[: shape[0]]
    counts = torch.tensor([3, 2])[: shape[0]]
    cpu = ops.hdr_flip(test, ref, ex, counts, ppd, "aces", 1e-15)
    hdr = (emulator.hdr_flip_fused if fused else emulator.hdr_flip)(test, ref, ex, counts, ppd, "aces", 1e-15)
    assert within_promise(hdr[0], cpu[0], dtype)
    assert (hdr[2] != cpu[2]).float().mean().item() < gpu_agreement.HDR_INDEX_MISMATCH
    args = (g, test, ref, ex, counts, cpu[2], ppd, "aces", 1e-15, [True, True])
    got = emulator.hdr_flip_backward_tiled(*args, SMALLEST) if tiled else emulator.hdr_flip_backward(*args)
    for x, y in zip(got, ops.hdr_flip_backward(*args)):
        assert within_promise(x, y, dtype, grad=True)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("limit", LIMITS, ids=LIMIT_IDS)
def test_each_generation_runs_the_formulation_its_shared_memory_allows(ops, emulator, limit, dtype):
    # At the default ppd the tiles fit where docs/algorithm.md §8.8 says they need no more than the
    # block has: in float32 everywhere but sm_75 (64 KB); in float64 only on sm_90 and sm_100. The
    # formulation not chosen is refused, as its launch would be on that GPU.
    fused_bytes, transpose_bytes = TILE_BYTES[dtype]
    with device_with(emulator, limit):
        fused, tiled, rows_fit = plan_of(emulator, DEFAULT_PPD, dtype)
        assert (fused, tiled, rows_fit) == (fused_bytes <= limit, max(fused_bytes, transpose_bytes) <= limit, True)
        shape = (2, 3, 21, 40)
        check_plan(ops, emulator, DEFAULT_PPD, dtype, fused, tiled, shape)
        a, b = inputs(shape, dtype)
        g = torch.ones(2, 1, 21, 40, dtype=dtype)
        if not fused:
            with pytest.raises(RuntimeError, match=f"do not fit the device's {limit} bytes"):
                emulator.ldr_flip_fused(a, b, DEFAULT_PPD, "srgb", 1e-15)
        if not tiled:
            with pytest.raises(RuntimeError, match=f"do not fit the device's {limit} bytes"):
                emulator.ldr_flip_backward_tiled(g, a, b, DEFAULT_PPD, "srgb", 1e-15, [True, True], SMALLEST)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("limit", LIMITS, ids=LIMIT_IDS)
def test_each_generation_at_the_largest_ppd_it_supports(ops, emulator, limit, dtype):
    # The row passes' shared memory grows with the filter radius (7 planes of a 128-pixel row and its
    # 2R halo): every ppd up to MAX_PPD fits but on sm_75 (both dtypes) and, in float64, the 99 KB
    # generations; there the largest that fits runs, and one just beyond is refused.
    with device_with(emulator, limit):
        ppd, beyond = largest_ppd(emulator, dtype)
        assert (beyond is None) == (limit >= (99 if dtype == torch.float32 else 163) * 1024)
        assert plan_of(emulator, ppd, dtype) == (False, False, True)
        check_plan(ops, emulator, ppd, dtype, False, False, (1, 3, 9, 13))
        if beyond is not None:
            a, b = inputs((1, 3, 9, 13), dtype)
            with pytest.raises(RuntimeError, match="pixels_per_degree is too large"):
                emulator.ldr_flip(a, b, beyond, "srgb", 1e-15)


# ---- the GPU's floating-point contract (docs/algorithm.md §9.2) ----
# nvcc compiles the device code with -fmad=false, and the filter taps' sums as the fused
# multiply-adds the source asks for (FLIP_FMADD, csrc/flip/cuda/filter_sums.h); the emulator is
# compiled to the same IEEE operations in the same order (-ffp-contract=off, std::fma for those
# taps). What the GPU promises beyond a tolerance is therefore checked here, on its own arithmetic:
# identical images give exactly 0, and swapping test and reference gives the same bits. (CUDA's
# exp2, pow, cbrt and log are the one difference left, and they go through both images alike.)
# nvcc's default contraction broke both: it fused a product of one image into the other's
# difference.

# Two items, several tiles and walks, two row bands in the smallest budget.
CONTRACT_SHAPE = (2, 3, 21, 40)
# float32 at the default ppd runs the tiled kernels' build for fixed radii, ppd 10 the run-time radii.
CONTRACT_CASES = [(torch.float32, DEFAULT_PPD, "srgb"), (torch.float32, 10.0, "linear"), (torch.float64, 67.0, "srgb")]
CONTRACT_IDS = ["float32-default-ppd", "float32-ppd10", "float64"]


def ldr_maps(emu, a, b, ppd, space, eps):
    """LDR-FLIP's map from every formulation: row passes, fused forward, and the forwards that keep
    the sensitivities (tiled and rows)."""
    maps = {"rows": emu.ldr_flip(a, b, ppd, space, eps), "fused": emu.ldr_flip_fused(a, b, ppd, space, eps)}
    for tiled in (True, False):
        maps[f"kept, tiled={tiled}"] = emu.ldr_flip_with_sensitivities(a, b, ppd, space, eps, [True, True], tiled)[0]
    return maps


def ldr_gradients(emu, g, a, b, ppd, space, eps):
    """(formulation, mask) -> (gradient of a, gradient of b) from every backward formulation, for
    every gradient mask: row passes, tiled (one band and row bands), and from kept sensitivities
    (tiled and rows; with the sensitivities kept for the mask)."""
    out = {}
    for mask in MASKS:
        key = tuple(mask)
        out["rows", key] = tuple(emu.ldr_flip_backward(g, a, b, ppd, space, eps, mask))
        for budget in (ONE_BAND, SMALLEST):
            out[f"tiled {budget}", key] = tuple(emu.ldr_flip_backward_tiled(g, a, b, ppd, space, eps, mask, budget))
        for tiled in (True, False):
            _, sens = emu.ldr_flip_with_sensitivities(a, b, ppd, space, eps, mask, tiled)
            grads = emu.ldr_flip_backward_from_sensitivities(g, sens, a, b, ppd, space, mask, tiled)
            out[f"kept, tiled={tiled}", key] = tuple(grads)
            if mask != [True, True]:  # one image's sensitivities, whichever it is
                out[f"sensitivities, tiled={tiled}", key] = (sens, sens)
    return out


def hdr_case(dtype):
    g = torch.Generator().manual_seed(31)
    ref = torch.exp2(6 * torch.rand(*CONTRACT_SHAPE, generator=g, dtype=dtype) - 3)
    test = ref * (1 + 0.2 * torch.randn(ref.shape, generator=g, dtype=dtype)).clamp(min=0.1)
    ex = torch.tensor([[-2.0, 0.0, 1.5], [0.0, 1.0, 1.0]], dtype=dtype)
    return (
        test,
        ref,
        ex,
        torch.tensor([3, 2]),
        torch.rand(CONTRACT_SHAPE[0], 1, *CONTRACT_SHAPE[2:], generator=g, dtype=dtype),
    )


def assert_bits(x, y, what):
    assert x.dtype == y.dtype and x.shape == y.shape, what
    diff = (x != y).sum().item()
    assert diff == 0, f"{what}: {diff} values differ, by up to {(x - y).abs().max().item():.3g}"


@pytest.mark.parametrize("dtype, ppd, space", CONTRACT_CASES, ids=CONTRACT_IDS)
def test_identical_images_give_exactly_zero_in_every_formulation(emulator, dtype, ppd, space):
    # docs/algorithm.md §4.14: exactly 0 with eps = 0, on the GPU too (§9.2).
    a, _ = inputs(CONTRACT_SHAPE, dtype, seed=30)
    for name, m in ldr_maps(emulator, a, a.clone(), ppd, space, 0.0).items():
        assert_bits(m, torch.zeros_like(m), f"LDR-FLIP, {name}")
    ya = a[:, 1:2]
    m = emulator.feature_difference(ya, ya.clone(), ppd, 0.0)
    assert_bits(m, torch.zeros_like(m), "feature_difference")
    test, _, ex, counts, _ = hdr_case(dtype)
    for name, fwd in (("rows", emulator.hdr_flip), ("fused", emulator.hdr_flip_fused)):
        m = fwd(test, test.clone(), ex, counts, ppd, "aces", 0.0)[0]
        assert_bits(m, torch.zeros_like(m), f"HDR-FLIP, {name}")


@pytest.mark.parametrize("dtype, ppd, space", CONTRACT_CASES, ids=CONTRACT_IDS)
def test_swapping_test_and_reference_gives_the_same_bits(emulator, dtype, ppd, space):
    # docs/algorithm.md §4.14: LDR-FLIP is symmetric (every distance is), so swapping the images
    # gives the same map and swaps the gradients, bit for bit in every formulation, each gradient
    # alone or both; HDR-FLIP too for given exposures (only automatic ones, from the reference,
    # make it asymmetric: §5.7), its exposure map and winning index included.
    a, b = inputs(CONTRACT_SHAPE, dtype, seed=32)
    maps, swapped = ldr_maps(emulator, a, b, ppd, space, 1e-15), ldr_maps(emulator, b, a, ppd, space, 1e-15)
    for name in maps:
        assert_bits(maps[name], swapped[name], f"LDR-FLIP map, {name}")
    assert maps["rows"].max() > 0.1  # a real difference, not a trivially symmetric zero map
    ya, yb = a[:, 1:2], b[:, 1:2]
    assert_bits(
        emulator.feature_difference(ya, yb, ppd, 1e-15), emulator.feature_difference(yb, ya, ppd, 1e-15), "features"
    )
    g = torch.rand(CONTRACT_SHAPE[0], 1, *CONTRACT_SHAPE[2:], generator=torch.Generator().manual_seed(33), dtype=dtype)
    grads, grads_swapped = (ldr_gradients(emulator, g, x, y, ppd, space, 1e-15) for x, y in ((a, b), (b, a)))
    for (name, mask), (ga, gb) in grads.items():
        gb_swapped, ga_swapped = grads_swapped[name, mask[::-1]]
        assert_bits(ga, ga_swapped, f"{name}, mask {mask}: the first image's gradient")
        assert_bits(gb, gb_swapped, f"{name}, mask {mask}: the second image's gradient")
    test, ref, ex, counts, hg = hdr_case(dtype)
    for name, fwd in (("rows", emulator.hdr_flip), ("fused", emulator.hdr_flip_fused)):
        for x, y, what in zip(
            fwd(test, ref, ex, counts, ppd, "aces", 1e-15),
            fwd(ref, test, ex, counts, ppd, "aces", 1e-15),
            ("map", "exposure map", "index"),
        ):
            assert_bits(x, y, f"HDR-FLIP {what}, {name}")
    index = emulator.hdr_flip(test, ref, ex, counts, ppd, "aces", 1e-15)[2]
    for mask in MASKS:
        args, args_swapped = ((hg, x, y, ex, counts, index, ppd, "aces", 1e-15) for x, y in ((test, ref), (ref, test)))
        got = {
            "rows": (emulator.hdr_flip_backward(*args, mask), emulator.hdr_flip_backward(*args_swapped, mask[::-1])),
            "tiled": (
                emulator.hdr_flip_backward_tiled(*args, mask, SMALLEST),
                emulator.hdr_flip_backward_tiled(*args_swapped, mask[::-1], SMALLEST),
            ),
        }
        for name, ((gt, gr), (gr_swapped, gt_swapped)) in got.items():
            assert_bits(gt, gt_swapped, f"HDR-FLIP {name}, mask {mask}: the test image's gradient")
            assert_bits(gr, gr_swapped, f"HDR-FLIP {name}, mask {mask}: the reference's gradient")


def within_promise(x, y, dtype, grad=False):
    """The GPU and CPU agreement the README promises, as flip_loss/gpu_agreement.py defines it:
    maps within 1e-5 (float32) / 1e-10 (float64) relative to max(1, largest value), gradients
    within 5e-4 / 1e-10 of their scale."""
    return gpu_agreement.within(x, y, dtype, gradient=grad)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_device_arithmetic_stays_within_the_gpu_promise(ops, emulator, dtype):
    # The device's arithmetic (the emulator: the CPU kernels' roundings but for the filter taps'
    # fused multiply-adds and the order of the GPU formulation's sums; CUDA's own exp2, pow, cbrt
    # and log are not emulated) stays within the promised agreement with the CPU kernels: LDR and
    # HDR, both formulations, both gradients.
    a, b = inputs((2, 3, 37, 45), dtype, seed=12)
    g = torch.rand(2, 1, 37, 45, generator=torch.Generator().manual_seed(13), dtype=dtype)
    for space in ("srgb", "linear"):
        cpu = ops.ldr_flip(a, b, 67.0, space, 1e-15)
        for fwd in (emulator.ldr_flip_fused, emulator.ldr_flip):
            assert within_promise(fwd(a, b, 67.0, space, 1e-15), cpu, dtype)
        want = ops.ldr_flip_backward(g, a, b, 67.0, space, 1e-15, [True, True])
        tiled = emulator.ldr_flip_backward_tiled(g, a, b, 67.0, space, 1e-15, [True, True], SMALLEST)
        rows = emulator.ldr_flip_backward(g, a, b, 67.0, space, 1e-15, [True, True])
        for x, r, y in zip(tiled, rows, want):
            assert within_promise(x, y, dtype, grad=True) and within_promise(r, y, dtype, grad=True)
    # The fused multiply-adds did change the bits (else this test would test nothing).
    if dtype == torch.float32:
        assert not torch.equal(
            emulator.ldr_flip_fused(a, b, 67.0, "srgb", 1e-15), ops.ldr_flip(a, b, 67.0, "srgb", 1e-15)
        )
    gen = torch.Generator().manual_seed(14)
    ref = torch.exp2(6 * torch.rand(2, 3, 21, 45, generator=gen, dtype=dtype) - 3)
    test = ref * (1 + 0.2 * torch.randn(ref.shape, generator=gen, dtype=dtype)).clamp(min=0.1)
    ex = torch.tensor([[-2.0, 0.0, 1.5], [0.0, 1.0, 1.0]], dtype=dtype)
    counts = torch.tensor([3, 2])
    cpu = ops.hdr_flip(test, ref, ex, counts, 30.0, "aces", 1e-15)
    got = emulator.hdr_flip_fused(test, ref, ex, counts, 30.0, "aces", 1e-15)
    assert within_promise(got[0], cpu[0], dtype)
    assert (
        got[2] != cpu[2]
    ).float().mean().item() < gpu_agreement.HDR_INDEX_MISMATCH  # near-ties may pick the other exposure
    hg = torch.rand(2, 1, 21, 45, generator=gen, dtype=dtype)
    args = (hg, test, ref, ex, counts, cpu[2], 30.0, "aces", 1e-15, [True, True])
    for x, y in zip(emulator.hdr_flip_backward_tiled(*args, SMALLEST), ops.hdr_flip_backward(*args)):
        assert within_promise(x, y, dtype, grad=True)
