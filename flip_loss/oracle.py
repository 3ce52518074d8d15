"""Pure-PyTorch LDR-FLIP and HDR-FLIP: the float64 reference the compiled kernels are tested
against, and the portable path wherever they are missing (docs/algorithm.md §9.7).

Written from the algorithm as ``docs/algorithm.md`` states it (§4, §5, §7), in whole-tensor
operations that exist since torch 2.1: an image's two filter banks are one edge padding and two
depthwise ``conv2d`` passes with 1-D taps, eight planes each; the linear colour maps are folded
into 3x3 matrices.

* Works on any device and float dtype. float64 is computed in float64, float32 in float32 (no float64
  tensor of image size: a device may have none), and float16 / bfloat16 in float32 with the result
  cast back to the input dtype.
* Everything is built from differentiable torch ops and autograd Functions whose derivatives are
  torch ops, so autograd gives the gradient of every public function with respect to every tensor
  argument. At a kink the gradient is the project's own rule (docs/algorithm.md §7.4), the kernels'
  rule, written out on explicit conditions: by the helpers below "The gradient at every kink" and
  the element-wise stages' own slopes (``_Pointwise``), the branches and maxima by selections on
  the kernels' comparisons. Nothing is left to torch's autograd at a kink, whose rules differ
  between torch releases (``torch.clamp`` at its bounds).
* Tensors are N x C x H x W. Only :func:`ldr_flip` also accepts an unbatched C x H x W pair.
"""

import functools
import math
import struct
from fractions import Fraction
from typing import Optional

import torch
import torch.nn.functional as F

from .constants import DEFAULT_EPS, DEFAULT_PPD, GW, PC, PT, QC, QF, TONE_MAPPERS, tone_coefficients
from .image_checks import pair_values
from .tensor_values import is_compiling, is_plain_tensor

__all__ = [
    "srgb_to_linear",
    "linear_to_srgb",
    "linear_rgb_to_opponent",
    "opponent_to_linear_rgb",
    "csf_taps",
    "feature_taps",
    "csf_filter",
    "hunt_hyab",
    "feature_difference",
    "feature_responses",
    "ldr_flip",
    "cmax",
    "hdr_to_ldr",
    "hdr_flip",
    "tone_coefficients",
    "TONE_MAPPERS",
]

# --------------------------------------------------------------------------------------------
# Constants (docs/algorithm.md §3, §4.3)
# --------------------------------------------------------------------------------------------

# Linear sRGB (D65) -> XYZ, as exact rationals.
_RGB_TO_XYZ_EXACT = (
    (Fraction(10135552, 24577794), Fraction(8788810, 24577794), Fraction(4435075, 24577794)),
    (Fraction(2613072, 12288897), Fraction(8788810, 12288897), Fraction(887015, 12288897)),
    (Fraction(1425312, 73733382), Fraction(8788810, 73733382), Fraction(70074185, 73733382)),
)


def _inverse3(m):
    """Exact inverse of a 3x3 matrix of Fractions (adjugate / determinant)."""
    (a, b, c), (d, e, f), (g, h, i) = m
    det = a * (e * i - f * h) - b * (d * i - f * g) + c * (d * h - e * g)
    adj = (
        (e * i - f * h, c * h - b * i, b * f - c * e),
        (f * g - d * i, a * i - c * g, c * d - a * f),
        (d * h - e * g, b * g - a * h, a * e - b * d),
    )
    return tuple(tuple(x / det for x in row) for row in adj)


RGB_TO_XYZ = tuple(tuple(float(x) for x in row) for row in _RGB_TO_XYZ_EXACT)
XYZ_TO_RGB = tuple(tuple(float(x) for x in row) for row in _inverse3(_RGB_TO_XYZ_EXACT))
# D65 white = XYZ of linear RGB (1, 1, 1): (0.950428545, 1, 1.088900371).
WHITE = tuple(float(sum(row)) for row in _RGB_TO_XYZ_EXACT)
INV_WHITE = tuple(1.0 / w for w in WHITE)


# The linear maps of the per-pixel stages folded, in exact rationals, and rounded once:
# linear RGB -> white-normalised XYZ (x, y, z) = (X / Xn, Y / Yn, Z / Zn) (the Lab input); linear
# RGB -> the CSF's planes (y, x - y, y - z), which are YCxCz's without its offset and scales (the
# CSF taps sum to one, so they commute with the filter; y is also the feature detectors' input,
# (Y + 16) / 116); and the filtered planes -> linear RGB.
def _folded():
    white = [sum(row) for row in _RGB_TO_XYZ_EXACT]
    x, y, z = (tuple(v / w for v in row) for row, w in zip(_RGB_TO_XYZ_EXACT, white))
    to_csf = (y, tuple(a - b for a, b in zip(x, y)), tuple(a - b for a, b in zip(y, z)))
    m = _inverse3(_RGB_TO_XYZ_EXACT)
    # x = y + (x - y), z = y - (y - z); XYZ = (x Xn, y Yn, z Zn).
    from_csf = tuple(
        (row[0] * white[0] + row[1] * white[1] + row[2] * white[2], row[0] * white[0], -row[2] * white[2]) for row in m
    )
    return tuple(tuple(tuple(float(v) for v in row) for row in mat) for mat in ((x, y, z), to_csf, from_csf))


_RGB_TO_XYZN, _RGB_TO_CSF, _CSF_TO_RGB = _folded()

# CSF parameters per opponent channel (achromatic Y, red-green Cx, blue-yellow Cz).
_CSF_A1 = (1.0, 1.0, 34.1)
_CSF_B1 = (0.0047, 0.0053, 0.04)
_CSF_A2 = (0.0, 0.0, 13.5)
_CSF_B2 = (1e-5, 1e-5, 0.025)

# sRGB transfer-function thresholds and the CIE Lab break point.
SRGB_DECODE_T = 0.04045
_SRGB_ENCODE_T = 0.0031308
LAB_DELTA = 6.0 / 29.0
LAB_T = LAB_DELTA**3  # 0.008856...
LAB_LIN_OFFSET = 4.0 / 29.0  # f(t) = t / (3 delta^2) + 4/29 below LAB_T


# --------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------


