"""Pooled statistics and the weighted histogram of a FLIP error map, as NVIDIA's evaluator reports
them (see docs/cli.md, "Pooling").

``pool`` returns the six values the ``flip`` tool prints: the mean, the weighted median, the 1st and
3rd weighted quartiles, the minimum and the maximum. ``weighted_histogram`` returns the per-bucket
weighted sums the tool's ``--histogram`` option plots. Both follow the tool's own definitions and
arithmetic (``weighted_percentile``), so that the printed 6-decimal values agree with it, but for
two deliberate deviations (``pool``).
"""

import math
from typing import NamedTuple, Optional, Sequence, Tuple

import numpy as np

from .constants import STATISTICS, Statistic

__all__ = ["PooledValues", "STATISTICS", "Statistic", "pool", "weighted_percentile", "weighted_histogram"]


PERCENTILES = tuple(s.percentile for s in STATISTICS if s.percentile is not None)

# The pooled values of an error map, as Python floats: one field per row of STATISTICS.
PooledValues = NamedTuple("PooledValues", [(s.field, float) for s in STATISTICS])


def pooled_values(mean: float, percentiles: Sequence[float], low: float, high: float) -> PooledValues:
    """PooledValues from the mean, the values of PERCENTILES (in that order), the min and the max."""
    found = dict(zip(PERCENTILES, percentiles))
    extremes = {"mean": mean, "min": low, "max": high}
    return PooledValues(*(found[s.percentile] if s.percentile is not None else extremes[s.field] for s in STATISTICS))


def _as_flat_array(error_map) -> np.ndarray:
    """Flattens a torch tensor or array-like into a 1-D float32/float64 numpy array (row-major)."""
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a runtime dependency
        torch = None
    if torch is not None and isinstance(error_map, torch.Tensor):
        t = error_map.detach()
        if t.is_complex():
            raise TypeError("flip_loss.pooling: complex error maps are not supported")
        t = t.to("cpu")
        t = t.double() if t.dtype == torch.float64 else t.float()
        a = t.contiguous().numpy()
    else:
        a = np.asarray(error_map)
        if a.dtype.kind == "c":
            raise TypeError("flip_loss.pooling: complex error maps are not supported")
        if a.dtype.kind not in "fiub":
            raise TypeError(f"flip_loss.pooling: expected a numeric array, got dtype {a.dtype}")
        wide = a.dtype.kind == "f" and a.dtype.itemsize >= 8  # float64 of either byte order, or wider
        a = a.astype(np.float64 if wide else np.float32, copy=False)
    a = a.reshape(-1)
    if a.size == 0:
        raise ValueError("flip_loss.pooling: the error map is empty")
    if not np.isfinite(a).all():
        raise ValueError("flip_loss.pooling: the error map contains NaN or infinite values")
    return a


def _at_most(value: float, dtype: np.dtype):
    """The largest number of ``dtype`` not above ``value``: for numbers ``x`` of that dtype,
    ``x > value`` exactly when ``x`` is above it."""
    v = dtype.type(value)
    if float(v) > value:
        v = np.nextafter(v, dtype.type(-np.inf))
    return v


class _Order(NamedTuple):
    """What the weighted percentiles walk: the map's values sorted, their running sums in that
    order, and the map's total. Both sums are accumulated one value after another in the map's
    dtype, the total in row-major order, as the evaluator does (np.sum's pairwise summation would
    not reproduce its float32 total)."""

    ordered: np.ndarray
    running: np.ndarray
    total: float


