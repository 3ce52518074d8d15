"""Published FLIP constants (docs/algorithm.md §3, §5.3), the limits of the options and the names
of the pooled values. Plain Python (no numpy, no torch): the command line's parser reads it."""

import math
import os
import re
import struct
from typing import NamedTuple, Optional, Tuple


def display_ppd(distance_m: float, display_width_m: float, display_width_px: float) -> float:
    """The pixels per degree of a display (small-angle approximation), unchecked: the formula of
    ``flip_loss.pixels_per_degree`` (options.py, which checks its arguments first)."""
    return distance_m * (display_width_px / display_width_m) * (math.pi / 180.0)


# A 0.7 m wide 4K display seen from 0.7 m: 67.0206...
DEFAULT_PPD = display_ppd(0.7, 0.7, 3840.0)

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

# The largest image (width x height) the loaders accept: 2^27 = 134,217,728 pixels, e.g. 16384 x 8192,
# four times an 8K UHD frame. A header claiming more is refused before anything is decoded: such a
# file is far more likely damaged or a decompression bomb (a few kilobytes that expand to gigabytes)
# than a render, and FLIP on it would need tens of gigabytes. It stays below the size at which
# Pillow itself raises DecompressionBombError (twice Pillow's default MAX_IMAGE_PIXELS), so one
# limit and one message apply to every format (flip_loss.imageio).
MAX_IMAGE_PIXELS = 2**27

# What an image's alpha channel means and what it is composited over (flip_loss.alpha).
ALPHA_MODES = ("straight", "premultiplied")
BACKGROUNDS = ("black", "white", "checkerboard")

# The checkerboard an RGBA image may be composited over (flip_loss.alpha): square tiles of
# CHECKERBOARD_TILE pixels, the top-left one dark, in two greys given as sRGB-encoded values, 102
# and 153 of 255 (0.4 and 0.6), the mid-tone checks image editors show behind transparency. Mid
# greys keep the tiles' edges far from FLIP's clamps; the same pattern lies behind both images, so
# it only shows where their alpha (or colour) differs. Linear and HDR images get the same greys'
# linear values (the sRGB decode, docs/algorithm.md §4.2).
CHECKERBOARD_TILE = 8
CHECKERBOARD_SRGB = (0.4, 0.6)
CHECKERBOARD_LINEAR = tuple(((v + 0.055) / 1.055) ** 2.4 for v in CHECKERBOARD_SRGB)


def _f32(x: float) -> float:
    """``x`` rounded to float32. A product of two float32 values is exact in float64, so
    ``_f32(a * b)`` of float32 ``a`` and ``b`` is their float32 product."""
    return struct.unpack("f", struct.pack("f", x))[0]


# HDR-FLIP's tone mappers come from their registry, flip_loss/tone_mappers.inc, whose rows the C++
# kernels include: read here, so that an install without the compiled kernels has the same table
# (tests/tooling/test_one_source.py holds the two readings to each other, bit for bit).
TONE_MAPPER_REGISTRY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tone_mappers.inc")
_NUMBER = r"-?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"
_ROW = re.compile(
    r'FLIP_TONE_MAPPER\(\s*(k[A-Z]\w*)\s*,\s*"([a-z][a-z0-9_]*)"\s*,\s*"([^"\\]+)"\s*,'
    r"\s*\(([^()]*)\)\s*,\s*\(([^()]*)\)\s*\)"
)


def _coefficients(text: str, in_float: bool, where: str) -> Tuple[float, ...]:
    """A row's six coefficients, each a literal or a product of literals as C++ evaluates it: in
    float (``in_float``: every literal ends in ``f``, each product rounded to float32) or double."""
    suffix = "f" if in_float else ""
    values = []
    for entry in text.split(","):
        factors = [f.strip() for f in entry.split("*")]
        if not all(re.fullmatch(_NUMBER + suffix, f) for f in factors):
            kind = "float literals (1.0f)" if in_float else "double literals (1.0)"
            raise ValueError(f"{where}: {entry.strip()!r} is not {kind} or a product of them")
        value = None
        for factor in factors:
            x = float(factor[: len(factor) - len(suffix)])
            x = _f32(x) if in_float else x
            value = x if value is None else (_f32(value * x) if in_float else value * x)
        values.append(value)
    if len(values) != 6:
        raise ValueError(f"{where}: {len(values)} coefficients, not the 6 of k0..k5")
    return tuple(values)


