"""GPU speed and memory of LDR-FLIP: flip_loss's CUDA kernels against the pure-PyTorch reference
(flip_loss/reference.py) on the same GPU, in the same run.

    python benchmarks/gpu_bench.py [--repeats 20] [--json out.json]

CUDA events around each call, warm-up first, median of repeats, inputs rotating between two
pairs; extra peak memory = torch.cuda.max_memory_allocated() during the call minus what was
allocated before it (inputs included in neither).
"""
import argparse
import json
import os
import statistics
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import flip_loss  # noqa: E402
from flip_loss import reference as ref_impl  # noqa: E402


def make_pairs(n, h, w, count=2):
    pairs = []
    for i in range(count):
        g = torch.Generator(device="cuda").manual_seed(i)
        ref = torch.rand(n, 3, h, w, device="cuda", generator=g)
        # Smooth-ish content: a blurred random image, so the filters see structure, not only noise.
        ref = torch.nn.functional.avg_pool2d(ref, 5, stride=1, padding=2)
        test = (ref + 0.03 * torch.randn(ref.shape, device="cuda", generator=g)).clamp(0, 1)
        pairs.append((test, ref))
    return pairs


def measure(fn, pairs, repeats, warmup=3):
    for i in range(warmup):
        fn(*pairs[i % len(pairs)])
    torch.cuda.synchronize()
    times = []
    for i in range(repeats):
        args = pairs[i % len(pairs)]
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn(*args)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    fn(*pairs[0])
    torch.cuda.synchronize()
    extra = (torch.cuda.max_memory_allocated() - base) / 2**20
    return statistics.median(times), extra


def forward(impl):
    def run(t, r):
        with torch.no_grad():
            return impl(t, r, flip_loss.DEFAULT_PPD, "srgb", 1e-15)
    return run


def forward_backward(impl):
    def run(t, r):
        x = t.detach().requires_grad_()
        impl(x, r, flip_loss.DEFAULT_PPD, "srgb", 1e-15).mean().backward()
    return run


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeats", type=int, default=20)
    p.add_argument("--json", help="also write the rows here")
    args = p.parse_args()
    if not torch.cuda.is_available():
        sys.exit("gpu_bench: no CUDA device")
    ours = torch.ops.flip.ldr_flip
    cases = [("1920x1080", 1, 1080, 1920), ("3840x2160", 1, 2160, 3840), ("8x512x512", 8, 512, 512)]
    rows = []
    for name, n, h, w in cases:
        pairs = make_pairs(n, h, w)
        f_ms, f_mem = measure(forward(ours), pairs, args.repeats)
        fb_ms, fb_mem = measure(forward_backward(ours), pairs, args.repeats)
        row = {"case": name, "forward_ms": f_ms, "forward_extra_MiB": f_mem, "fwd_bwd_ms": fb_ms,
               "fwd_bwd_extra_MiB": fb_mem}
        if name == "1920x1080":
            rf_ms, rf_mem = measure(forward(ref_impl.ldr_flip), pairs, max(3, args.repeats // 4))
            rfb_ms, rfb_mem = measure(forward_backward(ref_impl.ldr_flip), pairs, max(3, args.repeats // 4))
            row.update(reference_forward_ms=rf_ms, reference_fwd_bwd_ms=rfb_ms, reference_fwd_bwd_extra_MiB=rfb_mem)
        rows.append(row)
        del pairs
        torch.cuda.empty_cache()

    dev = torch.cuda.get_device_name()
    print(f"GPU: {dev}; torch {torch.__version__} (CUDA {torch.version.cuda}); float32; ppd {flip_loss.DEFAULT_PPD:.2f}; "
          f"median of {args.repeats} (CUDA events)\n")
    print("| case | forward | fwd+bwd | extra memory fwd / fwd+bwd | reference.py fwd / fwd+bwd (speed-up) |")
    print("| --- | --- | --- | --- | --- |")
    for r in rows:
        ref = "-"
        if "reference_forward_ms" in r:
            ref = (f"{r['reference_forward_ms']:.2f} / {r['reference_fwd_bwd_ms']:.2f} ms "
                   f"({r['reference_fwd_bwd_ms'] / r['fwd_bwd_ms']:.0f}x), {r['reference_fwd_bwd_extra_MiB']:.0f} MiB")
        print(f"| {r['case']} | {r['forward_ms']:.3f} ms | {r['fwd_bwd_ms']:.3f} ms | "
              f"{r['forward_extra_MiB']:.0f} / {r['fwd_bwd_extra_MiB']:.0f} MiB | {ref} |")
    hd, uhd = rows[0], rows[1]
    print(f"\n4K / 1080p time ratio (fwd+bwd): {uhd['fwd_bwd_ms'] / hd['fwd_bwd_ms']:.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"gpu": dev, "torch": torch.__version__, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