def _compute_dtype(dtype):
    """float64 stays float64; everything else (float32, float16, bfloat16) computes in float32."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def _upcast(x):
    return x.to(_compute_dtype(x.dtype))


def mix3(m, c0, c1, c2):
    """Apply a 3x3 matrix (nested tuples of Python floats) to three channel tensors. Written out
    element-wise rather than as a matmul so that no TF32 / reduced-precision path is taken."""
    return tuple(r[0] * c0 + r[1] * c1 + r[2] * c2 for r in m)


def _mix(planes, m):
    """The rows of ``m`` (Python floats) applied to a sequence of planes, one plane per row, in
    element-wise operations (never a TF32 matmul), zero entries skipped."""
    rows = []
    for row in m:
        acc = None
        for plane, w in zip(planes, row):
            if w != 0.0:
                acc = plane * w if acc is None else torch.add(acc, plane, alpha=w)
        rows.append(acc)
    return rows


# --- The gradient at every kink (docs/algorithm.md §7.4), each from explicit conditions ---------


def clamp(
    x: torch.Tensor, low: Optional[float] = None, high: Optional[float] = None, slack: float = 0.0
) -> torch.Tensor:
    """clamp(x, low, high) whose gradient is 1 on the closed interval [low - slack, high + slack] (a
    value on a bound passes it) and 0 outside, as the kernels' clamps; the value is clamped to [low,
    high] exactly. TorchScript compiles it (flip_loss.alpha clamps alpha with it inside a scripted
    FLIPLoss)."""
    xd = x.detach()
    clamped = torch.clamp(xd, low, high)
    if slack == 0.0:
        # A value equals its clamp exactly where it lies in [low, high] (NaN nowhere).
        return torch.where(xd == clamped, x, clamped)
    wide_low: Optional[float] = None
    wide_high: Optional[float] = None
    if low is not None:
        wide_low = low - slack
    if high is not None:
        wide_high = high + slack
    inside = xd == torch.clamp(xd, wide_low, wide_high)
    # x + (clamped - x) is clamped exactly (x itself inside, the bound in the slack: Sterbenz).
    return torch.where(inside, x + (clamped - xd), clamped)


def _abs(d):
    """|d| with the gradient sign(d), 0 at d = 0."""
    return d * torch.sign(d).detach()


def _positive_power(x, p: float):
    """x^p for x > 0 as exp(p log x): two transcendentals that the CPU evaluates faster than one
    pow, and a backward of products instead of pow's second pow (within a few ulps of pow)."""
    return torch.exp(torch.log(x) * p)


def _power(x, p: float, floor: float = 0.0):
    """max(x, floor)^p for 0 < p < 1, with the gradient p x^(p-1) where x >= floor and x > 0 and 0
    elsewhere (no infinite slope at 0)."""
    return _Power.apply((p, floor), x)


def combine(colour, feature):
    """colour^(1 - feature), passing no gradient where colour = 0 (where the power's slopes in both
    arguments are not finite)."""
    return _Combine.apply((), colour, 1.0 - feature)


def _squares(u, v):
    return torch.addcmul(u * u, v, v)


def _safe_norm(u, v):
    """sqrt(u^2 + v^2) with a zero gradient where u = v = 0 (instead of NaN)."""
    return _Norm.apply(0.0, u, v)


def chroma_norm(u, v):
    """HyAB's chroma distance sqrt(u^2 + v^2), passing no gradient where it is below the rounding
    noise of grey colours (1e-3 in float32, 1e-12 in float64; docs/algorithm.md §7.11): there the
    direction of (u, v) is noise. The value is unchanged."""
    return _Norm.apply(1e-12 if u.dtype == torch.float64 else 1e-3, u, v)


def floored_abs(d, eps):
    """sqrt(max(d^2, eps)): |d| where d^2 >= eps, else sqrt(eps), with the gradient of the clamped
    square root: sign(d) where d^2 >= eps (the clamp's bound passes) and d^2 > 0, else 0."""
    return _FlooredAbs.apply(float(eps), d)


# Conditions as 0/1 planes of the compute dtype, from the sign of a difference (exact: a difference
# of two unequal floats is never 0 and keeps their order; where subnormals are flushed, floats
# within 2^-126 of each other count as equal), and selections by such a weight (_select: exactly
# one branch, both finite): on the CPU comparisons into bool tensors, torch.where and bool-to-float
# conversions run several times slower than float arithmetic.


def _above(x, a):
    """1.0 where x > a, else 0.0 (of x's dtype; NaN where x or a is NaN)."""
    return torch.sign(_difference(x, a)).clamp(min=0.0)  # out of place: vmap has no rule for clamp_


def _at_least(x, a):
    """1.0 where x >= a, else 0.0 (of x's dtype; NaN where x or a is NaN)."""
    return (torch.sign(_difference(x, a)) + 1.0).clamp(max=1.0)


def _inside(x, low, high):
    """1.0 where low <= x <= high, else 0.0 (of x's dtype; NaN where x is NaN): where x equals its
    clamp."""
    return 1.0 - torch.sign(x - torch.clamp(x, low, high)).abs()


def _difference(x, a):
    return x.detach() - (a.detach() if isinstance(a, torch.Tensor) else a)


def _select(weight, if_zero, if_one):
    """``if_one`` where ``weight`` is 1, ``if_zero`` where it is 0, exactly (both finite). On the
    CPU a blend: torch.lerp gives an end exactly there (end - (end - start)(1 - w) for w >= 0.5);
    elsewhere torch.where (MPS's lerp computes start + w (end - start), which is not exact). A
    number becomes a 0-dim tensor made on the device (a fill, never a host-to-device copy)."""
    if not isinstance(if_zero, torch.Tensor):
        if_zero = weight.new_full((), if_zero)
    if not isinstance(if_one, torch.Tensor):
        if_one = weight.new_full((), if_one)
    if weight.device.type == "cpu":
        return torch.lerp(if_zero, if_one, weight)
    return torch.where(weight > 0.5, if_one, if_zero)


class _Pointwise(torch.autograd.Function):
    """Base of an element-wise stage y = value(x, ...) differentiated by its own slopes: a subclass
    gives ``value(params, *xs)`` and ``slopes(params, y, *xs)`` (dy/dx per input, the rule of
    docs/algorithm.md §7.4 at every kink written into them). The forward computes the value alone
    and records one node; the backward multiplies by the slopes, and forward mode too. The slopes
    are torch ops on the saved inputs and output, so autograd can differentiate them again."""

    generate_vmap_rule = True

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.params = inputs[0]
        ctx.save_for_backward(output, *inputs[1:])
        ctx.save_for_forward(output, *inputs[1:])

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        slopes = cls.slopes

        def backward(ctx, grad):
            return (None,) + tuple(grad * s for s in slopes(ctx.params, *ctx.saved_tensors))

        def jvp(ctx, _params, *tangents):
            out = None
            for t, s in zip(tangents, slopes(ctx.params, *ctx.saved_tensors)):
                if t is not None:
                    out = t * s if out is None else torch.addcmul(out, t, s)
            return out

        cls.backward, cls.jvp = staticmethod(backward), staticmethod(jvp)


class _Clamp(_Pointwise):
    """clamp(x, low, high) with the gradient of :func:`clamp` (params: low, high, slack)."""

    @staticmethod
    def forward(params, x):
        return torch.clamp(x, params[0], params[1])

    @staticmethod
    def slopes(params, y, x):
        low, high, slack = params
        return (_inside(x, low - slack, high + slack),)


class _DecodedClamp(_Pointwise):
    """The sRGB decode of clamp(x, 0, 1) (params: ()), as _srgb_decode(clamp(x, 0.0, 1.0))."""

    @staticmethod
    def forward(params, x):
        return _srgb_decode_unit(torch.clamp(x, 0.0, 1.0))

    @staticmethod
    def slopes(params, y, x):
        # d/dc ((c + 0.055) / 1.055)^2.4 = 2.4 y / (c + 0.055), on c > 0.04045 (the knee decodes
        # linearly); nothing outside [0, 1].
        power = 2.4 * y / (torch.clamp(x, min=SRGB_DECODE_T) + 0.055)
        slope = _select(_above(x, SRGB_DECODE_T), 1.0 / 12.92, power)
        return (slope * _inside(x, 0.0, 1.0),)


