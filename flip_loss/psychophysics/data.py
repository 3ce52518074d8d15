"""Reference tables of the suite, read from the files in ``flip_loss/psychophysics/data/``.

Each detection or masking table is a :class:`ThresholdTable` (x values and threshold contrasts);
:meth:`ThresholdTable.threshold` interpolates it linearly in log–log coordinates (for the Foley
data, whose values are in dB, this is linear interpolation of the table as stored; for the dense
castleCSF tables, 100 points per curve, it differs from linear-in-value interpolation by < 0.1 %).
"""

import csv
import json
import os
from dataclasses import dataclass
from typing import Dict, List

import numpy as np

__all__ = [
    "DATA_DIR",
    "ThresholdTable",
    "castle_table",
    "foley_table",
    "noise_masking_table",
    "MatchingTable",
    "contrast_matching_table",
]

DATA_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")


@dataclass(frozen=True)
class ThresholdTable:
    """A threshold curve: contrast threshold ``c`` (at detection) for each ``x``."""

    x: np.ndarray
    c: np.ndarray
    source: str
    label: str  # "castleCSF" or the human data set

    def threshold(self, x) -> np.ndarray:
        """Threshold contrast at ``x`` (clamped to the table's range), log–log interpolation."""
        lx = np.log10(np.asarray(x, dtype=np.float64))
        return 10.0 ** np.interp(lx, np.log10(self.x), np.log10(self.c))


def _path(name: str) -> str:
    return os.path.join(DATA_DIR, name)


def _read_column(name: str) -> np.ndarray:
    with open(_path(name)) as f:
        return np.array([float(line) for line in f if line.strip()], dtype=np.float64)


# x axes of the castleCSF tables (see data/README.md).
_CASTLE_AXES = {
    "spatial_freq": lambda n: 2.0 ** np.linspace(-1.0, 5.0, n),
    "luminance": lambda n: np.logspace(np.log10(0.1), np.log10(90.0), n),
    "size": lambda n: 2.0 ** np.linspace(-2.0, 3.0, n),
}


def castle_table(name: str) -> ThresholdTable:
    """A castleCSF table, e.g. ``spatial_freq_rg`` or ``spatial_freq_ach_band_limited_noise``."""
    c = _read_column(name + ".txt")
    axis = next(k for k in _CASTLE_AXES if name.startswith(k))
    return ThresholdTable(_CASTLE_AXES[axis](len(c)), c, name + ".txt", "castleCSF")


def _db_to_contrast(db: float) -> float:
    return 10.0 ** (db / 20.0)


def foley_table(orientation: int = 0) -> ThresholdTable:
    """Foley (1994) masking thresholds for one masker orientation, the masker-0 row left out
    (see :func:`foley_unmasked`)."""
    xs, cs = [], []
    with open(_path("foley_data.csv")) as f:
        for row in csv.DictReader(f):
            if int(float(row["orientation"])) != orientation or float(row["c_mask"]) == 0.0:
                continue
            xs.append(_db_to_contrast(float(row["c_mask"])))
            cs.append(_db_to_contrast(float(row["c_target"])))
    order = np.argsort(xs)
    return ThresholdTable(np.array(xs)[order], np.array(cs)[order], "foley_data.csv", "human (Foley 1994, KMF)")


def foley_unmasked(orientation: int = 0) -> float:
    """The unmasked target threshold of the Foley data (the row with masker contrast 0)."""
    with open(_path("foley_data.csv")) as f:
        for row in csv.DictReader(f):
            if int(float(row["orientation"])) == orientation and float(row["c_mask"]) == 0.0:
                return _db_to_contrast(float(row["c_target"]))
    raise KeyError(f"no unmasked row for orientation {orientation}")


def noise_masking_table() -> ThresholdTable:
    """Thresholds of a Gabor on low-pass noise vs the noise's RMS contrast."""
    with open(_path("contrast_masking_data_gabor_on_noise.json")) as f:
        d = json.load(f)
    return ThresholdTable(
        np.array(d["mask_contrast_list"], dtype=np.float64),
        np.array(d["test_contrast_list"], dtype=np.float64),
        "contrast_masking_data_gabor_on_noise.json",
        "human (Gabor on noise)",
    )


@dataclass(frozen=True)
class MatchingTable:
    """Human contrast matches to a 5 cpd standard: ``matches[i, j]`` is the contrast at test
    frequency ``frequencies[j]`` that looked equal to ``reference_contrasts[i]`` at 5 cpd."""

    reference_contrasts: np.ndarray
    frequencies: np.ndarray
    matches: np.ndarray
    source: str = "contrast_constancy_sin_5_cpd.json"


def contrast_matching_table() -> MatchingTable:
    with open(_path("contrast_constancy_sin_5_cpd.json")) as f:
        d = json.load(f)
    refs = np.array(d["average_reference_contrast"], dtype=np.float64)
    rows: List[np.ndarray] = []
    freqs = None
    for i in range(len(refs)):
        entry: Dict = d[f"ref_contrast_index_{i}"]
        f_i = np.array(entry["x_test_frequency"], dtype=np.float64)
        if freqs is None:
            freqs = f_i
        elif not np.array_equal(freqs, f_i):
            raise ValueError("contrast matching data: test frequencies differ between rows")
        rows.append(np.array(entry["y_test_contrast_average"], dtype=np.float64))
    return MatchingTable(refs, freqs, np.stack(rows))
