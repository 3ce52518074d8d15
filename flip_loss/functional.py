"""Functional API: ``ldr_flip`` and its input checks."""
import math

import torch

from . import _ops
from .constants import DEFAULT_EPS, DEFAULT_PPD

INPUT_SPACES = ("srgb", "linear")


def _check_pair(test, reference, pixels_per_degree, input_space, eps):
    for name, t in (("test", test), ("reference", reference)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"flip_loss: {name} must be a torch.Tensor, got {type(t).__name__}")
        if not t.is_floating_point():
            raise TypeError(f"flip_loss: {name} must have a floating-point dtype, got {t.dtype}; "
                            "convert 8-bit images with .float() / 255")
        if t.dim() not in (3, 4) or t.shape[-3] != 3:
            raise ValueError(f"flip_loss: {name} must be N x 3 x H x W or 3 x H x W (RGB), "
                             f"got shape {tuple(t.shape)}")
        if t.numel() == 0:
            raise ValueError(f"flip_loss: {name} is empty (shape {tuple(t.shape)})")
    if test.shape != reference.shape:
        raise ValueError(f"flip_loss: test and reference shapes differ: {tuple(test.shape)} vs "
                         f"{tuple(reference.shape)}")
    if test.device != reference.device:
        raise ValueError(f"flip_loss: test and reference are on different devices: {test.device} vs "
                         f"{reference.device}")
    if isinstance(pixels_per_degree, bool) or not isinstance(pixels_per_degree, (int, float)) \
            or not math.isfinite(pixels_per_degree) or pixels_per_degree <= 0:
        raise ValueError(f"flip_loss: pixels_per_degree must be a positive finite number, got "
                         f"{pixels_per_degree!r}")
    if not isinstance(input_space, str) or input_space.lower() not in INPUT_SPACES:
        raise ValueError(f"flip_loss: input_space must be one of {INPUT_SPACES}, got {input_space!r}")
    if not isinstance(eps, (int, float)) or not math.isfinite(eps) or eps < 0:
        raise ValueError(f"flip_loss: eps must be a finite number >= 0, got {eps!r}")


def _checked_pair(test, reference, pixels_per_degree, input_space, eps):
    """Checks the arguments (see _check_pair) and promotes both images to a common dtype."""
    _check_pair(test, reference, pixels_per_degree, input_space, eps)
    if test.dtype != reference.dtype:
        common = torch.promote_types(test.dtype, reference.dtype)
        test, reference = test.to(common), reference.to(common)
    return test, reference


def ldr_flip(test: torch.Tensor, reference: torch.Tensor, pixels_per_degree: float = DEFAULT_PPD,
             input_space: str = "srgb", eps: float = DEFAULT_EPS) -> torch.Tensor:
    """LDR-FLIP error map between ``test`` and ``reference``.

    Both are N x 3 x H x W (or 3 x H x W) RGB tensors of the same float dtype and device, sRGB-encoded
    in [0, 1] (``input_space="srgb"``, the default) or linear RGB in [0, 1] (``"linear"``); values
    outside [0, 1] are clamped, as NVIDIA's evaluator does. Returns the per-pixel error in [0, 1],
    N x 1 x H x W (1 x H x W for a CHW input), in the input dtype. Differentiable in both inputs.
    ``eps`` regularises the two square roots whose slope is infinite at zero (see README); with
    ``eps=0`` the values are exactly those of the published metric.
    """
    test, reference = _checked_pair(test, reference, pixels_per_degree, input_space, eps)
    space = input_space.lower()
    if _ops.use_extension(test, reference):
        return torch.ops.flip.ldr_flip(test, reference, float(pixels_per_degree), space, float(eps))
    from . import reference as ref_impl

    return ref_impl.ldr_flip(test, reference, float(pixels_per_degree), space, float(eps))