class _LabF(_Pointwise):
    """CIE Lab's f(t) (params: ()): the cube root above the knee, the line at and below it."""

    @staticmethod
    def forward(params, t):
        return _lab_value(t, *params)

    @staticmethod
    def slopes(params, y, t):
        cube_root = y / (3.0 * torch.clamp(t, min=LAB_T))
        return (_select(_above(t, LAB_T), 1.0 / (3.0 * LAB_DELTA**2), cube_root),)


class _Power(_Pointwise):
    """max(x, floor)^p (params: p, floor), the slopes of :func:`_power`."""

    @staticmethod
    def forward(params, x):
        p, floor = params
        if floor > 0:  # x >= 0 (the callers'), so both branches are finite
            return _select(_at_least(x, floor), floor**p, _positive_power(x, p))
        # 0^p = exp(-inf) = 0, below 0 the clamp: floor^p.
        return _positive_power(torch.clamp(x, min=0.0), p)

    @staticmethod
    def slopes(params, y, x):
        p, floor = params
        passes = _at_least(x, floor) if floor > 0 else _above(x, 0.0)
        # The divisor is x where it passes, max(x, 0) + 1 elsewhere (never 0).
        return (passes * (p * y) / (torch.clamp(x, min=0.0) + (1.0 - passes)),)


class _Combine(_Pointwise):
    """colour^exponent (params: ()), passing nothing where colour <= 0 (see :func:`combine`)."""

    @staticmethod
    def forward(params, colour, exponent):
        return torch.pow(colour, exponent)

    @staticmethod
    def slopes(params, y, colour, exponent):
        passes = _above(colour, 0.0)
        c = torch.clamp(colour, min=0.0) + (1.0 - passes)  # 1 where it does not pass (colour <= 0)
        py = passes * y
        return py * exponent / c, py * torch.log(c)


class _Norm(_Pointwise):
    """sqrt(u^2 + v^2) (params: the norm at or below which the gradient is 0): the gradient
    (u, v) / norm above it."""

    @staticmethod
    def forward(params, u, v):
        return torch.sqrt(_squares(u, v))

    @staticmethod
    def slopes(params, y, u, v):
        passes = _above(y, params)
        inverse = passes / (y + (1.0 - passes))
        return u * inverse, v * inverse


class _FlooredAbs(_Pointwise):
    """sqrt(max(d^2, eps)) (params: eps), the slopes of :func:`floored_abs`."""

    @staticmethod
    def forward(params, d):
        below = d * d < params if params > 0 else d == 0
        return torch.where(below, math.sqrt(params), d.abs())

    @staticmethod
    def slopes(params, y, d):
        slope = torch.sign(d)  # 0 at d = 0
        return (slope * _at_least(d * d, params) if params > 0 else slope,)


# --------------------------------------------------------------------------------------------
# Colour transforms (docs/algorithm.md §4.2-§4.3)
# --------------------------------------------------------------------------------------------


def _srgb_decode(x):
    # The power's argument is clamped to the threshold so that the branch not taken has finite
    # slopes; where it is taken (x > 0.04045) the clamp's slope is 1.
    power = _positive_power((torch.clamp(x, min=SRGB_DECODE_T) + 0.055) / 1.055, 2.4)
    return torch.where(x <= SRGB_DECODE_T, x / 12.92, power)


def _srgb_decode_unit(x):
    """_srgb_decode of x in [0, 1] (both branches finite, one selected by a blend)."""
    power = _positive_power((torch.clamp(x, min=SRGB_DECODE_T) + 0.055) / 1.055, 2.4)
    return _select(_above(x, SRGB_DECODE_T), x / 12.92, power)


def srgb_to_linear(x):
    """sRGB decode per channel: c <= 0.04045 -> c / 12.92, else ((c + 0.055) / 1.055)^2.4.
    The power branch is evaluated on max(c, 0.04045) so it never yields NaN gradients."""
    return _srgb_decode(_upcast(x)).to(x.dtype)


def linear_to_srgb(x):
    """sRGB encode per channel: l <= 0.0031308 -> 12.92 l, else 1.055 l^(1/2.4) - 0.055.
    The power branch is evaluated on max(l, 0.0031308)."""
    dt = x.dtype
    x = _upcast(x)
    power = 1.055 * torch.pow(torch.clamp(x, min=_SRGB_ENCODE_T), 1.0 / 2.4) - 0.055
    return torch.where(x <= _SRGB_ENCODE_T, 12.92 * x, power).to(dt)


def xyz_to_opponent(X, Y, Z):
    """XYZ -> YCxCz (relative to the D65 white)."""
    x, y, z = X * INV_WHITE[0], Y * INV_WHITE[1], Z * INV_WHITE[2]
    return 116.0 * y - 16.0, 500.0 * (x - y), 200.0 * (y - z)


def opponent_to_xyz(Yo, Cx, Cz):
    """Exact inverse of :func:`xyz_to_opponent`."""
    y = (Yo + 16.0) / 116.0
    x = y + Cx / 500.0
    z = y - Cz / 200.0
    return x * WHITE[0], y * WHITE[1], z * WHITE[2]


def _rgb_to_opponent(r, g, b):
    return xyz_to_opponent(*mix3(RGB_TO_XYZ, r, g, b))


def _opponent_to_rgb(Yo, Cx, Cz):
    return mix3(XYZ_TO_RGB, *opponent_to_xyz(Yo, Cx, Cz))


def linear_rgb_to_opponent(lin):
    """N x 3 x H x W linear RGB -> YCxCz (XYZ / D65 white; Y = 116 y - 16, Cx = 500 (x - y),
    Cz = 200 (y - z))."""
    dt = lin.dtype
    lin = _upcast(lin)
    return torch.stack(_rgb_to_opponent(lin[:, 0], lin[:, 1], lin[:, 2]), dim=1).to(dt)


def opponent_to_linear_rgb(opp):
    """Exact inverse of :func:`linear_rgb_to_opponent` (no clamp)."""
    dt = opp.dtype
    opp = _upcast(opp)
    return torch.stack(_opponent_to_rgb(opp[:, 0], opp[:, 1], opp[:, 2]), dim=1).to(dt)


def _lab_f(t, finite=False):
    """f(t); ``finite``: t is known finite (both branches are then, and one is selected by a
    blend)."""
    return _LabF.apply((finite,), t)


def _lab_value(t, finite):
    # The cube root's argument is clamped to the knee for the branch not taken; the knee itself
    # takes the linear branch (docs/algorithm.md §7.4).
    cube_root = _positive_power(torch.clamp(t, min=LAB_T), 1.0 / 3.0)
    linear = t / (3.0 * LAB_DELTA**2) + LAB_LIN_OFFSET
    if finite:
        return _select(_above(t, LAB_T), linear, cube_root)
    return torch.where(t > LAB_T, cube_root, linear)


def xyz_to_lab(X, Y, Z):
    """XYZ -> CIE L*a*b* (D65). The cube-root branch is evaluated on max(t, delta^3)."""
    fx, fy, fz = _lab_f(X * INV_WHITE[0]), _lab_f(Y * INV_WHITE[1]), _lab_f(Z * INV_WHITE[2])
    return 116.0 * fy - 16.0, 500.0 * (fx - fy), 200.0 * (fy - fz)


