"""Scores of the suite (protocol §3) and the contrast-matching root finder.

* :func:`alignment_score` — ``AS = −Spearman(k, D)`` pooled over all (x, k) cells, for the
  detection and masking tests (``c = c_T(x) / k``; a metric whose response depends on k alone
  scores 1).
* :func:`solve_matching_contrast` — for each target response, the contrast (root-found on
  ``log10 c`` in [−3, 0]) whose metric response equals it; no root → the bracket end, flagged.
* :func:`log_rmse` — ``sqrt(mean((log10 a − log10 b)²))``, the matching scores.
"""

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

__all__ = [
    "SENSITIVITY_MULTIPLIERS",
    "sensitivity_multipliers",
    "rankdata",
    "spearman",
    "alignment_score",
    "MatchResult",
    "solve_matching_contrast",
    "log_rmse",
]


def sensitivity_multipliers(n: int = 10) -> np.ndarray:
    """``k = logspace(log10 0.5, log10 2, n)``: stimuli are shown at ``c_T(x) / k``."""
    return np.logspace(np.log10(0.5), np.log10(2.0), n)


SENSITIVITY_MULTIPLIERS = sensitivity_multipliers(10)


def rankdata(a: np.ndarray) -> np.ndarray:
    """Ranks 1..n of a 1-D array, ties given their average rank (as ``scipy.stats.rankdata``)."""
    a = np.asarray(a, dtype=np.float64).ravel()
    order = np.argsort(a, kind="mergesort")
    sorted_a = a[order]
    ranks = np.empty(len(a), dtype=np.float64)
    i = 0
    while i < len(a):
        j = i
        while j + 1 < len(a) and sorted_a[j + 1] == sorted_a[i]:
            j += 1
        ranks[order[i : j + 1]] = 0.5 * (i + j) + 1.0
        i = j + 1
    return ranks


def spearman(a, b) -> float:
    """Spearman's rank correlation (Pearson correlation of the average ranks); NaN when either
    side is constant or holds a NaN."""
    a = np.asarray(a, dtype=np.float64).ravel()
    b = np.asarray(b, dtype=np.float64).ravel()
    if a.shape != b.shape:
        raise ValueError(f"spearman: shapes differ, {a.shape} vs {b.shape}")
    if len(a) < 2 or not (np.all(np.isfinite(a)) and np.all(~np.isnan(b))):
        return float("nan")
    ra, rb = rankdata(a), rankdata(b)
    ra -= ra.mean()
    rb -= rb.mean()
    den = np.sqrt((ra * ra).sum() * (rb * rb).sum())
    return float((ra * rb).sum() / den) if den > 0 else float("nan")


def alignment_score(k, d) -> float:
    """``AS = −Spearman(k, D)`` over all cells (any shapes, flattened alike). ``D`` is a
    difference (larger = more visible); stimuli at larger ``k`` have lower contrast."""
    return -spearman(np.asarray(k, dtype=np.float64).ravel(), np.asarray(d, dtype=np.float64).ravel())


@dataclass
class MatchResult:
    """Matched contrasts (``contrast``, one per target) and ``no_root`` flags (True where the
    response never reached the target in the bracket and the bracket end was recorded)."""

    contrast: np.ndarray
    no_root: np.ndarray
    evaluations: int


