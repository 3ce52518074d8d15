"""``FLIPMetric``: FLIP accumulated over an evaluation loop, in bounded memory.

``update(test, reference)`` evaluates LDR-FLIP on a batch (no gradient, ``eps=0``: the published
metric) and folds the error maps into running statistics; ``compute()`` returns the pooled values
over **all pixels seen** (the six values of :func:`flip_loss.pool`, as if every map had been
concatenated) and the mean of every image; ``reset()`` starts afresh.

Memory does not grow with the number of pixels: the mean, min and max are exact (the sum is kept in
float64), and the weighted median and quartiles come from a fine histogram of ``bins`` equal buckets
on [0, 1] (default 2**16) that keeps, per bucket, the pixel count, the sum of the values and their
min and max. A weighted percentile is found as the evaluator defines it (the first value at which
the running sum of the sorted values exceeds ``p`` times the total), bucket by bucket with exact
float64 bucket sums, and then placed inside its bucket by linear interpolation between the bucket's
smallest and largest value. The result therefore lies within the bucket's value range: it differs
from the exact :func:`flip_loss.pool` value by **at most one bucket width** (1/65536 = 1.5e-5 with
the defaults), and by nothing when the bucket holds a single value or identical values. Only the
per-image means (one float64 per image) grow with the number of images.

The statistics live on the device of the first error map (``torch.bincount``/``index_add_`` there);
each update reads back only a finiteness flag and the per-image means, and ``compute()`` copies the
histogram to the CPU.
"""
from typing import List, NamedTuple, Optional

import torch

from . import options
from .constants import DEFAULT_PPD
from .functional import _is_device_call, _ldr_flip
from .pooling import PooledValues

__all__ = ["FLIPMetric", "FLIPMetricResult"]


class FLIPMetricResult(NamedTuple):
    """What :meth:`FLIPMetric.compute` returns."""

    pooled: PooledValues          # over all pixels of all images seen
    per_image_means: torch.Tensor  # float64, one entry per image, in update order
    num_images: int
    num_pixels: int


