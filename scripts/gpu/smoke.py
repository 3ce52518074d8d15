"""Whether a fresh build's CUDA kernels load and run at all: one small LDR-FLIP and HDR-FLIP forward
and backward on the GPU against the CPU kernels, within tests/test_cuda.py's tolerances. Run by
scripts/gpu/gpu_check.sh right after the build, so that a broken build or a kernel that cannot
launch on this GPU is named in seconds, before the benchmarks and the tests spend their time.
Prints one "smoke: ..." line per check and exits non-zero on the first failure."""

import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
import flip_loss  # noqa: E402

if not flip_loss.HAS_EXTENSION:
    sys.exit(f"smoke: flip_loss._C did not load: {flip_loss._ops.IMPORT_ERROR}")
if flip_loss._ops.CUDA_IMPORT_ERROR is not None:
    sys.exit(f"smoke: {flip_loss._ops.CUDA_IMPORT_ERROR}")
if not torch._C._dispatch_has_kernel_for_dispatch_key("flip::ldr_flip", "CUDA"):
    sys.exit("smoke: no CUDA kernels: flip_loss._C_cuda is not built (built without FLIP_LOSS_CUDA=1?)")
if not torch.cuda.is_available():
    sys.exit("smoke: torch sees no CUDA device")
print(
    f"smoke: {torch.cuda.get_device_name()}, torch {torch.__version__} (CUDA {torch.version.cuda}), "
    f"flip_loss {flip_loss.__version__}",
    flush=True,
)

ops = torch.ops.flip
g = torch.Generator().manual_seed(0)
failed = []


def check(label, got, want, tol):
    """Largest difference relative to max(1, largest value), as tests/test_cuda.py measures it."""
    for i, (c, h) in enumerate(zip(got, want)):
        scale = max(h.abs().max().item(), 1.0)
        err = (c.cpu() - h).abs().max().item() / scale
        ok = err <= tol and torch.isfinite(c).all().item()
        print(
            f"smoke: {label}[{i}]: {'ok' if ok else 'FAILED'} (largest difference {err:.2e}, tolerance {tol:.0e})",
            flush=True,
        )
        if not ok:
            failed.append(label)


for dtype, tol, gtol in ((torch.float32, 1e-5, 1e-4), (torch.float64, 1e-10, 1e-10)):
    x = torch.rand(2, 3, 45, 131, generator=g, dtype=dtype)
    y = (x + 0.1 * torch.randn(x.shape, generator=g, dtype=dtype)).clamp(0, 1)
    w = torch.rand(2, 1, 45, 131, generator=g, dtype=dtype)
    name = str(dtype).replace("torch.", "")
    check(
        f"ldr_flip {name}",
        [ops.ldr_flip(x.cuda(), y.cuda(), 67.0, "srgb", 1e-15)],
        [ops.ldr_flip(x, y, 67.0, "srgb", 1e-15)],
        tol,
    )
    check(
        f"ldr_flip_backward {name}",
        ops.ldr_flip_backward(w.cuda(), x.cuda(), y.cuda(), 67.0, "srgb", 1e-15, [True, True]),
        ops.ldr_flip_backward(w, x, y, 67.0, "srgb", 1e-15, [True, True]),
        gtol,
    )
    ex = torch.tensor([[-1.0, 0.5, 2.0], [0.0, 1.0, 0.0]], dtype=dtype)
    counts = torch.tensor([3, 2])
    hx, hy = 4 * x, 4 * y
    mh, _, index = ops.hdr_flip(hx, hy, ex, counts, 67.0, "aces", 1e-15)
    mc = ops.hdr_flip(hx.cuda(), hy.cuda(), ex.cuda(), counts.cuda(), 67.0, "aces", 1e-15)[0]
    # The map only: the winning exposure may differ at near-ties, so the backward takes the CPU's index.
    check(f"hdr_flip {name}", [mc], [mh], tol)
    check(
        f"hdr_flip_backward {name}",
        ops.hdr_flip_backward(
            w.cuda(), hx.cuda(), hy.cuda(), ex.cuda(), counts.cuda(), index.cuda(), 67.0, "aces", 1e-15, [True, True]
        ),
        ops.hdr_flip_backward(w, hx, hy, ex, counts, index, 67.0, "aces", 1e-15, [True, True]),
        gtol,
    )
torch.cuda.synchronize()
if failed:
    sys.exit(f"smoke: FAILED: {', '.join(failed)}")
print("smoke: ok")
