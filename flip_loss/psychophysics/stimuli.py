"""Stimulus generators: geometry, spatial patterns, and the modulation of a background in DKL.

A stimulus is a pattern (H×W, float64) times a contrast times a DKL direction, added to a D65
background of luminance ``L_b``: ``DKL = DKL_bg + c · L_b · pattern · direction`` (protocol §1.2).
:func:`compose` returns absolute linear BT.709 RGB (cd/m²); :class:`colour.Display` turns it into
the display-encoded frame a metric sees. Pixel coordinates are in degrees,
``linspace(−W/ppd/2, W/ppd/2, W)`` (both endpoints), and the same for H; a :class:`Geometry` may
keep only a central crop of that frame (the coordinates stay those of the full frame).

Noise fields are drawn on the CPU from a fixed seed (``torch.Generator``), so the stimuli do not
depend on the device the metric runs on.
"""

import math
from dataclasses import dataclass
from typing import Optional, Sequence, Tuple

import torch

from . import colour

__all__ = [
    "Geometry",
    "gabor",
    "grating",
    "square_wave",
    "band_limited_noise",
    "lowpass_noise",
    "compose",
    "compose_via_dkl",
    "Component",
]

_F64 = torch.float64


@dataclass(frozen=True)
class Geometry:
    """A frame of ``width × height`` pixels at ``ppd`` pixels per degree, optionally reduced to
    its central ``crop = (w, h)`` pixels."""

    width: int
    height: int
    ppd: float
    crop: Optional[Tuple[int, int]] = None

    def __post_init__(self):
        if self.crop is not None:
            cw, ch = self.crop
            if cw > self.width or ch > self.height:
                # A crop larger than the frame keeps the frame.
                object.__setattr__(self, "crop", (min(cw, self.width), min(ch, self.height)))

    @property
    def shape(self) -> Tuple[int, int]:
        """(H, W) of the generated image (the crop when there is one)."""
        if self.crop is None:
            return self.height, self.width
        return self.crop[1], self.crop[0]

    @staticmethod
    def _axis(n: int, ppd: float, keep: Optional[int]) -> torch.Tensor:
        full = torch.linspace(-n / ppd / 2.0, n / ppd / 2.0, n, dtype=_F64)
        if keep is None or keep >= n:
            return full
        start = (n - keep) // 2
        return full[start : start + keep]

    @property
    def x(self) -> torch.Tensor:
        """Horizontal pixel coordinates in degrees (W,)."""
        return self._axis(self.width, self.ppd, None if self.crop is None else self.crop[0])

    @property
    def y(self) -> torch.Tensor:
        """Vertical pixel coordinates in degrees (H,)."""
        return self._axis(self.height, self.ppd, None if self.crop is None else self.crop[1])

    @property
    def pitch(self) -> Tuple[float, float]:
        """Pixel pitch in degrees (horizontal, vertical) of the full frame's coordinates."""
        return (self.width / self.ppd / (self.width - 1), self.height / self.ppd / (self.height - 1))


def gabor(
    geom: Geometry, frequency: float, sigma: float, phase: str = "sine", orientation: str = "vertical"
) -> torch.Tensor:
    """A Gabor patch centred in the frame: Gaussian envelope (σ in degrees) times a sine
    (``phase="sine"``) or cosine carrier of ``frequency`` cpd; vertical bars vary along x."""
    x, y = geom.x, geom.y
    envelope = torch.exp(-(y[:, None] ** 2 + x[None, :] ** 2) / (2.0 * sigma**2))
    return envelope * grating(geom, frequency, phase, orientation)


def grating(geom: Geometry, frequency: float, phase: str = "sine", orientation: str = "vertical") -> torch.Tensor:
    """A full-field sinusoidal grating with unit amplitude, phase 0 at the frame's centre."""
    if phase not in ("sine", "cosine"):
        raise ValueError(f"phase must be 'sine' or 'cosine', got {phase!r}")
    carrier = torch.sin if phase == "sine" else torch.cos
    h, w = geom.shape
    if orientation == "vertical":  # bars are vertical: luminance varies along x
        return carrier(2.0 * math.pi * frequency * geom.x)[None, :].expand(h, w).clone()
    if orientation == "horizontal":
        return carrier(2.0 * math.pi * frequency * geom.y)[:, None].expand(h, w).clone()
    raise ValueError(f"orientation must be 'vertical' or 'horizontal', got {orientation!r}")


def square_wave(geom: Geometry, frequency: float, orientation: str = "horizontal") -> torch.Tensor:
    """A full-field square wave of amplitude 1 (values ±1; 0 exactly on a zero crossing),
    ``sign(sin(2π f ·))``; horizontal bars vary along y."""
    return torch.sign(grating(geom, frequency, "sine", orientation))


def _radial_frequency(geom: Geometry) -> torch.Tensor:
    """|ρ| in cpd of the rfft2 bins of an image of ``geom.shape``."""
    h, w = geom.shape
    px, py = geom.pitch
    fy = torch.fft.fftfreq(h, d=py, dtype=_F64)
    fx = torch.fft.rfftfreq(w, d=px, dtype=_F64)
    return torch.sqrt(fy[:, None] ** 2 + fx[None, :] ** 2)


