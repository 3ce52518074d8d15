"""A fast separable LDR-FLIP in plain PyTorch: the "best pure PyTorch" baseline of the CPU speed
targets (`cpu_bench.py`).

What a user who wants speed without compiled code would write: float32 throughout (float64 for
the agreement check); the colour transforms folded into 3x3 / 3x4 matrices applied with
elementwise ATen ops on planes; each of the two filter banks as one replicate pad plus two
depthwise ``conv2d`` calls with 1-D taps (the bank's planes stacked as channels-last channels,
the layout in which those convolutions are fast); test and reference through the per-image
stages separately, so that a reference that needs no gradient costs no backward work. No Python
loop over taps or pixels. The taps come from ``flip_loss.oracle``, so this computes the same map
(docs/algorithm.md §4) and, by autograd, the same gradient; ``ldr_flip`` lists where it differs,
all at rounding level or on measure-zero sets.

    python benchmarks/torch_separable.py --check     # agreement with oracle.py
"""

import argparse
import functools
import math
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from flip_loss import oracle  # noqa: E402
from flip_loss.constants import DEFAULT_EPS, DEFAULT_PPD, PC, PT, QC, QF  # noqa: E402

__all__ = ["ldr_flip", "check"]


# --------------------------------------------------------------------------------------------
# Folded linear maps, in float64 (docs/algorithm.md §4.3, §4.6, §4.7)
# --------------------------------------------------------------------------------------------


def _matmul(a, b):
    return tuple(tuple(sum(a[i][k] * b[k][j] for k in range(len(b))) for j in range(len(b[0]))) for i in range(len(a)))


# Linear RGB -> white-normalised XYZ (x, y, z) = (X / Xn, Y / Yn, Z / Zn).
_RGB_TO_XYZN = tuple(tuple(v * oracle.INV_WHITE[i] for v in row) for i, row in enumerate(oracle.RGB_TO_XYZ))

# Linear RGB -> the CSF planes (y, x - y, y - z, y - z): y is (Yo + 16) / 116, which is also the
# feature detectors' input, and the CSF taps sum to one, so the opponent offset and scales are
# applied after the filter (_CSF_OUT). The blue-yellow plane appears twice because it is filtered
# by two separable Gaussians whose results are summed.
_RGB_TO_CSF_IN = (
    _RGB_TO_XYZN[1],
    tuple(a - b for a, b in zip(_RGB_TO_XYZN[0], _RGB_TO_XYZN[1])),
    tuple(a - b for a, b in zip(_RGB_TO_XYZN[1], _RGB_TO_XYZN[2])),
    tuple(a - b for a, b in zip(_RGB_TO_XYZN[1], _RGB_TO_XYZN[2])),
)

# Filtered planes (fy, fx-y, fy-z1, fy-z2) -> linear RGB: x = fy + f(x-y), y = fy,
# z = fy - (f(y-z)1 + f(y-z)2), then XYZ (times the white) -> RGB.
_CSF_OUT = _matmul(
    oracle.XYZ_TO_RGB,
    (
        (oracle.WHITE[0], oracle.WHITE[0], 0.0, 0.0),
        (1.0, 0.0, 0.0, 0.0),
        (oracle.WHITE[2], 0.0, -oracle.WHITE[2], -oracle.WHITE[2]),
    ),
)


def _mix(planes, m):
    """The rows of ``m`` (Python floats) applied to a sequence of planes: one plane per row."""
    rows = []
    for row in m:
        acc = None
        for p, w in zip(planes, row):
            if w == 0.0:
                continue
            acc = p * w if acc is None else torch.add(acc, p, alpha=w)
        rows.append(acc)
    return rows


# --------------------------------------------------------------------------------------------
# Filter banks as depthwise conv2d weights (docs/algorithm.md §4.4-§4.5, §4.10-§4.11)
# --------------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=16)
def _weights(ppd, dtype, device):
    """(CSF radius, horizontal, vertical weights; feature radius, horizontal, vertical weights)."""
    c = oracle.csf_taps(ppd, dtype=dtype, device=device)
    f = oracle.feature_taps(ppd, dtype=dtype, device=device)
    csf = torch.stack((c["y"], c["cx"], c["cz1"], c["cz2"]))  # 4 x (2r+1), one row per plane
    # Feature planes (dx, dy, ddx, ddy): horizontal taps (dg, g, ddg, g), then vertical taps
    # (g, dg, g, ddg), on four copies of the y plane (a depthwise convolution and its backward
    # are several times faster than one that maps one plane to four).
    feat_h = torch.stack((f["dg"], f["g"], f["ddg"], f["g"]))
    feat_v = torch.stack((f["g"], f["dg"], f["g"], f["ddg"]))
    return (
        c["radius"],
        csf[:, None, None, :].contiguous(),
        csf[:, None, :, None].contiguous(),
        f["radius"],
        feat_h[:, None, None, :].contiguous(),
        feat_v[:, None, :, None].contiguous(),
    )


