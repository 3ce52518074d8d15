"""Pure-PyTorch LDR-FLIP: the test oracle for the compiled kernels and the fallback when they are
missing.

Written from the algorithm as ``docs/algorithm.md`` states it (§4, §7 and §8). Clarity and exactness
come first; speed second (the filters are separable 1-D passes with clamp-to-edge borders).

* Works on any device and float dtype. float64 is computed in float64, float32 in float32, and
  float16 / bfloat16 are computed in float32 with the result cast back to the input dtype.
* Everything is built from differentiable torch ops, so autograd gives the gradient of every public
  function with respect to every tensor argument. At a kink the gradient is the project's own rule
  (docs/algorithm.md §7.4), the kernels' rule, written out on explicit conditions: the clamps,
  absolute values, norms and powers by the helpers below "The gradient at every kink", the
  branches and maxima by ``torch.where`` on the kernels' comparisons. Nothing is left to torch's
  autograd at a kink, whose rules differ between torch releases (``torch.clamp`` at its bounds).
* Tensors are N x C x H x W. Only :func:`ldr_flip` also accepts an unbatched C x H x W pair.
"""

import functools
import math
from fractions import Fraction
from typing import Optional

import torch

from .constants import DEFAULT_EPS, DEFAULT_PPD, GW, PC, PT, QC, QF, TONE_MAPPERS, tone_coefficients

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


# --- The gradient at every kink (docs/algorithm.md §7.4), each from explicit conditions ---------


def clamp(
    x: torch.Tensor, low: Optional[float] = None, high: Optional[float] = None, slack: float = 0.0
) -> torch.Tensor:
    """clamp(x, low, high) whose gradient is 1 on the closed interval [low - slack, high + slack] (a
    value on a bound passes it) and 0 outside, as the kernels' clamps; the value is clamped to [low,
    high] exactly. TorchScript compiles it (flip_loss.alpha clamps alpha with it inside a scripted
    FLIPLoss)."""
    inside = torch.ones_like(x, dtype=torch.bool)
    if low is not None:
        inside = inside & (x >= low - slack)
    if high is not None:
        inside = inside & (x <= high + slack)
    clamped = torch.clamp(x, low, high)
    if slack == 0.0:
        return torch.where(inside, x, clamped.detach())
    # x + (clamped - x) is clamped exactly (x itself inside, the bound in the slack: Sterbenz).
    return torch.where(inside, x + (clamped - x).detach(), clamped.detach())


def _abs(d):
    """|d| with the gradient sign(d), 0 at d = 0."""
    return d * torch.sign(d).detach()


def _power(x, p, floor=0.0):
    """max(x, floor)^p for 0 < p < 1, with the gradient p x^(p-1) where x >= floor and x > 0 and 0
    elsewhere (no infinite slope at 0)."""
    passes = (x >= floor) & (x > 0)
    safe = torch.where(passes, x, torch.ones_like(x))
    return torch.where(passes, torch.pow(safe, p), torch.pow(torch.clamp(x, min=floor), p).detach())


def combine(colour, feature):
    """colour^(1 - feature), passing no gradient where colour = 0 (where the power's slopes in both
    arguments are not finite)."""
    passes = colour > 0
    safe = torch.where(passes, colour, torch.ones_like(colour))
    return torch.where(passes, torch.pow(safe, 1.0 - feature), torch.pow(colour, 1.0 - feature).detach())


def _safe_norm(u, v):
    """sqrt(u^2 + v^2) with a zero gradient where u = v = 0 (instead of NaN)."""
    s = u * u + v * v
    nonzero = s > 0
    return torch.where(nonzero, torch.sqrt(torch.where(nonzero, s, torch.ones_like(s))), torch.zeros_like(s))


def chroma_norm(u, v):
    """HyAB's chroma distance sqrt(u^2 + v^2), passing no gradient where it is below the rounding
    noise of grey colours (1e-3 in float32, 1e-12 in float64; docs/algorithm.md §7.11): there the
    direction of (u, v) is noise. The value is unchanged."""
    n = _safe_norm(u, v)
    floor = 1e-12 if n.dtype == torch.float64 else 1e-3
    return torch.where(n > floor, n, n.detach())


