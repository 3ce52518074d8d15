"""The CUDA kernels under CUDA graphs, torch.compile(mode="reduce-overhead"), several host threads
and the row-pass fallback. Whatever a first call per process would hide runs in a fresh
subprocess. Every test here skips cleanly without a GPU (and none has run on one yet)."""

import os
import subprocess
import sys
import textwrap
import threading

import pytest
import torch

import flip_loss

pytestmark = pytest.mark.cuda

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

needs_kernels = pytest.mark.skipif(
    not torch._C._dispatch_has_kernel_for_dispatch_key("flip::ldr_flip", "CUDA"), reason="built without CUDA kernels"
)


def run_fresh(script, env_extra=None, timeout=600):
    """Runs `script` in a new Python process (this checkout first on the path); its stdout."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]))
    env.update(env_extra or {})
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        cwd=ROOT,
    )
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr[-6000:]}"
    return proc.stdout


def pair(shape, seed, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    ref = torch.rand(shape, generator=g, dtype=dtype)
    test = (ref + 0.1 * torch.randn(shape, generator=g, dtype=dtype)).clamp(0, 1)
    return test, ref


@needs_kernels
def test_reduce_overhead_compiled_call_first_in_fresh_process():
    # The first flip call of the process is the compiled one, so it runs inside cudagraph-trees'
    # warm-up, where every caching-allocator allocation of the thread lands in the graph's private
    # pool: taps cached from there fail the pool checks (slow_path_cudagraph_asserts, on here).
    out = run_fresh("""
        import torch, torch._inductor.config as inductor_config
        import flip_loss
        inductor_config.triton.slow_path_cudagraph_asserts = True
        g = torch.Generator().manual_seed(0)
        ref = torch.rand(2, 3, 40, 56, generator=g)
        inputs = [((ref + s * torch.randn(ref.shape, generator=g)).clamp(0, 1).cuda(), ref.cuda())
                  for s in (0.05, 0.1, 0.2, 0.3)]
        loss_fn = flip_loss.FLIPLoss()
        step = torch.compile(lambda x, y: loss_fn(x, y), mode="reduce-overhead", fullgraph=True)
        results = []
        for test, reference in inputs:  # warm-up, recording, then replays with new inputs
            x = test.clone().requires_grad_()
            loss = step(x, reference)
            loss.backward()
            results.append((loss.detach().clone(), x.grad.clone()))
        for (test, reference), (loss, grad) in zip(inputs, results):
            x = test.clone().requires_grad_()
            eager = loss_fn(x, reference)
            eager.backward()
            torch.testing.assert_close(loss, eager.detach(), rtol=1e-5, atol=1e-6)
            torch.testing.assert_close(grad, x.grad, rtol=1e-4, atol=1e-7)
        print("ok", len(results))
    """)
    assert out.split() == ["ok", "4"]


@needs_kernels
def test_graph_capture_is_first_flip_call_in_fresh_process():
    # No warm-up of the flip ops: the capture itself makes their first call (the taps must reach the
    # kernels without an allocation or a copy). Replays with new inputs against the CPU kernels.
    out = run_fresh("""
        import torch
        import flip_loss
        from flip_loss import gpu_agreement
        ops = torch.ops.flip
        g = torch.Generator().manual_seed(1)
        x = torch.rand(1, 3, 33, 47, generator=g).cuda().requires_grad_()
        y = torch.rand(1, 3, 33, 47, generator=g).cuda()
        weight = torch.rand(1, 1, 33, 47, generator=g).cuda()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = ops.ldr_flip(x, y, 67.0, "srgb", 0.0)
            (out * weight).sum().backward()
        for seed in (2, 3):
            gen = torch.Generator().manual_seed(seed)
            xn, yn = torch.rand(1, 3, 33, 47, generator=gen), torch.rand(1, 3, 33, 47, generator=gen)
            with torch.no_grad():
                x.copy_(xn.cuda()); y.copy_(yn.cuda())
            graph.replay()
            xc = xn.clone().requires_grad_()
            oc = ops.ldr_flip(xc, yn, 67.0, "srgb", 0.0)
            (oc * weight.cpu()).sum().backward()
            torch.testing.assert_close(out.cpu(), oc.detach(), rtol=1e-5, atol=1e-5)
            # The gradient within the promised agreement with the CPU (README, flip_loss/gpu_agreement.py).
            assert gpu_agreement.within(x.grad, xc.grad, torch.float32, gradient=True)
        print("ok")
    """)
    assert out.split() == ["ok"]


@needs_kernels
def test_large_ppd_first_call_under_capture_raises_clearly_in_fresh_process():
    # ppd 400 in float32 needs more taps than a launch carries by value: they go to device memory
    # once, which a capture cannot do. The op says so instead of breaking the capture; after a call
    # outside the capture, capturing works and replays match the CPU kernels.
    out = run_fresh("""
        import torch
        import flip_loss
        ops = torch.ops.flip
        x = torch.rand(1, 3, 24, 30, generator=torch.Generator().manual_seed(4))
        y = torch.rand(1, 3, 24, 30, generator=torch.Generator().manual_seed(5))
        xc, yc = x.cuda(), y.cuda()
        graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(graph):
                ops.ldr_flip(xc, yc, 400.0, "srgb", 0.0)
        except RuntimeError as exc:
            print("raised:", "before capturing" in str(exc))
        ops.ldr_flip(xc, yc, 400.0, "srgb", 0.0)  # the warm-up the message asks for
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = ops.ldr_flip(xc, yc, 400.0, "srgb", 0.0)
        graph.replay()
        torch.testing.assert_close(out.cpu(), ops.ldr_flip(x, y, 400.0, "srgb", 0.0), rtol=1e-5, atol=1e-5)
        print("ok")
    """)
    assert out.split() == ["raised:", "True", "ok"]


@needs_kernels
@pytest.mark.parametrize("hdr", [False, True], ids=["ldr", "hdr"])
def test_flip_loss_forward_backward_captured_and_replayed(hdr):
    # HDR with given exposures: an automatic count would be read back to the host.
    options = dict(hdr=True, start_exposure=-2.0, stop_exposure=2.0, num_exposures=4) if hdr else {}
    loss_fn = flip_loss.FLIPLoss(**options)

    def inputs(seed):
        test, ref = pair((2, 3, 29, 61), seed)
        return (test * 4, ref * 4) if hdr else (test, ref)

    test0, ref0 = inputs(0)
    x = test0.cuda().requires_grad_()
    y = ref0.cuda()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up, as torch.cuda.graphs asks (FLIPLoss's one-time checks)
        for _ in range(2):
            x.grad = None
            loss_fn(x, y).backward()
    torch.cuda.current_stream().wait_stream(side)
    x.grad = None
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        loss = loss_fn(x, y)
        loss.backward()
    for seed in (1, 2, 3):
        test, ref = inputs(seed)
        with torch.no_grad():
            x.copy_(test.cuda())
            y.copy_(ref.cuda())
        graph.replay()
        xe = test.cuda().requires_grad_()
        eager = loss_fn(xe, ref.cuda())
        eager.backward()
        torch.testing.assert_close(loss, eager.detach(), rtol=1e-6, atol=1e-7)
        torch.testing.assert_close(x.grad, xe.grad, rtol=1e-5, atol=1e-8)


@needs_kernels
def test_two_threads_with_different_ppd_launch_concurrently(ops):
    # Both ppd need more than the default 48 KB of shared memory in the fused forward, with different
    # sizes: a per-launch limit set by one thread could fall below the other's launch in between.
    cases = {20.0: pair((1, 3, 48, 80), 6), 150.0: pair((1, 3, 48, 80), 7)}
    expected = {ppd: ops.ldr_flip(t, r, ppd, "srgb", 0.0) for ppd, (t, r) in cases.items()}
    start = threading.Barrier(len(cases))
    results, errors = {}, []

    def work(ppd):
        try:
            t, r = (v.cuda() for v in cases[ppd])
            stream = torch.cuda.Stream()
            with torch.cuda.stream(stream):
                start.wait()
                for _ in range(200):
                    out = ops.ldr_flip(t, r, ppd, "srgb", 0.0)
            stream.synchronize()
            results[ppd] = out.cpu()
        except Exception as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(ppd,)) for ppd in cases]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors
    for ppd, out in results.items():
        torch.testing.assert_close(out, expected[ppd], rtol=1e-5, atol=1e-5)
    assert set(results) == set(cases)


# Forward and backward of LDR and HDR-FLIP on the GPU against the CPU kernels, both gradients and
# each alone, and LDR-FLIP's pair that keeps the sensitivities; run in a fresh process under an
# environment switch that picks the GPU formulation.
CHECK_EVERY_PATH = """
    import torch
    import flip_loss
    from flip_loss import gpu_agreement
    ops = torch.ops.flip
    g = torch.Generator().manual_seed(8)
    for dtype in (torch.float32, torch.float64):
        x = torch.rand(2, 3, 37, 71, generator=g, dtype=dtype)
        y = torch.rand(2, 3, 37, 71, generator=g, dtype=dtype)
        w = torch.rand(2, 1, 37, 71, generator=g, dtype=dtype)
        tol = gpu_agreement.tolerance(dtype)
        gtol = gpu_agreement.tolerance(dtype, gradient=True)  # of the scale: README, GPU and CPU agreement
        torch.testing.assert_close(ops.ldr_flip(x.cuda(), y.cuda(), 67.0, "srgb", 0.0).cpu(),
                                   ops.ldr_flip(x, y, 67.0, "srgb", 0.0), rtol=tol, atol=tol)
        ex = torch.tensor([[-1.0, 0.5, 2.0], [0.0, 1.0, 0.0]], dtype=dtype)
        counts = torch.tensor([3, 2])
        hx, hy = 4 * x, 4 * y
        mc = ops.hdr_flip(hx.cuda(), hy.cuda(), ex.cuda(), counts.cuda(), 67.0, "aces", 0.0)[0]
        mh, _, index = ops.hdr_flip(hx, hy, ex, counts, 67.0, "aces", 0.0)
        torch.testing.assert_close(mc.cpu(), mh, rtol=tol, atol=tol)
        ldr_cpu = ops.ldr_flip_backward(w, x, y, 67.0, "srgb", 1e-15, [True, True])
        hdr_cpu = ops.hdr_flip_backward(w, hx, hy, ex, counts, index, 67.0, "aces", 1e-15, [True, True])
        for mask in ([True, True], [True, False], [False, True]):
            ldr = ops.ldr_flip_backward(w.cuda(), x.cuda(), y.cuda(), 67.0, "srgb", 1e-15, mask)
            hdr = ops.hdr_flip_backward(w.cuda(), hx.cuda(), hy.cuda(), ex.cuda(), counts.cuda(), index.cuda(),
                                        67.0, "aces", 1e-15, mask)
            # autograd's pair that keeps the sensitivities (tiled, or the row passes when forced)
            _, sens = ops._ldr_flip_with_sensitivities(x.cuda(), y.cuda(), 67.0, "srgb", 1e-15, mask)
            kept = ops._ldr_flip_backward_from_sensitivities(w.cuda(), sens, x.cuda(), y.cuda(), 67.0, "srgb", mask)
            for got, want in ((ldr, ldr_cpu), (hdr, hdr_cpu), (kept, ldr_cpu)):
                for m, c, h in zip(mask, got, want):
                    assert c.numel() == (h.numel() if m else 0)
                    if m:
                        scale = max(h.abs().max().item(), 1.0)
                        assert (c.cpu() - h).abs().max().item() <= gtol * scale
    print("ok")
"""


@needs_kernels
def test_row_passes_match_cpu_when_forced():
    # FLIP_LOSS_CUDA_FORCE_ROW_PASSES=1 (read once per process) sends LDR and HDR forwards and
    # backwards through the H + V (+ VT + HT) passes that otherwise only serve very large ppd.
    out = run_fresh(CHECK_EVERY_PATH, env_extra={"FLIP_LOSS_CUDA_FORCE_ROW_PASSES": "1"})
    assert out.split() == ["ok"]


@needs_kernels
def test_tiled_backward_in_small_bands_matches_cpu():
    # FLIP_LOSS_CUDA_BACKWARD_SCRATCH (bytes, read once per process) shrinks the tiled backward's
    # scratch: 20000 bytes cut these images into 16-row bands, one item each, with their halo rows.
    out = run_fresh(CHECK_EVERY_PATH, env_extra={"FLIP_LOSS_CUDA_BACKWARD_SCRATCH": "20000"})
    assert out.split() == ["ok"]