def _separable(planes, r, w_h, w_v):
    """A sequence of B x H x W planes -> the planes filtered by one bank (as many as w_v has rows).

    The planes are interleaved (channels-last), where oneDNN's depthwise convolutions are several
    times faster than on planar NCHW data (and so is their backward, whose gradient arrives in the
    same layout). Clamp-to-edge padding on both axes first: padding the rows before the horizontal
    pass equals padding its result, since clamping acts on each axis separately."""
    x = torch.stack(planes, dim=-1).permute(0, 3, 1, 2)
    x = F.pad(x, (r, r, r, r), mode="replicate")
    x = F.conv2d(x, w_h, groups=len(planes))
    x = F.conv2d(x, w_v, groups=len(planes))
    return x.permute(0, 2, 3, 1).unbind(-1)


# --------------------------------------------------------------------------------------------
# The map
# --------------------------------------------------------------------------------------------


def _norm(u, v):
    """sqrt(u^2 + v^2) with a zero gradient at u = v = 0: the clamp to the smallest normal number
    blocks the gradient there and changes no value above it (two ops fewer than a masked
    square root)."""
    return torch.sqrt(torch.clamp(torch.addcmul(u * u, v, v), min=torch.finfo(u.dtype).tiny))


def _srgb_decode(x):
    power = torch.pow((torch.clamp(x, min=oracle.SRGB_DECODE_T) + 0.055) / 1.055, 2.4)
    return torch.where(x <= oracle.SRGB_DECODE_T, x / 12.92, power)


def _lab_f(t):
    cube_root = torch.pow(torch.clamp(t, min=oracle.LAB_T), 1.0 / 3.0)
    return torch.where(t > oracle.LAB_T, cube_root, t / (3.0 * oracle.LAB_DELTA**2) + 4.0 / 29.0)


def _hunt_lab(rgb):
    """Linear RGB planes -> Hunt-adjusted Lab planes (L, a', b')."""
    fx, fy, fz = (_lab_f(t) for t in _mix(rgb, _RGB_TO_XYZN))
    L = 116.0 * fy - 16.0
    hunt = 0.01 * L
    return L, hunt * (500.0 * (fx - fy)), hunt * (200.0 * (fy - fz))


def _image_terms(x, ppd, input_space):
    """Per-image stages of one batch of images: the Hunt-Lab planes of the CSF-filtered colour and
    the edge and point magnitudes."""
    rc, csf_h, csf_v, rf, feat_h, feat_v = _weights(ppd, x.dtype, x.device)
    x = torch.clamp(x, 0.0, 1.0)
    if input_space == "srgb":
        x = _srgb_decode(x)
    planes = _mix(x.unbind(1), _RGB_TO_CSF_IN)  # y, x - y, y - z, y - z
    rgb = [torch.clamp(c, 0.0, 1.0) for c in _mix(_separable(planes, rc, csf_h, csf_v), _CSF_OUT)]
    dx, dy, ddx, ddy = _separable(planes[:1] * 4, rf, feat_h, feat_v)
    return _hunt_lab(rgb) + (_norm(dx, dy), _norm(ddx, ddy))