def floored_abs(d, eps):
    """sqrt(max(d^2, eps)): |d| where d^2 >= eps, else sqrt(eps), with the gradient of the clamped
    square root: sign(d) where d^2 >= eps (the clamp's bound passes) and d^2 > 0, else 0."""
    d2 = d * d
    return torch.where((d2 >= eps) & (d2 > 0), _abs(d), torch.full_like(d, math.sqrt(eps)))


def _pad_index(x, r, dim):
    """Clamp-to-edge padding of ``r`` samples on both sides of ``dim``, by index (works for any
    size, including sizes smaller than ``r``)."""
    n = x.shape[dim]
    idx = torch.arange(-r, n + r, device=x.device).clamp_(0, n - 1)
    return x.index_select(dim, idx)


def correlate(x, taps, dim):
    """1-D correlation of ``x`` along ``dim`` with the odd-length ``taps`` (centre tap at index r),
    clamp-to-edge borders: out[i] = sum_k taps[k] * x[clamp(i + k - r)]."""
    r = (taps.shape[0] - 1) // 2
    n = x.shape[dim]
    xp = _pad_index(x, r, dim)
    out = None
    for k in range(2 * r + 1):
        term = taps[k] * xp.narrow(dim, k, n)
        out = term if out is None else out + term
    return out


def correlate_odd(x, taps, dim):
    """:func:`correlate` for antisymmetric taps (taps[r - i] = -taps[r + i], centre 0), summed as
    pair differences: out[i] = sum_j taps[r - j] * (x[i - j] - x[i + j]). Same linear map, but
    exactly 0 on a constant neighbourhood, where the plain sum leaves a rounding residue that the
    feature difference's square root turns into noise gradients."""
    r = (taps.shape[0] - 1) // 2
    n = x.shape[dim]
    xp = _pad_index(x, r, dim)
    out = torch.zeros_like(x)
    for j in range(1, r + 1):
        out = out + taps[r - j] * (xp.narrow(dim, r - j, n) - xp.narrow(dim, r + j, n))
    return out


def correlate_centred(x, taps, dim):
    """:func:`correlate` for symmetric taps that sum to zero, summed as centred differences:
    out[i] = sum_j taps[r + j] * ((x[i + j] - x[i]) + (x[i - j] - x[i])); the centre tap is
    implied. Exactly 0 on a constant neighbourhood (see :func:`correlate_odd`)."""
    r = (taps.shape[0] - 1) // 2
    n = x.shape[dim]
    xp = _pad_index(x, r, dim)
    out = torch.zeros_like(x)
    for j in range(1, r + 1):
        out = out + taps[r + j] * ((xp.narrow(dim, r + j, n) - x) + (xp.narrow(dim, r - j, n) - x))
    return out


def _separable(x, taps_h, taps_v):
    """Horizontal pass with ``taps_h`` then vertical pass with ``taps_v`` (N x C x H x W)."""
    return correlate(correlate(x, taps_h, -1), taps_v, -2)


# --------------------------------------------------------------------------------------------
# Colour transforms (docs/algorithm.md §4.2-§4.3)
# --------------------------------------------------------------------------------------------


def srgb_to_linear(x):
    """sRGB decode per channel: c <= 0.04045 -> c / 12.92, else ((c + 0.055) / 1.055)^2.4.
    The power branch is evaluated on max(c, 0.04045) so it never yields NaN gradients."""
    dt = x.dtype
    x = _upcast(x)
    power = torch.pow((clamp(x, low=SRGB_DECODE_T) + 0.055) / 1.055, 2.4)
    return torch.where(x <= SRGB_DECODE_T, x / 12.92, power).to(dt)


