"""One configuration of flip_loss's CPU LDR-FLIP, timed quickly: for comparing two builds or
steps of a change (run it once per build, alternating), and as the loop to profile
(`perf record -e cpu-clock .venv/bin/python benchmarks/quick_bench.py ...`).

    .venv/bin/python benchmarks/quick_bench.py [--size 512x512] [--threads 1] [--mode fwd|fwd+bwd]
                                               [--repeats 15]

Random image, test = reference + N(0, 0.03) noise, float32, default ppd, gradient w.r.t. the test
image (as cpu_bench.py); prints the best and the median wall time of --repeats calls after a
warm-up. To time another build, put its directory first on PYTHONPATH.
"""

import argparse
import statistics
import time

import torch

import flip_loss


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--size", default="512x512", help="WxH, e.g. 1920x1080")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--mode", choices=["fwd", "fwd+bwd"], default="fwd")
    p.add_argument("--repeats", type=int, default=15)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    w, h = (int(v) for v in args.size.split("x"))
    g = torch.Generator().manual_seed(0)
    ref = torch.rand(1, 3, h, w, generator=g)
    test = (ref + 0.03 * torch.randn(ref.shape, generator=g)).clamp(0, 1)

    def fwd():
        with torch.no_grad():
            flip_loss.ldr_flip(test, ref)

    def fwd_bwd():
        x = test.clone().requires_grad_()
        flip_loss.ldr_flip(x, ref).mean().backward()

    run = fwd if args.mode == "fwd" else fwd_bwd
    run()
    times = []
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        run()
        times.append(time.perf_counter() - t0)
    print(
        f"{args.size} {args.mode}, {args.threads} thread(s), {flip_loss._C.cpu_capability()}: "
        f"best {min(times) * 1e3:.1f} ms, median {statistics.median(times) * 1e3:.1f} ms of {args.repeats}"
    )


if __name__ == "__main__":
    main()
