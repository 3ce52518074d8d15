"""Multi-scale FLIP's pieces that ``ldr_flip``, ``hdr_flip`` and ``FLIPLoss`` share: the weighted
sum of the maps at each scale, and the CPU's one-op path (``_ldr_flip_multiscale``); the option
check is ``options.pixels_per_degree_scales``."""

from typing import List

import torch

from .tensor_values import requires_grad_inside


def weighted_sum(maps: List[torch.Tensor], weights: List[float]) -> torch.Tensor:
    """Multi-scale FLIP's map: maps[0] * weights[0] + maps[1] * weights[1] + ..., in that order (the
    order _ldr_flip_multiscale adds in), values past 1 then 1; one map of weight 1 is returned
    unchanged. The weights sum to 1 (options.checked_scales), but each rounded to the maps' dtype
    (and each partial sum) may round up, so that maps of 1 at every scale could sum to 1 + 1 ulp
    (ten equal float32 weights do). The cap subtracts the excess as a constant, so the gradient
    stays that of the weighted mean, as the op's (which caps alike for weights that sum to 1, and
    whose backward never reads the map).
    TorchScript-compatible: a scripted FLIPLoss sums alike."""
    if len(maps) == 1 and weights[0] == 1.0:
        return maps[0]
    total = maps[0] * weights[0]
    for k in range(1, len(maps)):
        total = total + maps[k] * weights[k]
    # Exact: total - (total - 1) is 1 for totals in [1, 2] (Sterbenz), and total - 0 is total.
    return total - (total - 1.0).clamp(min=0.0).detach()


def multiscale_op_serves(device: torch.device) -> bool:
    """Whether multi-scale LDR-FLIP runs as one op, ``_ldr_flip_multiscale``, which converts the
    inputs once for all scales: on the CPU (and the meta device), where it has kernels; elsewhere
    each scale is an ``ldr_flip`` call. TorchScript-compatible."""
    return device.type == "cpu" or device.type == "meta"


def multiscale_op(
    test: torch.Tensor, reference: torch.Tensor, ppds: List[float], weights: List[float], space: str, eps: float
) -> torch.Tensor:
    """The weighted mean of the maps at each scale from ``_ldr_flip_multiscale``, which keeps the
    sensitivities of the inputs a gradient will be taken for (TorchScript-compatible: a scripted
    FLIPLoss calls it too, so that both give the same bits)."""
    wanted = [test.requires_grad, reference.requires_grad]
    if not torch.jit.is_scripting():
        wanted = [requires_grad_inside(test), requires_grad_inside(reference)]
    grad = torch.is_grad_enabled()
    keep = [grad and wanted[0], grad and wanted[1]]
    return torch.ops.flip._ldr_flip_multiscale(test, reference, ppds, weights, space, eps, keep)[0]
