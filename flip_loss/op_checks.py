"""The argument checks of ``torch.ops.flip.*`` on the Python side of the ops: their fake kernels
(torch.compile, torch.export, FakeTensor tracing, with symbolic sizes), their Autograd kernels
(which run them before any kernel does) and, for calls that skip autograd (``torch.inference_mode``,
inference tensors), their BackendSelect kernels — see ``flip_loss/op_registration.py``.

The C++ kernels check the same rules with the same messages (``csrc/ops/checks.h``); they are what
the C++ API meets. Across the stable ABI a
C++ exception keeps no class that every torch release agrees on, so the C++ checks raise
RuntimeError; here a wrong dtype raises TypeError and any other bad argument ValueError, as PyTorch's
own ops do. The values of exposures and counts are checked here for real host tensors only, as the
CPU kernels check them (reading device tensors would synchronise the device; a traced call has no
values). ``tests/ops/test_op_checks.py`` holds the two sets of checks to each other.
"""

import math

import torch

from .tensor_values import carries_tangent
from .constants import MAX_EPS, MAX_EXPOSURES, MAX_PPD, MIN_EXPOSURES, MIN_PPD, TONE_MAPPERS

# torch's C++ names of dtypes, which the C++ messages print.
_DTYPE_NAMES = {
    torch.float16: "Half",
    torch.bfloat16: "BFloat16",
    torch.float32: "Float",
    torch.float64: "Double",
    torch.uint8: "Byte",
    torch.int8: "Char",
    torch.int16: "Short",
    torch.int32: "Int",
    torch.int64: "Long",
    torch.bool: "Bool",
    torch.complex64: "ComplexFloat",
    torch.complex128: "ComplexDouble",
}


def dtype_name(dtype: torch.dtype) -> str:
    return _DTYPE_NAMES.get(dtype, str(dtype).replace("torch.", ""))


def _number(x: float) -> str:
    """A float as C++'s ostream prints it (six significant digits), as the C++ messages do."""
    return f"{x:g}"


def _sizes(t: torch.Tensor) -> str:
    return "[" + ", ".join(str(s) for s in t.shape) + "]"


def refuse_forward_mode(name: str, *args) -> None:
    """Raises NotImplementedError where a tensor among ``args`` carries a forward-mode tangent. The
    compiled ops have no JVP: a result without a tangent would read as a derivative of 0. Called by
    the ops' Autograd and BackendSelect kernels, and by the Python API where the compiled ops
    serve, before any work that a tangent could reach first (automatic exposures)."""
    if carries_tangent(*args):
        raise forward_mode_error(name)


def forward_mode_error(name: str) -> NotImplementedError:
    """The refusal of forward mode by op ``name``."""
    return NotImplementedError(
        f"flip: forward-mode automatic differentiation (torch.func.jvp, jacfwd, hessian, "
        f"torch.autograd.forward_ad) is not supported: flip::{name} has no JVP. Call it "
        f"through the Python API (flip_loss.ldr_flip, hdr_flip, FLIPLoss), which computes "
        f"forward mode with the portable path (flip_loss.oracle), outside torch.compile."
    )


def _value(cond, message):
    if not cond:
        raise ValueError(message)


def _type(cond, message):
    if not cond:
        raise TypeError(message)


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """float16/bfloat16 (and uint8 codes) are computed (and their sensitivities kept) in float32."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def map_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype of the map for images of ``dtype``: theirs, float32 for uint8 codes."""
    return torch.float32 if dtype == torch.uint8 else dtype


def _is_integral(dtype: torch.dtype) -> bool:
    return not dtype.is_floating_point and not dtype.is_complex and dtype != torch.bool


def check_image(t, name: str, channels: int, codes: bool = False) -> None:
    """``codes``: the op takes images of 8-bit codes (uint8 samples k, the values k / 255): ldr_flip
    alone, since they have no gradient and the other ops' inputs are not 8-bit values."""
    if t is None:
        raise RuntimeError(f"flip: {name} is undefined")
    byte = t.dtype == torch.uint8
    _type(
        t.dtype.is_floating_point or (codes and byte),
        f"flip: {name} must have a floating-point dtype (float16, bfloat16, float32 or float64)"
        f"{' or be uint8 (8-bit codes)' if codes else ''}, got {dtype_name(t.dtype)}"
        f"{' (uint8 images, 8-bit codes, are taken by ldr_flip alone)' if byte else ''}",
    )
    _value(
        t.dim() in (3, 4),
        f"flip: {name} must be N x {channels} x H x W or {channels} x H x W, got {t.dim()} dimensions {_sizes(t)}",
    )
    _value(
        t.shape[-3] == channels, f"flip: {name} must have {channels} channel(s) in dimension -3, got shape {_sizes(t)}"
    )
    _value(t.shape[-1] > 0 and t.shape[-2] > 0, f"flip: {name} must have a non-empty H x W, got shape {_sizes(t)}")
    _value(t.dim() == 3 or t.shape[0] > 0, f"flip: {name} is an empty batch (N = 0), got shape {_sizes(t)}")


