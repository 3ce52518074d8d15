"""A small CUDA workload for compute-sanitizer (memcheck, racecheck): every op forward and
backward, odd sizes that leave partial tiles, both dtypes."""
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import flip_loss  # noqa: E402,F401
from flip_loss import reference as ref_impl  # noqa: E402

ops = torch.ops.flip
for dtype in (torch.float32, torch.float64):
    for shape in [(2, 3, 37, 133), (1, 3, 3, 5)]:
        a = torch.rand(shape, device="cuda", dtype=dtype, requires_grad=True)
        b = torch.rand(shape, device="cuda", dtype=dtype, requires_grad=True)
        ops.ldr_flip(a, b, 67.0, "srgb", 1e-15).sum().backward()
        opp = ref_impl.linear_rgb_to_opponent(a.detach()).requires_grad_()
        ops.csf_filter(opp, 30.0).sum().backward()
        ops.hunt_hyab(a, b, 1e-15).sum().backward()
        ops.feature_difference(a[:, :1], b[:, :1], 30.0, 1e-15).sum().backward()
torch.cuda.synchronize()
print("sanitize_case: done")