def _hunt_lab(r, g, b, bounded=False):
    """Linear RGB planes -> Hunt-adjusted L*a*b* (L, 0.01 L a, 0.01 L b), with the white folded
    into the matrix; ``bounded``: the planes are in [0, 1] (as after the gamut clamp), so both of
    Lab's branches are finite."""
    fx, fy, fz = (_lab_f(t, finite=bounded) for t in _mix((r, g, b), _RGB_TO_XYZN))
    L = 116.0 * fy - 16.0
    return L, (5.0 * L) * (fx - fy), (2.0 * L) * (fy - fz)


def _hyab(lab_t, lab_r, eps):
    """HyAB distance of two Hunt-adjusted Lab colours: sqrt(max(dL^2, eps)) + ||(da', db')||."""
    return floored_abs(lab_r[0] - lab_t[0], eps) + chroma_norm(lab_r[1] - lab_t[1], lab_r[2] - lab_t[2])


# --------------------------------------------------------------------------------------------
# Filter taps (docs/algorithm.md §4.4, §4.10, §7.11)
# --------------------------------------------------------------------------------------------
# Built in double with the kernels' formulas, summed in the kernels' order (csrc/flip/filters.h).
# The caches hold tuples of Python floats: immutable, and the same whatever the mode, default dtype
# or default device of the call that built them. Every tensor is made per call from them (see
# _bank for the one device copy that is kept).


def _scaled(w, s):
    return tuple(v / s if s != 0 else 0.0 for v in w)


def _symmetric(w, odd):
    """``w`` made exactly antisymmetric (``odd``) or symmetric and zero-sum in double: each mirrored
    pair takes the mean of its two magnitudes, and a symmetric filter's centre balances the rest."""
    r = len(w) // 2
    s = [0.0] * len(w)
    side = 0.0
    for i in range(1, r + 1):
        v = 0.5 * (w[r - i] - w[r + i]) if odd else 0.5 * (w[r - i] + w[r + i])
        s[r - i], s[r + i] = v, (-v if odd else v)
        side += v
    s[r] = 0.0 if odd else -2.0 * side
    return tuple(s)


@functools.lru_cache(maxsize=64)
def _csf_rows(ppd):
    """(r, y, cx, cz1, cz2): the CSF taps of ``ppd`` as tuples of 2r + 1 floats."""
    b_max = max(_CSF_B1 + _CSF_B2)
    r = int(math.ceil(3.0 * math.sqrt(b_max / (2.0 * math.pi**2)) * ppd))

    def gauss(amp, b):
        return tuple(amp * math.exp(-math.pi * math.pi * (i / ppd) * (i / ppd) / b) for i in range(-r, r + 1))

    def total(w):
        s = 0.0
        for v in w:
            s += v
        return s

    y = gauss(_CSF_A1[0] * math.sqrt(math.pi / _CSF_B1[0]), _CSF_B1[0])
    cx = gauss(_CSF_A1[1] * math.sqrt(math.pi / _CSF_B1[1]), _CSF_B1[1])
    # Blue-yellow: two separable Gaussians with square-root amplitudes, jointly normalised so
    # that the 2-D kernel f1 (x) f1 + f2 (x) f2 sums to one.
    f1 = gauss(math.sqrt(_CSF_A1[2] * math.sqrt(math.pi / _CSF_B1[2])), _CSF_B1[2])
    f2 = gauss(math.sqrt(_CSF_A2[2] * math.sqrt(math.pi / _CSF_B2[2])), _CSF_B2[2])
    m = math.sqrt(total(f1) * total(f1) + total(f2) * total(f2))
    return r, _scaled(y, total(y)), _scaled(cx, total(cx)), _scaled(f1, m), _scaled(f2, m)


@functools.lru_cache(maxsize=64)
def _feature_rows(ppd):
    """(r, g, dg, ddg): the feature taps of ``ppd`` as tuples of 2r + 1 floats; dg exactly
    antisymmetric, ddg exactly symmetric with the centre that makes it sum to zero."""
    sigma = 0.5 * GW * ppd
    r = int(math.ceil(3.0 * sigma))
    g, dg, ddg = [], [], []
    sg = 0.0
    for k in range(-r, r + 1):
        gk = math.exp(-float(k) * k / (2 * sigma * sigma))
        g.append(gk)
        dg.append(-k * gk)
        ddg.append((float(k) * k / (sigma * sigma) - 1.0) * gk)
        sg += gk

    def lobes(w):  # positive taps scaled to sum to +1, negative ones to -1
        pos = neg = 0.0
        for v in w:
            if v > 0:
                pos += v
            else:
                neg += v
        return tuple((v / pos if pos > 0 else 0.0) if v > 0 else (v / -neg if neg < 0 else 0.0) for v in w)

    return r, _scaled(g, sg), _symmetric(lobes(dg), True), _symmetric(lobes(ddg), False)


def _difference_taps(s):
    """Taps ``c`` that give the correlation with the zero-sum taps ``s`` from the first differences
    d[m] = x[m + 1] - x[m]: sum_k s[k] x[i + k] = sum_j c[j] d[i + j], with c[j] = -sum_{k <= j} s[k]
    left of the centre and sum_{k > j} s[k] right of it (each summed from the outer tap in; the
    centre is never used, as in the kernels' forms). A constant neighbourhood has d = 0, so its
    response is exactly 0 (docs/algorithm.md §7.11). 2r + 1 taps, the last 0 (see
    _feature_responses)."""
    r = len(s) // 2
    c = [0.0] * len(s)
    acc = 0.0
    for j in range(r):
        acc += s[j]
        c[j] = -acc
    acc = 0.0
    for j in range(2 * r - 1, r - 1, -1):
        acc += s[j + 1]
        c[j] = acc
    return tuple(c)


@functools.lru_cache(maxsize=64)
def _bank_rows(kind, ppd):
    """(r, rows) of one filter bank, one row of taps per plane it filters: the CSF's (y, cx, cz1,
    cz2); the feature detectors' eight, the horizontal pass's four then the vertical pass's, for the
    planes (x differences, x differences, y differences, y differences): (dg, ddg, g, g) then (g, g,
    dg, ddg), dg and ddg as difference taps; an image's sixteen, both banks in one, the horizontal
    pass's eight (the CSF's four, the feature detectors' four) then the vertical pass's, all widened
    with zero taps to the larger radius."""
    if kind == "csf":
        r, *rows = _csf_rows(ppd)
        return r, tuple(rows)
    if kind == "image":
        rc, csf = _bank_rows("csf", ppd)
        rf, feature = _bank_rows("feature", ppd)
        r = max(rc, rf)

        def widened(w, ri):  # zero taps on both sides up to radius r: the same correlation
            return (0.0,) * (r - ri) + w + (0.0,) * (r - ri)

        csf = tuple(widened(w, rc) for w in csf)
        feature = tuple(widened(w, rf) for w in feature)
        return r, csf + feature[:4] + csf + feature[4:]
    r, g, dg, ddg = _feature_rows(ppd)
    dg, ddg = _difference_taps(dg), _difference_taps(ddg)
    return r, (dg, ddg, g, g, g, g, dg, ddg)


# Device copies of the banks for plain eager calls on devices other than the CPU (where a tensor
# made per call would cost a host-to-device copy each time, and one during CUDA graph capture
# would fail). Keyed by everything they depend on; made outside inference mode; never handed out;
# at most 64 entries, emptied when full (the kernels' policy, csrc/flip/bounded_cache.h).
_DEVICE_BANKS = {}


