"""The Python API's per-call cost on a tiny image, where the checks around the ops (types, shapes,
options, the out-of-range look, the weight checks) and not the kernels dominate: ldr_flip,
FLIPLoss and a weighted FLIPLoss on one 16 x 16 image, and the raw op ``torch.ops.flip.hunt_hyab``
(the cheapest kernel, so its dispatch and argument checks show) eager and under
``torch.inference_mode``, with the share of its BackendSelect kernel; one thread, the best of 5 rounds of 400 calls after a warm-up. To compare two checkouts, put each first on PYTHONPATH in turn:

    PYTHONPATH=OTHER_CHECKOUT .venv/bin/python benchmarks/call_overhead_bench.py
    .venv/bin/python benchmarks/call_overhead_bench.py
"""

import time
import warnings

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
    # The raw op, and the share of its BackendSelect kernel (flip_loss/op_registration.py: the
    # Python checks of calls that skip autograd): the same calls with that kernel replaced by a
    # fallthrough (what an op without one gets), in alternating rounds so that a busy machine slows
    # both alike.
    op = torch.ops.flip.hunt_hyab

    def with_fallthrough(fn):
        lib = torch.library.Library("flip", "IMPL")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "overriding a previously registered kernel"
            lib.impl("hunt_hyab", torch.library.fallthrough_kernel, "BackendSelect", allow_override=True)
        try:
            return fn()
        finally:
            lib._destroy()  # the kernel registered before is back

    for mode, context in (("eager", torch.no_grad), ("under inference_mode", torch.inference_mode)):
        with context():
            call = lambda: best_us(lambda: op(a, b, 0.0), rounds=1)  # noqa: E731
            pairs = [(call(), with_fallthrough(call)) for _ in range(9)]
        full, bare = min(p[0] for p in pairs), min(p[1] for p in pairs)
        print(f"raw hunt_hyab {mode}: {full:.1f} us, of which its BackendSelect kernel {full - bare:.1f} us")


if __name__ == "__main__":
    main()
