"""A small CUDA workload for compute-sanitizer (memcheck, racecheck, synccheck, initcheck), run by
scripts/gpu/gpu_check.sh (a correctness workload, so not in benchmarks/): every op forward and
backward in both dtypes on odd sizes that leave partial tiles, HDR-FLIP forward and backward, an
image tall enough for the grid-striding loops, a non-default stream and a second GPU when there is
one. LDR/HDR-FLIP forwards take the fused kernel and backwards the tiled kernels (both gradients,
and each alone); LDR-FLIP under autograd takes the pair that keeps the sensitivities (kTiledGrad over
the whole batch, then kTiledTranspose on them); with FLIP_LOSS_CUDA_FORCE_ROW_PASSES=1 all take the
row-pass fallback instead,
and with FLIP_LOSS_CUDA_BACKWARD_SCRATCH=<bytes> small, the tiled backward splits even these images
into bands (both read once per process). Each section prints one labelled line when it is done, so
a run stopped at its time limit still tells how far it got."""

import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
import flip_loss  # noqa: E402,F401
from flip_loss import oracle  # noqa: E402

ops = torch.ops.flip


def pair(shape, dtype, device, scale=1.0):
    a = (scale * torch.rand(shape, device=device, dtype=dtype)).requires_grad_()
    b = (scale * torch.rand(shape, device=device, dtype=dtype)).requires_grad_()
    return a, b


def every_op(device, dtype, shape):
    a, b = pair(shape, dtype, device)
    out = ops.ldr_flip(a, b, 67.0, "srgb", 1e-15)  # autograd: the kept sensitivities
    out.sum().backward()
    with torch.no_grad():
        ops.ldr_flip(a, b, 67.0, "linear", 1e-15)  # the fused forward
    for mask in ([True, True], [True, False], [False, True]):  # the recomputing tiled backward
        ops.ldr_flip_backward(torch.ones_like(out), a.detach(), b.detach(), 67.0, "linear", 1e-15, mask)
    opp = oracle.linear_rgb_to_opponent(a.detach()).requires_grad_()
    ops.csf_filter(opp, 30.0).sum().backward()
    ops.hunt_hyab(a, b, 1e-15).sum().backward()
    ops.feature_difference(a[:, :1], b[:, :1], 30.0, 1e-15).sum().backward()


def hdr(device, dtype, shape):
    a, b = pair(shape, dtype, device, scale=8.0)
    n = shape[0]
    ex = torch.tensor([[-2.0, 0.0, 1.5]] * n, device=device, dtype=dtype)
    counts = torch.tensor([3] + [2] * (n - 1), device=device)
    out, _, index = ops.hdr_flip(a, b, ex, counts, 67.0, "aces", 1e-15)
    out.sum().backward()
    ops.hdr_flip_backward(
        torch.ones_like(out), a.detach(), b.detach(), ex, counts, index, 67.0, "hable", 1e-15, [True, False]
    )


def section(name):
    torch.cuda.synchronize()
    print(f"sanitize_case: {name}: done", flush=True)


row_passes = os.environ.get("FLIP_LOSS_CUDA_FORCE_ROW_PASSES") == "1"
scratch = os.environ.get("FLIP_LOSS_CUDA_BACKWARD_SCRATCH")
print(f"sanitize_case: forward path = {'row passes (forced)' if row_passes else 'fused where it fits'}")
print(
    f"sanitize_case: backward path = {'row passes (forced)' if row_passes else 'tiled where it fits'}, "
    f"scratch budget = {scratch + ' bytes' if scratch else 'default'}"
)
for dtype in (torch.float32, torch.float64):
    for shape in [(2, 3, 37, 133), (1, 3, 3, 5)]:
        every_op("cuda", dtype, shape)
        hdr("cuda", dtype, shape)
section("every op and HDR-FLIP, float32 and float64, partial tiles")

# 70000 rows > 65535 grid rows: under FLIP_LOSS_CUDA_FORCE_ROW_PASSES=1 the H and HT passes stride
# over rows; otherwise the fused forward and the tiled backward run 4375 tiles down the image (more
# than 65535 tiles, 1.1 M rows, is tests/test_cuda.py's job: too slow under the sanitizers).
a, b = pair((1, 3, 70000, 2), torch.float32, "cuda")
ops.ldr_flip(a, b, 67.0, "srgb", 1e-15).sum().backward()
section("tall image 1x3x70000x2 (grid-striding rows)")

stream = torch.cuda.Stream()
with torch.cuda.stream(stream):
    every_op("cuda", torch.float32, (1, 3, 20, 41))
    hdr("cuda", torch.float32, (1, 3, 20, 41))
stream.synchronize()
section("non-default stream")

if torch.cuda.device_count() > 1:
    every_op("cuda:1", torch.float32, (1, 3, 20, 41))
    hdr("cuda:1", torch.float32, (1, 3, 20, 41))
    torch.cuda.synchronize("cuda:1")
    section("second GPU (cuda:1)")
else:
    print("sanitize_case: second GPU: skipped (one device)")
print("sanitize_case: done")
