"""Published FLIP constants (docs/algorithm.md §3, §5.3) and the limits of the options."""

import math
from typing import Tuple

import numpy as np


def pixels_per_degree(distance_m: float, display_width_m: float, display_width_px: float) -> float:
    """Pixels per degree of visual angle for a display of ``display_width_px`` pixels spanning
    ``display_width_m`` metres, seen from ``distance_m`` metres (small-angle approximation)."""
    from .options import real_number  # options imports this module

    values = []
    for name, v in (
        ("distance_m", distance_m),
        ("display_width_m", display_width_m),
        ("display_width_px", display_width_px),
    ):
        x = real_number(name, v)  # Python, NumPy and 0-dim tensor numbers alike; TypeError otherwise
        if not (math.isfinite(x) and x > 0):
            raise ValueError(f"flip_loss: {name} must be a positive finite number, got {v!r}")
        values.append(x)
    return _ppd(*values)


def _ppd(distance_m: float, display_width_m: float, display_width_px: float) -> float:
    return distance_m * (display_width_px / display_width_m) * (math.pi / 180.0)


# A 0.7 m wide 4K display seen from 0.7 m: 67.0206...
DEFAULT_PPD = _ppd(0.7, 0.7, 3840.0)

QC = 0.7
PC = 0.4
PT = 0.95
GW = 0.082
QF = 0.5
DEFAULT_EPS = 1e-15

# Limits of the options, the same in the Python API, the command line and the C++ ops (docs/api.md,
# "Limits of the options and errors").
# A filter radius of thousands of pixels means the value passed is not a pixels-per-degree.
MAX_PPD = 10000.0
# Nor is a value that makes one pixel span more than 1000 degrees of visual angle. Every ppd below
# about 0.5 gives the same map (all filters are 3 taps wide with negligible side taps), and below
# about 1e-160 the feature filters' Gaussians underflow to 0/0 and the gradients are NaN.
MIN_PPD = 1e-3
# eps only regularises the gradients of two square roots; csrc/include/flip_loss/limits.h says what
# it does to the map up to this bound and beyond.
MAX_EPS = 1e-6
# The automatic exposure range of any float32 reference needs at most ~152 exposures; a larger
# count is a mistake that would only take a long time and a lot of memory.
MAX_EXPOSURES = 256
# HDR-FLIP compares at least two exposures (a maximum over one is LDR-FLIP of one exposure).
MIN_EXPOSURES = 2
# A given start or stop exposure c (stops) lies in [MIN_EXPOSURE_STOPS, MAX_EXPOSURE_STOPS]: the
# exponents for which 2^c is a nonzero, finite float32, the precision in which the exposures are
# computed (as the evaluator does). Beyond 127 a float32 image's scale 2^c is infinite and black
# pixels come out white; no float32 reference's automatic range leaves [-129, 23].
MIN_EXPOSURE_STOPS = -149.0
MAX_EXPOSURE_STOPS = 127.0

# HDR-FLIP's tone mappers (lower case; the options accept any case).
TONE_MAPPERS = ("aces", "hable", "reinhard")
# Each tone mapper's name as NVIDIA's flip tool prints it in a run's settings (the command line's
# header is that tool's); no rule turns the registry's names into these spellings.
TONE_MAPPER_DISPLAY_NAMES = {"aces": "ACES", "hable": "Hable", "reinhard": "Reinhard"}

# The checkerboard an RGBA image may be composited over (flip_loss.alpha): square tiles of
# CHECKERBOARD_TILE pixels, the top-left one dark, in two greys given as sRGB-encoded values, 102
# and 153 of 255 (0.4 and 0.6), the mid-tone checks image editors show behind transparency. Mid
# greys keep the tiles' edges far from FLIP's clamps; the same pattern lies behind both images, so
# it only shows where their alpha (or colour) differs. Linear and HDR images get the same greys'
# linear values (the sRGB decode, docs/algorithm.md §4.2).
CHECKERBOARD_TILE = 8
CHECKERBOARD_SRGB = (0.4, 0.6)
CHECKERBOARD_LINEAR = tuple(((v + 0.055) / 1.055) ** 2.4 for v in CHECKERBOARD_SRGB)


def tone_coefficients(tone_mapper: str) -> Tuple[float, ...]:
    """NVIDIA's evaluator's (k0..k5) of T(x) = (k0 x^2 + k1 x + k2) / (k3 x^2 + k4 x + k5), rounded to
    float32 as it computes them (docs/algorithm.md §5.3); Reinhard's row (x / (1 + x)) is used only
    by the exposure solve."""
    f = np.float32
    table = {
        "reinhard": (0.0, 1.0, 0.0, 0.0, 1.0, 1.0),
        "aces": (
            f(0.6) * f(0.6) * f(2.51),
            f(0.6) * f(0.03),
            0.0,
            f(0.6) * f(0.6) * f(2.43),
            f(0.6) * f(0.59),
            f(0.14),
        ),
        "hable": (f(0.231683), f(0.013791), 0.0, f(0.18), f(0.3), f(0.018)),
    }
    return tuple(float(v) for v in table[tone_mapper.lower()])
