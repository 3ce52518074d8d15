"""NVIDIA's PyTorch FLIP loss API on this project's kernels: a drop-in for ``flip_loss.py`` of
NVlabs/flip (``src/pytorch``).

Code written against that file, ``LDRFLIPLoss()(test, reference, pixels_per_degree)``,
``HDRFLIPLoss()(test, reference, pixels_per_degree, tone_mapper, start_exposure, stop_exposure)``
and the module functions its users call (``compute_start_stop_exposures``,
``color_space_transform``, ``tone_map``, ``compute_ldrflip``, ``generate_spatial_filter``,
``spatial_filter``, ``hunt_adjustment``, ``hyab``, ``redistribute_errors``, ``feature_detection``),
runs unchanged once that file is deleted and flip-loss installed: the names are importable from
``flip_loss`` as they were from the file. Everything here is written from the algorithm as
``docs/algorithm.md`` states it (and the signatures and behaviour of NVIDIA's functions as its
users see them), not from NVIDIA's source.

The values are NVIDIA's where its loss is right, including its rules where they differ from
flip-evaluator's (``median="upper"`` and ``max_value=None`` give flip-evaluator's instead); where it
is wrong this module is not (an unknown tone mapper raises, every image of a batch gets its own
exposure count, a zero luminance gives finite exposures). NVIDIA's tunable constants qc, qf, pc, pt
are accepted at FLIP's published values only, which the kernels implement. docs/nvidia.md compares
every function and attribute and states each deviation.
"""

import math
import warnings
from typing import Dict, Optional, Tuple

import numpy as np
import torch

from . import constants, op_checks, options
from . import oracle
from .constants import DEFAULT_EPS, PC, PT, QC, QF
from ._ops import kernels_serve
from .functional import _caller_stacklevel, ldr_flip_with_look
from .tensor_values import host_table, is_compiling, is_device_call
from .image_checks import checked_pair
from .hdr import (
    as_batch,
    automatic_counts,
    checked_reference,
    exposure_anchor,
    exposure_grid,
    exposure_values,
    luminance_max_median,
    option_tensor,
)
from .modules import weighted_reduce

__all__ = [
    "HDRFLIPLoss",
    "LDRFLIPLoss",
    "NVIDIA_DEFAULT_PPD",
    "HDR_INPUT_MAX",
    "color_space_transform",
    "compute_ldrflip",
    "compute_start_stop_exposures",
    "feature_detection",
    "generate_spatial_filter",
    "hunt_adjustment",
    "hyab",
    "redistribute_errors",
    "spatial_filter",
    "tone_map",
]

# NVIDIA's default observer: a 0.7 m wide 4K display seen from 0.7 m, written as NVIDIA's loss
# writes it (67.02064327658226; flip_loss.DEFAULT_PPD, the same setup computed in another order,
# is 67.02064327658225).
NVIDIA_DEFAULT_PPD = (0.7 * 3840 / 0.7) * math.pi / 180
# NVIDIA's loss clamps HDR inputs to [0, 65536] (negative values count as 0 everywhere here).
HDR_INPUT_MAX = 65536.0
# The tone-mapped value that the brightest pixel (start) and the median pixel (stop) are mapped to
# by the automatic exposures, as HDRFLIPLoss asks compute_start_stop_exposures for them.
_TARGET = 0.85


def _pixels_per_degree(value) -> float:
    """A ppd as NVIDIA's users pass it: a number, a 0-dim tensor, or a one-element tensor."""
    if isinstance(value, torch.Tensor) and value.dim() > 0 and value.numel() == 1:
        value = value.reshape(())
    return options.checked_pixels_per_degree(value)


def _tone_mapper(value) -> str:
    """The tone mapper, checked: ``ValueError`` for an unknown name (NVIDIA's loss would silently
    run ACES), any case accepted."""
    return options.tone_mapper(value)


def _compute_dtype(x: torch.Tensor) -> torch.dtype:
    return torch.float64 if x.dtype == torch.float64 else torch.float32


# FLIP's published constants, by the names NVIDIA's functions and losses give them.
_PUBLISHED = {"qc": QC, "qf": QF, "pc": PC, "pt": PT}


def _published_constant(name: str, value) -> float:
    """``value`` for one of NVIDIA's tunable constants (qc, qf, pc, pt) where only FLIP's published
    value can be honoured: that value (as a Python float, or rounded to float32 as a float32
    tensor holds it) is accepted; another raises ``ValueError`` rather than being ignored."""
    published = _PUBLISHED[name]
    v = options.real_number(name, value)
    if v == published or v == float(np.float32(published)):
        return published
    raise ValueError(
        f"flip_loss: {name} must be FLIP's published value {published}, got {value!r}: the compiled "
        f"kernels implement the published constants only (docs/algorithm.md §3), so another value "
        f"could not be honoured. To try other values, compose the stage functions by hand "
        f"(hyab, torch.pow, redistribute_errors(..., pc, pt), feature_detection)"
    )