def _read_tone_mappers(path: str):
    """The registry's rows, in order: (name, display name, kernels' float32 row, NVIDIA's double
    row) each. ValueError, naming the file, for a row that is not exactly of the documented form."""
    with open(path, encoding="utf-8") as f:
        text = re.sub(r"//[^\n]*", "", f.read())
    rows = []
    for match in _ROW.finditer(text):
        _id, name, display, kernel, exact = match.groups()
        where = f"flip_loss: {path}, tone mapper {name!r}"
        rows.append((name, display, _coefficients(kernel, True, where), _coefficients(exact, False, where)))
    if not rows or len(rows) != text.count("FLIP_TONE_MAPPER("):
        raise ValueError(
            f'flip_loss: {path}: every row must be FLIP_TONE_MAPPER(kId, "name", "Display", (k0f, ...), (k0, ...))'
        )
    names = [r[0] for r in rows]
    if len(set(names)) != len(names):
        raise ValueError(f"flip_loss: {path}: a tone mapper's name is given twice")
    return rows


_TONE_ROWS = _read_tone_mappers(TONE_MAPPER_REGISTRY)
# Their names, in alphabetical order (lower case; the options accept any case).
TONE_MAPPERS = tuple(sorted(r[0] for r in _TONE_ROWS))
# Each one's name as a run's settings print it (NVIDIA's flip tool's spelling for its three).
TONE_MAPPER_DISPLAY_NAMES = {r[0]: r[1] for r in _TONE_ROWS}
# Each one's (k0..k5) of T(x) = (k0 x^2 + k1 x + k2) / (k3 x^2 + k4 x + k5) in float32, as the kernels,
# the pure-PyTorch oracle and the exposure solve use them (docs/algorithm.md §5.3).
TONE_COEFFICIENTS = {r[0]: r[2] for r in _TONE_ROWS}
# The same curves in double, as NVIDIA's PyTorch loss computes them (flip_loss.nvidia).
NVIDIA_TONE_COEFFICIENTS = {r[0]: r[3] for r in _TONE_ROWS}


def tone_coefficients(tone_mapper: str) -> Tuple[float, ...]:
    """(k0..k5) of ``tone_mapper``'s curve (any case; ``TONE_COEFFICIENTS``); ValueError for a name
    that is not one of ``TONE_MAPPERS``, never another tone mapper's row."""
    if not isinstance(tone_mapper, str):
        raise TypeError(
            f"flip_loss: tone_mapper must be a string, one of {TONE_MAPPERS}, got {type(tone_mapper).__name__}"
        )
    row = TONE_COEFFICIENTS.get(tone_mapper.lower())
    if row is None:
        raise ValueError(f"flip_loss: tone_mapper must be one of {TONE_MAPPERS} (any case), got {tone_mapper!r}")
    return row


class Statistic(NamedTuple):
    """One pooled value of an error map, in every vocabulary that names it."""

    field: str  # the PooledValues field (Python)
    key: str  # the command line's name (--fail-above QUANTITY, the report's columns)
    label: str  # the heading: terminal lines, CSV columns, the report
    percentile: Optional[float]  # the weighted percentile p it is, or None (mean, min, max)
    gate: bool  # whether --fail-above takes it
    report_column: bool  # whether the report's pairs table shows it


# The one table of the pooled values, in their order everywhere (PooledValues, the terminal's lines,
# the CSV's columns, the report's): pool() and FLIPMetric compute the percentiles it lists, and the
# command line's gates, CSV, summary and report read their names here. A new percentile is one row.
STATISTICS = (
    Statistic("mean", "mean", "Mean", None, gate=True, report_column=True),
    Statistic("weighted_median", "weighted-median", "Weighted median", 0.5, gate=True, report_column=True),
    Statistic(
        "weighted_quartile_1", "weighted-quartile-1", "1st weighted quartile", 0.25, gate=False, report_column=True
    ),
    Statistic(
        "weighted_quartile_3", "weighted-quartile-3", "3rd weighted quartile", 0.75, gate=False, report_column=True
    ),
    Statistic("min", "min", "Min", None, gate=False, report_column=False),
    Statistic("max", "max", "Max", None, gate=True, report_column=True),
)