def check_pair(test, ref, channels: int, codes: bool = False) -> None:
    check_image(test, "test", channels, codes)
    check_image(ref, "reference", channels, codes)
    _value(test.shape == ref.shape, f"flip: test and reference shapes differ: {_sizes(test)} vs {_sizes(ref)}")
    _value(
        test.device == ref.device, f"flip: test and reference are on different devices: {test.device} vs {ref.device}"
    )
    _type(
        test.dtype == ref.dtype,
        f"flip: test and reference dtypes differ: {dtype_name(test.dtype)} vs {dtype_name(ref.dtype)}",
    )


def check_grad(grad, like, channels: int) -> None:
    """The incoming gradient of a backward op: floating point, on the inputs' device, shaped like
    the op's output for an input shaped like ``like`` (channels in dimension -3)."""
    if grad is None:
        raise RuntimeError("flip: grad is undefined")
    _type(grad.dtype.is_floating_point, f"flip: grad must have a floating-point dtype, got {dtype_name(grad.dtype)}")
    _value(grad.device == like.device, f"flip: grad is on {grad.device}, inputs on {like.device}")
    expected = list(like.shape)
    expected[-3] = channels
    _value(
        list(grad.shape) == expected,
        f"flip: grad must have shape [{', '.join(str(s) for s in expected)}], got {_sizes(grad)}",
    )


def check_ppd(ppd: float) -> None:
    _value(
        ppd == ppd and MIN_PPD <= ppd <= MAX_PPD,
        f"flip: pixels_per_degree must be a finite number from {_number(MIN_PPD)} to {_number(MAX_PPD)}, "
        f"got {_number(ppd)}",
    )


def check_eps(eps: float) -> None:
    _value(
        eps == eps and 0 <= eps <= MAX_EPS,
        f"flip: eps must be a finite number in [0, {_number(MAX_EPS)}] (larger values change the metric, not only "
        f"its gradient), got {_number(eps)}",
    )


def check_input_space(space: str) -> None:
    _value(space.lower() in ("srgb", "linear"), f'flip: input_space must be "srgb" or "linear", got "{space}"')


def check_tone_mapper(name: str) -> None:
    names = ", ".join(f"'{n}'" for n in sorted(TONE_MAPPERS))
    _value(name.lower() in TONE_MAPPERS, f'flip: tone_mapper must be one of {names}, got "{name}"')


def check_exposures(exposures, counts, like) -> None:
    """Shapes, dtypes and devices of exposures (N x E stops) and counts (N integers)."""
    if exposures is None or counts is None:
        raise RuntimeError("flip: exposures or counts is undefined")
    n = like.shape[0] if like.dim() == 4 else 1
    _type(
        exposures.dtype.is_floating_point, f"flip: exposures must be floating point, got {dtype_name(exposures.dtype)}"
    )
    _type(_is_integral(counts.dtype), f"flip: counts must be integers, got {dtype_name(counts.dtype)}")
    _value(
        exposures.dim() == 2 and exposures.shape[0] == n,
        f"flip: exposures must be N x E (one row of exposures per image), got shape {_sizes(exposures)} for {n} image(s)",
    )
    _value(
        MIN_EXPOSURES <= exposures.shape[1] <= MAX_EXPOSURES,
        f"flip: exposures must have between {MIN_EXPOSURES} and {MAX_EXPOSURES} columns (one per exposure), got "
        f"shape {_sizes(exposures)}",
    )
    _value(
        counts.dim() == 1 and counts.shape[0] == n,
        f"flip: counts must have one entry per image, got shape {_sizes(counts)}",
    )
    _value(
        exposures.device == like.device and counts.device == like.device,
        f"flip: exposures and counts must be on the images' device ({like.device})",
    )