def _filtered_noise(geom: Geometry, passband, seed: int) -> torch.Tensor:
    h, w = geom.shape
    gen = torch.Generator(device="cpu").manual_seed(int(seed))
    white = torch.randn((h, w), generator=gen, dtype=_F64)
    rho = _radial_frequency(geom)
    mask = passband(rho) & (rho > 0)  # no DC: the pattern has zero mean
    spectrum = torch.fft.rfft2(white) * mask
    field = torch.fft.irfft2(spectrum, s=(h, w))
    rms = field.square().mean().sqrt()
    if not torch.isfinite(rms) or rms == 0:
        raise ValueError("the noise pass band holds no frequency of this frame; use a larger image")
    return field / rms


def band_limited_noise(geom: Geometry, frequency: float, seed: int = 0) -> torch.Tensor:
    """Gaussian white noise (fixed ``seed``) through an ideal FFT band-pass of one octave centred
    on ``frequency`` (``f·2^−0.5 ≤ |ρ| ≤ f·2^0.5`` cpd), normalised to unit RMS (= unit standard
    deviation: the mean is exactly 0)."""
    lo, hi = frequency * 2.0**-0.5, frequency * 2.0**0.5
    return _filtered_noise(geom, lambda rho: (rho >= lo) & (rho <= hi), seed)


def lowpass_noise(geom: Geometry, cutoff: float, seed: int = 0) -> torch.Tensor:
    """Gaussian white noise (fixed ``seed``) through an ideal FFT low-pass at ``cutoff`` cpd
    (DC removed), normalised to unit RMS."""
    return _filtered_noise(geom, lambda rho: rho <= cutoff, seed)


@dataclass(frozen=True)
class Component:
    """One modulation: ``contrast`` (a scalar or a length-N sequence, one per image) times the
    unit-amplitude ``pattern`` (H×W) along the DKL ``direction``."""

    contrast: object
    pattern: torch.Tensor
    direction: Sequence[float] = colour.DIRECTIONS["ach"]


def compose(
    l_b: float, components: Sequence[Component], n: Optional[int] = None, shape: Optional[Tuple[int, int]] = None
) -> torch.Tensor:
    """Absolute linear BT.709 RGB (cd/m², float64, N×3×H×W) of a D65 background of luminance
    ``l_b`` plus the ``components``, built in DKL and converted DKL → LMS → XYZ → RGB.

    ``n`` is the number of images (inferred from the contrasts when omitted); ``shape`` the image
    size when there is no component (a uniform field)."""
    if n is None:
        n = 1
        for comp in components:
            c = torch.as_tensor(comp.contrast, dtype=_F64)
            if c.dim() > 0:
                n = max(n, c.numel())
    if shape is None:
        if not components:
            raise ValueError("compose: give shape for a uniform field")
        shape = tuple(components[0].pattern.shape)
    h, w = shape
    # The pipeline DKL → LMS → XYZ → RGB is linear, so the image is the background's RGB plus, per
    # component, c · L_b · pattern times the RGB image of its DKL direction (exactly
    # colour.dkl_to_rgb of the DKL image, without materialising it).
    rgb = colour.background_rgb_from_dkl(l_b)[None, :, None, None].expand(n, 3, h, w)
    for comp in components:
        c = torch.as_tensor(comp.contrast, dtype=_F64).reshape(-1)
        if c.numel() == 1:
            c = c.expand(n)
        if c.numel() != n:
            raise ValueError(f"compose: {c.numel()} contrasts for {n} images")
        v = colour.dkl_to_rgb(torch.tensor(comp.direction, dtype=_F64))
        rgb = rgb + (float(l_b) * c)[:, None, None, None] * v[None, :, None, None] * comp.pattern[None, None]
    return rgb.contiguous()


def compose_via_dkl(l_b: float, components: Sequence[Component], n: int) -> torch.Tensor:
    """The same image as :func:`compose`, built literally: the N×3×H×W DKL image
    ``DKL_bg + Σ c · L_b · pattern · direction``, then :func:`colour.dkl_to_rgb` (slower; for tests)."""
    h, w = components[0].pattern.shape
    dkl = background_dkl_image(l_b, n, h, w)
    for comp in components:
        c = (
            torch.as_tensor(comp.contrast, dtype=_F64).reshape(-1).expand(n)
            if torch.as_tensor(comp.contrast).numel() == 1
            else torch.as_tensor(comp.contrast, dtype=_F64)
        )
        d = torch.tensor(comp.direction, dtype=_F64)
        dkl = dkl + (float(l_b) * c)[:, None, None, None] * d[None, :, None, None] * comp.pattern[None, None]
    return colour.dkl_to_rgb(dkl)


def background_dkl_image(l_b: float, n: int, h: int, w: int) -> torch.Tensor:
    """N×3×H×W DKL image of the uniform D65 background."""
    return colour.background_dkl(l_b)[None, :, None, None].expand(n, 3, h, w).clone()
