"""Functional API: ``ldr_flip``, the image checks shared by every entry point, the LDR data range
and the out-of-range warning."""

import math
import warnings
from typing import List, Optional, Tuple

import torch

from . import _ops, alpha as alpha_rule, options
from .constants import DEFAULT_EPS, DEFAULT_PPD

__all__ = ["INPUT_SPACES", "OUT_OF_RANGE_TOLERANCE", "ldr_flip"]

INPUT_SPACES = options.INPUT_SPACES

# LDR inputs further than this outside [0, 1] trigger the warning below: 0-255 images and [-1, 1]
# images do, while a network's output (or an optimised image) that overshoots by a little is
# clamped without a word, as the evaluator does.
OUT_OF_RANGE_TOLERANCE = 0.25


def check_image(name: str, t: torch.Tensor, rgba: bool = False) -> None:
    """The checks of one image that need no data: a float dtype, N x 3 x H x W or 3 x H x W (with
    ``rgba``, 4 channels too), not empty. TorchScript-compatible."""
    if not t.is_floating_point():
        raise TypeError(
            "flip_loss: "
            + name
            + " must have a floating-point dtype, got "
            + str(t.dtype)
            + "; convert 8-bit images with .float() / 255 (or pass data_range=255)"
        )
    if (t.dim() == 3 or t.dim() == 4) and t.shape[-3] == 4 and not rgba:
        # Whoever passes RGBA must say what alpha means: guessing straight or premultiplied would
        # silently change the result for half of the images.
        raise ValueError(
            "flip_loss: " + name + " has 4 channels (RGBA, shape " + str(list(t.shape)) + "), and FLIP "
            "compares RGB images: ldr_flip, hdr_flip, FLIPLoss and FLIPMetric composite it over "
            "background= (default 'black') given alpha='straight' (colour not multiplied by alpha, "
            "as PNG stores it) or alpha='premultiplied' (colour multiplied by alpha, as OpenEXR "
            "stores it); or drop alpha with " + name + "[..., :3, :, :]"
        )
    if (t.dim() != 3 and t.dim() != 4) or (t.shape[-3] != 3 and not (rgba and t.shape[-3] == 4)):
        layout = "N x 3 x H x W or 3 x H x W (RGB)"
        if rgba:
            layout = "N x C x H x W or C x H x W with C = 3 (RGB) or 4 (RGBA)"
        raise ValueError("flip_loss: " + name + " must be " + layout + ", got shape " + str(list(t.shape)))
    if t.numel() == 0:
        raise ValueError("flip_loss: " + name + " is empty (shape " + str(list(t.shape)) + ")")


def _without_channels(t: torch.Tensor) -> List[int]:
    shape: List[int] = t.shape
    return shape[:-3] + shape[-2:]


def check_image_pair(test: torch.Tensor, reference: torch.Tensor, rgba: bool = False) -> None:
    """The checks of an image pair that need no data (dtype, layout, emptiness, matching shapes and
    devices); with ``rgba`` each image may have an alpha channel (4 channels), and the shapes must
    match but for the channels (an RGB image beside an RGBA one is opaque). TorchScript-compatible:
    a scripted ``FLIPLoss`` makes them too."""
    check_image("test", test, rgba)
    check_image("reference", reference, rgba)
    if rgba:
        same_shape = _without_channels(test) == _without_channels(reference)
    else:
        same_shape = test.shape == reference.shape
    if not same_shape:
        raise ValueError(
            "flip_loss: test and reference shapes differ: "
            + str(list(test.shape))
            + " vs "
            + str(list(reference.shape))
        )
    if test.device != reference.device:
        raise ValueError(
            "flip_loss: test and reference are on different devices: "
            + str(test.device)
            + " vs "
            + str(reference.device)
        )


def checked_pair(test, reference, rgba: bool = False):
    """Checks an image pair (see check_image_pair) and promotes both to a common dtype."""
    for name, t in (("test", test), ("reference", reference)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"flip_loss: {name} must be a torch.Tensor, got {type(t).__name__}")
    check_image_pair(test, reference, rgba)
    if test.dtype != reference.dtype:
        common = torch.promote_types(test.dtype, reference.dtype)
        test, reference = test.to(common), reference.to(common)
    return test, reference


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


def is_compiling() -> bool:
    compiler = getattr(torch, "compiler", None)
    return bool(compiler is not None and hasattr(compiler, "is_compiling") and compiler.is_compiling())


# The out-of-range warning is shown at most once per process. CPU inputs are looked at on every
# call until it has been shown (a min/max pass, negligible next to FLIP); inputs on another device
# only when the caller allows it (a module's first call, the first such call of ldr_flip), since
# reading the result back is a host synchronisation. Traced code (torch.compile, TorchScript) is
# not looked at.
_out_of_range_warned = False
_device_inputs_looked_at = False