def _bank(kind, ppd, dtype, device):
    """(r, P x (2r + 1) taps tensor) of a filter bank in ``dtype`` on ``device``."""
    r, rows = _bank_rows(kind, ppd)
    if device.type in ("cpu", "meta") or is_compiling():
        return r, torch.tensor(rows, dtype=dtype, device=device)
    key = (kind, ppd, dtype, device)
    taps = _DEVICE_BANKS.get(key)
    if taps is None:
        with torch.inference_mode(False):
            taps = torch.tensor(rows, dtype=dtype, device=device)
        if not is_plain_tensor(taps):  # made under a mode (FakeTensor): this call's only
            return r, taps
        if len(_DEVICE_BANKS) >= 64:
            _DEVICE_BANKS.clear()
        _DEVICE_BANKS[key] = taps
    return r, taps


def csf_taps64(ppd):
    """(r, y, cx, cz1, cz2): the CSF taps as new float64 CPU tensors."""
    r, *rows = _csf_rows(float(ppd))
    return (r,) + tuple(torch.tensor(w, dtype=torch.float64, device="cpu") for w in rows)


def csf_taps(pixels_per_degree, dtype=torch.float64, device=None):
    """Normalised 1-D CSF taps for ``pixels_per_degree``: ``{"radius": r, "y", "cx", "cz1",
    "cz2"}``, each tap tensor of length 2r + 1 (built in float64, then rounded to ``dtype``), new
    tensors on every call."""
    r, *rows = _csf_rows(float(pixels_per_degree))
    cast = dict(dtype=dtype, device=device)
    return dict(radius=r, **{k: torch.tensor(w, **cast) for k, w in zip(("y", "cx", "cz1", "cz2"), rows)})


def feature_taps(pixels_per_degree, dtype=torch.float64, device=None):
    """Normalised 1-D feature-detector taps: ``{"radius": r, "g", "dg", "ddg"}`` (Gaussian, and
    its first / second derivative with lobe-wise normalisation), new tensors on every call."""
    r, *rows = _feature_rows(float(pixels_per_degree))
    cast = dict(dtype=dtype, device=device)
    return dict(radius=r, **{k: torch.tensor(w, **cast) for k, w in zip(("g", "dg", "ddg"), rows)})


# --------------------------------------------------------------------------------------------
# Separable filters: one bank of planes per call, two depthwise conv2d passes
# --------------------------------------------------------------------------------------------


def _stack(planes):
    """N x H x W planes stacked into one N x P x H x W tensor for the filter passes: interleaved
    (channels-last) on the CPU, where oneDNN's depthwise convolutions and their backward are
    several times faster on it; planar elsewhere, where a depthwise float32 convolution of planar
    data runs PyTorch's own kernel (CUDA), never a TF32 one. (Stacked planar and then restrided:
    stacking along the last axis directly copies one sample at a time, twice as slow.)"""
    if planes[0].device.type != "cpu":
        return torch.stack(planes, dim=1)
    return _channels_last(torch.stack(planes, dim=1))


def _unstack(x):
    """The planes of a filter pass's output (N x P x H x W), made planar first, so that the
    per-pixel stages read each plane contiguously rather than every P-th sample."""
    return x.contiguous().unbind(1)


def _channels_last(x):
    try:
        return x.contiguous(memory_format=torch.channels_last)
    except RuntimeError:  # vmap (torch.func.jacfwd, jacrev) cannot restride a batched tensor
        return x


def _under_func_transform(*tensors):
    """Whether a tensor is wrapped by a torch.func transform or carries a forward-mode tangent."""
    wrapped = getattr(torch._C._functorch, "is_functorch_wrapped_tensor", lambda x: False)
    return any(wrapped(x) or torch.autograd.forward_ad.unpack_dual(x).tangent is not None for x in tensors)


def _needs_derivative(x):
    """Whether anything may differentiate through ``x``: autograd, forward mode, a torch.func
    transform, or torch.compile's trace (which may differentiate what it traces later)."""
    return x.requires_grad or is_compiling() or _under_func_transform(x)


def _edge_rows(x, before, after, dim):
    n = x.shape[dim]
    shape = list(x.shape)
    shape[dim] = before
    first = x.narrow(dim, 0, 1).expand(shape)
    shape[dim] = after
    return torch.cat((first, x, x.narrow(dim, n - 1, 1).expand(shape)), dim)


def _pad(x, before, after, halo=0):
    """Clamp-to-edge padding of both image axes (the last two; docs/algorithm.md §7.9), ``before``
    samples before and ``after`` after, for any image size: the edge rows repeated, whose backward
    sums them (replicate padding's backward adds with atomics on CUDA, which makes the gradient
    vary from run to run). A strip with ``halo`` (>= before, after) rows above and below its own
    (_with_halo) takes the rows it needs from them instead."""
    x = _edge_rows(x, before, after, -1)
    if halo:
        return x.narrow(-2, halo - before, x.shape[-2] - 2 * halo + before + after)
    return _edge_rows(x, before, after, -2)


def _correlation(x, taps, dim, padding=0):
    if x.device.type == "cpu":  # a gradient arrives planar
        x = _channels_last(x)
    p, k = taps.shape
    if dim == -1:
        return F.conv2d(x, taps.view(p, 1, 1, k), padding=(0, padding), groups=p)
    return F.conv2d(x, taps.view(p, 1, k, 1), padding=(padding, 0), groups=p)


class _Correlate(torch.autograd.Function):
    """_correlation with constant taps and ``padding`` zeros on both sides along ``dim``. Linear:
    its transpose (the backward) is the correlation of the gradient with the reversed taps and
    K - 1 - padding zeros (a forward convolution, which oneDNN runs faster than its convolution
    backward), itself differentiable, so the loss stays twice differentiable; its forward-mode
    derivative is itself."""

    generate_vmap_rule = True

    @staticmethod
    def forward(x, taps, dim, padding):
        return _correlation(x, taps, dim, padding)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.taps, ctx.dim, ctx.padding = inputs[1:]

    @staticmethod
    def backward(ctx, grad):
        transposed = _Correlate.apply(grad, ctx.taps.flip(-1), ctx.dim, ctx.taps.shape[-1] - 1 - ctx.padding)
        return transposed, None, None, None

    @staticmethod
    def jvp(ctx, tangent, _taps, _dim, _padding):
        return _Correlate.apply(tangent, ctx.taps, ctx.dim, ctx.padding)


def _correlate(x, taps, dim):
    """Each plane p of ``x`` (N x P x H x W) correlated with row p of ``taps`` (P x K, constants) along
    ``dim`` (-1: horizontal, -2: vertical), only where the taps fit (the caller pads)."""
    if taps.requires_grad:
        return _correlation(x, taps, dim)
    return _Correlate.apply(x, taps, dim, 0)


