"""Colour pipeline of the stimuli: XYZ, LMS (CIE 2006), DKL, linear BT.709, the display model.

Everything here follows §1 of the protocol (Hammou et al., arXiv:2503.16264): stimuli are built
in absolute units (cd/m²) in DKL around a D65 background, converted DKL → LMS → XYZ → linear
BT.709 RGB, divided by the display peak luminance, clipped to [0, 1] and encoded with the sRGB
OETF. All conversions work on tensors whose colour axis is ``dim=-3`` (``3×H×W`` or ``N×3×H×W``)
and are computed in the tensor's dtype (the suite uses float64 until the last step).
"""

from dataclasses import dataclass

import torch

__all__ = [
    "D65_XYZ",
    "LMS_GRAY",
    "DIRECTIONS",
    "SCALED_DIRECTIONS",
    "Display",
    "xyz_to_lms",
    "lms_to_xyz",
    "lms_to_dkl",
    "dkl_to_lms",
    "xyz_to_rgb",
    "rgb_to_xyz",
    "dkl_to_rgb",
    "rgb_to_dkl",
    "background_dkl",
    "background_rgb",
    "srgb_encode",
    "srgb_decode",
    "luminance",
]

#: CIE D65 white, Y = 1.
D65_XYZ = (0.95047, 1.0, 1.08883)

#: XYZ → LMS (CIE 2006 cone fundamentals), rows.
XYZ_TO_LMS2006 = (
    (0.187596268556126, 0.585168649077728, -0.026384263306304),
    (-0.133397430663221, 0.405505777260049, 0.034502127690364),
    (0.000244379021663, -0.000542995890619, 0.019406849066323),
)

#: LMS of the adapting grey that defines the DKL axes.
LMS_GRAY = (0.739876529525622, 0.320136241543338, 0.020793708751515)

#: XYZ → linear BT.709 (sRGB primaries, D65), rows.
XYZ_TO_BT709 = (
    (3.2406, -1.5372, -0.4986),
    (-0.9689, 1.8758, 0.0415),
    (0.0557, -0.2040, 1.0570),
)

#: Unit modulation directions in DKL for the detection tests.
DIRECTIONS = {"ach": (1.0, 0.0, 0.0), "rg": (0.0, 1.0, 0.0), "yv": (0.0, 0.0, 1.0)}
#: Scaled directions of the masking and colour-matching tests.
SCALED_DIRECTIONS = {"ach": (1.0, 0.0, 0.0), "rg": (0.0, 0.610649, 0.0), "yv": (0.0, 0.0, 4.203636)}


def _mat(rows) -> torch.Tensor:
    # On the CPU whatever the default device when the module loads (``_apply`` moves a copy).
    return torch.tensor(rows, dtype=torch.float64, device="cpu")


def _lms_to_dkl_rows():
    mc1 = LMS_GRAY[0] / LMS_GRAY[1]
    mc2 = (LMS_GRAY[0] + LMS_GRAY[1]) / LMS_GRAY[2]
    return ((1.0, 1.0, 0.0), (1.0, -mc1, 0.0), (-1.0, -1.0, mc2))


M_XYZ_LMS = _mat(XYZ_TO_LMS2006)
M_LMS_XYZ = torch.linalg.inv(M_XYZ_LMS)
M_LMS_DKL = _mat(_lms_to_dkl_rows())
M_DKL_LMS = torch.linalg.inv(M_LMS_DKL)
M_XYZ_RGB = _mat(XYZ_TO_BT709)
M_RGB_XYZ = torch.linalg.inv(M_XYZ_RGB)


def _apply(matrix: torch.Tensor, img: torch.Tensor) -> torch.Tensor:
    if img.dim() == 1 and img.shape[0] == 3:
        return matrix.to(img) @ img
    if img.dim() < 3 or img.shape[-3] != 3:
        raise ValueError(f"expected a colour axis of size 3 at dim -3, got shape {tuple(img.shape)}")
    return torch.einsum("ij,...jhw->...ihw", matrix.to(img), img)


