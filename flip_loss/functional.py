"""Functional API: ``ldr_flip``, the LDR data range and the out-of-range warning. (The image checks
every entry point shares are in image_checks.py, what a call may read of its tensors in
tensor_values.py, multi-scale FLIP's sum in multiscale.py.)"""

import math
import warnings
from typing import List, Optional, Tuple

import torch

from . import alpha as alpha_rule, options
from ._ops import kernels_serve
from .constants import DEFAULT_EPS, DEFAULT_PPD
from .tensor_values import host_table, is_compiling, is_device_call, is_plain_tensor
from .image_checks import checked_pair, pair_values
from .multiscale import multiscale_op, multiscale_op_serves, weighted_sum

__all__ = ["INPUT_SPACES", "OUT_OF_RANGE_TOLERANCE", "ldr_flip"]

INPUT_SPACES = options.INPUT_SPACES

# LDR inputs further than this outside [0, 1] trigger the warning below: 0-255 images and [-1, 1]
# images do, while a network's output (or an optimised image) that overshoots by a little is
# clamped without a word, as the evaluator does.
OUT_OF_RANGE_TOLERANCE = 0.25


def _float32_exact(v: float) -> bool:
    """Whether ``v`` is 0 or a normal float32 number (24 significant bits, in range), so that float32
    arithmetic with it does not round it. TorchScript-compatible (Veltkamp's split: with the factor
    2**29 + 1, ``hi`` keeps the leading 24 of the 53 significant bits of ``v``)."""
    if v == 0.0:
        return True
    if not (1.1754943508222875e-38 <= abs(v) <= 3.4028234663852886e38):
        return False
    t = v * 536870913.0
    return t - (t - v) == v


def to_unit_range(x: torch.Tensor, data_range: Tuple[float, float]) -> torch.Tensor:
    """Maps values in [low, high] to [0, 1] (differentiably), returned in the input's dtype.
    TorchScript-compatible."""
    low, high = data_range
    if low == 0.0 and high == 1.0:
        return x
    # Checked here too, on every path: a module's data_range can be changed after construction.
    options.check_data_range_value(low, high)
    width = high - low
    # float32 arithmetic would round low (1000.1 by 2.4e-5, which shifts every value by 2.4e-5 of
    # a range of 1) or overflow with the width (a width of 1e39 is infinite: every value mapped
    # to 0): such ranges map in float64, rounded once. float16 and bfloat16 map in float32 (a
    # width of 65535 is infinite in float16).
    compute = x.dtype
    if x.dtype != torch.float64:
        compute = torch.float32
        if x.device.type != "mps" and not (_float32_exact(low) and 1.1754943508222875e-38 <= width <= 3.4e38):
            compute = torch.float64  # (MPS has no float64)
    y = x if compute == x.dtype else x.to(compute)
    y = y / width if low == 0.0 else (y - low) / width
    return y if y.dtype == x.dtype else y.to(x.dtype)


# The out-of-range warning is shown at most once per process. CPU inputs are looked at on every
# call until it has been shown (a min/max pass, negligible next to FLIP); inputs on another device
# only when the caller allows it (a module's first call, the first such call of ldr_flip), since
# reading the result back is a host synchronisation. Traced code (torch.compile, TorchScript) is
# not looked at.
_out_of_range_warned = False
_device_inputs_looked_at = False


def unit_pair(
    test: torch.Tensor, reference: torch.Tensor, data_range: Tuple[float, float], keep_codes: bool
) -> Tuple[torch.Tensor, torch.Tensor]:
    """Both images as LDR-FLIP's ops take them. A floating-point image is mapped from ``data_range``
    to [0, 1]; a uint8 image (8-bit codes k) means the values k / 255 whatever ``data_range`` says:
    kept as codes when both images are and ``keep_codes`` (the kernels read them as they are), else
    as those values (``pair_values``). TorchScript-compatible."""
    test_codes = test.dtype == torch.uint8
    ref_codes = reference.dtype == torch.uint8
    if not test_codes:
        test = to_unit_range(test, data_range)
    if not ref_codes:
        reference = to_unit_range(reference, data_range)
    if test_codes and ref_codes and keep_codes:
        return test, reference
    return pair_values(test, reference)