def feature_responses(yhat, pixels_per_degree, halo=0):
    """The feature detectors' responses (dx, dy, ddx, ddy), each N x H x W, of a normalised
    achromatic image (N x 1 x H x W): the Gaussian's first and second derivative along one axis
    and the Gaussian along the other. The derivative taps are difference taps (_difference_taps)
    applied to the first differences of the image along their axis: a constant neighbourhood gives
    exactly 0, whatever order a convolution sums in. All four planes go through one pair of passes
    (horizontal, then vertical), each plane with its own taps. ``halo``: see _pad."""
    r, taps = _bank("feature", float(pixels_per_degree), yhat.dtype, yhat.device)
    _, along_x, along_y = _differences(_pad(yhat[:, 0], r, r + 1, halo))
    planes = _stack([along_x, along_x, along_y, along_y])
    dx, ddx, dy, ddy = _unstack(_correlate(_correlate(planes, taps[:4], -1), taps[4:], -2))
    return dx, dy, ddx, ddy


def _differences(x):
    """(x without its last row and column, its first differences along x, along y) of a plane
    padded with one more sample after each axis than before, so that the differences keep the
    padded length; the difference taps' last tap, 0, is the one that reaches that sample."""
    xs = x[:, :-1, :-1]
    return xs, x[:, :-1, 1:] - xs, x[:, 1:, :-1] - xs


# --------------------------------------------------------------------------------------------
# Stages
# --------------------------------------------------------------------------------------------

# How far outside the RGB cube the gamut clamp still passes the gradient, for every dtype: about 10x
# float32's rounding of the colour round trip, so that a flat channel at 0 or 1 passes it on every
# device (the kernels' gamut_gradient_slack, csrc/flip/color.h; docs/algorithm.md §7.4).
GAMUT_GRADIENT_SLACK = 1e-5


def _filtered_rgb(y, d1, d2, ppd, differentiated=True, halo=0):
    """The CSF planes (y, x - y, y - z) (N x H x W) filtered, back in linear RGB and clamped to
    [0, 1] (docs/algorithm.md §4.4-§4.6): three N x H x W planes. ``differentiated=False`` (nothing
    differentiates through them) clamps with torch.clamp: the same values. ``halo``: see _pad."""
    r, taps = _bank("csf", ppd, y.dtype, y.device)
    d2 = _pad(d2, r, r, halo)
    x = _stack([_pad(y, r, r, halo), _pad(d1, r, r, halo), d2, d2])
    return _csf_rgb(*_unstack(_correlate(_correlate(x, taps, -1), taps, -2)), differentiated)


def _csf_rgb(yf, d1f, d2f, d2f2, differentiated):
    """The filtered CSF planes back in linear RGB, clamped to [0, 1] (see _filtered_rgb); the
    blue-yellow channel is the sum of its two separable Gaussians' planes."""
    rgb = _mix((yf, d1f, d2f + d2f2), _CSF_TO_RGB)
    if not differentiated:
        return [torch.clamp(c, 0.0, 1.0) for c in rgb]
    return [_Clamp.apply((0.0, 1.0, GAMUT_GRADIENT_SLACK), c) for c in rgb]


def _autocast_on(device_type: str) -> bool:
    try:
        return torch.is_autocast_enabled(device_type)
    except (TypeError, RuntimeError):  # torch < 2.4: no device argument
        return torch.is_autocast_cpu_enabled() if device_type == "cpu" else torch.is_autocast_enabled()


def _float32_under_autocast(function):
    """The ops' autocast rule for the portable path's public functions: under torch.autocast on the
    inputs' device, the floating-point tensors in float32 and the function with autocast off (its
    convolutions would run in the autocast dtype), so the result is float32 as the ops' Autocast
    kernels give it, with their values."""

    @functools.wraps(function)
    def run(*args, **kwargs):
        first = next((a for a in args if isinstance(a, torch.Tensor)), None)
        if first is None or not _autocast_on(first.device.type):
            return function(*args, **kwargs)

        def cast(a):
            return a.float() if isinstance(a, torch.Tensor) and a.is_floating_point() else a

        with torch.autocast(first.device.type, enabled=False):
            return function(*map(cast, args), **{k: cast(v) for k, v in kwargs.items()})

    return run


@_float32_under_autocast
def csf_filter(opponent, pixels_per_degree):
    """N x 3 x H x W YCxCz -> CSF-filtered linear RGB clamped to [0, 1] (docs/algorithm.md §4.4-§4.6).
    Separable correlation (horizontal, then vertical) with clamp-to-edge borders; the blue-yellow
    channel is the sum of two separable Gaussian filters."""
    opp = _upcast(opponent)
    planes = ((opp[:, 0] + 16.0) / 116.0, opp[:, 1] / 500.0, opp[:, 2] / 200.0)
    return torch.stack(_filtered_rgb(*planes, float(pixels_per_degree)), dim=1).to(opponent.dtype)


def _cmax():
    one = torch.ones((), dtype=torch.float64, device="cpu")
    zero = torch.zeros((), dtype=torch.float64, device="cpu")
    d = _hyab(_hunt_lab(zero, one, zero), _hunt_lab(zero, zero, one), DEFAULT_EPS)
    return float(d.item()) ** QC


_CMAX = _cmax()


def cmax():
    """Largest Hunt-HyAB colour difference ^ qc: green (0,1,0) vs blue (0,0,1), in float64
    (about 41.2760963); computed once, on the CPU, when the module loads."""
    return _CMAX


def _colour_difference(lab_t, lab_r, eps):
    """Hunt-adjusted Lab planes of both images -> dE_c (N x H x W): HyAB ^ qc, redistributed."""
    e = _power(_hyab(lab_t, lab_r, eps), QC)
    knee = PC * _CMAX
    low = e * (PT / knee)
    high = PT + (e - knee) * ((1.0 - PT) / (_CMAX - knee))
    return _select(_at_least(e, knee), low, high)


@_float32_under_autocast
def hunt_hyab(test_rgb, reference_rgb, eps=DEFAULT_EPS):
    """Two filtered linear-RGB images (N x 3 x H x W) -> colour difference dE_c (N x 1 x H x W) in
    [0, 1]: Hunt-adjusted Lab, HyAB with the L term sqrt(max(dL^2, eps)), ^qc, then the piecewise
    linear redistribution with its knee at pc * cmax (docs/algorithm.md §4.7-§4.9)."""
    lab_t = _hunt_lab(*_upcast(test_rgb).unbind(1))
    lab_r = _hunt_lab(*_upcast(reference_rgb).unbind(1))
    return _colour_difference(lab_t, lab_r, eps).unsqueeze(1).to(test_rgb.dtype)


def _edge_point(yhat, ppd, differentiated=True, halo=0):
    """Edge and point magnitudes (N x H x W) of one normalised achromatic image (N x 1 x H x W).
    ``differentiated=False`` (nothing differentiates through them): plain square roots, the same
    values."""
    return _edge_point_norms(*feature_responses(yhat, ppd, halo), differentiated)


def _edge_point_norms(dx, dy, ddx, ddy, differentiated):
    """The edge and point magnitudes of the feature responses (see _edge_point)."""
    if not differentiated:
        return torch.sqrt(_squares(dx, dy)), torch.sqrt(_squares(ddx, ddy))
    return _safe_norm(dx, dy), _safe_norm(ddx, ddy)