def is_device_call(test) -> bool:
    """Whether an eager call with ``test`` counts as its owner's look at inputs on a device (not one
    with inputs without values, meta tensors or FakeTensors, which cannot be looked at)."""
    return (
        isinstance(test, torch.Tensor)
        and test.device.type != "cpu"
        and not is_compiling()
        and (is_plain_tensor(test) or _unwrapped_has_values(test))
    )


def _unwrapped(t: torch.Tensor) -> torch.Tensor:
    """``t`` without its functorch wrappers (vmap, grad, ...): the tensor that holds the values."""
    functorch = torch._C._functorch
    while functorch.is_functorch_wrapped_tensor(t):
        t = functorch.get_unwrapped(t)
    return t


def is_plain_tensor(t: torch.Tensor) -> bool:
    """A tensor that holds its values itself: not a subclass (FakeTensor), not functorch-wrapped,
    not on the meta device."""
    return (
        type(t) is torch.Tensor and t.device.type != "meta" and not torch._C._functorch.is_functorch_wrapped_tensor(t)
    )


def _unwrapped_has_values(t: torch.Tensor) -> bool:
    from torch._subclasses.fake_tensor import is_fake

    t = _unwrapped(t)
    return t.device.type != "meta" and not is_fake(t)


def host_table(table: torch.Tensor) -> Optional[torch.Tensor]:
    """The values of a small table (rows of flags or per-image values, computed for a check) as a
    float64 CPU tensor of ``table.shape[0]`` rows, for the checks that read values back; None when
    there are no values to read (meta tensors, FakeTensors: the check is skipped, and nothing in the
    result depends on it). Under functorch transforms (vmap, grad, ...) the table is unwrapped, and
    the values of every vmapped example are read: row i then holds row i of every example (each
    vmap level's batch dimension moved last and flattened into the row), so a check covers all of
    them, whatever was called before. Not for traced code (torch.compile, TorchScript)."""
    t = table
    functorch = torch._C._functorch
    while functorch.is_functorch_wrapped_tensor(t):
        if functorch.is_batchedtensor(t):
            bdim = functorch.maybe_get_bdim(t)
            t = functorch.get_unwrapped(t).movedim(bdim, -1)
        else:
            t = functorch.get_unwrapped(t)
    if not _unwrapped_has_values(t):
        return None
    return t.detach().to("cpu", torch.float64).reshape(table.shape[0], -1)


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
    refuse_non_finite(lo, hi, test.device.type)
    if lo < -OUT_OF_RANGE_TOLERANCE or hi > 1.0 + OUT_OF_RANGE_TOLERANCE:
        _out_of_range_warned = True
        warnings.warn(
            f"flip_loss: LDR-FLIP inputs range from {lo:.4g} to {hi:.4g} (after data_range), far outside "
            f"[0, 1]; FLIP clamps them to [0, 1], with zero gradient beyond. {_range_advice(lo, hi)} "
            "(Shown once per process.)",
            UserWarning,
            stacklevel=_caller_stacklevel(),
        )


def refuse_non_finite(lo: float, hi: float, device_type: str) -> None:
    """The CPU kernels refuse NaN or infinite inputs on every call; on other devices the kernels
    pass them through (a check there would synchronise the host on every call, docs/algorithm.md
    §7.12), so the look at device inputs, which reads their extremes back anyway, refuses them with
    the CPU kernels' error: on the first look only, not a guarantee for every call. ``lo`` and
    ``hi`` are the inputs' extremes (NaN when any value is NaN)."""
    if device_type != "cpu" and not (math.isfinite(lo) and math.isfinite(hi)):
        raise RuntimeError("flip::ldr_flip: an input contains NaN or infinite values")


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


def kernels_serve(op: str, *tensors: torch.Tensor) -> bool:
    """Whether the compiled ``op`` serves these tensors: on a device with kernels (see _ops), or on
    the meta device, where the ops' Meta kernels give the result's shape and dtype (the
    pure-PyTorch oracle would work too, but slowly and with a warning)."""
    if _ops.HAS_EXTENSION and all(t.device.type == "meta" for t in tensors):
        return True
    return _ops.use_extension(*tensors, op=op)


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
    grad = torch.is_grad_enabled()
    keep = [grad and test.requires_grad, grad and reference.requires_grad]
    return torch.ops.flip._ldr_flip_multiscale(test, reference, ppds, weights, space, eps, keep)[0]


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
    test, reference = checked_pair(test, reference, mode is not None)
    ppds, weights = options.pixels_per_degree_scales(pixels_per_degree, ppd_weights)
    space = options.input_space(input_space)
    eps = options.eps(eps)
    unit = options.data_range(data_range)
    options.check_background_value(bg, unit[0], unit[1])
    test, reference = to_unit_range(test, unit), to_unit_range(reference, unit)
    # Alpha shares the colour's data range and is looked at with it (it is clamped as they are).
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