def solve_matching_contrast(
    response: Callable[[np.ndarray], np.ndarray],
    targets: Sequence[float],
    lo: float = -3.0,
    hi: float = 0.0,
    grid: int = 16,
    iterations: int = 10,
) -> MatchResult:
    """Find, for each target response ``t``, the contrast ``c`` with ``response(c) = t``,
    searching ``log10 c`` in ``[lo, hi]``.

    ``response`` maps an array of contrasts to the metric's responses (it is called in batches:
    first on a ``grid`` of log-spaced contrasts, then once per refinement step with one contrast
    per target still being refined). The first bracket (lowest contrast) where ``response − t``
    changes sign is refined by ``iterations`` Illinois (modified regula falsi) steps in
    ``log10 c``, and the root is that of the secant through the final bracket. Where ``response − t`` never changes sign the
    result is the bracket end the response points to (``hi`` if the response stays below the
    target, ``lo`` if it stays above) and ``no_root`` is set.
    """
    targets = np.asarray(targets, dtype=np.float64).ravel()
    if grid < 2:
        raise ValueError("grid must be >= 2")
    lg = np.linspace(lo, hi, grid)
    d = np.asarray(response(10.0**lg), dtype=np.float64).ravel()
    evals = grid
    n = len(targets)
    a = np.full(n, np.nan)
    b = np.full(n, np.nan)
    da = np.full(n, np.nan)
    db = np.full(n, np.nan)
    result = np.full(n, np.nan)
    no_root = np.zeros(n, dtype=bool)
    for i, t in enumerate(targets):
        s = d - t
        exact = np.nonzero(s == 0)[0]
        cross = np.nonzero(np.sign(s[:-1]) * np.sign(s[1:]) < 0)[0]
        first = min([*exact[:1], *cross[:1]], default=None)
        if first is None:
            no_root[i] = True
            if np.all(np.isnan(s)):
                result[i] = np.nan
            else:
                # The response never reaches the target: the end it approaches (if the metric
                # is increasing: hi when always below, lo when always above).
                result[i] = hi if abs(s[-1]) <= abs(s[0]) else lo
            continue
        if len(exact) and exact[0] == first:
            result[i] = lg[first]
            continue
        a[i], b[i], da[i], db[i] = lg[first], lg[first + 1], s[first], s[first + 1]
    todo = np.nonzero(~np.isnan(a))[0]
    last = np.zeros(n, dtype=np.int64)  # which end moved last: 1 = a, 2 = b
    for _ in range(iterations):
        if len(todo) == 0:
            break
        # Illinois (modified regula falsi) step inside each bracket: superlinear on smooth
        # responses, never leaves the bracket (falls back to the midpoint on a degenerate one).
        den = da[todo] - db[todo]
        w = np.where(den != 0, da[todo] / np.where(den != 0, den, 1.0), 0.5)
        w = np.clip(w, 0.02, 0.98)
        x = a[todo] + w * (b[todo] - a[todo])
        dx = np.asarray(response(10.0**x), dtype=np.float64).ravel() - targets[todo]
        evals += len(todo)
        same_as_a = np.sign(dx) == np.sign(da[todo])  # the root is in [x, b]
        # Illinois: when the same end moves twice in a row, halve the other (stale) end's value.
        moved = np.where(same_as_a, 1, 2)
        stale = moved == last[todo]
        a_new = np.where(same_as_a, x, a[todo])
        b_new = np.where(same_as_a, b[todo], x)
        da_new = np.where(same_as_a, dx, np.where(stale, 0.5 * da[todo], da[todo]))
        db_new = np.where(same_as_a, np.where(stale, 0.5 * db[todo], db[todo]), dx)
        a[todo], b[todo], da[todo], db[todo] = a_new, b_new, da_new, db_new
        last[todo] = moved
        done = dx == 0
        result[todo[done]] = x[done]
        todo = todo[~done]
    for i in todo:
        # The root of the secant through the final bracket.
        den = da[i] - db[i]
        w = da[i] / den if den != 0 else 0.5
        result[i] = a[i] + min(max(w, 0.0), 1.0) * (b[i] - a[i])
    return MatchResult(10.0**result, no_root, evals)


def log_rmse(a, b) -> float:
    """``sqrt(mean((log10 a − log10 b)²))`` over all finite cells."""
    la = np.log10(np.asarray(a, dtype=np.float64).ravel())
    lb = np.log10(np.asarray(b, dtype=np.float64).ravel())
    ok = np.isfinite(la) & np.isfinite(lb)
    if not np.any(ok):
        return float("nan")
    return float(np.sqrt(np.mean((la[ok] - lb[ok]) ** 2)))