def xyz_to_lms(xyz):
    return _apply(M_XYZ_LMS, xyz)


def lms_to_xyz(lms):
    return _apply(M_LMS_XYZ, lms)


def lms_to_dkl(lms):
    return _apply(M_LMS_DKL, lms)


def dkl_to_lms(dkl):
    return _apply(M_DKL_LMS, dkl)


def xyz_to_rgb(xyz):
    return _apply(M_XYZ_RGB, xyz)


def rgb_to_xyz(rgb):
    return _apply(M_RGB_XYZ, rgb)


def dkl_to_rgb(dkl: torch.Tensor) -> torch.Tensor:
    """DKL → LMS → XYZ → linear BT.709, in the units of the input (cd/m² for the stimuli)."""
    return xyz_to_rgb(lms_to_xyz(dkl_to_lms(dkl)))


def rgb_to_dkl(rgb: torch.Tensor) -> torch.Tensor:
    """Linear BT.709 → XYZ → LMS → DKL (the inverse of :func:`dkl_to_rgb`)."""
    return lms_to_dkl(xyz_to_lms(rgb_to_xyz(rgb)))


def luminance(rgb: torch.Tensor) -> torch.Tensor:
    """CIE Y of linear BT.709 RGB (the Y row of the inverse of ``XYZ_TO_BT709``), dim -3 removed."""
    w = M_RGB_XYZ[1].to(rgb)
    return torch.einsum("j,...jhw->...hw", w, rgb)


def background_dkl(l_b: float) -> torch.Tensor:
    """DKL coordinates (3,) of the D65 background of luminance ``l_b`` cd/m²."""
    xyz = torch.tensor(D65_XYZ, dtype=torch.float64) * float(l_b)
    return M_LMS_DKL @ (M_XYZ_LMS @ xyz)


def background_rgb(l_b: float) -> torch.Tensor:
    """Absolute linear BT.709 RGB (3,) of the D65 background of luminance ``l_b``."""
    return M_XYZ_RGB @ (torch.tensor(D65_XYZ, dtype=torch.float64) * float(l_b))


def background_rgb_from_dkl(l_b: float) -> torch.Tensor:
    """:func:`background_rgb` through the stimulus path (DKL of the background → RGB)."""
    return dkl_to_rgb(background_dkl(l_b))


def srgb_encode(linear: torch.Tensor) -> torch.Tensor:
    """The sRGB OETF (IEC 61966-2-1) of values in [0, 1]."""
    lin = linear.clamp(0.0, 1.0)
    return torch.where(lin <= 0.0031308, 12.92 * lin, 1.055 * lin.clamp_min(0.0031308) ** (1.0 / 2.4) - 0.055)


def srgb_decode(encoded: torch.Tensor) -> torch.Tensor:
    """The inverse of :func:`srgb_encode`."""
    v = encoded.clamp(0.0, 1.0)
    return torch.where(v <= 0.04045, v / 12.92, ((v.clamp_min(0.04045) + 0.055) / 1.055) ** 2.4)


@dataclass(frozen=True)
class Display:
    """The display of a test: peak luminance ``y_peak`` (cd/m²) and sRGB encoding."""

    y_peak: float

    def relative(self, rgb_abs: torch.Tensor) -> torch.Tensor:
        """Linear BT.709 relative to the peak, clipped to [0, 1] (what the panel emits / y_peak)."""
        return (rgb_abs / self.y_peak).clamp(0.0, 1.0)

    def encode(self, rgb_abs: torch.Tensor) -> torch.Tensor:
        """Absolute linear RGB (cd/m²) → display-encoded frame in [0, 1] (sRGB OETF)."""
        return srgb_encode(self.relative(rgb_abs))

    def decode(self, encoded: torch.Tensor) -> torch.Tensor:
        """Display-encoded frame → absolute linear RGB (cd/m²) that the display emits."""
        return srgb_decode(encoded) * self.y_peak
