"""Multi-scale FLIP in one call against one call per scale, on the CPU: `FLIPLoss(pixels_per_degree=
[...])` (one `_ldr_flip_multiscale` op: the input conversion once for all scales) against the mean
of one `FLIPLoss(pixels_per_degree=p)` per value, forward and forward+backward (gradient w.r.t.
the test image), float32, the same inputs and threads, calls alternating, median of the rounds.

    .venv/bin/python benchmarks/multiscale_bench.py [--sizes 512x512 1920x1080] [--ppds 10 20 40 67.02 100]
                                                    [--repeats 7] [--threads 2]
"""

import argparse
import os
import statistics
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
import flip_loss  # noqa: E402


def parse_size(text):
    w, h = (int(v) for v in text.lower().split("x"))
    return h, w


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", nargs="+", default=["512x512", "1920x1080"])
    parser.add_argument("--ppds", nargs="+", type=float, default=[10.0, 20.0, 40.0, 67.02, 100.0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    one = flip_loss.FLIPLoss(pixels_per_degree=args.ppds)
    each = [flip_loss.FLIPLoss(pixels_per_degree=p) for p in args.ppds]

    def one_call(x, ref):
        return one(x, ref)

    def per_scale(x, ref):
        return sum(loss(x, ref) for loss in each) / len(each)

    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads, CPU kernels "
        f"{flip_loss._C.cpu_capability()}; ppd {args.ppds}; float32; median of {args.repeats}"
    )
    print("| size | one call fwd | per scale fwd | speed-up | one call fwd+bwd | per scale fwd+bwd | speed-up |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for size in args.sizes:
        h, w = parse_size(size)
        g = torch.Generator().manual_seed(0)
        ref = torch.rand(1, 3, h, w, generator=g)
        test = (ref + 0.03 * torch.randn(ref.shape, generator=g)).clamp(0, 1)
        assert torch.allclose(one_call(test, ref), per_scale(test, ref), rtol=1e-6, atol=0)
        row = [size]
        for backward in (False, True):
            times = {one_call: [], per_scale: []}
            for fn in times:  # warm-up
                x = test.clone().requires_grad_(backward)
                loss = fn(x, ref)
                if backward:
                    loss.backward()
            for _ in range(args.repeats):
                for fn in times:
                    x = test.clone().requires_grad_(backward)
                    start = time.perf_counter()
                    loss = fn(x, ref)
                    if backward:
                        loss.backward()
                    times[fn].append(time.perf_counter() - start)
            a, b = statistics.median(times[one_call]), statistics.median(times[per_scale])
            row += [f"{a * 1e3:.1f} ms", f"{b * 1e3:.1f} ms", f"{b / a:.2f}x"]
        print("| " + " | ".join(row) + " |", flush=True)


if __name__ == "__main__":
    main()
