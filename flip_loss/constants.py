"""Published FLIP constants (docs/algorithm.md §3, §5.3) and the limits of the options."""
import math
from typing import Tuple

import numpy as np


def pixels_per_degree(distance_m: float, display_width_m: float, display_width_px: float) -> float:
    """Pixels per degree of visual angle for a display of ``display_width_px`` pixels spanning
    ``display_width_m`` metres, seen from ``distance_m`` metres (small-angle approximation)."""
    for name, v in (("distance_m", distance_m), ("display_width_m", display_width_m),
                    ("display_width_px", display_width_px)):
        if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
            raise ValueError(f"{name} must be a positive finite number, got {v!r}")
    return distance_m * (display_width_px / display_width_m) * (math.pi / 180.0)


# A 0.7 m wide 4K display seen from 0.7 m: 67.0206...
DEFAULT_PPD = pixels_per_degree(0.7, 0.7, 3840)

QC = 0.7
PC = 0.4
PT = 0.95
GW = 0.082
QF = 0.5
DEFAULT_EPS = 1e-15

# Limits of the options, the same in the Python API, the command line and the C++ ops (README,
# "Limits of the options").
# A filter radius of thousands of pixels means the value passed is not a pixels-per-degree.
MAX_PPD = 10000.0
# eps only regularises the gradients of two square roots: up to 1e-6 the map stays in [0, 1] and
# identical images give at most ~4.6e-4; larger values change the metric itself.
MAX_EPS = 1e-6
# The automatic exposure range of any float32 reference needs at most ~152 exposures; a larger
# count is a mistake that would only take a long time and a lot of memory.
MAX_EXPOSURES = 256

# HDR-FLIP's tone mappers (lower case; the options accept any case).
TONE_MAPPERS = ("aces", "hable", "reinhard")


def tone_coefficients(tone_mapper: str) -> Tuple[float, ...]:
    """NVIDIA's evaluator's (k0..k5) of T(x) = (k0 x^2 + k1 x + k2) / (k3 x^2 + k4 x + k5), rounded to
    float32 as it computes them (docs/algorithm.md §5.3); Reinhard's row (x / (1 + x)) is used only
    by the exposure solve."""
    f = np.float32
    table = {
        "reinhard": (0.0, 1.0, 0.0, 0.0, 1.0, 1.0),
        "aces": (f(0.6) * f(0.6) * f(2.51), f(0.6) * f(0.03), 0.0, f(0.6) * f(0.6) * f(2.43), f(0.6) * f(0.59),
                 f(0.14)),
        "hable": (f(0.231683), f(0.013791), 0.0, f(0.18), f(0.3), f(0.018)),
    }
    return tuple(float(v) for v in table[tone_mapper.lower()])
