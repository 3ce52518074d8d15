"""One small case of every CUDA kernel, for compute-sanitizer (memcheck, racecheck, synccheck), run
by scripts/gpu/gpu_check.sh (a correctness workload, so not in benchmarks/). Small images with
partial tiles, so that each kernel runs a few blocks and the sanitizers' cost stays in seconds:

* float32 at flip_loss's default ppd (the tiled kernels built for its radii, DefaultRadii in
  launch_params.h), float32 at ppd 30 and float64 at the default ppd (the builds that read the
  radii at run time): LDR-FLIP's fused forward, the tiled backward (both gradients, and each
  alone), autograd's pair that keeps the sensitivities, HDR-FLIP's fused forward and tiled backward;
* the row passes (horizontal, vertical, their transposes and the kept-sensitivity pair on rows) at
  a ppd whose tiles do not fit the shared memory (float32 230, float64 110), which also takes the
  taps from device memory;
* the single-stage ops (csf_filter, hunt_hyab, feature_difference) forward and backward;
* a non-default stream, and a second GPU when there is one; with ``--tall``, an image of 70000 rows
  (grid-striding rows and tiles).

With FLIP_LOSS_CUDA_BACKWARD_SCRATCH=<bytes> small (read once per process), the tiled backward splits
even these images into bands. Each section prints one ``sanitize_case: <section>: done`` line, so a
run stopped at its time limit still tells how far it got. ``--device cpu`` runs the same calls on
the CPU (tests/gpu/test_gpu_check_script.py: the script itself, without a GPU)."""

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
import flip_loss  # noqa: E402
from flip_loss import oracle  # noqa: E402

ops = torch.ops.flip
PPD = flip_loss.DEFAULT_PPD
# Beyond these the fused forward's tiles exceed an H100/H200's 227 KB of shared memory per block
# (docs/algorithm.md §8.8: ppd ~207 in float32, ~96 in float64), so LDR/HDR-FLIP take the row passes.
ROWS_PPD = {torch.float32: 230.0, torch.float64: 110.0}


def pair(shape, dtype, device, scale=1.0):
    g = torch.Generator().manual_seed(sum(shape))
    a = (scale * torch.rand(shape, generator=g, dtype=dtype)).to(device).requires_grad_()
    b = (scale * torch.rand(shape, generator=g, dtype=dtype)).to(device).requires_grad_()
    return a, b


def ldr(device, dtype, shape, ppd):
    a, b = pair(shape, dtype, device)
    out = ops.ldr_flip(a, b, ppd, "srgb", 1e-15)  # autograd: the kept sensitivities
    out.sum().backward()
    with torch.no_grad():
        ops.ldr_flip(a, b, ppd, "linear", 1e-15)  # the forward alone
    for mask in ([True, True], [True, False], [False, True]):  # the recomputing backward
        ops.ldr_flip_backward(torch.ones_like(out), a.detach(), b.detach(), ppd, "linear", 1e-15, mask)


def hdr(device, dtype, shape, ppd):
    a, b = pair(shape, dtype, device, scale=8.0)
    n = shape[0]
    ex = torch.tensor([[-2.0, 0.0, 1.5]] * n, dtype=dtype).to(device)
    counts = torch.tensor([3] + [2] * (n - 1)).to(device)
    out, _, index = ops.hdr_flip(a, b, ex, counts, ppd, "aces", 1e-15)
    out.sum().backward()
    ops.hdr_flip_backward(
        torch.ones_like(out), a.detach(), b.detach(), ex, counts, index, ppd, "hable", 1e-15, [True, False]
    )


def stages(device, dtype, shape):
    a, b = pair(shape, dtype, device)
    opp = oracle.linear_rgb_to_opponent(a.detach()).requires_grad_()
    ops.csf_filter(opp, 30.0).sum().backward()
    ops.hunt_hyab(a, b, 1e-15).sum().backward()
    ops.feature_difference(a[:, :1], b[:, :1], 30.0, 1e-15).sum().backward()


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda")
    p.add_argument("--tall", action="store_true", help="also an image of 70000 rows (grid-striding loops)")
    args = p.parse_args()
    device = args.device
    cuda = device.startswith("cuda")

    def section(name):
        if cuda:
            torch.cuda.synchronize()
        print(f"sanitize_case: {name}: done", flush=True)

    scratch = os.environ.get("FLIP_LOSS_CUDA_BACKWARD_SCRATCH")
    print(f"sanitize_case: device {device}, tiled backward scratch = {scratch + ' bytes' if scratch else 'default'}")
    shape = (2, 3, 21, 45)  # partial tiles in both directions, two items
    for dtype, ppd in ((torch.float32, PPD), (torch.float32, 30.0), (torch.float64, PPD)):
        ldr(device, dtype, shape, ppd)
        hdr(device, dtype, shape, ppd)
        section(f"fused, tiled and kept, {str(dtype)[6:]}, ppd {ppd:.4g}")
    for dtype in (torch.float32, torch.float64):
        ldr(device, dtype, (2, 3, 9, 37), ROWS_PPD[dtype])
        hdr(device, dtype, (2, 3, 9, 37), ROWS_PPD[dtype])
        section(f"row passes, {str(dtype)[6:]}, ppd {ROWS_PPD[dtype]:.4g}")
    for dtype in (torch.float32, torch.float64):
        stages(device, dtype, (2, 3, 19, 41))
    section("single-stage ops")
    if cuda:
        stream = torch.cuda.Stream()
        with torch.cuda.stream(stream):
            ldr(device, torch.float32, (1, 3, 20, 41), PPD)
            hdr(device, torch.float32, (1, 3, 20, 41), PPD)
        stream.synchronize()
        section("non-default stream")
        if torch.cuda.device_count() > 1:
            ldr("cuda:1", torch.float32, (1, 3, 20, 41), PPD)
            hdr("cuda:1", torch.float32, (1, 3, 20, 41), PPD)
            torch.cuda.synchronize("cuda:1")
            section("second GPU (cuda:1)")
    if args.tall:
        # 70000 rows > 65535 grid rows: the row passes stride over rows; the fused forward and the
        # tiled backward run 4375 tiles down the image (more than 65535 tiles, 1.1 M rows, is
        # tests/gpu/test_cuda.py's job: too slow under the sanitizers).
        a, b = pair((1, 3, 70000, 2), torch.float32, device)
        ops.ldr_flip(a, b, PPD, "srgb", 1e-15).sum().backward()
        a, b = pair((1, 3, 70000, 2), torch.float32, device)
        ops.ldr_flip(a, b, ROWS_PPD[torch.float32], "srgb", 1e-15).sum().backward()
        section("tall image 1x3x70000x2 (grid-striding rows), tiles and row passes")
    print("sanitize_case: done", flush=True)


if __name__ == "__main__":
    main()