def _feature_term(edge_point_t, edge_point_r, eps):
    """dE_f (N x H x W) from both images' edge and point magnitudes."""
    d_edge = _abs(edge_point_r[0] - edge_point_t[0])
    d_point = _abs(edge_point_r[1] - edge_point_t[1])
    # Ties go to the edge term. A blend with weights 0 and 1 selects either value exactly, as
    # torch.where would, and routes the whole gradient to it; it runs several times faster than
    # torch.where on a condition as unpredictable as which difference is the larger.
    m = _select(_at_least(d_edge, d_point), d_point, d_edge)
    return _power(m / math.sqrt(2.0), QF, floor=eps)


@_float32_under_autocast
def feature_difference(test_y, reference_y, pixels_per_degree, eps=DEFAULT_EPS):
    """Two normalised achromatic images (N x 1 x H x W, Y-hat = (Y + 16) / 116 of the unfiltered
    opponent image) -> feature difference dE_f (N x 1 x H x W):
    (max(|d edge|, |d point|) / sqrt(2)) ^ qf, floored at eps before the power (docs/algorithm.md §4.10-§4.12)."""
    ppd = float(pixels_per_degree)
    t = _edge_point(_upcast(test_y), ppd)
    r = _edge_point(_upcast(reference_y), ppd)
    return _feature_term(t, r, eps).unsqueeze(1).to(test_y.dtype)


def _image_terms(x, ppd, srgb, halo=0):
    """The stages of one image (N x 3 x H x W, compute dtype) that do not need the other: its
    Hunt-adjusted Lab planes after the CSF and its edge and point magnitudes. Test and reference
    go through them separately, so that an image that needs no gradient records nothing, and skips
    the conditions that only shape a gradient (the clamps' and norms' rules at their kinks). A strip
    with ``halo`` rows above and below its own (_with_halo) gives the terms of its own rows."""
    differentiated = _needs_derivative(x)
    # Channel by channel: temporaries of one plane's size (see STRIP_PIXELS).
    rgb = []
    for c in x.unbind(1):
        if not differentiated:
            c = torch.clamp(c, 0.0, 1.0)
            rgb.append(_srgb_decode_unit(c) if srgb else c)
        else:
            rgb.append(_DecodedClamp.apply((), c) if srgb else _Clamp.apply((0.0, 1.0, 0.0), c))
    y, d1, d2 = _mix(rgb, _RGB_TO_CSF)
    # Both banks in one pair of passes: the CSF's planes, and the feature detectors' differences of
    # the unfiltered, normalised achromatic channel y (as feature_responses).
    r, taps = _bank("image", ppd, y.dtype, y.device)
    y, along_x, along_y = _differences(_pad(y, r, r + 1, halo))
    d2 = _pad(d2, r, r, halo)
    planes = _stack([y, _pad(d1, r, r, halo), d2, d2, along_x, along_x, along_y, along_y])
    yf, d1f, d2f, d2f2, dx, ddx, dy, ddy = _unstack(_correlate(_correlate(planes, taps[:8], -1), taps[8:], -2))
    lab = _hunt_lab(*_csf_rgb(yf, d1f, d2f, d2f2, differentiated), bounded=True)
    return lab, _edge_point_norms(dx, dy, ddx, ddy, differentiated)


# Images of more pixels (N x H x W) than this are evaluated on the CPU in horizontal strips of about
# this many pixels, each with the rows its filters reach above and below (_with_halo): freed blocks
# of more than a few tens of MB go back to the operating system, which zeroes them again when they
# are allocated next, and for whole-image planes that costs as much as the arithmetic on them. Not
# fewer: every strip recomputes its halo rows (about 2 x 11 at the default ppd), a share that grows
# as strips get shorter (a sixth of a 1080p strip of 2^18 pixels, a third of a 4K one).
STRIP_PIXELS = 1 << 19