def _warn_if_outside_unit_range(test: torch.Tensor, reference: torch.Tensor, on_device: bool) -> None:
    global _out_of_range_warned
    if _out_of_range_warned or is_compiling() or (test.device.type != "cpu" and not on_device):
        return
    with torch.no_grad():
        # One pass over each image (aminmax), not one for its minimum and another for its maximum.
        lo_t, hi_t = torch.aminmax(test.detach())
        lo_r, hi_r = torch.aminmax(reference.detach())
        extremes = torch.stack([torch.minimum(lo_t, lo_r), torch.maximum(hi_t, hi_r)])
        if is_plain_tensor(extremes):  # the common case, without host_table's per-call cost
            lo, hi = extremes.float().tolist()
        else:
            table = host_table(extremes)
            if table is None:  # no values (meta, FakeTensor): nothing to warn about, nothing used up
                return
            lo, hi = float(table[0].min()), float(table[1].max())
    # NaN/Inf inputs are no range to advise on: the CPU kernels refuse them (the call fails, and a
    # warning it showed would be used up, never shown for a later call's real out-of-range values);
    # on another device their own warning says what happens.
    if warn_non_finite_on_device(lo, hi, test.device.type) or not (math.isfinite(lo) and math.isfinite(hi)):
        return
    if lo < -OUT_OF_RANGE_TOLERANCE or hi > 1.0 + OUT_OF_RANGE_TOLERANCE:
        _out_of_range_warned = True
        warnings.warn(
            f"flip_loss: LDR-FLIP inputs range from {lo:.4g} to {hi:.4g} (after data_range), far outside "
            f"[0, 1]; FLIP clamps them to [0, 1], with zero gradient beyond. {_range_advice(lo, hi)} "
            "(Shown once per process.)",
            UserWarning,
            stacklevel=_caller_stacklevel(),
        )


# The warning below, like the out-of-range one, is shown at most once per process.
_non_finite_warned = False


def warn_non_finite_on_device(lo: float, hi: float, device_type: str) -> bool:
    """Whether the look at inputs on a device other than the CPU found NaN or infinite values
    (``lo`` and ``hi``: the inputs' extremes, NaN when any value is NaN); warns the first time.
    The rule is one per device, the same on every path and every call: the CPU kernels refuse such
    inputs (RuntimeError); the other devices' kernels pass them through, the map NaN around them,
    since refusing there would synchronise the host on every call (docs/algorithm.md §7.12). The
    look, which reads the extremes back anyway but only on some calls, therefore only warns: an
    error there would make a call's outcome depend on the calls before it."""
    global _non_finite_warned
    if device_type == "cpu" or (math.isfinite(lo) and math.isfinite(hi)):
        return False
    if not _non_finite_warned:
        _non_finite_warned = True
        warnings.warn(
            f"flip_loss: LDR-FLIP inputs on {device_type} hold NaN or infinite values. The {device_type} kernels do "
            "not refuse them (the CPU kernels do): the map, and a loss over it, is NaN around them "
            "(docs/algorithm.md §7.12). (Shown once per process.)",
            UserWarning,
            stacklevel=_caller_stacklevel(),
        )
    return True


def _range_advice(lo: float, hi: float) -> str:
    """What the out-of-range warning suggests, from the range it saw: a data_range only where the
    values look like one (0-255, 0-65535, [-1, 1]); otherwise (a network output that overshoots)
    a clamp or a bounded output."""
    if lo >= -OUT_OF_RANGE_TOLERANCE:
        if 200.0 <= hi <= 256.0:
            return "If these are 0-255 images, pass data_range=255."
        if 50000.0 <= hi <= 65536.0:
            return "If these are 16-bit images, pass data_range=65535."
    elif lo >= -1.0 - OUT_OF_RANGE_TOLERANCE and hi <= 1.0 + OUT_OF_RANGE_TOLERANCE:
        return "If these are [-1, 1] images, pass data_range=(-1, 1)."
    return (
        "If a network produces them, bound its output (e.g. a sigmoid) or clamp it to [0, 1]; for linear "
        "HDR images use hdr_flip."
    )


def _caller_stacklevel() -> int:
    """The stacklevel of warnings.warn that names the first frame outside flip_loss and torch (the
    user's line that called the loss), counted from the caller of this function."""
    import os
    import sys

    package = os.path.dirname(os.path.abspath(__file__)) + os.sep
    torch_dir = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep
    frame, level = sys._getframe(1), 1
    while frame is not None:
        name = os.path.abspath(frame.f_code.co_filename)
        if not (name.startswith(package) or name.startswith(torch_dir)):
            return level
        frame, level = frame.f_back, level + 1
    return 1


