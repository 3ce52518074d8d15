"""The filter-tap caches stay bounded however many pixels-per-degree values a process meets: their
one policy (csrc/flip/bounded_cache.h: at most kTapCacheEntries entries, clear when full, pinned
entries, values that outlive their entry while a call holds them) checked on the host by
tests/cpp/bounded_cache.cpp, compiled here with g++; maps computed after a sweep over many ppd
values are those computed before it, bit for bit (CPU, and CUDA where a GPU is present, with the
device memory of large-radius taps bounded and a captured graph's taps kept)."""

from pathlib import Path

import pytest
import torch
from check_programs import run_check_program

ROOT = Path(__file__).resolve().parents[2]
SOURCE = ROOT / "tests" / "cpp" / "bounded_cache.cpp"
CAPACITY = 64  # flip::kTapCacheEntries (bounded_cache.cpp checks the constant)


def test_the_cache_policy_holds_on_the_host(tmp_path):
    # A value destroyed under the cache's lock deadlocks the program: run_check_program's timeout
    # catches it.
    run_check_program(SOURCE, tmp_path, ("-O2", "-pthread"))


def _images(device, dtype=torch.float32, shape=(1, 3, 12, 14)):
    g = torch.Generator().manual_seed(3)
    a = torch.rand(shape, generator=g, dtype=dtype)
    b = (a + 0.1 * torch.randn(shape, generator=g, dtype=dtype)).clamp(0, 1)
    return a.to(device), b.to(device)


def _maps_and_gradients(a, b, ppds):
    out = []
    for p in ppds:
        x = a.clone().requires_grad_()
        m = torch.ops.flip.ldr_flip(x, b, p, "srgb", 0.0)
        (g,) = torch.autograd.grad(m.sum(), x)
        out += [m, g]
    return out


def _sweep_keeps_the_maps(device, ppds):
    """Maps at a few ppd values, then a sweep over many more than the cache holds, then the same
    few again: equal bit for bit (the rebuilt taps are the dropped ones), for the forward and the
    backward, in float32 and float64."""
    for dtype in (torch.float32, torch.float64):
        a, b = _images(device, dtype)
        before = _maps_and_gradients(a, b, ppds[:3])
        for p in ppds:
            torch.ops.flip.ldr_flip(a, b, p, "srgb", 0.0)
        after = _maps_and_gradients(a, b, ppds[:3])
        assert all(torch.equal(x, y) for x, y in zip(before, after))


def test_cpu_maps_after_a_sweep_of_many_ppd_values_are_unchanged():
    ppds = [1.0 + 0.37 * k for k in range(3 * CAPACITY + 5)]
    _sweep_keeps_the_maps("cpu", ppds)


@pytest.mark.cuda
def test_cuda_taps_memory_stays_bounded_under_a_sweep_of_large_ppd_values():
    # float32 taps of ppd past ~203 live in device memory (csrc/ops/cuda.cpp, DeviceTaps). One cache
    # full of them, then nine more cachefuls: with the bound, the device memory in use grows by at
    # most about one cacheful; without it, by ten.
    a, b = _images("cuda")

    def used():
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        free, total = torch.cuda.mem_get_info()
        return total - free

    def sweep(ppds):
        for p in ppds:
            torch.ops.flip.ldr_flip(a, b, p, "srgb", 0.0)

    sweep([250.0])  # the op's own first-call allocations
    start = used()
    ppds = [2000.0 + 7.25 * k for k in range(10 * CAPACITY)]
    sweep(ppds[:CAPACITY])
    one_cacheful = used() - start
    assert one_cacheful > 0
    sweep(ppds[CAPACITY:])
    assert used() - start <= 2 * one_cacheful + (4 << 20)
    _sweep_keeps_the_maps("cuda", [2500.5, 3000.25, 260.0] + ppds[::3])


@pytest.mark.cuda
def test_a_captured_graph_keeps_its_taps_through_a_sweep():
    # The graph reads ppd 400's float32 taps from device memory at every replay: the cache pins the
    # entry a capture used, so sweeps that empty the cache several times leave it in place.
    a, b = _images("cuda", shape=(1, 3, 24, 30))
    torch.ops.flip.ldr_flip(a, b, 400.0, "srgb", 0.0)  # the warm-up before capturing
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = torch.ops.flip.ldr_flip(a, b, 400.0, "srgb", 0.0)
    for p in [1000.0 + 3.5 * k for k in range(4 * CAPACITY)]:
        torch.ops.flip.ldr_flip(a, b, p, "srgb", 0.0)
    out.zero_()
    graph.replay()
    torch.testing.assert_close(
        out.cpu(), torch.ops.flip.ldr_flip(a.cpu(), b.cpu(), 400.0, "srgb", 0.0), rtol=1e-5, atol=1e-5
    )