def _strip_rows(x, ppd):
    """(halo, rows of each strip) of an N x C x H x W image, or None for one piece: the halo is
    the rows an output row's filters reach on either side (the larger of the CSF's and the feature
    detectors' radii, and the one the differences add); every strip has at least two halos'
    rows."""
    n, _, h, w = x.shape
    if x.device.type != "cpu" or n * h * w <= STRIP_PIXELS:
        return None
    halo = _bank_rows("image", ppd)[0] + 1
    count = min(-(-n * h * w // STRIP_PIXELS), h // (2 * halo))
    if count < 2:
        return None
    rows, extra = divmod(h, count)
    return halo, [rows + 1] * extra + [rows] * (count - extra)


def _with_halo(x, rows, halo):
    """``x`` (N x C x H x W) cut into strips of ``rows`` rows, each with ``halo`` rows of its
    neighbours above and below (the edge row repeated at the image's edges)."""
    pieces = x.split(rows, dim=-2)
    last = len(pieces) - 1

    def edge(piece, at):
        shape = list(piece.shape)
        shape[-2] = halo
        return piece.narrow(-2, at, 1).expand(shape)

    return [
        torch.cat(
            (
                pieces[i - 1].narrow(-2, pieces[i - 1].shape[-2] - halo, halo) if i > 0 else edge(p, 0),
                p,
                pieces[i + 1].narrow(-2, 0, halo) if i < last else edge(p, p.shape[-2] - 1),
            ),
            dim=-2,
        )
        for i, p in enumerate(pieces)
    ]


def _error_map(test, reference, ppd, srgb, eps, halo=0):
    """The LDR-FLIP map (N x H x W) of two images in the compute dtype (strips with ``halo``: of
    their own rows)."""
    lab_t, features_t = _image_terms(test, ppd, srgb, halo)
    lab_r, features_r = _image_terms(reference, ppd, srgb, halo)
    return combine(_colour_difference(lab_t, lab_r, eps), _feature_term(features_t, features_r, eps))


def _check_floating(test, reference, codes: bool) -> None:
    """Floating-point images (or, with ``codes``, uint8: 8-bit codes) or a TypeError."""
    for name, x in (("test", test), ("reference", reference)):
        if not (x.is_floating_point() or (codes and x.dtype == torch.uint8)):
            allowed = "floating point or uint8 (8-bit codes)" if codes else "floating point"
            raise TypeError(f"flip_loss.oracle: {name} must be {allowed}, got {x.dtype}")


@_float32_under_autocast
def ldr_flip(test, reference, pixels_per_degree=DEFAULT_PPD, input_space="srgb", eps=DEFAULT_EPS):
    """LDR-FLIP error map of ``test`` against ``reference`` (N x 3 x H x W -> N x 1 x H x W, or
    3 x H x W -> 1 x H x W), in the input dtype (float32 for uint8 images: 8-bit codes k, the values
    k / 255).

    ``input_space="srgb"``: inputs are clamped to [0, 1] and sRGB-decoded; ``"linear"``: inputs
    are linear RGB, clamped to [0, 1]."""
    space = input_space.lower()
    if space not in ("srgb", "linear"):
        raise ValueError(f"input_space must be 'srgb' or 'linear', got {input_space!r}")
    _check_floating(test, reference, codes=True)
    test, reference = pair_values(test, reference)  # uint8 images as flip_loss.ldr_flip reads them
    dt = test.dtype
    unbatched = test.dim() == 3
    if unbatched:
        test, reference = test.unsqueeze(0), reference.unsqueeze(0)
    ppd = float(pixels_per_degree)
    cdt = _compute_dtype(torch.promote_types(test.dtype, reference.dtype))
    test, reference, srgb = test.to(cdt), reference.to(cdt), space == "srgb"
    strips = _strip_rows(test, ppd)
    if strips is None:
        out = _error_map(test, reference, ppd, srgb, eps)
    else:
        halo, rows = strips
        pairs = zip(_with_halo(test, rows, halo), _with_halo(reference, rows, halo))
        out = torch.cat([_error_map(t, r, ppd, srgb, eps, halo) for t, r in pairs], dim=-2)
    out = out.unsqueeze(1)
    if unbatched:
        out = out.squeeze(0)
    return out.to(dt)


# --------------------------------------------------------------------------------------------
# HDR-FLIP (docs/algorithm.md §5)
# --------------------------------------------------------------------------------------------

_HDR_CAP = 1e15  # exposed values beyond this saturate every curve; capped so x^2 stays finite
# The luminance weights of Reinhard's curve, the evaluator's (and the kernels') float32 values.
_LUMINANCE_WEIGHTS = tuple(struct.unpack("f", struct.pack("f", v))[0] for v in (0.2126, 0.7152, 0.0722))


def hdr_to_ldr(x, scale, tone_mapper):
    """Expose (x * scale, negatives clamped to 0), tone map and clamp to [0, 1]; x is N x 3 x H x W,
    scale broadcastable to N x 1 x 1 x 1."""
    e = clamp(x, low=0.0) * scale
    e = torch.where(e < _HDR_CAP, e, _HDR_CAP)  # the cap itself passes nothing
    if tone_mapper == "reinhard":
        w = _LUMINANCE_WEIGHTS
        lum = w[0] * e[:, 0:1] + w[1] * e[:, 1:2] + w[2] * e[:, 2:3]
        return clamp(e / (1.0 + lum), 0.0, 1.0)
    k = tone_coefficients(tone_mapper)
    ee = e * e
    return clamp((k[0] * ee + k[1] * e + k[2]) / (k[3] * ee + k[4] * e + k[5]), 0.0, 1.0)


def _exposure_error(t, r, exposures, i, ppd, tone_mapper, eps):
    """The LDR-FLIP map of exposure ``i`` (N x 1 x H x W; a row with fewer exposures repeats its
    last, which its count then leaves out)."""
    scale = torch.exp2(exposures[:, min(i, exposures.shape[1] - 1)]).view(-1, 1, 1, 1)
    return ldr_flip(hdr_to_ldr(t, scale, tone_mapper), hdr_to_ldr(r, scale, tone_mapper), ppd, "linear", eps)


def _exposure_maximum(t, r, exposures, counts, ppd, tone_mapper, eps):
    """(error map, exposure map, winning index) of the per-pixel maximum over exposures."""
    n = t.shape[0]
    shape = (n, 1) + tuple(t.shape[-2:])
    count = torch.tensor(counts, device=t.device).view(n, 1, 1, 1)
    levels = torch.tensor([[i / (c - 1) for c in counts] for i in range(max(counts))], dtype=t.dtype, device=t.device)
    best = torch.zeros(shape, dtype=t.dtype, device=t.device)
    emap = torch.zeros(shape, dtype=t.dtype, device=t.device)
    index = torch.full(shape, -1, dtype=torch.int32, device=t.device)
    for i in range(max(counts)):
        err = _exposure_error(t, r, exposures, i, ppd, tone_mapper, eps)
        wins = (err > best) & (count > i)  # strict: ties keep the earlier (darker) exposure
        best = torch.where(wins, err, best)
        emap = torch.where(wins, levels[i].view(n, 1, 1, 1), emap)
        index = torch.where(wins, i, index)
    return best, emap, index


class _ExposureMaximum(torch.autograd.Function):
    """HDR-FLIP's maximum over exposures, differentiated by recomputing one exposure at a time:
    the forward keeps only the inputs and the winning index, and the backward runs each winning
    exposure's LDR-FLIP again with autograd and sends it the gradient of the pixels it won. Memory
    is that of one exposure, whatever the count; the gradient is autograd's, exposure by exposure
    (docs/algorithm.md §8.5). Under ``create_graph=True`` the exposures' vector-Jacobian products
    keep their graphs, so the gradient is itself differentiable (a second derivative, a gradient
    penalty)."""

    @staticmethod
    def forward(t, r, exposures, counts, ppd, tone_mapper, eps):
        return _exposure_maximum(t, r, exposures, counts, ppd, tone_mapper, eps)

    @staticmethod
    def setup_context(ctx, inputs, output):
        t, r, exposures, counts, ppd, tone_mapper, eps = inputs
        ctx.save_for_backward(t, r, exposures, output[2])
        ctx.settings = (ppd, tone_mapper, eps)
        ctx.mark_non_differentiable(output[1], output[2])

    @staticmethod
    def backward(ctx, grad, _emap, _index):
        t, r, exposures, index = ctx.saved_tensors
        wanted = ctx.needs_input_grad[:2]
        grads = [torch.zeros_like(x) if w else None for x, w in zip((t, r), wanted)]
        # One read-back: which exposures won a pixel (the others pass no gradient).
        for i in torch.unique(index).tolist():
            if i < 0:
                continue

            def error(*images, exposure=i):  # of the images whose gradient is wanted
                pair = iter(images)
                t_i, r_i = (next(pair) if w else x for x, w in zip((t, r), wanted))
                return _exposure_error(t_i, r_i, exposures, exposure, *ctx.settings)

            # torch.func.vjp rather than autograd.grad, so that torch.func.grad works through it too.
            _, vjp = torch.func.vjp(error, *(x for x, w in zip((t, r), wanted) if w))
            got = iter(vjp(torch.where(index == i, grad, 0.0)))
            for k in (k for k, w in enumerate(wanted) if w):
                grads[k] = grads[k] + next(got)  # out of place: under vmap the sum is batched
        return grads[0], grads[1], None, None, None, None, None


@_float32_under_autocast
def hdr_flip(test, reference, pixels_per_degree, tone_mapper, exposures, counts, eps=DEFAULT_EPS):
    """HDR-FLIP with given exposures: ``exposures`` N x E (stops), ``counts`` N (how many of each
    row to use). Returns (error map, exposure map, winning index) like ``torch.ops.flip.hdr_flip``;
    differentiable in both images, with memory flat in the exposure count (_ExposureMaximum)."""
    tm = tone_mapper.lower()
    if tm not in TONE_MAPPERS:
        raise ValueError(f"tone_mapper must be one of {TONE_MAPPERS}, got {tone_mapper!r}")
    _check_floating(test, reference, codes=False)
    dt = test.dtype
    cdt = _compute_dtype(dt)
    t, r = test.to(cdt), reference.to(cdt)
    # The exposures are settings, not a function to differentiate (as for the op).
    ex = exposures.detach().to(device=t.device, dtype=cdt)
    args = (t, r, ex, [int(c) for c in counts.tolist()], float(pixels_per_degree), tm, eps)
    # Recomputation serves reverse mode; torch.func transforms and forward mode differentiate the
    # plain maximum, whose graph holds every exposure.
    if torch.is_grad_enabled() and (t.requires_grad or r.requires_grad) and not _under_func_transform(t, r):
        best, emap, index = _ExposureMaximum.apply(*args)
    else:
        best, emap, index = _exposure_maximum(*args)
    return best.to(dt), emap.to(dt), index