def linear_to_srgb(x):
    """sRGB encode per channel: l <= 0.0031308 -> 12.92 l, else 1.055 l^(1/2.4) - 0.055.
    The power branch is evaluated on max(l, 0.0031308)."""
    dt = x.dtype
    x = _upcast(x)
    power = 1.055 * torch.pow(clamp(x, low=_SRGB_ENCODE_T), 1.0 / 2.4) - 0.055
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


def xyz_to_lab(X, Y, Z):
    """XYZ -> CIE L*a*b* (D65). The cube-root branch is evaluated on max(t, delta^3)."""

    def f(t):
        cube_root = torch.pow(clamp(t, low=LAB_T), 1.0 / 3.0)
        return torch.where(t > LAB_T, cube_root, t / (3.0 * LAB_DELTA**2) + LAB_LIN_OFFSET)

    fx, fy, fz = f(X * INV_WHITE[0]), f(Y * INV_WHITE[1]), f(Z * INV_WHITE[2])
    return 116.0 * fy - 16.0, 500.0 * (fx - fy), 200.0 * (fy - fz)


def _lab(r, g, b):
    """Linear RGB -> CIE L*a*b* (D65)."""
    return xyz_to_lab(*mix3(RGB_TO_XYZ, r, g, b))


def _hunt_lab(r, g, b):
    L, a, bb = _lab(r, g, b)
    return L, 0.01 * L * a, 0.01 * L * bb


def _hyab(lab_t, lab_r, eps):
    """HyAB distance of two Hunt-adjusted Lab colours: sqrt(max(dL^2, eps)) + ||(da', db')||."""
    return floored_abs(lab_r[0] - lab_t[0], eps) + chroma_norm(lab_r[1] - lab_t[1], lab_r[2] - lab_t[2])


# --------------------------------------------------------------------------------------------
# Filter taps (docs/algorithm.md §4.4, §4.10, §7.11)
# --------------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=64)
def csf_taps64(ppd):
    b_max = max(_CSF_B1 + _CSF_B2)
    r = int(math.ceil(3.0 * math.sqrt(b_max / (2.0 * math.pi**2)) * ppd))
    x = torch.arange(-r, r + 1, dtype=torch.float64) / ppd
    x2 = x * x

    def gauss(a, b):
        return a * math.sqrt(math.pi / b) * torch.exp(-(math.pi**2) * x2 / b)

    y = gauss(_CSF_A1[0], _CSF_B1[0])
    cx = gauss(_CSF_A1[1], _CSF_B1[1])
    # Blue-yellow: two separable Gaussians with square-root amplitudes, jointly normalised so
    # that the 2-D kernel f1 (x) f1 + f2 (x) f2 sums to one.
    f1 = math.sqrt(_CSF_A1[2] * math.sqrt(math.pi / _CSF_B1[2])) * torch.exp(-(math.pi**2) * x2 / _CSF_B1[2])
    f2 = math.sqrt(_CSF_A2[2] * math.sqrt(math.pi / _CSF_B2[2])) * torch.exp(-(math.pi**2) * x2 / _CSF_B2[2])
    m = math.sqrt(f1.sum().item() ** 2 + f2.sum().item() ** 2)
    return r, y / y.sum(), cx / cx.sum(), f1 / m, f2 / m


def _lobe_normalise(t):
    """Positive taps scaled to sum to +1, negative taps to sum to -1 (zero taps stay zero)."""
    pos = torch.clamp(t, min=0.0)
    neg = torch.clamp(t, max=0.0)
    ps, ns = pos.sum().item(), -neg.sum().item()
    return (pos / ps if ps > 0 else pos) + (neg / ns if ns > 0 else neg)


@functools.lru_cache(maxsize=64)
def _feature_taps64(ppd):
    sigma = 0.5 * GW * ppd
    r = int(math.ceil(3.0 * sigma))
    k = torch.arange(-r, r + 1, dtype=torch.float64)
    g = torch.exp(-k * k / (2.0 * sigma * sigma))
    dg = _lobe_normalise(-k * g)
    ddg = _lobe_normalise((k * k / (sigma * sigma) - 1.0) * g)
    # Exactly antisymmetric dg and symmetric, zero-sum ddg (the mirrored magnitudes differ only by
    # the rounding of the lobe sums), as the pair-difference forms of _edge_point assume.
    dg = 0.5 * (dg - dg.flip(0))
    ddg = 0.5 * (ddg + ddg.flip(0))
    ddg[r] = -2.0 * ddg[r + 1 :].sum()
    return r, g / g.sum(), dg, ddg