def check_exposure_values(exposures, counts) -> None:
    """The values of host-resident exposures and counts (already shape-checked): each count in
    [MIN_EXPOSURES, E] and the exposures it selects finite. Skipped for device, fake and traced
    tensors."""
    if not all(type(t) is torch.Tensor and t.device.type == "cpu" for t in (exposures, counts)):
        return
    columns = exposures.shape[1]
    for n, count in enumerate(counts.tolist()):
        _value(
            MIN_EXPOSURES <= count <= columns,
            f"flip: counts[{n}] = {count} must be at least {MIN_EXPOSURES} and at most the number of exposure "
            f"columns ({columns}; at most {MAX_EXPOSURES})",
        )
        for i, e in enumerate(exposures[n, :count].double().tolist()):
            _value(math.isfinite(e), f"flip: exposures[{n}, {i}] = {_number(e)} is not finite")


def check_exposure_index(index, grad) -> None:
    if index is None:
        raise RuntimeError("flip: exposure_index is undefined")
    _type(
        index.dtype == torch.int32,
        f"flip: exposure_index must be the int32 index returned by hdr_flip, got {dtype_name(index.dtype)}",
    )
    _value(
        index.shape == grad.shape and index.device == grad.device,
        f"flip: exposure_index must be the index returned by hdr_flip (shape {_sizes(grad)} on {grad.device}), got "
        f"shape {_sizes(index)} on {index.device}",
    )


def check_mask(mask) -> None:
    """A ``bool[2]`` output_mask: the dispatcher does not hold a list to its schema's length, so
    every op with one checks it first (as the C++ kernels do, csrc/ops/schema_types.h)."""
    _value(len(mask) == 2, f"flip: output_mask must hold 2 values (test, reference), got {len(mask)}")


def sensitivities_shape(like, mask) -> list:
    """N x 7k x H x W (or 7k x H x W), k = the number of images in mask."""
    shape = list(like.shape)
    shape[-3] = SENSITIVITY_PLANES_PER_IMAGE * (int(mask[0]) + int(mask[1]))
    return shape


def multiscale_sensitivities_shape(like, mask, scales: int) -> list:
    """_ldr_flip_multiscale's: each scale's in turn, N x (scales * 7k) x H x W; [0] for none."""
    if not (mask[0] or mask[1]):
        return [0]
    shape = sensitivities_shape(like, mask)
    shape[-3] *= scales
    return shape


# The gradient of a pixel's error w.r.t. each of its filtered responses, per image
# (csrc/flip/plane_counts.h, kResponsePlanesPerImage; tests/tooling/test_one_source.py compares them).
SENSITIVITY_PLANES_PER_IMAGE = 7

# The most bytes of them that autograd keeps on a CUDA device from an LDR-FLIP forward to its
# backward (csrc/flip/plane_counts.h, kCudaKeptSensitivitiesBytes: why; tests/tooling/test_one_source.py).
CUDA_KEPT_SENSITIVITIES_BYTES = 256 << 20