def _order(flat: np.ndarray) -> _Order:
    """The walk of a finite float32 or float64 array: by the compiled extension's radix sort and
    sums where it is loaded (a quarter of NumPy's time on a 1080p map), else by NumPy."""
    from ._ops import extension_function

    source = np.require(flat, flat.dtype, ["C_CONTIGUOUS", "ALIGNED"])
    running = np.empty_like(source)
    walk = extension_function("pooling_order")
    if walk is not None:
        ordered = np.empty_like(source)
        total = walk(source.ctypes.data, ordered.ctypes.data, running.ctypes.data, source.size, source.itemsize)
    else:
        total = float(np.add.accumulate(source, dtype=source.dtype, out=running)[-1])
        ordered = np.sort(source)
        np.add.accumulate(ordered, dtype=source.dtype, out=running)
    return _Order(ordered, running, total)


def _weighted_percentiles(order: _Order, ps) -> Tuple[float, ...]:
    """The weighted percentiles ``ps`` of a map walked in ``order``."""
    ordered, running, total = order
    if total == 0:
        return tuple(0.0 for _ in ps)
    # A running sum of values >= 0 (every FLIP map) never decreases, so the first one above a
    # threshold is found by bisection; the threshold is compared in float64, as exactly as the
    # float32 running sums converted would be.
    growing = ordered[0] >= 0
    out = []
    for p in ps:
        # p * total is exact in float64 for a float32 total and p in {0.25, 0.5, 0.75}.
        threshold = float(p) * total
        if growing:
            i = int(np.searchsorted(running, _at_most(threshold, running.dtype), side="right"))
        else:
            above = np.flatnonzero(running.astype(np.float64) > threshold)
            i = int(above[0]) if above.size else ordered.size
        # With p close to 1 rounding can leave no running sum above the threshold: take the top.
        out.append(float(ordered[min(i, ordered.size - 1)]))
    return tuple(out)


def _check_p(p) -> float:
    """``p`` as a float: a Python or NumPy number or a 0-dim real tensor (TypeError for anything
    else, a bool included), in [0, 1] (ValueError)."""
    from . import options

    try:
        v = options.real_number("p", p)
    except TypeError as exc:
        raise TypeError(str(exc).replace("flip_loss:", "flip_loss.pooling:", 1)) from None
    if not 0.0 <= v <= 1.0:
        raise ValueError(f"flip_loss.pooling: p must be a number in [0, 1], got {p!r}")
    return v


def weighted_percentile(error_map, p: float) -> float:
    """The evaluator's weighted percentile ``p`` (in [0, 1]) of all elements of ``error_map``
    (a torch tensor or numpy array of any shape), with no interpolation: sort the values ascending,
    walk them with a running sum of the values themselves, and return the first value at which the
    running sum exceeds ``p * sum(values)``; 0 when the sum is 0. Each pixel is thereby weighted by
    its own error. For float32 (and lower-precision) maps the running sum and the total are
    accumulated sequentially in float32, the total in row-major order, exactly as the evaluator
    does: for a 1080p map the float32 rounding moves the reported percentiles by about 2e-5 relative
    to an exact sum, and reproducing it is what makes the printed 6-decimal values agree with the
    tool. float64 maps are accumulated in float64."""
    p = _check_p(p)
    return _weighted_percentiles(_order(_as_flat_array(error_map)), (p,))[0]


def pool(error_map) -> PooledValues:
    """Pooled values of all elements of ``error_map`` (a torch tensor of any shape, on any device,
    or a numpy array): mean, weighted median, 1st and 3rd weighted quartiles, min and max.

    Computed as NVIDIA's evaluator computes them (``weighted_percentile``), with two deliberate
    deviations: the mean is accumulated in float64 (the evaluator divides a float32 running sum by
    the pixel count; on large maps that differs from the exact mean in about the 6th decimal), and
    the max of a map with no positive value is its true maximum, 0 for an all-zero map (the
    evaluator starts its running maximum at FLT_MIN and so reports 1.2e-38 there). Raises
    ``ValueError`` for an empty map or one with NaN/inf values.
    """
    return pool_with_histogram(error_map)[0]