def _redistribution_constants(pc, pt) -> Tuple[float, float]:
    """pc and pt of the colour compression, checked: the knee pc * cmax must lie strictly inside
    (0, cmax) and the value there, pt, in [0, 1], or the mapping divides by zero or leaves [0, 1]."""
    p = options.real_number("pc", pc)
    t = options.real_number("pt", pt)
    if not (math.isfinite(p) and 0.0 < p < 1.0):
        raise ValueError(f"flip_loss: pc must be a number strictly between 0 and 1 (the knee pc * cmax), got {pc!r}")
    if not (math.isfinite(t) and 0.0 <= t <= 1.0):
        raise ValueError(f"flip_loss: pt must be a number from 0 to 1 (the error at the knee), got {pt!r}")
    return p, t


def _one_of(name: str, value, alias: str, alias_value) -> Tuple[str, object]:
    """(the name used, the value) of a parameter that also has a keyword-only alias (the project's
    earlier name): exactly one of the two must be given."""
    if value is not None and alias_value is not None:
        raise TypeError(f"flip_loss: give {name} or its alias {alias}, not both")
    if value is None and alias_value is None:
        raise TypeError(f"flip_loss: missing the argument {name}")
    return (name, value) if value is not None else (alias, alias_value)


# --------------------------------------------------------------------------------------------
# Automatic exposures (docs/algorithm.md §5.4, §7.7, §7.8)
# --------------------------------------------------------------------------------------------


def _exact_tone_coefficients(tone_mapper: str) -> Tuple[float, ...]:
    """(k0..k5) of the tone curve T(x) = (k0 x^2 + k1 x + k2) / (k3 x^2 + k4 x + k5) as NVIDIA's loss
    computes them, in double precision: the registry's NVIDIA row (``constants.NVIDIA_TONE_COEFFICIENTS``;
    the kernels use its float32 row, ``constants.TONE_COEFFICIENTS``). ValueError for any other
    name, never another tone mapper's row."""
    row = constants.NVIDIA_TONE_COEFFICIENTS.get(tone_mapper)
    if row is None:
        raise ValueError(
            f"flip_loss: tone_mapper must be one of {constants.TONE_MAPPERS} (lower case here), got {tone_mapper!r}"
        )
    return row


def _nvidia_anchor(tone_mapper: str, target: float) -> float:
    """The scene value the tone curve maps to ``target``, as NVIDIA's loss gets it: the larger root
    of (k0 - t k3) x^2 + (k1 - t k4) x + (k2 - t k5) = 0 with the double-precision coefficients,
    normalised (x^2 + p x + q) in double and finished with float32 tensor arithmetic on the CPU
    (x = -p/2 + sqrt(p^2/4 - q)). PyTorch's float32 square root need not be the correctly rounded
    one (for ACES it is one ulp off, here and in NVIDIA's exposures), so NumPy's would not do. A
    curve linear in x (Reinhard's x / (1 + x)) is solved in double."""
    k = _exact_tone_coefficients(tone_mapper)
    a, b, c = k[0] - target * k[3], k[1] - target * k[4], k[2] - target * k[5]
    if a == 0.0:
        return -c / b
    half = torch.tensor(0.5 * (b / a), dtype=torch.float32, device="cpu")
    return float(torch.sqrt(half * half - c / a) - half)


def _anchor(tone_mapper: str, target: float, median: str) -> float:
    """The anchor that goes with a median rule: NVIDIA's with ``"lower"``, flip-evaluator's
    (``hdr.exposure_anchor``) with ``"upper"``, so that each rule gives that program's exposures."""
    if median == "upper":
        return exposure_anchor(tone_mapper, target)
    return _nvidia_anchor(tone_mapper, target)


# The anchors HDRFLIPLoss uses, computed once, so that neither NumPy nor the scalar arithmetic
# above enters torch.compile's graphs.
_ANCHORS = {(rule, tm): _anchor(tm, _TARGET, rule) for rule in ("lower", "upper") for tm in options.TONE_MAPPERS}


def _checked_target(name: str, value) -> float:
    t = options.real_number(name, value)
    if not (math.isfinite(t) and 0.0 < t < 1.0):
        raise ValueError(f"flip_loss: {name} must be a tone-mapped value between 0 and 1 (exclusive), got {value!r}")
    return t


def _target_anchor(tone_mapper: str, name: str, target, median: str) -> float:
    t = _checked_target(name, target)
    if t == _TARGET:
        return _ANCHORS[(median, tone_mapper)]
    x = _anchor(tone_mapper, t, median)
    if not (math.isfinite(x) and x > 0):
        raise ValueError(f"flip_loss: the {tone_mapper} tone curve maps no scene value to {name}={t}")
    return x


def _start_stop(
    ref: torch.Tensor, x_start: float, x_stop: float, lower_median: bool, by_reciprocal: bool = False
) -> Tuple[torch.Tensor, torch.Tensor]:
    """(start, stop), N values each, for a checked, batched reference and the two anchors:
    log2(x / Y) in the reference's precision, or log2(x * (1 / Y)) with ``by_reciprocal`` (how
    PyTorch divides a Python number by a tensor; it reproduces NVIDIA's Reinhard exposures bit for
    bit, where the true division is one ulp off)."""
    y_max, y_med = luminance_max_median(ref, lower_median)
    if by_reciprocal:
        return torch.log2(y_max.reciprocal() * x_start), torch.log2(y_med.reciprocal() * x_stop)
    return (torch.log2(torch.full_like(y_max, x_start) / y_max), torch.log2(torch.full_like(y_med, x_stop) / y_med))


