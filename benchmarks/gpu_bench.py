"""GPU speed and memory of LDR-FLIP: flip_loss's CUDA kernels against the pure-PyTorch oracle
(flip_loss/oracle.py) on the same GPU, in the same run. scripts/gpu/gpu_check.sh runs it with
--quick and checks the speed targets against its --json rows.

    python benchmarks/gpu_bench.py [--repeats 20] [--rounds 5] [--quick] [--json out.json]

Cases: 1920x1080 and 3840x2160 (batch 1) and 8x512x512, float32, ppd 67.02, sRGB; forward and
forward+backward (the gradient of the mean map w.r.t. the test image, as a loss has). Times are per
call, from CUDA events around `repeats` back-to-back calls (inputs rotating between two pairs, no
synchronisation between calls, so host overhead overlaps the GPU as in training), after at least
0.3 s of warm-up calls (the GPU's clocks rise from idle only under load); the median of `rounds`
such rounds, with the fastest round beside it in the JSON. Again as CUDA graph replays of the same
calls (our kernels only: what a training loop under torch.cuda.graphs or
torch.compile(mode="reduce-overhead") pays). Extra peak memory = torch.cuda.max_memory_allocated()
during one call minus what was allocated before it (inputs included in neither). Then
torch.profiler's per-kernel CUDA times for 1080p forward+backward. The JSON is rewritten after
every case ("complete": false until the last). --quick: 3 rounds, fewer
reference calls and a shorter profile (about a quarter of the time; same cases and columns).
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
from flip_loss import oracle  # noqa: E402


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


def warm_up(fn, pairs, seconds=0.3, least=3):
    """Calls fn until `seconds` of wall time (and at least `least` calls) have passed."""
    t0 = time.perf_counter()
    i = 0
    while i < least or time.perf_counter() - t0 < seconds:
        fn(*pairs[i % len(pairs)])
        if i % 8 == 7:
            torch.cuda.synchronize()
        i += 1
    torch.cuda.synchronize()


def timed_rounds(run_once, repeats, rounds):
    """Per-call times (ms) of `rounds` rounds of `repeats` back-to-back calls of run_once(i)."""
    per_call = []
    for _ in range(rounds):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for i in range(repeats):
            run_once(i)
        end.record()
        end.synchronize()
        per_call.append(start.elapsed_time(end) / repeats)
    return per_call


def measure(fn, pairs, repeats, rounds=5, warmup_s=0.3):
    """Per-call time (ms; median and fastest of `rounds` rounds) of back-to-back calls, and extra
    peak memory (MiB) of one call."""
    warm_up(fn, pairs, warmup_s)
    times = timed_rounds(lambda i: fn(*pairs[i % len(pairs)]), repeats, rounds)
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    fn(*pairs[0])
    torch.cuda.synchronize()
    extra = (torch.cuda.max_memory_allocated() - base) / 2**20
    return statistics.median(times), min(times), extra


def measure_graph(fn, pairs, repeats, rounds=5):
    """Per-replay time (ms, median of `rounds` rounds) of `fn` on static copies of the inputs,
    captured once in a CUDA graph."""
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
    return statistics.median(timed_rounds(lambda i: graph.replay(), repeats, rounds))


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
    p.add_argument("--repeats", type=int, default=20, help="back-to-back calls per timed round")
    p.add_argument("--rounds", type=int, default=None, help="timed rounds per figure (default 5, --quick 3)")
    p.add_argument(
        "--quick",
        action="store_true",
        help="fewer rounds, reference calls and profiled calls: the same rows in a fraction of the time",
    )
    p.add_argument("--json", help="also write the rows here")
    args = p.parse_args()
    if not torch.cuda.is_available():
        sys.exit("gpu_bench: no CUDA device")
    rounds = args.rounds or (3 if args.quick else 5)
    oracle_rounds, oracle_repeats = (1, 3) if args.quick else (3, max(3, args.repeats // 4))
    began = time.perf_counter()
    dev = torch.cuda.get_device_name()
    ours = torch.ops.flip.ldr_flip
    cases = [("1920x1080", 1, 1080, 1920), ("3840x2160", 1, 2160, 3840), ("8x512x512", 8, 512, 512)]
    rows = []

    def write_json(complete):
        # Rewritten after every case: a run stopped at its time limit keeps the rows it finished.
        if args.json:
            with open(args.json, "w") as f:
                json.dump(
                    {
                        "gpu": dev,
                        "torch": torch.__version__,
                        "cuda": torch.version.cuda,
                        "dtype": "float32",
                        "ppd": flip_loss.DEFAULT_PPD,
                        "repeats": args.repeats,
                        "rounds": rounds,
                        "quick": args.quick,
                        "complete": complete,
                        "seconds": time.perf_counter() - began,
                        "rows": rows,
                    },
                    f,
                    indent=1,
                )

    for name, n, h, w in cases:
        pairs = make_pairs(n, h, w)
        f_ms, f_min, f_mem = measure(forward(ours), pairs, args.repeats, rounds)
        fb_ms, fb_min, fb_mem = measure(forward_backward(ours), pairs, args.repeats, rounds)
        row = {
            "case": name,
            "batch": n,
            "height": h,
            "width": w,
            "forward_ms": f_ms,
            "forward_ms_fastest_round": f_min,
            "forward_extra_MiB": f_mem,
            "fwd_bwd_ms": fb_ms,
            "fwd_bwd_ms_fastest_round": fb_min,
            "fwd_bwd_extra_MiB": fb_mem,
            "graph_forward_ms": measure_graph(forward(ours), pairs, args.repeats, rounds),
            "graph_fwd_bwd_ms": measure_graph(forward_backward(ours), pairs, args.repeats, rounds),
        }
        if name == "1920x1080":
            oracle_ms, _, _ = measure(forward(oracle.ldr_flip), pairs, oracle_repeats, oracle_rounds)
            oracle_fb_ms, _, oracle_fb_mem = measure(
                forward_backward(oracle.ldr_flip), pairs, oracle_repeats, oracle_rounds
            )
            row.update(
                reference_forward_ms=oracle_ms,
                reference_fwd_bwd_ms=oracle_fb_ms,
                reference_fwd_bwd_extra_MiB=oracle_fb_mem,
            )
        rows.append(row)
        write_json(False)
        print(f"gpu_bench: {name} done ({time.perf_counter() - began:.0f} s)", file=sys.stderr, flush=True)
        del pairs
        torch.cuda.empty_cache()
    write_json(True)
    # The profile last: the rows above are already written should it fail.
    profiled = 2 if args.quick else 5
    try:
        profile_table = kernel_profile(forward_backward(ours), make_pairs(1, 1080, 1920), repeats=profiled)
    except Exception as e:  # noqa: BLE001  (a profiler that cannot run here is no reason to lose the table)
        profile_table = f"(torch.profiler failed: {e.__class__.__name__}: {e})"

    print(
        f"GPU: {dev}; torch {torch.__version__} (CUDA {torch.version.cuda}); float32; ppd {flip_loss.DEFAULT_PPD:.2f}; "
        f"per call: median of {rounds} rounds of {args.repeats} back-to-back calls (CUDA events)\n"
    )
    print(
        "| case | forward | fwd+bwd | graph replay fwd / fwd+bwd | extra memory fwd / fwd+bwd "
        "| oracle.py fwd / fwd+bwd (speed-up) |"
    )
    print("| --- | --- | --- | --- | --- | --- |")
    for r in rows:
        oracle_cell = "-"
        if "reference_forward_ms" in r:
            oracle_cell = (
                f"{r['reference_forward_ms']:.2f} / {r['reference_fwd_bwd_ms']:.2f} ms "
                f"({r['reference_fwd_bwd_ms'] / r['fwd_bwd_ms']:.0f}x), "
                f"{r['reference_fwd_bwd_extra_MiB']:.0f} MiB"
            )
        print(
            f"| {r['case']} | {r['forward_ms']:.3f} ms | {r['fwd_bwd_ms']:.3f} ms | "
            f"{r['graph_forward_ms']:.3f} / {r['graph_fwd_bwd_ms']:.3f} ms | "
            f"{r['forward_extra_MiB']:.0f} / {r['fwd_bwd_extra_MiB']:.0f} MiB | {oracle_cell} |"
        )
    hd, uhd = rows[0], rows[1]
    print(f"\n4K / 1080p time ratio (fwd+bwd): {uhd['fwd_bwd_ms'] / hd['fwd_bwd_ms']:.2f}")
    print(f"\nPer-kernel CUDA times, 1920x1080 forward+backward (torch.profiler, {profiled} calls):")
    print(profile_table)


if __name__ == "__main__":
    main()
