"""The promised agreement of the CUDA kernels with the CPU kernels, defined once (README, "GPU and CPU
agreement"; docs/algorithm.md §9.2): the CUDA tests, the emulator's tests and scripts/gpu/smoke.py
measure against these numbers; tests/tooling/test_one_source.py holds the documents to them.

How the numbers are derived (measured through the test-only emulator, which performs the device's
arithmetic but for CUDA's own maths functions, tests/gpu/test_gpu_emulation.py):

* float32 gradients, 5e-4 of their scale: each device's float32 gradient lies within about 2e-4 of
  the float64 one (the CPU kernels' up to 1.6e-4 on HDR inputs; the emulated device's within
  1.4e-4 of the CPU's), so the two devices' float32 gradients can be up to 2 x 2e-4 apart; the
  last 1e-4 is for CUDA's pow, cbrt, log and exp2, which the emulator does not reproduce (it alone
  already measured 1.4e-4, so any bound near 1e-4 would fail on correct kernels).
* float32 maps, 1e-5: the emulated device measured 3.7e-6 (about 31 float32 ulp of 1.0); 1e-5
  (84 ulp) leaves a factor of about 2.7 for CUDA's maths functions.
* float64, 1e-10 for both: the emulated device agrees to 1e-13; 1e-10 is far above any rounding
  difference and far below what a wrong tap, halo or band gives (1e-6 and more).
* HDR-FLIP's winning exposure may differ where two exposures tie to within rounding: at most 0.1 %
  of the pixels (float32), and gradients through a given index then meet the gradient bound.

Differences: the largest absolute difference over max(1, the CPU's largest magnitude)."""

import torch

# dtype -> the largest relative difference allowed (see above)
MAP_TOLERANCE = {torch.float32: 1e-5, torch.float64: 1e-10}
GRADIENT_TOLERANCE = {torch.float32: 5e-4, torch.float64: 1e-10}
# The largest fraction of pixels whose HDR-FLIP winning exposure may differ from the CPU's.
HDR_INDEX_MISMATCH = 1e-3


def tolerance(dtype: torch.dtype, gradient: bool = False) -> float:
    """The promised bound for a map (``gradient=False``) or a gradient of ``dtype``."""
    table = GRADIENT_TOLERANCE if gradient else MAP_TOLERANCE
    if dtype not in table:
        raise ValueError(f"flip_loss: no promised GPU/CPU agreement for {dtype} (float32 and float64 only)")
    return table[dtype]


def relative_difference(got: torch.Tensor, want: torch.Tensor) -> float:
    """The largest absolute difference of ``got`` (any device) from ``want``, divided by max(1, the
    largest magnitude of ``want``); infinite where ``got`` is not finite."""
    got, want = got.detach().cpu().double(), want.detach().cpu().double()
    if not bool(torch.isfinite(got).all()):
        return float("inf")
    if want.numel() == 0:
        return 0.0
    scale = max(want.abs().max().item(), 1.0)
    return (got - want).abs().max().item() / scale


def within(got: torch.Tensor, want: torch.Tensor, dtype: torch.dtype, gradient: bool = False) -> bool:
    """Whether ``got`` meets the promised agreement with ``want`` (the CPU kernels' result)."""
    return relative_difference(got, want) <= tolerance(dtype, gradient)
