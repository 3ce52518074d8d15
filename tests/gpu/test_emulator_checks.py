"""The emulator as a checker: the kernels' own block code (csrc/flip/cuda/kernel_bodies.h) runs one
fiber per CUDA thread with real barriers, checked shared memory, guarded global buffers and
NaN-filled scratch (tests/emulator), so a barrier left out, a halo off by one or a band's write
skipped must fail. Each mutation here is made to today's kernels and must be caught; the same cases
without it pass. Grid limits shrunk to a few blocks make every block run its grid-stride loops
(several rows, tiles, items or exposures per block), where the barriers at the end of a loop body
matter."""

import re
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch

from flip_loss.constants import DEFAULT_PPD

KERNEL_BODIES_H = Path(__file__).resolve().parents[2] / "csrc" / "flip" / "cuda" / "kernel_bodies.h"
SMALLEST = 1  # the tiled backward in bands of 16 rows, one item each
TINY_GRID = dict(max_grid_y=2, max_grid_z=1, max_blocks=3)


SETTINGS = [
    "skip_barrier_line",
    "skip_launch",
    "max_grid_y",
    "max_grid_z",
    "max_blocks",
    "reverse",
    "mutant",
    "shared_memory_per_block",
]


def current(em):
    """The emulator's run-time settings (tests/emulator/block_runner.h, Settings) as a dict."""
    values = dict(zip(SETTINGS, em.configure().tolist()))  # configure() returns the previous ones
    values["reverse"] = bool(values["reverse"])
    em.configure(**values)
    return values


@contextmanager
def configured(em, **settings):
    """The emulator's settings changed as given (the others kept) for a block, restored after."""
    before = current(em)
    em.configure(**{**before, **settings})
    try:
        yield
    finally:
        em.configure(**before)