@functools.lru_cache(maxsize=64)
def _taps_cached(kind, ppd, dtype, device):
    src = csf_taps64(ppd) if kind == "csf" else _feature_taps64(ppd)
    return (src[0],) + tuple(t.to(dtype=dtype, device=device) for t in src[1:])


def _device_key(device):
    if device is None:
        return torch.device("cpu")
    device = torch.device(device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    return device


def csf_taps(pixels_per_degree, dtype=torch.float64, device=None):
    """Normalised 1-D CSF taps for ``pixels_per_degree``: ``{"radius": r, "y", "cx", "cz1",
    "cz2"}``, each tap tensor of length 2r + 1 (built in float64, then cast)."""
    r, y, cx, cz1, cz2 = csf_taps64(float(pixels_per_degree))
    cast = dict(dtype=dtype, device=device)
    return {"radius": r, "y": y.to(**cast), "cx": cx.to(**cast), "cz1": cz1.to(**cast), "cz2": cz2.to(**cast)}


def feature_taps(pixels_per_degree, dtype=torch.float64, device=None):
    """Normalised 1-D feature-detector taps: ``{"radius": r, "g", "dg", "ddg"}`` (Gaussian, and
    its first / second derivative with lobe-wise normalisation)."""
    r, g, dg, ddg = _feature_taps64(float(pixels_per_degree))
    cast = dict(dtype=dtype, device=device)
    return {"radius": r, "g": g.to(**cast), "dg": dg.to(**cast), "ddg": ddg.to(**cast)}


# --------------------------------------------------------------------------------------------
# Stages
# --------------------------------------------------------------------------------------------


def csf_filter(opponent, pixels_per_degree):
    """N x 3 x H x W YCxCz -> CSF-filtered linear RGB clamped to [0, 1] (docs/algorithm.md §4.4-§4.6).
    Separable correlation (horizontal, then vertical) with clamp-to-edge borders; the blue-yellow
    channel is the sum of two separable Gaussian filters."""
    dt = opponent.dtype
    opp = _upcast(opponent)
    _, ty, tcx, tcz1, tcz2 = _taps_cached("csf", float(pixels_per_degree), opp.dtype, _device_key(opp.device))
    Yo, Cx, Cz = opp[:, 0:1], opp[:, 1:2], opp[:, 2:3]
    Yf = _separable(Yo, ty, ty)
    Cxf = _separable(Cx, tcx, tcx)
    Czf = _separable(Cz, tcz1, tcz1) + _separable(Cz, tcz2, tcz2)
    r, g, b = _opponent_to_rgb(Yf[:, 0], Cxf[:, 0], Czf[:, 0])
    return clamp(torch.stack((r, g, b), dim=1), 0.0, 1.0, GAMUT_GRADIENT_SLACK).to(dt)


# How far outside the RGB cube the gamut clamp still passes the gradient, for every dtype: about 10x
# float32's rounding of the colour round trip, so that a flat channel at 0 or 1 passes it on every
# device (the kernels' gamut_gradient_slack, csrc/flip/color.h; docs/algorithm.md §7.4).
GAMUT_GRADIENT_SLACK = 1e-5


@functools.lru_cache(maxsize=None)
def cmax():
    """Largest Hunt-HyAB colour difference ^ qc: green (0,1,0) vs blue (0,0,1), in float64
    (about 41.2760963)."""
    one, zero = torch.ones((), dtype=torch.float64), torch.zeros((), dtype=torch.float64)
    d = _hyab(_hunt_lab(zero, one, zero), _hunt_lab(zero, zero, one), DEFAULT_EPS)
    return float(d.item()) ** QC


def hunt_hyab(test_rgb, reference_rgb, eps=DEFAULT_EPS):
    """Two filtered linear-RGB images (N x 3 x H x W) -> colour difference dE_c (N x 1 x H x W) in
    [0, 1]: Hunt-adjusted Lab, HyAB with the L term sqrt(max(dL^2, eps)), ^qc, then the piecewise
    linear redistribution with its knee at pc * cmax (docs/algorithm.md §4.7-§4.9)."""
    dt = test_rgb.dtype
    t, r = _upcast(test_rgb), _upcast(reference_rgb)
    lab_t = _hunt_lab(t[:, 0:1], t[:, 1:2], t[:, 2:3])
    lab_r = _hunt_lab(r[:, 0:1], r[:, 1:2], r[:, 2:3])
    e = _power(_hyab(lab_t, lab_r, eps), QC)
    c_max = cmax()
    knee = PC * c_max
    low = e * (PT / knee)
    high = PT + (e - knee) * ((1.0 - PT) / (c_max - knee))
    return torch.where(e < knee, low, high).to(dt)


def _edge_point(yhat, ppd):
    """Edge and point magnitudes of one normalised achromatic image (N x 1 x H x W)."""
    _, g, dg, ddg = _taps_cached("feature", ppd, yhat.dtype, _device_key(yhat.device))
    # Each response has one zero-sum pass (horizontal for dx, ddx; vertical for dy, ddy), summed
    # in a form that is exactly 0 on a constant neighbourhood.
    h_dg = correlate_odd(yhat, dg, -1)
    h_ddg = correlate_centred(yhat, ddg, -1)
    h_g = correlate(yhat, g, -1)
    dx = correlate(h_dg, g, -2)
    ddx = correlate(h_ddg, g, -2)
    dy = correlate_odd(h_g, dg, -2)
    ddy = correlate_centred(h_g, ddg, -2)
    return _safe_norm(dx, dy), _safe_norm(ddx, ddy)


def feature_difference(test_y, reference_y, pixels_per_degree, eps=DEFAULT_EPS):
    """Two normalised achromatic images (N x 1 x H x W, Y-hat = (Y + 16) / 116 of the unfiltered
    opponent image) -> feature difference dE_f (N x 1 x H x W):
    (max(|d edge|, |d point|) / sqrt(2)) ^ qf, floored at eps before the power (docs/algorithm.md §4.10-§4.12)."""
    dt = test_y.dtype
    ppd = float(pixels_per_degree)
    edge_t, point_t = _edge_point(_upcast(test_y), ppd)
    edge_r, point_r = _edge_point(_upcast(reference_y), ppd)
    d_edge = _abs(edge_r - edge_t)
    d_point = _abs(point_r - point_t)
    m = torch.where(d_edge >= d_point, d_edge, d_point)  # ties go to the edge term
    return _power(m / math.sqrt(2.0), QF, floor=eps).to(dt)


def ldr_flip(test, reference, pixels_per_degree=DEFAULT_PPD, input_space="srgb", eps=DEFAULT_EPS):
    """LDR-FLIP error map of ``test`` against ``reference`` (N x 3 x H x W -> N x 1 x H x W, or
    3 x H x W -> 1 x H x W), in the input dtype.

    ``input_space="srgb"``: inputs are clamped to [0, 1] and sRGB-decoded; ``"linear"``: inputs
    are linear RGB, clamped to [0, 1]."""
    space = input_space.lower()
    if space not in ("srgb", "linear"):
        raise ValueError(f"input_space must be 'srgb' or 'linear', got {input_space!r}")
    dt = test.dtype
    unbatched = test.dim() == 3
    if unbatched:
        test, reference = test.unsqueeze(0), reference.unsqueeze(0)
    ppd = float(pixels_per_degree)
    cdt = _compute_dtype(torch.promote_types(test.dtype, reference.dtype))
    t = clamp(test.to(cdt), 0.0, 1.0)
    r = clamp(reference.to(cdt), 0.0, 1.0)
    if space == "srgb":
        t, r = srgb_to_linear(t), srgb_to_linear(r)
    opp_t, opp_r = linear_rgb_to_opponent(t), linear_rgb_to_opponent(r)
    # The feature detectors see the unfiltered, normalised achromatic channel.
    yhat_t = (opp_t[:, 0:1] + 16.0) / 116.0
    yhat_r = (opp_r[:, 0:1] + 16.0) / 116.0
    dec = hunt_hyab(csf_filter(opp_t, ppd), csf_filter(opp_r, ppd), eps)
    def_ = feature_difference(yhat_t, yhat_r, ppd, eps)
    out = combine(dec, def_)
    if unbatched:
        out = out.squeeze(0)
    return out.to(dt)


# --------------------------------------------------------------------------------------------
# HDR-FLIP (docs/algorithm.md §5)
# --------------------------------------------------------------------------------------------

_HDR_CAP = 1e15  # exposed values beyond this saturate every curve; capped so x^2 stays finite
# The luminance weights of Reinhard's curve, the evaluator's (and the kernels') float32 values.
_LUMINANCE_WEIGHTS = tuple(float(torch.tensor(v, dtype=torch.float32)) for v in (0.2126, 0.7152, 0.0722))


def hdr_to_ldr(x, scale, tone_mapper):
    """Expose (x * scale, negatives clamped to 0), tone map and clamp to [0, 1]; x is N x 3 x H x W,
    scale broadcastable to N x 1 x 1 x 1."""
    e = clamp(x, low=0.0) * scale
    e = torch.where(e < _HDR_CAP, e, torch.full_like(e, _HDR_CAP))  # the cap itself passes nothing
    if tone_mapper == "reinhard":
        w = _LUMINANCE_WEIGHTS
        lum = w[0] * e[:, 0:1] + w[1] * e[:, 1:2] + w[2] * e[:, 2:3]
        return clamp(e / (1.0 + lum), 0.0, 1.0)
    k = tone_coefficients(tone_mapper)
    ee = e * e
    return clamp((k[0] * ee + k[1] * e + k[2]) / (k[3] * ee + k[4] * e + k[5]), 0.0, 1.0)


def hdr_flip(test, reference, pixels_per_degree, tone_mapper, exposures, counts, eps=DEFAULT_EPS):
    """HDR-FLIP with given exposures: ``exposures`` N x E (stops), ``counts`` N (how many of each
    row to use). Returns (error map, exposure map, winning index) like ``torch.ops.flip.hdr_flip``."""
    tm = tone_mapper.lower()
    if tm not in TONE_MAPPERS:
        raise ValueError(f"tone_mapper must be one of {TONE_MAPPERS}, got {tone_mapper!r}")
    dt = test.dtype
    cdt = _compute_dtype(dt)
    t, r = test.to(cdt), reference.to(cdt)
    n = t.shape[0]
    ex = exposures.to(device=t.device, dtype=cdt)
    counts = [int(c) for c in counts.tolist()]
    shape = (n, 1) + tuple(t.shape[-2:])
    best = torch.zeros(shape, dtype=cdt, device=t.device)
    emap = torch.zeros(shape, dtype=cdt, device=t.device)
    index = torch.full(shape, -1, dtype=torch.int32, device=t.device)
    for i in range(max(counts)):
        active = torch.tensor([i < c for c in counts], device=t.device).view(n, 1, 1, 1)
        scale = torch.exp2(ex[:, min(i, ex.shape[1] - 1)]).view(n, 1, 1, 1)
        err = ldr_flip(hdr_to_ldr(t, scale, tm), hdr_to_ldr(r, scale, tm), pixels_per_degree, "linear", eps)
        wins = (err > best) & active  # strict: ties keep the earlier (darker) exposure
        level = torch.tensor([i / (c - 1) for c in counts], dtype=cdt, device=t.device).view(n, 1, 1, 1)
        best = torch.where(wins, err, best)
        emap = torch.where(wins, level.expand_as(emap), emap)
        index = torch.where(wins, torch.full_like(index, i), index)
    return best.to(dt), emap.to(dt), index
