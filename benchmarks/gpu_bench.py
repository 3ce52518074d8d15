"""GPU speed and memory of LDR-FLIP: flip_loss's CUDA kernels against the pure-PyTorch reference
(flip_loss/reference.py) on the same GPU, in the same run.

    python benchmarks/gpu_bench.py [--repeats 20] [--json out.json]

Times are per call, from CUDA events around `repeats` back-to-back calls (inputs rotating between
two pairs, warm-up first, no synchronisation between calls, so host overhead overlaps the GPU as
in training), and again as CUDA graph replays of the same calls (our kernels only: what a training
loop under torch.cuda.graphs or torch.compile(mode="reduce-overhead") pays). Extra peak memory =
torch.cuda.max_memory_allocated() during one call minus what was allocated before it (inputs
included in neither). Then torch.profiler's per-kernel CUDA times for 1080p forward+backward.
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
    """Per-call time (ms) of back-to-back calls, and extra peak memory (MiB) of one call."""
    for i in range(warmup):
        fn(*pairs[i % len(pairs)])
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for i in range(repeats):
        fn(*pairs[i % len(pairs)])
    end.record()
    end.synchronize()
    per_call = start.elapsed_time(end) / repeats
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    fn(*pairs[0])
    torch.cuda.synchronize()
    extra = (torch.cuda.max_memory_allocated() - base) / 2**20
    return per_call, extra


def measure_graph(fn, pairs, repeats):
    """Per-replay time (ms) of `fn` on static copies of the inputs, captured once in a CUDA graph."""
    static = [t.clone() for t in pairs[0]]
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn(*static)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn(*static)
    graph.replay()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(repeats):
        graph.replay()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / repeats


def kernel_profile(fn, pairs, repeats=5):
    """torch.profiler's table of CUDA kernels (time per call) for `repeats` calls of fn."""
    from torch.profiler import ProfilerActivity, profile

    fn(*pairs[0])
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for i in range(repeats):
            fn(*pairs[i % len(pairs)])
        torch.cuda.synchronize()
    return prof.key_averages().table(sort_by="cuda_time_total", row_limit=15, max_name_column_width=70)


def forward(impl):
    def run(t, r):
        with torch.no_grad():
            return impl(t, r, flip_loss.DEFAULT_PPD, "srgb", 1e-15)
    return run


def forward_backward(impl):
    def run(t, r):
        x = t.detach().requires_grad_()
        impl(x, r, flip_loss.DEFAULT_PPD, "srgb", 1e-15).mean().backward()
        return x.grad
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
               "fwd_bwd_extra_MiB": fb_mem, "graph_forward_ms": measure_graph(forward(ours), pairs, args.repeats),
               "graph_fwd_bwd_ms": measure_graph(forward_backward(ours), pairs, args.repeats)}
        if name == "1920x1080":
            rf_ms, rf_mem = measure(forward(ref_impl.ldr_flip), pairs, max(3, args.repeats // 4))
            rfb_ms, rfb_mem = measure(forward_backward(ref_impl.ldr_flip), pairs, max(3, args.repeats // 4))
            row.update(reference_forward_ms=rf_ms, reference_fwd_bwd_ms=rfb_ms, reference_fwd_bwd_extra_MiB=rfb_mem)
            profile_table = kernel_profile(forward_backward(ours), pairs)
        rows.append(row)
        del pairs
        torch.cuda.empty_cache()

    dev = torch.cuda.get_device_name()
    print(f"GPU: {dev}; torch {torch.__version__} (CUDA {torch.version.cuda}); float32; ppd {flip_loss.DEFAULT_PPD:.2f}; "
          f"per call over {args.repeats} back-to-back calls (CUDA events)\n")
    print("| case | forward | fwd+bwd | graph replay fwd / fwd+bwd | extra memory fwd / fwd+bwd "
          "| reference.py fwd / fwd+bwd (speed-up) |")
    print("| --- | --- | --- | --- | --- | --- |")
    for r in rows:
        ref = "-"
        if "reference_forward_ms" in r:
            ref = (f"{r['reference_forward_ms']:.2f} / {r['reference_fwd_bwd_ms']:.2f} ms "
                   f"({r['reference_fwd_bwd_ms'] / r['fwd_bwd_ms']:.0f}x), {r['reference_fwd_bwd_extra_MiB']:.0f} MiB")
        print(f"| {r['case']} | {r['forward_ms']:.3f} ms | {r['fwd_bwd_ms']:.3f} ms | "
              f"{r['graph_forward_ms']:.3f} / {r['graph_fwd_bwd_ms']:.3f} ms | "
              f"{r['forward_extra_MiB']:.0f} / {r['fwd_bwd_extra_MiB']:.0f} MiB | {ref} |")
    hd, uhd = rows[0], rows[1]
    print(f"\n4K / 1080p time ratio (fwd+bwd): {uhd['fwd_bwd_ms'] / hd['fwd_bwd_ms']:.2f}")
    print("\nPer-kernel CUDA times, 1920x1080 forward+backward (torch.profiler, 5 calls):")
    print(profile_table)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"gpu": dev, "torch": torch.__version__, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