def ldr_flip_with_look(
    test,
    reference,
    pixels_per_degree,
    input_space,
    eps,
    data_range,
    look_on_device: bool,
    alpha=None,
    background="black",
    ppd_weights=None,
):
    """``ldr_flip`` with ``look_on_device``: whether inputs on a device other than the CPU may be
    read back for the out-of-range warning (see above)."""
    mode, bg = options.alpha_options(alpha, background)
    test, reference = checked_pair(test, reference, mode is not None, codes=True)
    ppds, weights = options.pixels_per_degree_scales(pixels_per_degree, ppd_weights)
    space = options.input_space(input_space)
    eps = options.eps(eps)
    unit = options.data_range(data_range)
    options.check_background_value(bg, unit[0], unit[1])
    test, reference = unit_pair(test, reference, unit, mode is None and len(ppds) == 1)
    # Alpha shares the colour's data range and is looked at with it (it is clamped as they are).
    if test.dtype != torch.uint8:  # codes are in range
        _warn_if_outside_unit_range(test, reference, look_on_device)
    if mode is not None:
        bg = alpha_rule.unit_background(bg, unit[0], unit[1])
        linear = space == "linear"
        test, reference = (
            alpha_rule.composite(test, mode, bg, linear),
            alpha_rule.composite(reference, mode, bg, linear),
        )
    if kernels_serve("ldr_flip", test, reference):
        if len(ppds) > 1 and multiscale_op_serves(test.device):
            return multiscale_op(test, reference, ppds, weights, space, eps)
        op = torch.ops.flip.ldr_flip
    else:
        from . import oracle

        op = oracle.ldr_flip
    return weighted_sum([op(test, reference, ppd, space, eps) for ppd in ppds], weights)


def ldr_flip(
    test: torch.Tensor,
    reference: torch.Tensor,
    pixels_per_degree: float = DEFAULT_PPD,
    input_space: str = "srgb",
    eps: float = DEFAULT_EPS,
    data_range=1.0,
    alpha: Optional[str] = None,
    background="black",
    ppd_weights: Optional[List[float]] = None,
) -> torch.Tensor:
    """LDR-FLIP error map between ``test`` and ``reference``.

    Both are N x 3 x H x W (or 3 x H x W) RGB tensors of the same float dtype and device, sRGB-encoded
    (``input_space="srgb"``, the default) or linear RGB (``"linear"``), with values in [0, 1], or in
    ``data_range``: a number ``high`` (values in [0, high], e.g. 255) or a pair ``(low, high)`` (e.g.
    (-1, 1)); they are mapped to [0, 1] first. Values still outside [0, 1] are clamped, as NVIDIA's
    evaluator does (a one-time warning says so when they are clearly outside). Returns the
    per-pixel error in [0, 1], N x 1 x H x W (1 x H x W for a CHW input), in the input dtype.
    Differentiable in both inputs. ``eps`` (0 to 1e-6) regularises the two square roots whose slope
    is infinite at zero (see docs/api.md, "Gradients"); with ``eps=0`` the values are exactly those of the published
    metric.

    RGBA images (4 channels, alpha in the data range too) need ``alpha="straight"`` or
    ``alpha="premultiplied"``: each is composited over ``background`` (``"black"``, ``"white"``,
    ``"checkerboard"`` or an (r, g, b) triple in the data range) in its own encoding before FLIP;
    an RGB image beside an RGBA one is opaque. The rule: :mod:`flip_loss.alpha`.

    Multi-scale FLIP: a list (or tuple) of ``pixels_per_degree`` values gives the weighted mean of
    the maps at each, ``ppd_weights`` (one non-negative weight per value, normalised to sum to 1;
    default: equal weights); the inputs are checked, mapped and composited once for all scales.
    """
    global _device_inputs_looked_at
    look = not _device_inputs_looked_at
    if is_device_call(test):
        _device_inputs_looked_at = True
    return ldr_flip_with_look(
        test, reference, pixels_per_degree, input_space, eps, data_range, look, alpha, background, ppd_weights
    )
