"""CPU speed of LDR-FLIP: flip_loss (forward, forward+backward) against flip-evaluator's C++
evaluate() and the pure-PyTorch reference, in the same run on the same cores.

    .venv/bin/python benchmarks/cpu_bench.py [--repeats 5] [--markdown]

Uses the 1920x1080 render in benchmarks/data if present, else the bundled example tiled up.
Medians of `--repeats` runs after one warm-up; inputs rotate between two noise draws.
"""
import argparse
import os
import platform
import statistics
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import flip_loss  # noqa: E402
from flip_loss import reference as ref_impl  # noqa: E402
from flip_loss.imageio import load_image  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def source_image():
    """A real render: ../shared's 1080p reference when this checkout has it beside, else the
    bundled example tiled to 1080p."""
    shared = os.path.join(HERE, "..", "..", "shared", "data", "nvidia_flip", "reference.png")
    if os.path.exists(shared):
        return load_image(shared), "reference.png (1920x1080 render)"
    ex = load_image(flip_loss.cli.example_paths()[0])
    reps = (1, -(-1080 // ex.shape[1]), -(-1920 // ex.shape[2]))
    return ex.repeat(*reps)[:, :1080, :1920].contiguous(), "bundled example tiled to 1920x1080"


def pairs(img, h, w, n=2):
    ref = img[:, :h, :w].contiguous()
    out = []
    for i in range(n):
        g = torch.Generator().manual_seed(i)
        test = (ref + 0.03 * torch.randn(ref.shape, generator=g)).clamp(0, 1)
        out.append((test[None].contiguous(), ref[None].contiguous()))
    return out


def timed(fn, inputs, repeats):
    fn(*inputs[0])
    times = []
    for i in range(repeats):
        args = inputs[i % len(inputs)]
        t0 = time.perf_counter()
        fn(*args)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--markdown", action="store_true", help="print a Markdown table")
    p.add_argument("--skip-reference", action="store_true", help="skip the slow pure-PyTorch reference")
    args = p.parse_args()
    import flip_evaluator

    img, source = source_image()
    ppd = flip_loss.DEFAULT_PPD
    rows = []
    for (h, w) in [(512, 512), (1080, 1920)]:
        data = pairs(img, h, w)
        np_data = [(t[0].permute(1, 2, 0).numpy().copy(), r[0].permute(1, 2, 0).numpy().copy()) for t, r in data]

        def ours_fwd(t, r):
            with torch.no_grad():
                return flip_loss.ldr_flip(t, r, ppd)

        def ours_fwd_bwd(t, r):
            x = t.clone().requires_grad_()
            flip_loss.ldr_flip(x, r, ppd).mean().backward()

        def ref_fwd_bwd(t, r):
            x = t.clone().requires_grad_()
            ref_impl.ldr_flip(x, r, ppd).mean().backward()

        def evaluator(t, r):
            return flip_evaluator.evaluate(r, t, "LDR", inputsRGB=True, applyMagma=False, computeMeanError=False,
                                           parameters={"ppd": ppd})

        fwd = timed(ours_fwd, data, args.repeats)
        fb = timed(ours_fwd_bwd, data, args.repeats)
        ev = timed(evaluator, np_data, args.repeats)
        ref = None if args.skip_reference else timed(ref_fwd_bwd, data, max(1, args.repeats // 2))
        rows.append((f"{w}x{h}", fwd, fb, ev, ref))
        print(f"{w}x{h}: forward {fwd * 1e3:.1f} ms, forward+backward {fb * 1e3:.1f} ms, "
              f"flip-evaluator {ev * 1e3:.1f} ms" + (f", reference fwd+bwd {ref * 1e3:.1f} ms" if ref else ""),
              file=sys.stderr)

    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    print(f"\nMachine: {cpu}, {os.cpu_count()} logical cores, torch {torch.__version__} "
          f"({torch.get_num_threads()} threads), flip-evaluator {flip_evaluator.__name__} 1.7; image: {source}; "
          f"ppd {ppd:.2f}; float32, batch 1; median of {args.repeats}; CPU kernels: "
          f"{flip_loss._C.cpu_capability()}.\n")
    print("| size | flip_loss forward | flip_loss fwd+bwd | flip-evaluator forward | speed-up (forward) | "
          "fwd+bwd / forward | reference.py fwd+bwd |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for size, fwd, fb, ev, ref in rows:
        print(f"| {size} | {fwd * 1e3:.1f} ms | {fb * 1e3:.1f} ms | {ev * 1e3:.1f} ms | {ev / fwd:.1f}x | "
              f"{fb / fwd:.2f} | {'-' if ref is None else f'{ref * 1e3:.0f} ms'} |")


if __name__ == "__main__":
    main()
