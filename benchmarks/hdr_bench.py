"""HDR-FLIP speed (and, on a GPU, memory): flip_loss against flip-evaluator's HDR mode on the CPU,
or on a GPU against the pure-PyTorch oracle, with automatic exposures and with 4, 8 and 16
given exposures (memory must not grow with the count).

    python benchmarks/hdr_bench.py --device cpu [--repeats 2] [--json out.json]
    python benchmarks/hdr_bench.py --device cuda [--repeats 10] [--quick] [--json out.json]

The HDR image: the 1080p reference render (or the bundled example tiled up), linearised and
multiplied by an exposure ramp from 2^-3 to 2^7 across its width; the test image adds 10 %
multiplicative noise. Each time is the median of `repeats` calls, each call timed alone (CUDA
events, or the wall clock on the CPU) after one warm-up call; "automatic" includes choosing the
exposures from the reference image, as flip_loss.hdr_flip does when none are given.
scripts/gpu/gpu_check.sh runs `--device cuda --quick --json` and checks the automatic-exposures
forward+backward time against its target. --quick: 5 repeats on a GPU (1 on the CPU) and fewer
reference calls; the same rows.
"""

import argparse
import json
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import flip_loss  # noqa: E402
from flip_loss import hdr  # noqa: E402
from flip_loss import oracle  # noqa: E402

from cpu_bench import source_image  # noqa: E402


def hdr_pair(device):
    img, source = source_image()
    lin = oracle.srgb_to_linear(img.double())
    ramp = torch.exp2(torch.linspace(-3, 7, lin.shape[-1], dtype=torch.float64))
    ref = (lin * ramp).float()[None]
    g = torch.Generator().manual_seed(0)
    test = (ref * (1 + 0.1 * torch.randn(ref.shape, generator=g))).clamp(min=0)
    return test.to(device).contiguous(), ref.to(device).contiguous(), source


def timer(device):
    if device == "cuda":

        def run(fn, repeats):
            # At least 0.3 s of warm-up calls: the GPU's clocks rise from idle only under load.
            t0 = time.perf_counter()
            fn()
            torch.cuda.synchronize()
            while time.perf_counter() - t0 < 0.3:
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
    p.add_argument("--quick", action="store_true", help="fewer repeats: the same rows in a fraction of the time")
    p.add_argument("--json", help="also write the rows here")
    args = p.parse_args()
    dev = args.device
    if dev == "cuda" and not torch.cuda.is_available():
        sys.exit("hdr_bench: no CUDA device")
    began = time.perf_counter()
    repeats = args.repeats or ((1 if dev == "cpu" else 5) if args.quick else (2 if dev == "cpu" else 10))
    test, ref, source = hdr_pair(dev)
    run = timer(dev)
    start, stop = hdr.exposure_range(ref)
    _, counts, _, _ = hdr.exposures_for(ref)
    print(
        f"device {dev}; image: {source} lifted to HDR; automatic exposures {start.item():.4f} .. {stop.item():.4f}, "
        f"{counts.item()} exposures; float32; median of {repeats}",
        file=sys.stderr,
    )

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

    name = torch.cuda.get_device_name() if dev == "cuda" else "CPU"
    other = "-"
    extra = {}

    def write_json():
        if args.json:
            with open(args.json, "w") as f:
                json.dump(
                    {
                        "device": dev,
                        "gpu": name,
                        "torch": torch.__version__,
                        "cuda": torch.version.cuda,
                        "image": source,
                        "height": ref.shape[-2],
                        "width": ref.shape[-1],
                        "dtype": "float32",
                        "ppd": flip_loss.DEFAULT_PPD,
                        "tone_mapper": "aces",
                        "repeats": repeats,
                        "quick": args.quick,
                        "automatic_exposures": {"start": start.item(), "stop": stop.item(), "count": counts.item()},
                        "rows": [
                            {
                                "exposures": label,
                                "forward_ms": f_ms,
                                "fwd_bwd_ms": fb_ms,
                                "fwd_bwd_extra_MiB": None if mem != mem else mem,
                            }
                            for label, f_ms, fb_ms, mem in rows
                        ],
                        "seconds": time.perf_counter() - began,
                        **extra,
                    },
                    f,
                    indent=1,
                )

    digits = 2 if dev == "cuda" else 1  # GPU times are a few ms
    rows = []
    for label, kw in [("automatic", {})] + [
        (f"{n} given", {"start_exposure": start.item(), "stop_exposure": stop.item(), "num_exposures": n})
        for n in (4, 8, 16)
    ]:
        f_ms = run(fwd(**kw), repeats)
        fb_ms = run(fwd_bwd(**kw), repeats)
        rows.append((label, f_ms, fb_ms, peak_extra(fwd_bwd(**kw), dev)))
        print(f"{label}: forward {f_ms:.{digits}f} ms, fwd+bwd {fb_ms:.{digits}f} ms", file=sys.stderr, flush=True)
        write_json()  # after every row: a run stopped at its time limit keeps the rows it finished

    if dev == "cpu" and not args.skip_evaluator:
        import flip_evaluator

        r = ref[0].permute(1, 2, 0).numpy().copy()
        t = test[0].permute(1, 2, 0).numpy().copy()
        ev_ms = run(
            lambda: flip_evaluator.evaluate(
                r.copy(),
                t.copy(),
                "HDR",
                applyMagma=False,
                computeMeanError=False,
                parameters={"ppd": flip_loss.DEFAULT_PPD},
            ),
            max(1, repeats // 2),
        )
        other = f"flip-evaluator HDR forward (automatic): {ev_ms:.0f} ms; speed-up {ev_ms / rows[0][1]:.1f}x"
        extra = {"flip_evaluator_forward_ms": ev_ms}
    elif dev == "cuda":

        def oracle_fb():
            x = test.detach().requires_grad_()
            ex, cn, _, _ = hdr.exposures_for(ref)
            oracle.hdr_flip(x, ref, flip_loss.DEFAULT_PPD, "aces", ex, cn)[0].mean().backward()

        oracle_ms = run(oracle_fb, 2 if args.quick else max(2, repeats // 4))
        oracle_mem = peak_extra(oracle_fb, dev)
        other = (
            f"oracle.py HDR fwd+bwd (automatic): {oracle_ms:.{digits}f} ms, {oracle_mem:.0f} MiB extra; "
            f"speed-up {oracle_ms / rows[0][2]:.0f}x"
        )
        extra = {"reference_fwd_bwd_ms": oracle_ms, "reference_fwd_bwd_extra_MiB": oracle_mem}
    write_json()
    print(f"\n{name}, torch {torch.__version__}, {torch.get_num_threads()} threads; 1920x1080 HDR, ACES, ppd 67.02\n")
    print("| exposures | forward | forward+backward | extra peak memory (fwd+bwd) |")
    print("| --- | --- | --- | --- |")
    for label, f_ms, fb_ms, mem in rows:
        print(f"| {label} | {f_ms:.{digits}f} ms | {fb_ms:.{digits}f} ms | {'-' if mem != mem else f'{mem:.0f} MiB'} |")
    print(f"\n{other}")


if __name__ == "__main__":
    main()