def _by_reciprocal(tone_mapper: str, median: str) -> bool:
    return median == "lower" and tone_mapper == "reinhard"


def compute_start_stop_exposures(
    reference: torch.Tensor,
    tone_mapper: str,
    tmax: Optional[float] = None,
    tmin: Optional[float] = None,
    *,
    median: str = "lower",
    t_max: Optional[float] = None,
    t_min: Optional[float] = None,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """NVIDIA's automatic exposure range of each image of ``reference`` (N x 3 x H x W linear HDR):
    ``(start_exposure, stop_exposure)``, each an N x 1 x 1 x 1 tensor of stops, on the reference's
    device, float32 (float64 for a float64 reference), without gradient.

    NVIDIA's parameters, in NVIDIA's order: start = log2(x_max / Y_max), x_max the scene value the
    tone curve maps to ``tmax`` (the brightest pixel ends there); stop = log2(x_min / Y_median),
    x_min the value mapped to ``tmin`` (the median pixel ends there). Both are required and lie in
    (0, 1). Y is the Rec. 709 luminance of the reference with negative values as 0; HDRFLIPLoss asks
    for tmax = tmin = 0.85. ``t_max`` and ``t_min`` (keyword only) are the same parameters under
    this project's earlier names; giving a name and its alias raises ``TypeError``.

    ``median="lower"`` (default): NVIDIA's rules, the lower middle element of an even pixel count
    (``torch.median``) and the root of the exact tone curve; ``median="upper"``: flip-evaluator's,
    the upper middle element and its float32 root of the rounded curve (``flip_loss.exposure_range``
    for 0.85). Unlike NVIDIA's, a median or maximum luminance of 0 is raised to float32 epsilon (a
    finite range; NVIDIA's is infinite), and an unknown tone mapper raises ``ValueError``.
    """
    start_name, start_target = _one_of("tmax", tmax, "t_max", t_max)
    stop_name, stop_target = _one_of("tmin", tmin, "t_min", t_min)
    ref = checked_reference(reference)
    tm = _tone_mapper(tone_mapper)
    rule = options.median_rule(median)
    x_start = _target_anchor(tm, start_name, start_target, rule)
    x_stop = _target_anchor(tm, stop_name, stop_target, rule)
    start, stop = _start_stop(ref, x_start, x_stop, rule == "lower", _by_reciprocal(tm, rule))
    return start.view(-1, 1, 1, 1), stop.view(-1, 1, 1, 1)


# --------------------------------------------------------------------------------------------
# Colour spaces (docs/algorithm.md §4.2, §4.3, §4.7)
# --------------------------------------------------------------------------------------------

_SPACES = ("srgb", "linrgb", "xyz", "ycxcz", "cielab")
_SPACE_ALIASES = {"lab": "cielab"}


def _channels(x: torch.Tensor):
    return x.select(-3, 0), x.select(-3, 1), x.select(-3, 2)


def _stack(c0, c1, c2) -> torch.Tensor:
    return torch.stack((c0, c1, c2), dim=-3)


def _linrgb_to_xyz(x):
    return _stack(*oracle.mix3(oracle.RGB_TO_XYZ, *_channels(x)))


def _xyz_to_linrgb(x):
    return _stack(*oracle.mix3(oracle.XYZ_TO_RGB, *_channels(x)))


def _xyz_to_ycxcz(x):
    return _stack(*oracle.xyz_to_opponent(*_channels(x)))


def _ycxcz_to_xyz(x):
    return _stack(*oracle.opponent_to_xyz(*_channels(x)))


def _xyz_to_cielab(x):
    return _stack(*oracle.xyz_to_lab(*_channels(x)))


def _cielab_to_xyz(x):
    def f_inv(u):
        return torch.where(u > oracle.LAB_DELTA, u * u * u, 3.0 * oracle.LAB_DELTA**2 * (u - 4.0 / 29.0))

    L, a, b = _channels(x)
    fy = (L + 16.0) / 116.0
    w = oracle.WHITE
    return _stack(f_inv(fy + a / 500.0) * w[0], f_inv(fy) * w[1], f_inv(fy - b / 200.0) * w[2])


_TO_XYZ = {
    "xyz": lambda x: x,
    "linrgb": _linrgb_to_xyz,
    "srgb": lambda x: _linrgb_to_xyz(oracle.srgb_to_linear(x)),
    "ycxcz": _ycxcz_to_xyz,
    "cielab": _cielab_to_xyz,
}
_FROM_XYZ = {
    "xyz": lambda x: x,
    "linrgb": _xyz_to_linrgb,
    "srgb": lambda x: oracle.linear_to_srgb(_xyz_to_linrgb(x)),
    "ycxcz": _xyz_to_ycxcz,
    "cielab": _xyz_to_cielab,
}


def _space_names(transform) -> Tuple[str, str]:
    if not isinstance(transform, str):
        raise TypeError(
            f"flip_loss: fromSpace2toSpace must be a string such as 'srgb2ycxcz', got {type(transform).__name__}"
        )
    parts = transform.lower().split("2")
    names = [_SPACE_ALIASES.get(p, p) for p in parts]
    if len(names) != 2 or any(n not in _SPACES for n in names):
        raise ValueError(
            f"flip_loss: unknown colour transform {transform!r}: expected '<from>2<to>' with spaces "
            f"from {_SPACES} (or 'lab' for 'cielab'), e.g. 'srgb2ycxcz' or 'linrgb2cielab'"
        )
    return names[0], names[1]


def color_space_transform(input_color: torch.Tensor, fromSpace2toSpace: str) -> torch.Tensor:  # noqa: N803
    """``input_color`` (N x 3 x H x W or 3 x H x W) converted between colour spaces, e.g.
    ``"srgb2linrgb"``, ``"linrgb2srgb"``, ``"linrgb2xyz"``, ``"xyz2linrgb"``, ``"xyz2ycxcz"``,
    ``"ycxcz2xyz"``, ``"xyz2cielab"``, ``"cielab2xyz"``, ``"srgb2xyz"``, ``"srgb2ycxcz"``,
    ``"linrgb2ycxcz"``, ``"ycxcz2linrgb"``, ``"srgb2lab"``, ``"linrgb2lab"``, ``"ycxcz2lab"``,
    ``"lab2srgb"``: any pair of ``srgb``, ``linrgb`` (linear sRGB primaries, D65), ``xyz``,
    ``ycxcz`` (FLIP's opponent space) and ``cielab`` (also written ``lab``), in any case.

    The formulas are docs/algorithm.md §4.2 (sRGB, whose power branch extends past 1), §4.3 (the
    exact matrix and its exact inverse, the D65 white of the matrix) and §4.7 (L*a*b*). Nothing is
    clamped. float16 and bfloat16 compute in float32 and return in their dtype. Differentiable.
    Raises ``ValueError`` for an unknown transform (NVIDIA's function does not).
    """
    src, dst = _space_names(fromSpace2toSpace)
    if not isinstance(input_color, torch.Tensor):
        raise TypeError(f"flip_loss: input_color must be a torch.Tensor, got {type(input_color).__name__}")
    if input_color.dim() < 3 or input_color.shape[-3] != 3:
        raise ValueError(
            f"flip_loss: input_color must be N x 3 x H x W or 3 x H x W, got shape {list(input_color.shape)}"
        )
    dt = input_color.dtype
    x = input_color.to(_compute_dtype(input_color)) if input_color.is_floating_point() else input_color.float()
    if src == dst:  # a new tensor, in the dtype every other transform gives
        out = x.clone()
    elif src == "srgb" and dst == "linrgb":
        out = oracle.srgb_to_linear(x)
    elif src == "linrgb" and dst == "srgb":
        out = oracle.linear_to_srgb(x)
    else:
        out = _FROM_XYZ[dst](_TO_XYZ[src](x))
    return out.to(dt) if input_color.is_floating_point() else out


# --------------------------------------------------------------------------------------------
# Tone mapping (docs/algorithm.md §5.2, §5.3)
# --------------------------------------------------------------------------------------------


def _warn_if_negative(img: torch.Tensor) -> None:
    if is_compiling():
        return
    with torch.no_grad():
        table = host_table((img.detach() < 0).any().reshape(1))
    if table is not None and bool(table.any()):
        warnings.warn(
            "flip_loss: tone_map counts the negative values of img as 0, as HDR-FLIP does; NVIDIA's "
            "tone_map (whose img must be non-negative) would put them through the tone curve. Clamp img "
            "to 0 first (as HDRFLIPLoss does) to make the two agree.",
            UserWarning,
            stacklevel=_caller_stacklevel(),
        )


def tone_map(img: torch.Tensor, tone_mapper: str, exposure) -> torch.Tensor:
    """``img`` (N x 3 x H x W linear HDR) exposed by 2^``exposure`` (stops: a number or a tensor
    broadcastable to N x 1 x 1 x 1, such as the exposures of ``compute_start_stop_exposures``),
    tone mapped (a name of ``flip_loss.hdr.TONE_MAPPERS``, any case) and clamped to [0, 1], as
    HDR-FLIP's kernels do it: negative values count as 0, exposed values are capped at 1e15, and
    the curves have flip-evaluator's float32 coefficients (within 2e-6 of NVIDIA's double ones).
    Differentiable (in ``exposure`` too, when it is a tensor that requires a gradient); the
    gradient is 0 where a clamp is active.
    Raises ``ValueError`` for an unknown tone mapper (NVIDIA's runs ACES). Negative values, outside
    NVIDIA's contract (its HDRFLIPLoss clamps them to 0 first; its tone_map puts them through the
    curve), count as 0 here, with a ``UserWarning`` when there are any (looked at in eager calls,
    not in traced code; on a GPU that look synchronises).
    """
    tm = _tone_mapper(tone_mapper)
    if not isinstance(img, torch.Tensor) or not img.is_floating_point():
        raise TypeError("flip_loss: img must be a floating-point torch.Tensor")
    _warn_if_negative(img)
    x = img.to(_compute_dtype(img))
    batched = x if x.dim() == 4 else x.unsqueeze(0)
    if isinstance(exposure, torch.Tensor):
        c = exposure.to(device=x.device, dtype=x.dtype)
        if c.dim() == 1 and c.numel() == batched.shape[0]:  # one value per image, flattened
            c = c.view(-1, 1, 1, 1)
    else:
        c = torch.tensor(options.real_number("exposure", exposure), dtype=x.dtype, device=x.device)
    out = oracle.hdr_to_ldr(batched, torch.exp2(c), tm)
    return (out if x.dim() == 4 else out.squeeze(0)).to(img.dtype)


# --------------------------------------------------------------------------------------------
# The stages of LDR-FLIP (docs/algorithm.md §4)
# --------------------------------------------------------------------------------------------


def generate_spatial_filter(
    pixels_per_degree, channel: str, *, dtype: torch.dtype = torch.float32, device=None
) -> Tuple[torch.Tensor, int]:
    """The CSF filter of one opponent channel, ``"A"`` (achromatic, Y), ``"RG"`` (Cx) or ``"BY"``
    (Cz), as a 1 x 1 x (2r+1) x (2r+1) kernel normalised to sum to 1, and its radius r
    (docs/algorithm.md §4.4; built in double precision, then cast to ``dtype``)."""
    ppd = _pixels_per_degree(pixels_per_degree)
    key = channel.upper() if isinstance(channel, str) else channel
    if key not in ("A", "RG", "BY"):
        raise ValueError(f"flip_loss: channel must be 'A', 'RG' or 'BY', got {channel!r}")
    r, y, cx, cz1, cz2 = oracle.csf_taps64(float(ppd))
    if key == "A":
        kernel = torch.outer(y, y)
    elif key == "RG":
        kernel = torch.outer(cx, cx)
    else:
        kernel = torch.outer(cz1, cz1) + torch.outer(cz2, cz2)
    return kernel.to(dtype=dtype, device=device).view(1, 1, 2 * r + 1, 2 * r + 1), r


def spatial_filter(
    img: torch.Tensor, s_a: torch.Tensor, s_rg: torch.Tensor, s_by: torch.Tensor, radius: int
) -> torch.Tensor:
    """An opponent (YCxCz) image (N x 3 x H x W) filtered channel by channel with the 2-D kernels
    ``s_a``, ``s_rg``, ``s_by`` (from ``generate_spatial_filter``, radius ``radius``; borders
    clamped to the edge), converted to linear RGB and clamped to [0, 1] (docs/algorithm.md §4.5,
    §4.6). Pure PyTorch (for any kernels); ``compute_ldrflip`` runs the compiled CSF filter."""
    x = img.to(_compute_dtype(img))
    padded = torch.nn.functional.pad(x, (radius, radius, radius, radius), mode="replicate")
    weights = torch.cat([k.reshape(1, 1, k.shape[-2], k.shape[-1]) for k in (s_a, s_rg, s_by)])
    filtered = torch.nn.functional.conv2d(padded, weights.to(device=x.device, dtype=x.dtype), groups=3)
    return oracle.clamp(_xyz_to_linrgb(_ycxcz_to_xyz(filtered)), 0.0, 1.0).to(img.dtype)


def hunt_adjustment(img: torch.Tensor) -> torch.Tensor:
    """Hunt-adjusted L*a*b* of an L*a*b* image (N x 3 x H x W): (L, 0.01 L a, 0.01 L b)
    (docs/algorithm.md §4.7)."""
    L, a, b = img[:, 0:1], img[:, 1:2], img[:, 2:3]
    return torch.cat((L, 0.01 * L * a, 0.01 * L * b), dim=1)


def hyab(reference: torch.Tensor, test: torch.Tensor, eps: float = DEFAULT_EPS) -> torch.Tensor:
    """HyAB distance of two Hunt-adjusted L*a*b* images (N x 3 x H x W; NVIDIA's order, reference
    first): sqrt(max(dL^2, eps)) + ||(da, db)||, N x 1 x H x W (docs/algorithm.md §4.8, §7.2)."""
    eps = options.eps(eps)
    d = reference - test
    return oracle.floored_abs(d[:, 0:1], eps) + oracle.chroma_norm(d[:, 1:2], d[:, 2:3])


def redistribute_errors(power_deltaE_hyab: torch.Tensor, cmax, pc=PC, pt=PT) -> torch.Tensor:  # noqa: N803
    """The compression of the colour error (docs/algorithm.md §4.9): HyAB^qc values ``e`` mapped
    linearly to [0, pt) below the knee pc * ``cmax`` and from pt to 1 above it. ``pc`` and ``pt``
    (NVIDIA's parameters; FLIP's published 0.4 and 0.95 when left out) are honoured: any pc strictly
    between 0 and 1 and pt in [0, 1] (``ValueError`` otherwise: the mapping would divide by zero
    or leave [0, 1])."""
    cmax = options.real_number("cmax", cmax) if not isinstance(cmax, torch.Tensor) else cmax
    pc, pt = _redistribution_constants(pc, pt)
    knee = pc * cmax
    e = power_deltaE_hyab
    return torch.where(e < knee, (pt / knee) * e, pt + ((e - knee) / (cmax - knee)) * (1.0 - pt))


def feature_detection(img_y: torch.Tensor, pixels_per_degree, feature_type: str) -> torch.Tensor:
    """The edge (``"edge"``: first derivative of a Gaussian) or point (``"point"``: second
    derivative) responses of a normalised achromatic image (N x 1 x H x W, (Y + 16) / 116 of the
    opponent image) along x and y, as an N x 2 x H x W tensor (x first); the norm over dim 1 is
    the edge or point magnitude (docs/algorithm.md §4.10, §4.11; borders clamped to the edge)."""
    ppd = _pixels_per_degree(pixels_per_degree)
    if feature_type not in ("edge", "point"):
        raise ValueError(f"flip_loss: feature_type must be 'edge' or 'point', got {feature_type!r}")
    dx, dy, ddx, ddy = oracle.feature_responses(img_y.to(_compute_dtype(img_y)), ppd)
    along = (dx, dy) if feature_type == "edge" else (ddx, ddy)
    return torch.stack(along, dim=1).to(img_y.dtype)


def compute_ldrflip(
    test: torch.Tensor,
    reference: torch.Tensor,
    pixels_per_degree,
    qc=QC,
    qf=QF,
    pc=PC,
    pt=PT,
    eps: float = DEFAULT_EPS,
) -> torch.Tensor:
    """The LDR-FLIP error map (N x 1 x H x W) of two images in the **opponent space YCxCz** (N x 3 x
    H x W, e.g. ``color_space_transform(x, "srgb2ycxcz")``), as NVIDIA's function takes them: CSF
    filter, Hunt-adjusted HyAB and the feature difference of their normalised Y channels, combined
    (docs/algorithm.md §4.4-§4.13). Runs the compiled ops ``csf_filter``, ``hunt_hyab`` and
    ``feature_difference`` (the pure-PyTorch oracle where they have no kernels);
    differentiable in both inputs. The inputs are not clamped (the filtered colours are), as in
    NVIDIA's function. ``eps`` regularises the gradient (docs/algorithm.md §7.2).

    NVIDIA's parameters, in its order: ``qc``, ``qf``, ``pc``, ``pt`` (positional or by name) are
    accepted at FLIP's published values (0.7, 0.5, 0.4, 0.95, which they default to here); the
    kernels implement only those, so another value raises ``ValueError`` naming the parameter.
    """
    for name, value in (("qc", qc), ("qf", qf), ("pc", pc), ("pt", pt)):
        _published_constant(name, value)
    test, reference = checked_pair(test, reference)
    ppd = _pixels_per_degree(pixels_per_degree)
    eps = options.eps(eps)
    unbatched = test.dim() == 3
    # float16 and bfloat16 compute in float32 (the normalised Y of a half-precision opponent image
    # would keep only 3 decimals) and return in their dtype, or float32 under autocast, as the ops do.
    cdt = _compute_dtype(test)
    t, r = as_batch(test).to(cdt), as_batch(reference).to(cdt)
    yhat_t = (t[:, 0:1] + 16.0) / 116.0
    yhat_r = (r[:, 0:1] + 16.0) / 116.0
    if kernels_serve("ldr_flip", t, r):
        ops = torch.ops.flip
        colour = ops.hunt_hyab(ops.csf_filter(t, ppd), ops.csf_filter(r, ppd), eps)
        feature = ops.feature_difference(yhat_t, yhat_r, ppd, eps)
    else:
        colour = oracle.hunt_hyab(oracle.csf_filter(t, ppd), oracle.csf_filter(r, ppd), eps)
        feature = oracle.feature_difference(yhat_t, yhat_r, ppd, eps)
    out = oracle.combine(colour, feature)
    out = out.squeeze(0) if unbatched else out
    if out.dtype != test.dtype and not torch.is_autocast_enabled(test.device.type):
        out = out.to(test.dtype)
    return out


# --------------------------------------------------------------------------------------------
# The losses
# --------------------------------------------------------------------------------------------


def _published_property(name: str) -> property:
    """The property of one of NVIDIA's tunable constants (``_PUBLISHED``): it reads FLIP's
    published value; an assignment is checked by ``_published_constant`` (another value raises)."""

    def setter(self, value) -> None:
        _published_constant(name, value)

    return property(
        lambda self: _PUBLISHED[name], setter, doc=f"FLIP's published {name} (read-only but for that value)"
    )


class _FLIPConstants(torch.nn.Module):
    """The attributes NVIDIA's losses carry, as properties: ``qc``, ``qf``, ``pc``, ``pt`` read FLIP's
    published constants, and assigning that value is accepted, another raises ``ValueError`` at the
    assignment (the kernels implement the published constants only); ``eps`` is checked when set
    (``options.eps``: a finite number in [0, 1e-6]) and used by the next call."""

    def __init__(self, eps: float):
        super().__init__()
        self.eps = eps

    @property
    def eps(self) -> float:
        return self._eps

    @eps.setter
    def eps(self, value) -> None:
        self._eps = options.eps(value)

    qc = _published_property("qc")
    qf = _published_property("qf")
    pc = _published_property("pc")
    pt = _published_property("pt")


class LDRFLIPLoss(_FLIPConstants):
    """NVIDIA's ``LDRFLIPLoss``: ``LDRFLIPLoss()(test, reference, pixels_per_degree=67.0206...)``
    → the mean LDR-FLIP error over all pixels of all images, a 0-dim tensor.

    ``test`` and ``reference`` are sRGB images in [0, 1], N x 3 x H x W (or 3 x H x W) on the CPU
    or a GPU, any float dtype (float16/bfloat16 compute in float32; under ``torch.autocast`` the
    result is float32); values outside [0, 1] are clamped. ``pixels_per_degree`` is a number (or a
    0-dim or one-element tensor). Runs this project's compiled ``ldr_flip``; differentiable in both
    images; works under ``torch.compile`` (``fullgraph=True`` too).

    ``eps`` (keyword only, default 1e-15, NVIDIA's) regularises the gradient (docs/algorithm.md §7.2).
    NVIDIA's attributes: ``eps`` (checked when set, used by the next call) and ``qc``, ``qf``,
    ``pc``, ``pt`` (FLIP's published constants; assigning another value raises ``ValueError``).
    """

    def __init__(self, *, eps: float = DEFAULT_EPS):
        super().__init__(eps)
        self._looked_at_device_inputs = False

    def forward(
        self, test: torch.Tensor, reference: torch.Tensor, pixels_per_degree=NVIDIA_DEFAULT_PPD
    ) -> torch.Tensor:
        ppd = _pixels_per_degree(pixels_per_degree)
        test, reference = checked_pair(test, reference)  # float images, as NVIDIA's loss takes them
        look = not self._looked_at_device_inputs
        if is_device_call(test):
            self._looked_at_device_inputs = True
        error = ldr_flip_with_look(test, reference, ppd, "srgb", self.eps, 1.0, look)
        return weighted_reduce(error, None, "mean")

    def extra_repr(self) -> str:
        return f"eps={self.eps:g}"


def _anchors(name: str, target) -> Dict[Tuple[str, str], float]:
    """The scene value mapped to ``target`` by each tone mapper under each median rule's anchor,
    for HDRFLIPLoss's tmax and tmin (computed when they are set, so that neither NumPy nor the
    scalar arithmetic of the solve enters torch.compile's graphs)."""
    return {
        (rule, tm): _target_anchor(tm, name, target, rule) for rule in ("lower", "upper") for tm in options.TONE_MAPPERS
    }


class HDRFLIPLoss(_FLIPConstants):
    """NVIDIA's ``HDRFLIPLoss``: ``HDRFLIPLoss()(test, reference, pixels_per_degree=67.0206...,
    tone_mapper="aces", start_exposure=None, stop_exposure=None)`` → the mean HDR-FLIP error over
    all pixels of all images, a 0-dim tensor.

    ``test`` and ``reference`` are linear HDR images, N x 3 x H x W (or 3 x H x W), CPU or GPU.
    ``tone_mapper``: a name of ``flip_loss.hdr.TONE_MAPPERS`` (any case; another name raises
    ``ValueError``). ``start_exposure``/``stop_exposure``: None (computed per image from the
    reference with ``compute_start_stop_exposures(reference, tone_mapper, self.tmax, self.tmin)``), a
    number, or a tensor with one value per image (N x 1 x 1 x 1, as NVIDIA's loss takes them). Each
    image gets its own exposure count, max(2, ceil(stop - start)), as it would alone (NVIDIA's loss
    runs every image of a batch to the largest count). Runs this project's compiled ``hdr_flip``;
    differentiable in both images; works under ``torch.compile`` (the exposure count is read back
    from the device, a graph break).

    Keyword-only options: ``median="lower"`` (NVIDIA's exposures; ``"upper"``: flip-evaluator's, as
    ``flip_loss.hdr_flip`` computes them), ``max_value=65536.0`` (finite inputs are clamped to at
    most this before anything else, the automatic exposures included, with zero gradient above it,
    as NVIDIA's loss clamps them; None: no clamp, as flip-evaluator; NaN and infinite values are
    never clamped: they raise as in ``flip_loss.hdr_flip``), ``eps=1e-15``.

    NVIDIA's attributes: ``tmax`` and ``tmin`` (0.85: the tone-mapped values of the brightest and
    the median pixel at the automatic start and stop exposures; any value in (0, 1), checked when
    set, used by the next call), ``eps``, and ``qc``, ``qf``, ``pc``, ``pt`` as in ``LDRFLIPLoss``.
    ``median`` and ``max_value`` are checked when set too.
    """

    def __init__(self, *, median: str = "lower", max_value: Optional[float] = HDR_INPUT_MAX, eps: float = DEFAULT_EPS):
        super().__init__(eps)
        self.median = median
        self.max_value = max_value
        self.tmax = _TARGET
        self.tmin = _TARGET

    @property
    def median(self) -> str:
        return self._median

    @median.setter
    def median(self, value) -> None:
        self._median = options.median_rule(value)

    @property
    def max_value(self) -> Optional[float]:
        return self._max_value

    @max_value.setter
    def max_value(self, value) -> None:
        if value is not None:
            v = options.real_number("max_value", value)
            if not (math.isfinite(v) and v > 0):
                raise ValueError(f"flip_loss: max_value must be a positive finite number or None, got {value!r}")
            value = v
        self._max_value = value

    @property
    def tmax(self) -> float:
        return self._tmax

    @tmax.setter
    def tmax(self, value) -> None:
        t = _checked_target("tmax", value)
        self._start_anchors = _anchors("tmax", t)
        self._tmax = t

    @property
    def tmin(self) -> float:
        return self._tmin

    @tmin.setter
    def tmin(self, value) -> None:
        t = _checked_target("tmin", value)
        self._stop_anchors = _anchors("tmin", t)
        self._tmin = t

    def forward(
        self,
        test: torch.Tensor,
        reference: torch.Tensor,
        pixels_per_degree=NVIDIA_DEFAULT_PPD,
        tone_mapper: str = "aces",
        start_exposure=None,
        stop_exposure=None,
    ) -> torch.Tensor:
        test, reference = checked_pair(test, reference)
        serve = kernels_serve("hdr_flip", test, reference)
        if serve:  # before the exposures, as hdr_flip
            op_checks.refuse_forward_mode("hdr_flip", test, reference)
        ppd = _pixels_per_degree(pixels_per_degree)
        tm = _tone_mapper(tone_mapper)
        rule = self.median
        max_value, eps = self.max_value, self.eps  # checked when they were set
        t, r = as_batch(test), as_batch(reference)
        if max_value is not None:
            t, r = _clamp_above(t, max_value), _clamp_above(r, max_value)
        n = r.shape[0]
        if start_exposure is None or stop_exposure is None:
            x_start, x_stop = self._start_anchors[(rule, tm)], self._stop_anchors[(rule, tm)]
            auto_start, auto_stop = _start_stop(r, x_start, x_stop, rule == "lower", _by_reciprocal(tm, rule))
        s = (
            auto_start.to(torch.float32)
            if start_exposure is None
            else exposure_values(option_tensor("start_exposure", start_exposure), n, r.device, "start_exposure")
        )
        e = (
            auto_stop.to(torch.float32)
            if stop_exposure is None
            else exposure_values(option_tensor("stop_exposure", stop_exposure), n, r.device, "stop_exposure")
        )
        # The checks of hdr_flip (finite, ordered ranges; given bounds within [-149, 127]; at most
        # 256 exposures) and the per-image counts.
        counts, count_max, count_min = automatic_counts(s, e, start_exposure is not None, stop_exposure is not None)
        exposures = exposure_grid(s, e, counts, count_max)

        def sweep(t, r, exposures, counts):
            if serve:
                return torch.ops.flip.hdr_flip(t, r, exposures, counts, ppd, tm, eps)[0]
            return oracle.hdr_flip(t, r, ppd, tm, exposures, counts, eps)[0]

        error = sweep(t, r, exposures, counts)
        value = weighted_reduce(error, None, "mean")
        if count_min != count_max:
            _warn_if_nvidias_value_differs(sweep, t, r, exposures, counts, count_min, count_max, error, value)
        return value

    def extra_repr(self) -> str:
        return (
            f"median={self.median!r}, max_value={self.max_value}, eps={self.eps:g}, "
            f"tmax={self.tmax:g}, tmin={self.tmin:g}"
        )


def _warn_if_nvidias_value_differs(sweep, t, r, exposures, counts, count_min, count_max, error, value) -> None:
    """The one place where HDRFLIPLoss's value differs from NVIDIA's by design: a batch whose images
    need different exposure counts, which NVIDIA's loss runs all to the largest count, past the stop
    exposures of the images that need fewer (exposure_grid's columns beyond an image's count are
    those exposures). Only where that raises the error of some pixel can NVIDIA's value differ;
    where it does, it is said, not left silent (an image's error often peaks within its own range,
    so many mixed batches give NVIDIA's value too). The extra exposures of those images run once, without
    gradient: from each one's last own exposure (so that every sweep has two) to the largest."""
    with torch.no_grad():
        fewer = torch.nonzero(counts < count_max).flatten()
        first = counts[fewer] - 1
        width = count_max - count_min + 1
        columns = (first.unsqueeze(1) + torch.arange(width, device=counts.device)).clamp(max=count_max - 1)
        extra = sweep(t[fewer], r[fewer], exposures[fewer].gather(1, columns), count_max - first)
        nvidia = error.detach().clone()
        nvidia[fewer] = torch.maximum(nvidia[fewer], extra)
        table = torch.stack([(nvidia != error).sum().double(), weighted_reduce(nvidia, None, "mean").double()])
        raised, theirs = table.tolist()
    if theirs != float(value):
        warnings.warn(
            f"flip_loss: HDRFLIPLoss: the images of this batch need different numbers of exposures "
            f"({count_min} to {count_max}); each image gets its own, and the value it has alone: "
            f"{float(value):.6g}. NVIDIA's loss runs every image to the batch's largest count, past "
            f"its stop exposure, which raises the error of {int(raised)} pixel{'s' if raised > 1 else ''} here: its value is "
            f"{float(theirs):.6g}.",
            UserWarning,
            stacklevel=_caller_stacklevel(),
        )


def _clamp_above(x: torch.Tensor, high: float) -> torch.Tensor:
    """min(x, high) for finite x, passing the gradient at and below ``high`` and none above. NaN and
    +Inf stay as they are, so that the checks refuse them as ``hdr_flip`` does (NVIDIA's clamp
    would turn +Inf into ``high`` and give a finite loss). A dtype whose largest finite value does
    not exceed ``high`` (float16 for the default 65536) holds nothing to clamp, and could not hold
    ``high`` itself."""
    if high >= torch.finfo(x.dtype).max:
        return x
    above = (x > high) & (x < math.inf)
    return torch.where(above, torch.full_like(x, high), x)