def ldr_flip(test, reference, pixels_per_degree=DEFAULT_PPD, eps=DEFAULT_EPS, input_space="srgb"):
    """LDR-FLIP map (N x 3 x H x W float32 or float64 -> N x 1 x H x W), differentiable in both
    inputs by autograd; ``input_space`` "srgb" or "linear" as in ``reference.ldr_flip`` (which
    also takes unbatched and other dtypes; this baseline does not). It keeps the oracle's gradient
    policy (zero sub-gradient of the Euclidean norms at zero, the chroma norm's rounding-noise
    floor, clamped arguments for the unused branches of the sRGB decode and the Lab cube root).

    Differences from ``flip_loss.oracle.ldr_flip``, all at rounding level or on measure-zero sets:

    * the filters are plain sums of taps (``conv2d``), not the pair- and centred-difference forms
      that are exactly zero on a constant neighbourhood; there the derivative responses keep a
      rounding residue (about 1e-8 in float32), which the feature difference's square root lifts
      above eps: in float32 a flat region's map differs from oracle.py's by up to about 2e-5
      (float64: 1e-14). The noisy test images of the benchmark have no such regions;
    * the linear maps are folded (e.g. the CSF filter runs on y = (Y + 16) / 116 and the offset
      and scale are applied after it), which changes the rounding only;
    * ties between the edge and point differences split the gradient (``torch.maximum``) instead
      of giving it to the edge term;
    * a Euclidean norm of (0, 0) is sqrt of the smallest normal number (about 1e-19 in float32)
      instead of 0.
    """
    ppd = float(pixels_per_degree)
    # Test and reference go through the per-image stages separately, so that autograd records
    # (and the backward computes) only the side that needs a gradient (stacking them into one
    # batch saves nothing measurable in the forward and makes the backward at 512x512 about 1.5x
    # slower).
    L_t, a_t, b_t, edge_t, point_t = _image_terms(test, ppd, input_space)
    L_r, a_r, b_r, edge_r, point_r = _image_terms(reference, ppd, input_space)

    # Colour: HyAB, compression.
    chroma = _norm(a_r - a_t, b_r - b_t)
    floor = 1e-12 if chroma.dtype == torch.float64 else 1e-3
    chroma = torch.where(chroma > floor, chroma, chroma.detach())
    e = torch.pow(torch.clamp((L_r - L_t).abs(), min=math.sqrt(eps)) + chroma, QC)
    c_max = oracle.cmax()
    knee = PC * c_max
    dec = torch.where(e < knee, e * (PT / knee), PT + (e - knee) * ((1.0 - PT) / (c_max - knee)))

    # Features: the larger of the edge and point differences, ^qf.
    m = torch.maximum((edge_r - edge_t).abs(), (point_r - point_t).abs())
    def_ = torch.pow(torch.clamp(m / math.sqrt(2.0), min=eps), QF)

    return torch.pow(dec, 1.0 - def_)[:, None]


# --------------------------------------------------------------------------------------------
# Agreement with oracle.py
# --------------------------------------------------------------------------------------------


def _test_pair(h, w, dtype, seed=0):
    """A smooth colour image with detail and its noisy copy, both in [0, 1] without flat clamped
    regions."""
    g = torch.Generator().manual_seed(seed)
    yy, xx = torch.meshgrid(
        torch.linspace(0, 1, h, dtype=torch.float64), torch.linspace(0, 1, w, dtype=torch.float64), indexing="ij"
    )
    base = torch.stack(
        (
            0.5 + 0.4 * torch.sin(9 * xx + 3 * yy),
            0.5 + 0.4 * torch.cos(7 * yy - 2 * xx),
            0.5 + 0.4 * torch.sin(13 * xx * yy),
        )
    )
    detail = 0.1 * torch.rand((3, h, w), generator=g, dtype=torch.float64)
    r = (base + detail - 0.05).clamp(0.02, 0.98)
    t = (r + 0.05 * torch.randn((3, h, w), generator=g, dtype=torch.float64)).clamp(0.0, 1.0)
    return t[None].to(dtype), r[None].to(dtype)


def check():
    """Prints the map agreement (float64, float32) and the gradient agreement (float64, 64x64) with
    ``flip_loss.oracle``; returns True when they are within the stated bounds."""
    ok = True
    t64, r64 = _test_pair(96, 128, torch.float64)
    want = oracle.ldr_flip(t64, r64)
    diff64 = (ldr_flip(t64, r64) - want).abs().max().item()
    t32, r32 = t64.float(), r64.float()
    diff32 = (ldr_flip(t32, r32).double() - want).abs().max().item()
    oracle32 = (oracle.ldr_flip(t32, r32).double() - want).abs().max().item()
    print(f"map, 96x128, float64: max |separable - oracle| = {diff64:.3g}")
    print(
        f"map, 96x128, float32: max |separable - oracle(float64)| = {diff32:.3g} (oracle.py in float32: {oracle32:.3g})"
    )
    ok &= diff64 <= 1e-10 and diff32 <= 1e-5

    tg, rg = _test_pair(64, 64, torch.float64, seed=1)
    weights = torch.rand((1, 1, 64, 64), generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    grads = []
    for fn in (ldr_flip, oracle.ldr_flip):
        t, r = tg.clone().requires_grad_(), rg.clone().requires_grad_()
        (fn(t, r) * weights).sum().backward()
        grads.append((t.grad, r.grad))
    for name, a, b in (("test", grads[0][0], grads[1][0]), ("reference", grads[0][1], grads[1][1])):
        d = (a - b).abs().max().item()
        scale = b.abs().max().item()
        print(
            f"gradient wrt {name}, 64x64, float64: max |separable - oracle| = {d:.3g} (largest component {scale:.3g})"
        )
        ok &= d <= 1e-10 * max(1.0, scale)
    print("agreement: " + ("OK" if ok else "OUT OF BOUNDS"))
    return ok


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--check", action="store_true", help="compare with flip_loss.oracle and exit")
    args = p.parse_args()
    if args.check:
        sys.exit(0 if check() else 1)
    p.print_help()