def keeps_sensitivities(test, ref) -> bool:
    """Whether autograd's LDR-FLIP forward keeps the sensitivities of the images that require grad
    (``_ldr_flip_with_sensitivities``) for its backward: on the CPU always, on CUDA when they take
    at most CUDA_KEPT_SENSITIVITIES_BYTES, elsewhere never. csrc/ops/autograd.cpp applies the same
    rule."""
    if test.device.type == "cpu":
        return True
    if test.device.type != "cuda":
        return False
    images = int(test.requires_grad) + int(ref.requires_grad)
    elem = 8 if test.dtype == torch.float64 else 4  # the compute dtype's
    return SENSITIVITY_PLANES_PER_IMAGE * images * (test.numel() // 3) * elem <= CUDA_KEPT_SENSITIVITIES_BYTES


# ---- one check per op (its backward adds check_grad) ----


def _ldr_args(test, ref, ppd, space, eps, codes: bool = False) -> None:
    check_pair(test, ref, 3, codes)
    check_ppd(ppd)
    check_eps(eps)
    check_input_space(space)


def ldr_flip(test, ref, ppd, space, eps) -> None:
    _ldr_args(test, ref, ppd, space, eps, codes=True)


def ldr_flip_backward(grad, test, ref, ppd, space, eps, mask) -> None:
    check_mask(mask)
    _ldr_args(test, ref, ppd, space, eps)
    check_grad(grad, test, 1)


def ldr_flip_with_sensitivities(test, ref, ppd, space, eps, mask) -> None:
    check_mask(mask)
    _ldr_args(test, ref, ppd, space, eps)
    _value(mask[0] or mask[1], "flip: output_mask must ask for the sensitivities of at least one image")


def _check_sensitivities(sensitivities, test, expected, forward: str) -> None:
    if sensitivities is None:
        raise RuntimeError("flip: sensitivities is undefined")
    want = compute_dtype(test.dtype)
    _type(
        sensitivities.dtype == want,
        f"flip: sensitivities must be {dtype_name(want)} (as {forward} returns them for "
        f"{dtype_name(test.dtype)} images), got {dtype_name(sensitivities.dtype)}",
    )
    _value(
        sensitivities.device == test.device,
        f"flip: sensitivities are on {sensitivities.device}, images on {test.device}",
    )
    _value(
        list(sensitivities.shape) == expected,
        f"flip: sensitivities must have shape [{', '.join(str(s) for s in expected)}] (those "
        f"{forward} returned for this output_mask), got {_sizes(sensitivities)}",
    )


def ldr_flip_backward_from_sensitivities(grad, sensitivities, test, ref, ppd, space, mask) -> None:
    check_mask(mask)
    check_pair(test, ref, 3)
    check_ppd(ppd)
    check_input_space(space)
    _value(mask[0] or mask[1], "flip: output_mask must ask for at least one gradient")
    check_grad(grad, test, 1)
    _check_sensitivities(sensitivities, test, sensitivities_shape(test, mask), "_ldr_flip_with_sensitivities")


def check_scales(ppds, weights) -> None:
    """_ldr_flip_multiscale's scales: at least one pixels_per_degree value, each within its limits,
    and one finite, non-negative weight per value."""
    _value(len(ppds) > 0, "flip: pixels_per_degree must hold at least one value")
    for ppd in ppds:
        check_ppd(ppd)
    _value(
        len(weights) == len(ppds),
        f"flip: weights must hold one weight per pixels_per_degree value ({len(ppds)}), got {len(weights)}",
    )
    for w in weights:
        # w - w == 0: finite, also for a symbolic float (torch.compile with dynamic=True)
        _value(w - w == 0 and w >= 0, f"flip: weights must be finite and non-negative, got {_number(w)}")


def ldr_flip_multiscale(test, ref, ppds, weights, space, eps, mask) -> None:
    check_mask(mask)
    check_pair(test, ref, 3)
    check_scales(ppds, weights)
    check_eps(eps)
    check_input_space(space)


def ldr_flip_multiscale_backward(grad, sensitivities, test, ref, ppds, weights, space, mask) -> None:
    check_mask(mask)
    check_pair(test, ref, 3)
    check_scales(ppds, weights)
    check_input_space(space)
    _value(mask[0] or mask[1], "flip: output_mask must ask for at least one gradient")
    check_grad(grad, test, 1)
    expected = multiscale_sensitivities_shape(test, mask, len(ppds))
    _check_sensitivities(sensitivities, test, expected, "_ldr_flip_multiscale")


def hdr_flip(test, ref, exposures, counts, ppd, tone_mapper, eps) -> None:
    check_pair(test, ref, 3)
    check_ppd(ppd)
    check_eps(eps)
    check_tone_mapper(tone_mapper)
    check_exposures(exposures, counts, test)
    check_exposure_values(exposures, counts)


def hdr_flip_backward(grad, test, ref, exposures, counts, index, ppd, tone_mapper, eps, mask) -> None:
    check_mask(mask)
    hdr_flip(test, ref, exposures, counts, ppd, tone_mapper, eps)
    check_grad(grad, test, 1)
    check_exposure_index(index, grad)


def csf_filter(opponent, ppd) -> None:
    check_image(opponent, "opponent", 3)
    check_ppd(ppd)


def csf_filter_backward(grad, opponent, ppd) -> None:
    csf_filter(opponent, ppd)
    check_grad(grad, opponent, 3)


def hunt_hyab(test, ref, eps) -> None:
    check_pair(test, ref, 3)
    check_eps(eps)


def hunt_hyab_backward(grad, test, ref, eps, mask) -> None:
    check_mask(mask)
    hunt_hyab(test, ref, eps)
    check_grad(grad, test, 1)


def feature_difference(test, ref, ppd, eps) -> None:
    check_pair(test, ref, 1)
    check_ppd(ppd)
    check_eps(eps)


def feature_difference_backward(grad, test, ref, ppd, eps, mask) -> None:
    check_mask(mask)
    feature_difference(test, ref, ppd, eps)
    check_grad(grad, test, 1)
