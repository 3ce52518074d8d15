"""HDR-FLIP speed (and, on a GPU, memory): flip_loss against flip-evaluator's HDR mode on the CPU,
or on a GPU against the pure-PyTorch reference, with automatic exposures and with 4, 8 and 16
given exposures (memory must not grow with the count).

    python benchmarks/hdr_bench.py --device cpu [--repeats 2]
    python benchmarks/hdr_bench.py --device cuda [--repeats 10]

The HDR image: the 1080p reference render (or the bundled example tiled up), linearised and
multiplied by an exposure ramp from 2^-3 to 2^7 across its width; the test image adds 10 %
multiplicative noise.
"""
import argparse
import os
import statistics
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import flip_loss  # noqa: E402
from flip_loss import hdr  # noqa: E402
from flip_loss import reference as ref_impl  # noqa: E402

from cpu_bench import source_image  # noqa: E402


def hdr_pair(device):
    img, source = source_image()
    lin = ref_impl.srgb_to_linear(img.double())
    ramp = torch.exp2(torch.linspace(-3, 7, lin.shape[-1], dtype=torch.float64))
    ref = (lin * ramp).float()[None]
    g = torch.Generator().manual_seed(0)
    test = (ref * (1 + 0.1 * torch.randn(ref.shape, generator=g))).clamp(min=0)
    return test.to(device).contiguous(), ref.to(device).contiguous(), source


def timer(device):
    if device == "cuda":
        def run(fn, repeats):
            fn()
            torch.cuda.synchronize()
            times = []
            for _ in range(repeats):
                s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                s.record()
                fn()
                e.record()
                e.synchronize()
                times.append(s.elapsed_time(e))
            return statistics.median(times)
    else:
        def run(fn, repeats):
            fn()
            times = []
            for _ in range(repeats):
                t0 = time.perf_counter()
                fn()
                times.append((time.perf_counter() - t0) * 1e3)
            return statistics.median(times)
    return run


def peak_extra(fn, device):
    if device != "cuda":
        return float("nan")
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    fn()
    torch.cuda.synchronize()
    return (torch.cuda.max_memory_allocated() - base) / 2**20


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--repeats", type=int, default=None)
    p.add_argument("--skip-evaluator", action="store_true")
    args = p.parse_args()
    dev = args.device
    repeats = args.repeats or (2 if dev == "cpu" else 10)
    test, ref, source = hdr_pair(dev)
    run = timer(dev)
    start, stop = hdr.exposure_range(ref)
    _, counts, _, _ = hdr.exposures_for(ref)
    print(f"device {dev}; image: {source} lifted to HDR; automatic exposures {start.item():.4f} .. {stop.item():.4f}, "
          f"{counts.item()} exposures; float32; median of {repeats}", file=sys.stderr)

    def fwd(**kw):
        def f():
            with torch.no_grad():
                flip_loss.hdr_flip(test, ref, **kw)
        return f

    def fwd_bwd(**kw):
        def f():
            x = test.detach().requires_grad_()
            flip_loss.hdr_flip(x, ref, **kw).mean().backward()
        return f

    rows = []
    for label, kw in [("automatic", {})] + [(f"{n} given", {"start_exposure": start.item(), "stop_exposure": stop.item(),
                                                            "num_exposures": n}) for n in (4, 8, 16)]:
        f_ms = run(fwd(**kw), repeats)
        fb_ms = run(fwd_bwd(**kw), repeats)
        rows.append((label, f_ms, fb_ms, peak_extra(fwd_bwd(**kw), dev)))
        print(f"{label}: forward {f_ms:.1f} ms, fwd+bwd {fb_ms:.1f} ms", file=sys.stderr)

    other = "-"
    if dev == "cpu" and not args.skip_evaluator:
        import flip_evaluator

        r = ref[0].permute(1, 2, 0).numpy().copy()
        t = test[0].permute(1, 2, 0).numpy().copy()
        ev_ms = run(lambda: flip_evaluator.evaluate(r.copy(), t.copy(), "HDR", applyMagma=False,
                                                    computeMeanError=False, parameters={"ppd": flip_loss.DEFAULT_PPD}),
                    max(1, repeats // 2))
        other = f"flip-evaluator HDR forward (automatic): {ev_ms:.0f} ms; speed-up {ev_ms / rows[0][1]:.1f}x"
    elif dev == "cuda":
        def ref_fb():
            x = test.detach().requires_grad_()
            ex, cn, _, _ = hdr.exposures_for(ref)
            ref_impl.hdr_flip(x, ref, flip_loss.DEFAULT_PPD, "aces", ex, cn)[0].mean().backward()
        rf = run(ref_fb, max(2, repeats // 4))
        other = (f"reference.py HDR fwd+bwd (automatic): {rf:.1f} ms, {peak_extra(ref_fb, dev):.0f} MiB extra; "
                 f"speed-up {rf / rows[0][2]:.0f}x")
    name = torch.cuda.get_device_name() if dev == "cuda" else "CPU"
    print(f"\n{name}, torch {torch.__version__}, {torch.get_num_threads()} threads; 1920x1080 HDR, ACES, ppd 67.02\n")
    print("| exposures | forward | forward+backward | extra peak memory (fwd+bwd) |")
    print("| --- | --- | --- | --- |")
    for label, f_ms, fb_ms, mem in rows:
        print(f"| {label} | {f_ms:.1f} ms | {fb_ms:.1f} ms | {'-' if mem != mem else f'{mem:.0f} MiB'} |")
    print(f"\n{other}")


if __name__ == "__main__":
    main()