def images(shape=(2, 3, 37, 45), dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    a = torch.rand(shape, generator=g, dtype=dtype)
    b = (a + 0.1 * torch.randn(shape, generator=g, dtype=dtype)).clamp(0, 1)
    grad = torch.rand(shape[0], 1, *shape[2:], generator=g, dtype=dtype)
    return a, b, grad


def hdr_images(dtype=torch.float64):
    # Brightness rising across the width: each exposure wins a strip, so the tiled kernels' tiles
    # disagree on whether the exposure won them (the __syncthreads_or decides per tile).
    g = torch.Generator().manual_seed(3)
    ramp = torch.exp2(torch.linspace(-4, 8, 70, dtype=dtype))
    ref = torch.rand(2, 3, 37, 70, generator=g, dtype=dtype) * ramp
    test = ref * (1 + 0.2 * torch.randn(ref.shape, generator=g, dtype=dtype)).clamp(min=0.1)
    ex = torch.tensor([[-2.0, 0.0, 3.0], [0.0, 1.0, 1.0]], dtype=dtype)
    counts = torch.tensor([3, 2])
    grad = torch.rand(2, 1, 37, 70, generator=g, dtype=dtype)
    return test, ref, ex, counts, grad


def close(x, y):
    """float64 agreement of the emulated GPU formulation and the CPU kernels: within 1e-11 of the
    larger magnitude. The GPU's filter taps are fused multiply-adds (FLIP_FMADD, filter_sums.h) and
    the CPU's are not, which leaves the gradients up to about 1.5e-12 of their scale apart here; a
    mutation moves them far more."""
    return x.shape == y.shape and bool(((x - y).abs() <= 1e-11 * max(1.0, y.abs().max().item())).all())


# Per block function of kernel_bodies.h, a run of the op that launches it and whether the result is
# the CPU kernels'. Each returns True when the emulated results match.
def run_rows_forward(ops, em):
    a, b, _ = images()
    return close(em.ldr_flip(a, b, 30.0, "srgb", 1e-15), ops.ldr_flip(a, b, 30.0, "srgb", 1e-15))


def run_rows_backward(ops, em):
    a, b, g = images()
    want = ops.ldr_flip_backward(g, a, b, 30.0, "srgb", 1e-15, [True, True])
    got = em.ldr_flip_backward(g, a, b, 30.0, "srgb", 1e-15, [True, True])
    return all(close(x, y) for x, y in zip(got, want))


def run_fused(ops, em):
    a, b, _ = images()
    return close(em.ldr_flip_fused(a, b, 30.0, "srgb", 1e-15), ops.ldr_flip(a, b, 30.0, "srgb", 1e-15))


def run_fused_walk(ops, em):
    """The fused forward at ppd 67 (radius 10): each block walks down three tiles, keeping 2R = 20
    rows of horizontal outputs between them in two chunks of at most kTileH rows (float64: the
    build that reads the radii at run time)."""
    a, b, _ = images()
    return close(em.ldr_flip_fused(a, b, 67.0, "srgb", 1e-15), ops.ldr_flip(a, b, 67.0, "srgb", 1e-15))


def run_tiled(ops, em):
    a, b, g = images()
    want = ops.ldr_flip_backward(g, a, b, 30.0, "srgb", 1e-15, [True, True])
    got = em.ldr_flip_backward_tiled(g, a, b, 30.0, "srgb", 1e-15, [True, True], SMALLEST)
    return all(close(x, y) for x, y in zip(got, want))


def run_tiled_hdr(ops, em):
    test, ref, ex, counts, g = hdr_images()
    index = ops.hdr_flip(test, ref, ex, counts, 20.0, "aces", 1e-15)[2]
    args = (g, test, ref, ex, counts, index, 20.0, "aces", 1e-15, [True, True])
    want = ops.hdr_flip_backward(*args)
    got = em.hdr_flip_backward_tiled(*args, SMALLEST)
    return all(close(x, y) for x, y in zip(got, want))


RUNS = {
    "horizontal_pass_block": (run_rows_forward,),
    "horizontal_transpose_block": (run_rows_backward,),
    "tile_forward_block": (run_fused_walk,),
    "fused_forward_block": (run_fused,),
    "tiled_grad_block": (run_tiled_hdr, run_tiled),
    "tiled_transpose_block": (run_tiled_hdr,),
}

# The barriers whose removal changes nothing, by (block function, n-th barrier in it), as the
# checker finds them: the barrier after the vertical pass of the tile forward (the per-pixel tails
# read, for each pixel, the values the same thread wrote: the loops share their index mapping),
# and the last barrier of kTiledTranspose's tile loop (the next tile's first phase writes only the
# gradient-plane region of shared memory, which no thread reads after the barrier before the
# transposed vertical pass, and all threads meet at the next barrier before anything else is
# written). They stay as guards for layouts that alias regions, which must then show them needed
# here.
REDUNDANT = {
    ("tile_forward_block", 3),
    ("tiled_transpose_block", 3),
}


def barriers():
    """(line, block function, index within it, the call) of every barrier in kernel_bodies.h."""
    found, function, counts = [], None, {}
    for number, line in enumerate(KERNEL_BODIES_H.read_text().splitlines(), start=1):
        m = re.match(r"FLIP_HD void (\w+_block)\(", line)
        if m:
            function = m.group(1)
        if re.search(r"\bb\.sync(_or)?\(", line):
            k = counts.get(function, 0)
            counts[function] = k + 1
            found.append((number, function, k, "sync_or" if "sync_or" in line else "sync"))
    return found


def test_every_block_function_with_barriers_has_a_run():
    found = barriers()
    assert {f for _, f, _, _ in found} == set(RUNS)
    assert len(found) == 15  # 2 + 2 + 4 + 1 + 2 + 4: a new barrier must be added to the cases here


@pytest.mark.parametrize("line, function, k, kind", barriers(), ids=lambda v: str(v))
def test_each_barrier_left_out_is_caught_or_is_redundant(ops, emulator, line, function, k, kind):
    # Caught: by at least one of the function's runs (kTiledGrad's barrier after the tail only by
    # LDR-FLIP's: in HDR-FLIP's the next tile's __syncthreads_or is a barrier before any write).
    runs = RUNS[function]
    with configured(emulator, **TINY_GRID):
        assert all(run(ops, emulator) for run in runs)  # the cases pass with every barrier in place
        with configured(emulator, skip_barrier_line=line, **TINY_GRID):
            caught = []
            for run in runs:
                try:
                    assert run(ops, emulator)
                except RuntimeError as e:
                    assert re.search("race|divergence|uninitialised", str(e)), e
                    caught.append(run.__name__)
            assert caught == [] if (function, k) in REDUNDANT else caught != []


def test_a_race_names_the_kernel_block_and_threads(ops, emulator):
    line = next(n for n, f, k, _ in barriers() if f == "tile_forward_block" and k == 1)  # after the load
    with configured(emulator, skip_barrier_line=line):
        with pytest.raises(RuntimeError) as err:
            run_fused(ops, emulator)
    message = str(err.value)
    assert "fused_forward_kernel" in message and re.search(r"block \(\d+, \d+, \d+\) thread \d+", message)


def test_a_divergent_barrier_is_reported(ops, emulator):
    # Without the __syncthreads_or, each thread takes its own branch: some zero the planes and go
    # on to the next tile's barrier, the others wait at the forward's first barrier.
    line = next(n for n, f, _, kind in barriers() if f == "tiled_grad_block" and kind == "sync_or")
    with configured(emulator, skip_barrier_line=line, **TINY_GRID):
        with pytest.raises(RuntimeError, match="divergence"):
            run_tiled_hdr(ops, emulator)


def every_kernel(emulator, ops, dtype):
    """Calls that together launch every kernel: LDR and HDR, both formulations, each gradient
    alone, several bands, the single stages, the kept pair (tiled and rows), walks that stride
    under tiny grids. Each returns a list of tensors."""
    a, b, g = images(dtype=dtype)
    test, ref, ex, counts, hg = hdr_images(dtype)
    index = ops.hdr_flip(test, ref, ex, counts, 20.0, "aces", 1e-15)[2]
    hdr_args = (hg, test, ref, ex, counts, index, 20.0, "aces", 1e-15)
    y_a, y_b = a[:, 1:2], b[:, 1:2]
    tall_a, tall_b, tall_g = images(shape=(1, 3, 150, 40), dtype=dtype, seed=4)  # walks of 4 tiles, 3 per column
    kept = ops._ldr_flip_with_sensitivities(a, b, 30.0, "srgb", 1e-15, [False, True])[1]
    return [
        lambda: [emulator.ldr_flip(a, b, 30.0, "srgb", 1e-15)],
        lambda: [emulator.ldr_flip_fused(a, b, 30.0, "linear", 1e-15)],
        lambda: list(emulator.ldr_flip_backward(g, a, b, 30.0, "srgb", 1e-15, [True, True])),
        lambda: list(emulator.ldr_flip_backward_tiled(g, a, b, 30.0, "srgb", 1e-15, [True, False], SMALLEST)),
        lambda: list(emulator.ldr_flip_backward_tiled(g, a, b, 30.0, "srgb", 1e-15, [False, True], 1 << 25)),
        lambda: list(emulator.hdr_flip(test, ref, ex, counts, 20.0, "aces", 1e-15)),
        lambda: list(emulator.hdr_flip_fused(test, ref, ex, counts, 20.0, "hable", 1e-15)),
        lambda: list(emulator.hdr_flip_backward(*hdr_args, [True, True])),
        lambda: list(emulator.hdr_flip_backward_tiled(*hdr_args, [True, True], SMALLEST)),
        lambda: [emulator.csf_filter(a, 30.0), emulator.csf_filter_backward(b, a, 30.0)],
        lambda: [emulator.feature_difference(y_a, y_b, 30.0, 1e-15)],
        lambda: list(emulator.feature_difference_backward(g, y_a, y_b, 30.0, 1e-15, [False, True])),
        lambda: [emulator.ldr_flip_fused(tall_a, tall_b, 30.0, "srgb", 1e-15)],
        lambda: list(
            emulator.ldr_flip_backward_tiled(tall_g, tall_a, tall_b, 30.0, "srgb", 1e-15, [True, True], 1 << 25)
        ),
        lambda: list(emulator.ldr_flip_with_sensitivities(a, b, 30.0, "srgb", 1e-15, [True, False], True)),
        lambda: list(emulator.ldr_flip_with_sensitivities(a, b, 30.0, "linear", 1e-15, [True, True], False)),
        lambda: list(emulator.ldr_flip_backward_from_sensitivities(g, kept, a, b, 30.0, "srgb", [False, True], True)),
        lambda: list(emulator.ldr_flip_backward_from_sensitivities(g, kept, a, b, 30.0, "srgb", [False, True], False)),
    ]


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_tiny_grids_stride_to_the_same_results(ops, emulator, dtype):
    # Grid y/z and the grid-stride kernels' blocks capped to a few: every block loops over rows,
    # tiles, items, item-images and pixels, as on a GPU past CUDA's limits; the results are bit for
    # bit those of full grids.
    for run in every_kernel(emulator, ops, dtype):
        full = run()
        with configured(emulator, **TINY_GRID):
            tiny = run()
        assert len(full) == len(tiny) and all(torch.equal(x, y) for x, y in zip(full, tiny))


@pytest.mark.parametrize("tiny", [False, True], ids=["full grids", "tiny grids"])
def test_results_do_not_depend_on_the_order_of_blocks_and_threads(ops, emulator, tiny):
    # The kernels' promise (kernel_bodies.h): every output value is written by one thread, and no
    # thread reads what another block of the same launch writes, so nothing depends on scheduling.
    # Blocks and threads run in reverse order give the same bits; a global-memory race between
    # threads or blocks, which the shared-memory shadow does not see, would not.
    grid = TINY_GRID if tiny else {}
    for run in every_kernel(emulator, ops, torch.float64):
        with configured(emulator, **grid):
            forward = run()
        with configured(emulator, reverse=True, **grid):
            backward = run()
        assert all(torch.equal(x, y) for x, y in zip(forward, backward))


def test_a_band_whose_gradient_planes_were_not_written_poisons_the_gradient(ops, emulator):
    # The tiled backward: kTiledGrad of each band writes the gradient planes kTiledTranspose reads; the
    # scratch is NaN before each band. Left out, band 1's kTiledGrad (launch 2: band 0 is launches 0
    # and 1) leaves kTiledTranspose reading NaN, in band 1's rows and no others.
    a, b, g = images(shape=(1, 3, 40, 45))
    want = ops.ldr_flip_backward(g, a, b, 30.0, "srgb", 1e-15, [True, True])
    with configured(emulator, skip_launch=2):
        got = emulator.ldr_flip_backward_tiled(g, a, b, 30.0, "srgb", 1e-15, [True, True], SMALLEST)
    for x, y in zip(got, want):
        bad = x.isnan().any(1)[0].any(1)
        assert bad[16:32].all() and not bad[:16].any() and not bad[32:].any()
        assert close(x[..., :16, :], y[..., :16, :])


def test_a_launch_left_out_of_the_row_passes_is_caught(ops, emulator):
    # Without the V pass (launch 1 of the forward) the map stays as allocated: the emulator's copy
    # of an output starts as NaN, where the GPU's would hold whatever the allocator left (often the
    # last call's correct result).
    a, b, _ = images()
    emulator.ldr_flip(a, b, 30.0, "srgb", 1e-15)  # a correct map, which a reused buffer would hold
    with configured(emulator, skip_launch=1):
        out = emulator.ldr_flip(a, b, 30.0, "srgb", 1e-15)
    assert out.isnan().all()


def test_settings_are_taken_when_a_call_starts(ops, emulator):
    # A configure() from another thread while a call runs (the ops release the GIL) does not
    # reach into that call: each call works with the settings it started with.
    import threading

    a, b, g = images()
    want = ops.ldr_flip_backward(g, a, b, 30.0, "srgb", 1e-15, [True, True])
    result = {}

    def call():
        result["got"] = emulator.ldr_flip_backward_tiled(g, a, b, 30.0, "srgb", 1e-15, [True, True], SMALLEST)

    line = next(n for n, f, k, _ in barriers() if f == "tile_forward_block" and k == 1)  # after the load
    worker = threading.Thread(target=call)
    with configured(emulator):
        worker.start()
        import time

        time.sleep(0.2)
        with configured(emulator, skip_barrier_line=line):
            worker.join()
    assert all(close(x, y) for x, y in zip(result["got"], want))


# Source mutations, each switched on in one build of mutated sources (tests/emulator,
# mutant_ops): (file under csrc/, expression, its mutant, the run that must catch it).
MUTATIONS = (
    # The fused forward's input tile one column off: its halo shifted.
    ("flip/cuda/fused_forward.h", "clampi(x0 - R + at.col, 0, g.w - 1)", "clampi(x0 - R + 1 + at.col, 0, g.w - 1)"),
    # kTiledTranspose's gradient-plane tile read one row off.
    ("flip/cuda/tiled_backward.h", "gp[q * stride + off]", "gp[q * stride + off + g.w]"),
    # A band holding one gradient-plane row too few above it.
    (
        "flip/cuda/tiled_backward.h",
        "b.g0 = b.y0 - R > 0 ? b.y0 - R : 0;",
        "b.g0 = b.y0 - R + 1 > 0 ? b.y0 - R + 1 : 0;",
    ),
    # kTiledGrad skipping the test image's gradient planes in the last row of its band.
    (
        "flip/cuda/tiled_backward.h",
        "if (out_t) store_pixel_gradients(out_t, stride, q, gFt, gft);",
        "if (out_t && y != b.g1 - 1) store_pixel_gradients(out_t, stride, q, gFt, gft);",
    ),
    # The fused horizontal pass centred one column right in shared memory.
    ("flip/cuda/fused_forward.h", "row * stride + col + R", "row * stride + col + R + 1"),
    # The row pass H's tile and halo one column off.
    ("flip/cuda/row_passes.h", "clampi(x0 - R + i, 0, g.w - 1)", "clampi(x0 - R + i + 1, 0, g.w - 1)"),
    # kTiledTranspose judging whether an exposure won a tile by the band's output rows instead of the
    # gradient-plane rows it reads (a winning pixel just above the band is missed).
    (
        "flip/cuda/kernel_bodies.h",
        "tile_won(p.index + n * g.hw(), g, s.hs.i, y0, x0, band.g0, band.g1, R, b.tid(), b.threads())",
        "tile_won(p.index + n * g.hw(), g, s.hs.i, y0, x0, band.y0, band.y1, R, b.tid(), b.threads())",
    ),
    # tile_won blind to the image's last column.
    (
        "flip/cuda/tiled_backward.h",
        "x >= 0 && x < g.w && index[y * g.w + x] == i",
        "x >= 0 && x < g.w - 1 && index[y * g.w + x] == i",
    ),
    # The last item band running past the batch.
    ("flip/cuda/tiled_backward.h", "b.n1 = b.n0 + items < g.n ? b.n0 + items : g.n;", "b.n1 = b.n0 + items;"),
    # An item's exposures past its count taken too.
    ("flip/hdr_pixel.h", "i < count(n)", "i < E"),
    # The kernels compiled for the default ppd's radii reading the CSF taps one place off.
    (
        "flip/cuda/launch_params.h",
        "FixedFilter<T, Rc>{w + offset(i), w + offset(i) + 2 * Rc + 1, w + offset(i) + 3 * Rc + 1}",
        "FixedFilter<T, Rc>{w + offset(i) + 1, w + offset(i) + 2 * Rc + 1, w + offset(i) + 3 * Rc + 1}",
    ),
    # ... and the feature filters' border sums of the last row and column one place off.
    (
        "flip/cuda/launch_params.h",
        "FixedFilter<T, Rf>{w + offset(i), w + offset(i) + 2 * Rf + 1, w + offset(i) + 3 * Rf + 1}",
        "FixedFilter<T, Rf>{w + offset(i), w + offset(i) + 2 * Rf + 1, w + offset(i) + 3 * Rf}",
    ),
    # The backward from kept sensitivities scaling each by the gradient of the pixel to its right.
    ("flip/cuda/tiled_backward.h", "gmap[off]", "gmap[off + (x + 1 < g.w ? 1 : 0)]"),
    # The forward that keeps them doing so for a gradient of 2 instead of 1.
    ("flip/cuda/tiled_backward.h", "unit_gradient<T>()", "T(2)"),
    # kTiledGrad going on with the walk after a tile it skipped, on rows of the tile before that.
    (
        "flip/cuda/kernel_bodies.h",
        "tiled_zero_planes(g, band, n, y0, x0, b.tid(), b.threads(), p.scratch);\n          fresh = true;",
        "tiled_zero_planes(g, band, n, y0, x0, b.tid(), b.threads(), p.scratch);",
    ),
    # The vertical filters of the build for fixed radii (a thread takes 4 rows of a column) centred
    # one row low.
    ("flip/cuda/fused_forward.h", "o + R * kTileW", "o + (R + 1) * kTileW"),
    # ... and the transposed ones folding the image's last row's clamped samples into the row above.
    ("flip/cuda/filter_sums.h", "len - 1 - pos", "len - 2 - pos"),
    # The fused forward writing each pixel's error into its right neighbour too: a global-memory
    # race between threads and between blocks (the last column of a tile is the next one's first).
    ("flip/cuda/fused_forward.h", "out[p] = err;", "out[p] = err; if (x + 1 < g.w) out[p + 1] = err;"),
)


def run_fused_both_orders(ops, em):
    """run_fused with the blocks and threads in launch order and in reverse (which the kernels'
    results must not depend on)."""
    with configured(em, reverse=True):
        backward = run_fused(ops, em)
    return run_fused(ops, em) and backward


def hdr_spots(dtype=torch.float64):
    """HDR inputs of 48 x 96 where exposure 1 wins two pixels only: the last row of the first
    16-row band and the last column."""
    gen = torch.Generator().manual_seed(15)
    ref = torch.exp2(4 * torch.rand(1, 3, 48, 96, generator=gen, dtype=dtype) - 2)
    test = ref * (1 + 0.2 * torch.randn(ref.shape, generator=gen, dtype=dtype)).clamp(min=0.1)
    index = torch.zeros(1, 1, 48, 96, dtype=torch.int32)
    index[0, 0, 15, 40] = index[0, 0, 20, 95] = 1
    grad = torch.rand(1, 1, 48, 96, generator=gen, dtype=dtype)
    return grad, test, ref, torch.tensor([[0.0, 1.0]], dtype=dtype), torch.tensor([2]), index


def run_tiled_hdr_spots(ops, em):
    args = (*hdr_spots(), 20.0, "aces", 1e-15, [True, True])
    want = ops.hdr_flip_backward(*args)
    return all(close(x, y) for x, y in zip(em.hdr_flip_backward_tiled(*args, SMALLEST), want))


def run_tiled_uneven_batch(ops, em):
    a, b, g = images(shape=(3, 3, 20, 30))
    want = ops.ldr_flip_backward(g, a, b, 30.0, "srgb", 1e-15, [True, True])
    two_items = 2 * 2 * 7 * 20 * 30 * 8
    got = em.ldr_flip_backward_tiled(g, a, b, 30.0, "srgb", 1e-15, [True, True], two_items)
    return all(close(x, y) for x, y in zip(got, want))


def run_hdr_counts(ops, em):
    # Item 1 with two of three exposures; its third would win pixels.
    test, ref, _, _, _ = hdr_images()
    ex = torch.tensor([[-2.0, 0.0, 3.0], [0.0, 1.0, 4.0]], dtype=torch.float64)
    counts = torch.tensor([3, 2])
    want = ops.hdr_flip(test, ref, ex, counts, 20.0, "aces", 1e-15)
    got = em.hdr_flip_fused(test, ref, ex, counts, 20.0, "aces", 1e-15)
    return all(close(x.double(), y.double()) for x, y in zip(got, want))


def run_hdr_walk_after_a_skip(ops, em):
    """HDR-FLIP's kTiledGrad where exposure 1 wins pixels in tile rows 0, 2 and 3 of one column: the
    walk computes tile 0, skips tile 1 and must then compute tile 2 from scratch, not from the rows
    tile 0 left in shared memory."""
    gen = torch.Generator().manual_seed(15)
    ref = torch.exp2(4 * torch.rand(1, 3, 64, 40, generator=gen, dtype=torch.float64) - 2)
    test = ref * (1 + 0.2 * torch.randn(ref.shape, generator=gen, dtype=torch.float64)).clamp(min=0.1)
    index = torch.zeros(1, 1, 64, 40, dtype=torch.int32)
    index[0, 0, 5, 10] = index[0, 0, 33, 10] = index[0, 0, 60, 12] = 1
    grad = torch.rand(1, 1, 64, 40, generator=gen, dtype=torch.float64)
    args = (grad, test, ref, torch.tensor([[0.0, 1.0]], dtype=torch.float64), torch.tensor([2]), index, 20.0)
    args = (*args, "aces", 1e-15, [True, True])
    want = ops.hdr_flip_backward(*args)
    return all(close(x, y) for x, y in zip(em.hdr_flip_backward_tiled(*args, 1 << 30), want))


def close32(x, y):
    """float32 agreement of the emulated GPU formulation and the CPU kernels (which sum in another
    order): within 1e-4 of the larger magnitude."""
    return x.shape == y.shape and bool(((x - y).abs() <= 1e-4 * max(1.0, y.abs().max().item())).all())


def run_default_ppd(ops, em):
    """float32 at flip_loss's default ppd: the kernels compiled for its radii (launch_params.h,
    DefaultRadii) run the fused forward and both kernels of the tiled backward."""
    a, b, g = (x.float() for x in images(shape=(1, 3, 26, 41)))
    if not close32(em.ldr_flip_fused(a, b, DEFAULT_PPD, "srgb", 1e-15), ops.ldr_flip(a, b, DEFAULT_PPD, "srgb", 1e-15)):
        return False
    want = ops.ldr_flip_backward(g, a, b, DEFAULT_PPD, "srgb", 1e-15, [True, True])
    got = em.ldr_flip_backward_tiled(g, a, b, DEFAULT_PPD, "srgb", 1e-15, [True, True], SMALLEST)
    return all(close32(x, y) for x, y in zip(got, want))


def run_kept(ops, em):
    """The tiled forward that keeps the test image's sensitivities and the backward from them (the
    CUDA autograd's pair), against the CPU's pair."""
    a, b, g = images(shape=(2, 3, 21, 35))
    want_map, want_sens = ops._ldr_flip_with_sensitivities(a, b, 30.0, "srgb", 1e-15, [True, False])
    flip_map, sens = em.ldr_flip_with_sensitivities(a, b, 30.0, "srgb", 1e-15, [True, False])
    want = ops._ldr_flip_backward_from_sensitivities(g, want_sens, a, b, 30.0, "srgb", [True, False])
    got = em.ldr_flip_backward_from_sensitivities(g, sens, a, b, 30.0, "srgb", [True, False])
    return close(flip_map, want_map) and close(sens, want_sens) and close(got[0], want[0])


MUTANT_RUNS = [
    run_fused,
    run_tiled,
    run_tiled,
    run_tiled,
    run_fused,
    run_rows_forward,
    run_tiled_hdr_spots,
    run_tiled_hdr_spots,
    run_tiled_uneven_batch,
    run_hdr_counts,
    run_default_ppd,
    run_default_ppd,
    run_kept,
    run_kept,
    run_hdr_walk_after_a_skip,
    run_default_ppd,
    run_default_ppd,
    run_fused_both_orders,
]


@pytest.fixture(scope="module")
def mutants():
    import emulator as emulator_build

    return emulator_build.mutant_ops(MUTATIONS)


@pytest.mark.parametrize("k", range(1, len(MUTATIONS) + 1))
def test_each_source_mutation_is_caught(ops, mutants, k):
    run = MUTANT_RUNS[k - 1]
    with configured(mutants, **TINY_GRID):
        assert run(ops, mutants)  # the mutated build without its mutation: the kernels as they are
        with configured(mutants, mutant=k, **TINY_GRID):
            try:
                matches = run(ops, mutants)
            except RuntimeError as err:  # a check of the emulator caught it
                assert "flip_emulator" in str(err)
                return
            assert not matches


def test_a_global_write_race_shows_in_the_order_check(ops, mutants):
    # The last mutation above writes a word that another block also writes: its result depends on
    # which runs last. In launch order the right value comes last and the map is the CPU kernels';
    # the reversed order shows it.
    a, b, _ = images()
    k = len(MUTATIONS)
    with configured(mutants, mutant=k):
        forward = mutants.ldr_flip_fused(a, b, 30.0, "srgb", 1e-15)
    with configured(mutants, mutant=k, reverse=True):
        backward = mutants.ldr_flip_fused(a, b, 30.0, "srgb", 1e-15)
    assert close(forward, ops.ldr_flip(a, b, 30.0, "srgb", 1e-15)) and not torch.equal(forward, backward)