class FLIPMetric:
    """Accumulates LDR-FLIP over many ``update(test, reference)`` calls (see the module docstring).

    ``pixels_per_degree``, ``input_space`` and ``data_range`` are those of
    :func:`flip_loss.ldr_flip` (checked here, ``TypeError``/``ValueError``); ``bins`` is the
    resolution of the histogram behind the weighted median and quartiles (their error is at most
    ``1 / bins``).
    """

    def __init__(self, pixels_per_degree: float = DEFAULT_PPD, input_space: str = "srgb",
                 bins: int = 2 ** 16, data_range=1.0):
        if isinstance(bins, bool) or not isinstance(bins, int) or bins < 1:
            raise ValueError(f"flip_loss.FLIPMetric: bins must be a positive integer, got {bins!r}")
        self.pixels_per_degree = options.pixels_per_degree(pixels_per_degree)
        self.input_space = options.input_space(input_space)
        self.data_range = options.data_range(data_range)
        self.bins = int(bins)
        # Whether an update has looked at the value range of inputs on a GPU (once per metric,
        # since that is a host synchronisation; see flip_loss.functional).
        self._looked_at_device_inputs = False
        self.reset()

    def reset(self) -> None:
        """Forgets everything seen so far."""
        self._device: Optional[torch.device] = None
        self._count: Optional[torch.Tensor] = None
        self._sum: Optional[torch.Tensor] = None
        self._bin_min: Optional[torch.Tensor] = None
        self._bin_max: Optional[torch.Tensor] = None
        self._total = None
        self._min = None
        self._max = None
        self._num_pixels = 0
        self._means: List[torch.Tensor] = []

    @torch.no_grad()
    def update(self, test: torch.Tensor, reference: torch.Tensor) -> torch.Tensor:
        """Evaluates LDR-FLIP between ``test`` and ``reference`` (N x 3 x H x W or 3 x H x W, as for
        :func:`flip_loss.ldr_flip`), accumulates the maps and returns this batch's per-image means
        (float64, N entries, on the input device)."""
        look = not self._looked_at_device_inputs
        if _is_device_call(test):
            self._looked_at_device_inputs = True
        error = _ldr_flip(test, reference, self.pixels_per_degree, self.input_space, 0.0, self.data_range, look)
        return self.update_error_map(error)

    @torch.no_grad()
    def update_error_map(self, error_map: torch.Tensor) -> torch.Tensor:
        """Accumulates already computed error maps (N x 1 x H x W, or 1 x H x W for one image; values
        in [0, 1]) and returns their per-image means (float64)."""
        if not isinstance(error_map, torch.Tensor) or not error_map.is_floating_point():
            raise TypeError("flip_loss.FLIPMetric: error_map must be a floating-point tensor")
        if error_map.dim() == 3:
            error_map = error_map.unsqueeze(0)
        if error_map.dim() != 4 or error_map.shape[1] != 1 or error_map.numel() == 0:
            raise ValueError("flip_loss.FLIPMetric: expected an N x 1 x H x W (or 1 x H x W) error map, "
                             f"got shape {tuple(error_map.shape)}")
        e = error_map.detach().to(torch.float64)
        if not bool(torch.isfinite(e).all()):
            raise ValueError("flip_loss.FLIPMetric: the error map contains NaN or infinite values")
        if self._device is None:
            self._device = e.device
            zeros = torch.zeros(self.bins, dtype=torch.float64, device=e.device)
            self._count = torch.zeros(self.bins, dtype=torch.int64, device=e.device)
            self._sum = zeros.clone()
            self._bin_min = torch.full_like(zeros, float("inf"))
            self._bin_max = torch.full_like(zeros, float("-inf"))
            self._total = torch.zeros((), dtype=torch.float64, device=e.device)
            self._min = torch.full((), float("inf"), dtype=torch.float64, device=e.device)
            self._max = torch.full((), float("-inf"), dtype=torch.float64, device=e.device)
        e = e.to(self._device)
        flat = e.reshape(-1)
        index = torch.clamp(torch.floor(flat.clamp(0.0, 1.0) * self.bins), 0, self.bins - 1).long()
        self._count += torch.bincount(index, minlength=self.bins)
        self._sum.index_add_(0, index, flat)
        self._bin_min.scatter_reduce_(0, index, flat, reduce="amin")
        self._bin_max.scatter_reduce_(0, index, flat, reduce="amax")
        self._total += flat.sum()
        self._min = torch.minimum(self._min, flat.min())
        self._max = torch.maximum(self._max, flat.max())
        self._num_pixels += flat.numel()
        means = e.flatten(1).mean(1)
        self._means.append(means.to("cpu"))
        return means

    def _percentiles(self, ps) -> List[float]:
        count = self._count.cpu()
        sums = self._sum.cpu()
        lo = self._bin_min.cpu()
        hi = self._bin_max.cpu()
        total = float(sums.sum())
        if total <= 0.0:
            return [0.0 for _ in ps]
        cum = torch.cumsum(sums, 0)
        out = []
        for p in ps:
            target = p * total
            above = torch.nonzero(cum > target)
            k = int(above[0]) if above.numel() else int(torch.nonzero(count)[-1])
            before = float(cum[k - 1]) if k > 0 else 0.0
            # Fraction of this bucket's value sum needed to exceed the target.
            frac = (target - before) / float(sums[k]) if float(sums[k]) > 0 else 1.0
            frac = min(max(frac, 0.0), 1.0)
            a, b = float(lo[k]), float(hi[k])
            out.append(a + (b - a) * frac)
        return out

    def compute(self) -> FLIPMetricResult:
        """Pooled values over all pixels seen (mean, weighted median and quartiles, min, max; the
        percentiles to within one histogram bucket, see the module docstring) and the per-image
        means. Raises ``RuntimeError`` before the first update."""
        if self._num_pixels == 0:
            raise RuntimeError("flip_loss.FLIPMetric: compute() called before any update()")
        median, q1, q3 = self._percentiles((0.5, 0.25, 0.75))
        pooled = PooledValues(mean=float(self._total) / self._num_pixels, weighted_median=median,
                              weighted_quartile_1=q1, weighted_quartile_3=q3, min=float(self._min),
                              max=float(self._max))
        return FLIPMetricResult(pooled=pooled, per_image_means=torch.cat(self._means),
                                num_images=sum(int(m.numel()) for m in self._means),
                                num_pixels=self._num_pixels)

    def __repr__(self) -> str:
        data_range = "" if self.data_range == (0.0, 1.0) else f", data_range={self.data_range}"
        return (f"FLIPMetric(pixels_per_degree={self.pixels_per_degree:.4f}, input_space={self.input_space!r}, "
                f"bins={self.bins}{data_range}, images={sum(int(m.numel()) for m in self._means)})")
