"""NVIDIA-style loss calls through flip_loss's compatibility layer (flip_loss/nvidia.py) against
the project's pure-PyTorch oracle (flip_loss.oracle), forward + backward on the CPU.

    .venv/bin/python benchmarks/nvidia_compat_bench.py [--size 1920x1080] [--repeats 5]
                                                       [--hdr] [--hdr-size 480x270]

Times, after one warm-up call each, the median and best of --repeats calls of
``LDRFLIPLoss()(test, reference, ppd)``; ``compute_ldrflip`` on images already in YCxCz (the
compiled stage ops); and ``flip_loss.oracle.ldr_flip``, plain PyTorch ops standing in for a
pure-PyTorch loss (not NVIDIA's file, which this project does not run;
benchmarks/torch_separable.py is a faster pure-PyTorch formulation), each followed by
``.backward()``. With ``--hdr`` also ``HDRFLIPLoss()(test, reference)`` against
``oracle.hdr_flip`` with the same exposures, at ``--hdr-size``: the oracle's autograd graph holds
every exposure's intermediates, which at 1080p took over 23 GB, hence the smaller default.

Random sRGB image, test = reference + N(0, 0.03) noise, float32, the gradient w.r.t. the test
image, NVIDIA's default ppd, torch's default thread count.
"""

import argparse
import statistics
import time

import torch

import flip_loss
from flip_loss import nvidia
from flip_loss import oracle


def timed(run, repeats):
    run()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        run()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), min(times)


def pair(w, h):
    """A random sRGB reference and the test image: reference + N(0, 0.03) noise, clamped."""
    g = torch.Generator().manual_seed(0)
    ref = torch.rand(1, 3, h, w, generator=g)
    return (ref + 0.03 * torch.randn(ref.shape, generator=g)).clamp(0, 1), ref


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--size", default="1920x1080", help="WxH")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--hdr", action="store_true", help="also time HDR-FLIP")
    p.add_argument("--hdr-size", default="480x270", help="WxH of the HDR images")
    args = p.parse_args()
    w, h = (int(v) for v in args.size.split("x"))
    test, ref = pair(w, h)
    ppd = nvidia.NVIDIA_DEFAULT_PPD
    ldr_loss = flip_loss.LDRFLIPLoss()
    ycc_test = flip_loss.color_space_transform(test, "srgb2ycxcz")
    ycc_ref = flip_loss.color_space_transform(ref, "srgb2ycxcz")

    def layer():
        x = test.clone().requires_grad_()
        ldr_loss(x, ref, ppd).backward()

    def stages():
        x = ycc_test.clone().requires_grad_()
        flip_loss.compute_ldrflip(x, ycc_ref, ppd).mean().backward()

    def pure():
        x = test.clone().requires_grad_()
        oracle.ldr_flip(x, ref, ppd, "srgb").mean().backward()

    rows = [("LDRFLIPLoss", layer), ("compute_ldrflip (YCxCz)", stages), ("oracle.ldr_flip", pure)]
    if args.hdr:
        hw, hh = (int(v) for v in args.hdr_size.split("x"))
        hdr_test, hdr_ref = pair(hw, hh)
        ramp = torch.exp2(torch.linspace(-3.0, 5.0, hw)).view(1, 1, 1, hw)
        lin_test, lin_ref = ramp * oracle.srgb_to_linear(hdr_test), ramp * oracle.srgb_to_linear(hdr_ref)
        hdr_loss = flip_loss.HDRFLIPLoss()
        start, stop = flip_loss.compute_start_stop_exposures(lin_ref, "aces", 0.85, 0.85)
        exposures, counts, _, _ = flip_loss.hdr.exposures_for(lin_ref, "aces", start, stop)

        def hdr_layer():
            x = lin_test.clone().requires_grad_()
            hdr_loss(x, lin_ref, ppd).backward()

        def hdr_pure():
            x = lin_test.clone().requires_grad_()
            oracle.hdr_flip(x, lin_ref, ppd, "aces", exposures, counts)[0].mean().backward()

        print(f"HDR: {args.hdr_size}, {int(counts[0])} exposures")
        rows += [(f"HDRFLIPLoss ({args.hdr_size})", hdr_layer), (f"oracle.hdr_flip ({args.hdr_size})", hdr_pure)]
    print(
        f"{args.size}, forward+backward, float32, {torch.get_num_threads()} thread(s), "
        f"{flip_loss._C.cpu_capability()}, {args.repeats} repeats"
    )
    for name, run in rows:
        med, best = timed(run, args.repeats)
        print(f"  {name:36s} median {med * 1e3:8.1f} ms   best {best * 1e3:8.1f} ms")


if __name__ == "__main__":
    main()
