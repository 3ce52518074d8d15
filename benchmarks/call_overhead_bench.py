"""The Python API's per-call cost on a tiny image, where the checks around the ops (types, shapes,
options, the out-of-range look, the weight checks) and not the kernels dominate: ldr_flip,
FLIPLoss and a weighted FLIPLoss on one 16 x 16 image, one thread, the best of 5 rounds of 400
calls after a warm-up. To compare two checkouts, put each first on PYTHONPATH in turn:

    PYTHONPATH=OTHER_CHECKOUT .venv/bin/python benchmarks/call_overhead_bench.py
    .venv/bin/python benchmarks/call_overhead_bench.py
"""

import time

import torch

import flip_loss


def best_us(fn, calls=400, rounds=5, warmup=50):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        times.append((time.perf_counter() - start) / calls * 1e6)
    return min(times)


def main():
    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(0)
    a, b = torch.rand(1, 3, 16, 16, generator=g), torch.rand(1, 3, 16, 16, generator=g)
    loss, mask = flip_loss.FLIPLoss(), torch.ones(1, 1, 16, 16)
    print(
        f"ldr_flip {best_us(lambda: flip_loss.ldr_flip(a, b)):.0f} us | FLIPLoss {best_us(lambda: loss(a, b)):.0f} us"
        f" | weighted FLIPLoss {best_us(lambda: loss(a, b, mask)):.0f} us  (16x16, 1 thread, {flip_loss.__file__})"
    )


if __name__ == "__main__":
    main()