def _pooled(flat: np.ndarray, order: _Order) -> PooledValues:
    mean = float(np.sum(flat, dtype=np.float64) / flat.size)
    # + 0.0 turns -0 into 0 (the sort puts -0 first among the zeros), any other value unchanged.
    low, high = float(order.ordered[0]) + 0.0, float(order.ordered[-1]) + 0.0
    return pooled_values(mean, _weighted_percentiles(order, PERCENTILES), low, high)


def _checked_bins(bins) -> int:
    from . import options

    # A whole number of any kind (3.0 and a 0-dim tensor too), as every count of the API.
    return options.whole_number("bins", bins, 1, math.inf, "flip_loss.pooling")


def pool_with_histogram(error_map, bins: Optional[int] = None):
    """``(pool(error_map), weighted_histogram(error_map, bins))`` from one sort of the map, the
    histogram None without ``bins``: what a report of a map needs, each value as the two
    functions give it."""
    flat = _as_flat_array(error_map)
    bins = None if bins is None else _checked_bins(bins)
    order = _order(flat)
    return _pooled(flat, order), None if bins is None else _histogram_of_sorted(order.ordered, bins)


def weighted_histogram(error_map, bins: int = 100):
    """The evaluator's weighted error histogram of all elements of ``error_map``.

    ``bins`` equal buckets on [0, 1]; a value ``v`` goes into bucket ``floor(v / bucket_size)``
    (``bucket_size`` = ``1 / bins`` rounded to float32, the division done in float64, as the tool
    does), ``v = 1`` into the last bucket; values outside [0, 1] are left out. Each bucket's count
    is multiplied by the bucket centre ``(i + 0.5) / bins`` and divided by the number of megapixels,
    ``numel / 1024**2`` (all elements, including the ones left out).

    Returns ``(bin_edges, weighted_counts)``: float64 arrays of ``bins + 1`` and ``bins`` entries.
    """
    bins = _checked_bins(bins)
    flat = _as_flat_array(error_map)
    inside = flat[(flat >= 0) & (flat <= 1)].astype(np.float64)
    bucket_size = float(np.float32(1.0 / bins))
    index = np.floor(inside / bucket_size).astype(np.int64)
    index = np.minimum(index, bins - 1)
    counts = np.bincount(index, minlength=bins)[:bins].astype(np.float64)
    return _weighted_counts(counts, flat.size, bins)


def _weighted_counts(counts: np.ndarray, size: int, bins: int):
    centres = (np.arange(bins, dtype=np.float64) + 0.5) * (1.0 / bins)
    megapixels = size / (1024.0 * 1024.0)
    edges = np.linspace(0.0, 1.0, bins + 1)
    return edges, counts * centres / megapixels


def _histogram_of_sorted(ordered: np.ndarray, bins: int):
    """weighted_histogram of a sorted map: each bucket's first value found by bisection. The
    bucket of ``v``, floor(v / bucket_size) in float64, grows with ``v``, so the bucket's first
    value of the map's dtype is found from the float32 nearest its edge, a step or two away."""
    dtype = ordered.dtype
    bucket_size = float(np.float32(1.0 / bins))

    def bucket(v) -> float:
        return math.floor(float(v) / bucket_size)

    starts = [np.searchsorted(ordered, dtype.type(0.0), side="left")]  # values below 0 are left out
    for i in range(1, bins):
        first = dtype.type(i * bucket_size)
        while bucket(first) < i:
            first = np.nextafter(first, dtype.type(np.inf))
        while bucket(np.nextafter(first, dtype.type(-np.inf))) >= i:
            first = np.nextafter(first, dtype.type(-np.inf))
        starts.append(max(starts[0], np.searchsorted(ordered, first, side="left")))
    end = np.searchsorted(ordered, dtype.type(1.0), side="right")  # and values above 1
    starts = np.minimum(np.array(starts + [end], dtype=np.int64), end)
    return _weighted_counts(np.diff(starts).astype(np.float64), ordered.size, bins)
