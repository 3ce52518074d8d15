"""``FLIPMetric``: FLIP accumulated over an evaluation loop, in bounded memory, over one process or
all ranks of a ``torch.distributed`` job, with the same result however the images are batched,
ordered, placed (CPU or GPU) or spread over ranks.

``update(test, reference)`` folds a batch's LDR-FLIP maps (no gradient, ``eps=0``: the published
metric) into running statistics; ``compute()`` returns the pooled values over all pixels seen (the
six values of :func:`flip_loss.pool`, as if every map had been concatenated) and each image's mean.
Memory does not grow with the pixels: a histogram of ``bins`` buckets on [0, 1] holding, per
bucket, the pixel count, the sum of the values and their min and max. The sums are exact, in fixed
point (``LIMBS``), because integer sums do not depend on the order of addition (a GPU's float
atomics do): the mean is that exact sum over the count, rounded once. The weighted median and
quartiles are placed inside their bucket (``_percentiles``), within one bucket width (1/65536 by
default) of :func:`flip_loss.pool`'s. Only the per-image means grow with the number of images.

When a default process group is initialised (e.g. under ``torchrun``), ``compute()`` is a
collective (``synced``): every rank calls it and gets the result over all ranks' images, bit for
bit that of one process that saw them. ``update`` stays local and cheap.
"""

from typing import List, NamedTuple, Optional, Sequence, Tuple

import torch

from . import options
from .constants import DEFAULT_PPD
from .functional import ldr_flip_with_look
from .tensor_values import carries_tangent, functorch_levels, is_compiling, is_device_call
from .pooling import PERCENTILES, PooledValues, pooled_values

__all__ = ["FLIPMetric", "FLIPMetricResult"]

_WHO = "flip_loss.FLIPMetric"

# Fixed-point bucket sums: LIMBS limbs of LIMB_BITS bits below the binary point, the first one
# carrying the integer part too. 4 x 24 = 96 fractional bits: every float32 value from 2**-73 up and
# every float64 value from 2**-44 up is represented without rounding, smaller ones are truncated to
# the 2**-96 grid.
LIMB_BITS = 24
LIMBS = 4
_LIMB_SCALE = float(2**LIMB_BITS)
# The first limb of a bucket grows by at most 2**24 per pixel of value <= 1: int64 holds 2**39
# (5.5e11) of them, which ``update`` checks.
MAX_PIXELS = 2**39
# Elements folded per pass of an update: bounds its temporaries (a few int64/float64 copies).
_CHUNK = 1 << 22


class FLIPMetricResult(NamedTuple):
    """What :meth:`FLIPMetric.compute` returns."""

    pooled: PooledValues  # over all pixels of all images seen (on all ranks when synced)
    per_image_means: torch.Tensor  # float64 on the CPU, one entry per image, in update order
    # (synced: rank 0's images, then rank 1's, ...)
    num_images: int
    num_pixels: int


class Statistics(NamedTuple):
    """The running statistics of a FLIP metric (one ``bins``-bucket histogram), on one device.
    :class:`FLIPMetric` and :class:`flip_loss.torchmetrics.FLIPTorchMetric` share them."""

    count: torch.Tensor  # int64 [bins]: pixels per bucket
    limbs: torch.Tensor  # int64 [LIMBS, bins]: the bucket sums in fixed point (LIMBS, LIMB_BITS)
    bin_min: torch.Tensor  # float32 or float64 [bins]: smallest value per bucket (+inf when empty)
    bin_max: torch.Tensor  # float32 or float64 [bins]: largest value per bucket (-inf when empty)
    min: torch.Tensor  # float32 or float64 []: smallest value overall
    max: torch.Tensor  # float32 or float64 []: largest value overall


def empty_statistics(bins: int, device, dtype: torch.dtype = torch.float64) -> Statistics:
    """Statistics of no pixel, their extremes in ``dtype`` (float32 or float64)."""
    floats = dict(dtype=dtype, device=device)
    return Statistics(
        count=torch.zeros(bins, dtype=torch.int64, device=device),
        limbs=torch.zeros(LIMBS, bins, dtype=torch.int64, device=device),
        bin_min=torch.full((bins,), float("inf"), **floats),
        bin_max=torch.full((bins,), float("-inf"), **floats),
        min=torch.full((), float("inf"), **floats),
        max=torch.full((), float("-inf"), **floats),
    )


def holding(stats: Statistics, dtype: torch.dtype) -> Statistics:
    """``stats`` with extremes that hold values of ``dtype`` exactly (float32 ones widened to
    float64 for a float64 map; nothing changes otherwise)."""
    if dtype != torch.float64 or stats.min.dtype == torch.float64:
        return stats
    return stats._replace(**{k: getattr(stats, k).double() for k in ("bin_min", "bin_max", "min", "max")})


def checked_error_batch(error_map, who: str) -> torch.Tensor:
    """``error_map`` (N x 1 x H x W, or 1 x H x W) as an N x (H * W) tensor on its device, float64 for
    a float64 map and float32 otherwise (exact: no map holds more);
    ``TypeError``/``ValueError`` for anything else, for an empty map, for NaN or inf values and for
    values outside [0, 1] (FLIP's range: the histogram covers [0, 1] and the fixed-point sums hold
    values up to 1 per pixel; 1e12 would overflow them, and a negative value would put the median
    outside [min, max]). One read-back of two flags."""
    if not isinstance(error_map, torch.Tensor) or not error_map.is_floating_point():
        raise TypeError(f"{who}: error_map must be a floating-point tensor")
    if error_map.dim() == 3:
        error_map = error_map.unsqueeze(0)
    if error_map.dim() != 4 or error_map.shape[1] != 1 or error_map.numel() == 0:
        raise ValueError(
            f"{who}: expected an N x 1 x H x W (or 1 x H x W) error map, got shape {tuple(error_map.shape)}"
        )
    e = error_map.detach()
    e = e.to(torch.float64 if e.dtype == torch.float64 else torch.float32).reshape(error_map.shape[0], -1)
    nonfinite, outside = torch.stack([~torch.isfinite(e).all(), ((e < 0) | (e > 1)).any()]).tolist()
    if nonfinite:
        raise ValueError(
            f"{who}: the error map contains NaN or infinite values ({_first_bad(e, ~torch.isfinite(e), error_map)})"
        )
    if outside:
        raise ValueError(
            f"{who}: the error map has values outside [0, 1] ({_first_bad(e, (e < 0) | (e > 1), error_map)}); "
            "FLIP error maps lie in [0, 1]"
        )
    return e


def _first_bad(e: torch.Tensor, bad: torch.Tensor, error_map: torch.Tensor) -> str:
    """Where the refused values of an error map are, for its message: how many, and the first one
    with its image and pixel, the value written in full (a value 1 ulp past 1 reads as 1 in six
    digits). Only on the way to an error, so its read-backs cost nothing on the accepted path."""
    count = int(bad.sum())
    first = int(bad.reshape(-1).nonzero()[0, 0])
    hw = e.shape[1]
    width = error_map.shape[-1]
    image, pixel = divmod(first, hw)
    y, x = divmod(pixel, width)
    value = float(e.reshape(-1)[first])
    return (
        f"{count} {'value' if count == 1 else 'values'}, the first {value!r} at image {image}, row {y}, "
        f"column {x}, of a {str(error_map.dtype).replace('torch.', '')} map"
    )


def carry(limbs: torch.Tensor) -> None:
    """Brings every limb but the first back into [0, 2**LIMB_BITS) by carrying into the one above
    (in place); the represented sums do not change. Keeps the limbs far from int64 overflow and
    makes equal sums equal limb by limb."""
    mask = (1 << LIMB_BITS) - 1
    for i in range(LIMBS - 1, 0, -1):
        above = torch.bitwise_right_shift(limbs[i], LIMB_BITS)  # floor division, also for negative limbs
        limbs[i].copy_(limbs[i] & mask)  # not bitwise_and_: torch 2.1 refuses it with a number under a dispatch mode
        limbs[i - 1] += above


def buckets(flat: torch.Tensor, bins: int) -> torch.Tensor:
    """The bucket floor(v * bins), at most bins - 1, of each value in [0, 1]: in float64 for a
    float64 map; for a float32 one from its bits, in integers (the product of a 24-bit significand
    and ``bins`` fits int64), which is exact as float64 would be, and needs none."""
    if flat.dtype == torch.float64:
        return torch.clamp(torch.floor(flat * bins), 0, bins - 1).long()
    bits = flat.contiguous().view(torch.int32).long() & 0x7FFFFFFF  # -0.0 as 0.0
    exponent = bits >> 23
    significand = torch.where(exponent > 0, (bits & 0x7FFFFF) + 0x800000, bits)  # the implicit leading 1
    # v = significand * 2**(max(exponent, 1) - 150); the shift is at least 23 for v <= 1.
    shift = torch.clamp(150 - torch.clamp(exponent, min=1), max=63)
    return torch.clamp((significand * bins) >> shift, max=bins - 1)


def fold(stats: Statistics, e: torch.Tensor) -> Tuple[Statistics, torch.Tensor]:
    """``stats`` with the maps ``e`` (N x P float32 or float64, on the statistics' device, whose
    extremes hold its dtype: ``holding``) added, in new tensors, and the maps' per-image sums as
    N x LIMBS int64 limbs (not carried). ``stats`` is left as it was, so that an update stopped
    midway (Ctrl-C) changes nothing its owner keeps. Every step is exact in the maps' own dtype."""
    n, p = e.shape
    bins = stats.count.numel()
    batch = empty_statistics(bins, e.device, stats.bin_min.dtype)  # the maps' own, merged at the end
    per_image = torch.zeros(n, LIMBS, dtype=torch.int64, device=e.device)
    step = max(1, _CHUNK // n)
    for start in range(0, p, step):
        block = e[:, start : start + step]
        flat = block.reshape(-1)
        index = buckets(flat.clamp(0.0, 1.0), bins)
        batch.count.add_(torch.bincount(index, minlength=bins))
        if flat.dtype == batch.bin_min.dtype:
            batch.bin_min.scatter_reduce_(0, index, flat, reduce="amin")
            batch.bin_max.scatter_reduce_(0, index, flat, reduce="amax")
        else:  # a float32 map, float64 extremes (FLIPTorchMetric): no float64 copy of the map
            lowest = torch.full((bins,), float("inf"), dtype=flat.dtype, device=flat.device)
            highest = torch.full((bins,), float("-inf"), dtype=flat.dtype, device=flat.device)
            batch.bin_min.copy_(torch.minimum(batch.bin_min, lowest.scatter_reduce_(0, index, flat, reduce="amin")))
            batch.bin_max.copy_(torch.maximum(batch.bin_max, highest.scatter_reduce_(0, index, flat, reduce="amax")))
        # Limb i is the i-th group of 24 bits below the binary point (the first with the integer
        # part): scaling by 2**24 and splitting off the floor are exact in float32 and float64.
        scaled = block * _LIMB_SCALE
        for i in range(LIMBS):
            whole = torch.floor(scaled)
            limb = whole.long()
            batch.limbs[i].index_add_(0, index, limb.reshape(-1))
            per_image[:, i] += limb.sum(1)
            if i + 1 < LIMBS:
                scaled = (scaled - whole).mul_(_LIMB_SCALE)
    merged = Statistics(
        count=stats.count + batch.count,
        limbs=stats.limbs + batch.limbs,
        bin_min=torch.minimum(stats.bin_min, batch.bin_min),
        bin_max=torch.maximum(stats.bin_max, batch.bin_max),
        min=torch.minimum(stats.min, e.min()),
        max=torch.maximum(stats.max, e.max()),
    )
    carry(merged.limbs)
    return merged, per_image


def _fixed_point(limbs: Sequence[int]) -> int:
    """The sum the limbs represent, in units of 2**-(LIMBS * LIMB_BITS), as a Python int."""
    total = 0
    for limb in limbs:
        total = (total << LIMB_BITS) + int(limb)
    return total


def exact_means(per_image: torch.Tensor, pixels: int) -> torch.Tensor:
    """Per-image means (float64, CPU) from per-image sums in limbs (N x LIMBS) over ``pixels``
    pixels each: the exact quotient rounded once (Python's int division is correctly rounded)."""
    denominator = pixels << (LIMB_BITS * LIMBS)
    rows = per_image.cpu().tolist()
    return torch.tensor([_fixed_point(row) / denominator for row in rows], dtype=torch.float64, device="cpu")


def _percentiles(count: torch.Tensor, sums: torch.Tensor, lo: torch.Tensor, hi: torch.Tensor, ps) -> List[float]:
    """The weighted percentiles ``ps`` from the histogram: found as the evaluator defines them (the
    first value at which the running sum of the sorted values exceeds ``p`` times the total), bucket
    by bucket, then placed inside the bucket by linear interpolation between its smallest and largest
    value. So each lies within its bucket's value range: at most one bucket width from the exact
    value, and exact when the bucket holds a single value or identical values."""
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


def result_of(stats: Statistics, per_image_means: torch.Tensor) -> FLIPMetricResult:
    """The pooled values of ``stats`` (at least one pixel) and the per-image means, as
    :meth:`FLIPMetric.compute` returns them. A pure function of the values of ``stats``."""
    count = stats.count.cpu()
    limbs = stats.limbs.cpu().clone()
    carry(limbs)
    num_pixels = int(count.sum())
    # Bucket sums in float64 from the carried limbs, always in this order: equal limbs give equal
    # sums, so the percentiles depend only on the (exact) statistics.
    sums = torch.zeros(count.numel(), dtype=torch.float64, device="cpu")
    for i in range(LIMBS):
        sums += limbs[i].double() * 2.0 ** (-LIMB_BITS * (i + 1))
    percentiles = _percentiles(count, sums, stats.bin_min.cpu(), stats.bin_max.cpu(), PERCENTILES)
    mean = _fixed_point(limbs.sum(1).tolist()) / (num_pixels << (LIMB_BITS * LIMBS))
    pooled = pooled_values(mean, percentiles, float(stats.min), float(stats.max))
    means = per_image_means.to("cpu", torch.float64)
    return FLIPMetricResult(pooled=pooled, per_image_means=means, num_images=int(means.numel()), num_pixels=num_pixels)


def synced(
    stats: Optional[Statistics], per_image_means: torch.Tensor, bins: int, group=None, who: str = "flip_loss.FLIPMetric"
) -> Tuple[Statistics, torch.Tensor]:
    """Every rank's statistics reduced and per-image means gathered, on every rank of ``group``. A
    collective: every rank calls it, with its statistics (None before its first update: it joins
    with empty ones). The counts and limbs are summed and the extremes reduced with ``all_reduce`` on
    a device the group's backend takes (any with gloo, CUDA with NCCL); the per-image means are
    gathered in rank order, each rank's in its update order. Raises the same error on every rank
    when the ranks' ``bins`` differ or no rank has seen an image."""
    import torch.distributed as dist

    from . import distributed

    device_types = distributed.backend_device_types(group)
    if not device_types:
        raise RuntimeError(f"{who}: the process group has no backend to sync with")
    # A first exchange on a device every rank can use, whatever its statistics' device: the
    # histogram sizes, the image counts and where each rank's statistics are.
    header_device = distributed.current_device("cpu" if "cpu" in device_types else device_types[0])
    local_type = stats.count.device.type if stats is not None else None
    code = (
        -1
        if local_type is None
        else (device_types.index(local_type) if local_type in device_types else len(device_types))
    )
    header = torch.tensor([bins, int(per_image_means.numel()), code], dtype=torch.int64, device=header_device)
    headers = [torch.empty_like(header) for _ in range(dist.get_world_size(group))]
    dist.all_gather(headers, header, group=group)
    headers = [h.tolist() for h in headers]
    if len({h[0] for h in headers}) > 1:
        raise ValueError(
            f"{who}: the ranks' metrics have different bins ({', '.join(str(h[0]) for h in headers)} "
            "in rank order); give every rank the same"
        )
    lengths = [h[1] for h in headers]
    if sum(lengths) == 0:
        raise RuntimeError(f"{who}: compute() called before any update() on any rank")
    # The reduction runs where the statistics are when every rank's are on one kind of device the
    # group takes (e.g. CUDA under NCCL); otherwise on the CPU, or the group's one device type.
    codes = {h[2] for h in headers if h[2] >= 0}
    if len(codes) == 1 and next(iter(codes)) < len(device_types):
        device_type = device_types[next(iter(codes))]
    else:
        device_type = "cpu" if "cpu" in device_types else device_types[0]
    device = stats.count.device if local_type == device_type else distributed.current_device(device_type)
    if stats is None:
        stats = empty_statistics(bins, device)
    integers = torch.cat([stats.count[None], stats.limbs]).to(device)
    dist.all_reduce(integers, op=dist.ReduceOp.SUM, group=group)
    # One MIN for both extremes: the maxima negated.
    extremes = torch.cat([stats.bin_min, -stats.bin_max, stats.min[None], -stats.max[None]]).to(device, torch.float64)
    dist.all_reduce(extremes, op=dist.ReduceOp.MIN, group=group)
    means = distributed.gather_uneven(per_image_means.to(device, torch.float64), lengths, group)
    total = Statistics(
        count=integers[0],
        limbs=integers[1:],
        bin_min=extremes[:bins],
        bin_max=-extremes[bins : 2 * bins],
        min=extremes[2 * bins],
        max=-extremes[2 * bins + 1],
    )
    return total, means.cpu()


def check_pixel_capacity(seen: int, more: int, who: str) -> None:
    if seen + more > MAX_PIXELS:
        raise ValueError(
            f"{who}: more than 2**39 pixels in one metric would overflow its exact sums; "
            "compute() and reset() before that"
        )


class MetricOptions(NamedTuple):
    """A metric's options, checked and in the form its statistics are made with."""

    pixels_per_degree: float
    input_space: str
    data_range: Tuple[float, float]
    bins: int
    alpha: Optional[str]
    background: object


def metric_options(metric, who: str) -> MetricOptions:
    """The options of ``metric`` (FLIPMetric, FLIPTorchMetric) checked by the one set of rules that
    the constructor applies and every ``update`` and ``compute`` apply again, since any option may
    be set after construction: one pixels per degree (no list), the options of ``ldr_flip``, the
    background within the data range, ``bins`` a whole number from 1 to 2**24."""
    alpha, background = options.alpha_options(metric.alpha, metric.background)
    data_range = options.data_range(metric.data_range)
    options.check_background_value(background, *data_range)
    return MetricOptions(
        pixels_per_degree=options.checked_pixels_per_degree(metric.pixels_per_degree),
        input_space=options.input_space(metric.input_space),
        data_range=data_range,
        bins=options.bins(metric.bins, who),
        alpha=alpha,
        background=background,
    )


def check_same_options(held: MetricOptions, now: MetricOptions, who: str, remedy: str) -> None:
    """Statistics made for ``held`` take no batch (and give no result) under other options: a mix
    of two viewing conditions or histograms would be the metric of neither."""
    changed = [name for name in MetricOptions._fields if getattr(held, name) != getattr(now, name)]
    if changed:
        raise ValueError(
            f"{who}: {', '.join(f'{name}={getattr(now, name)!r}' for name in changed)} was set after "
            f"construction, but the metric's statistics are those of "
            f"{', '.join(f'{name}={getattr(held, name)!r}' for name in changed)}: {remedy}"
        )


def metric_error_map(metric, opts: MetricOptions, test: torch.Tensor, reference: torch.Tensor) -> torch.Tensor:
    """The LDR-FLIP map of one batch with a metric's (checked) options (FLIPMetric and
    FLIPTorchMetric): the inputs' values are looked at (range warning) on the first device batch
    only, so that later batches cost no device-to-host copy."""
    # The statistics are accumulated without autograd: a derivative through them would read as 0.
    if carries_tangent(test, reference) or (not is_compiling() and {"grad", "jvp"} & set(functorch_levels())):
        raise NotImplementedError(
            f"flip_loss: {type(metric).__name__} is not differentiable (it accumulates statistics without "
            "autograd), under forward mode or torch.func's gradient transforms alike; use flip_loss.ldr_flip "
            "or FLIPLoss for derivatives"
        )
    look = not metric.looked_at_device_inputs
    if is_device_call(test):
        metric.looked_at_device_inputs = True
    return ldr_flip_with_look(
        test,
        reference,
        opts.pixels_per_degree,
        opts.input_space,
        0.0,
        opts.data_range,
        look,
        opts.alpha,
        opts.background,
    )


class FLIPMetric:
    """Accumulates LDR-FLIP over many ``update(test, reference)`` calls (see the module docstring).
    The statistics live on the device of the first error map, their extremes in the maps' precision
    (float32 until a float64 map comes; every step is exact in either, so a device without float64,
    MPS, keeps them too); each update reads back only a finiteness flag and the per-image sums, and
    ``compute()`` copies the histogram to the CPU.

    ``pixels_per_degree``, ``input_space`` and ``data_range`` are those of
    :func:`flip_loss.ldr_flip` (checked here, ``TypeError``/``ValueError``); ``bins`` is the
    resolution of the histogram behind the weighted median and quartiles (their error is at most
    ``1 / bins``). ``alpha`` and ``background`` take RGBA inputs as :func:`flip_loss.ldr_flip`
    does. ``sync_on_compute`` (default True): ``compute()`` returns the result over all
    ranks of ``process_group`` (None: the default group) when one is initialised with more than
    one rank; False keeps it to this process's images.
    """

    def __init__(
        self,
        pixels_per_degree: float = DEFAULT_PPD,
        input_space: str = "srgb",
        bins: int = 2**16,
        data_range=1.0,
        *,
        alpha: Optional[str] = None,
        background="black",
        sync_on_compute: bool = True,
        process_group=None,
    ):
        self.pixels_per_degree, self.input_space, self.data_range = pixels_per_degree, input_space, data_range
        self.bins, self.alpha, self.background = bins, alpha, background
        self.sync_on_compute = sync_on_compute
        # Stored as checked: the same rules as an option set later meets when the metric runs.
        opts = self._options()
        self.pixels_per_degree, self.input_space, self.data_range = opts[:3]
        self.bins, self.alpha, self.background = opts[3:]
        self.process_group = process_group
        # Whether an update has looked at the value range of inputs on a GPU (once per metric,
        # since that is a host synchronisation; see flip_loss.functional).
        self.looked_at_device_inputs = False
        self.reset()

    def _options(self) -> MetricOptions:
        """The options checked (``metric_options``; ``sync_on_compute`` a bool), whenever they were set."""
        options.flag("sync_on_compute", self.sync_on_compute, _WHO)
        return metric_options(self, _WHO)

    def _options_of_statistics(self) -> MetricOptions:
        """The options checked, and those the statistics held were gathered with."""
        opts = self._options()
        if self._stats is not None:
            check_same_options(self._stats_options, opts, _WHO, "reset() it first to use other options")
        return opts

    def reset(self) -> None:
        """Forgets everything seen so far (on this rank; no communication)."""
        self._stats: Optional[Statistics] = None
        self._stats_options: Optional[MetricOptions] = None
        self._num_pixels = 0
        self._means: List[torch.Tensor] = []

    @torch.no_grad()
    def update(self, test: torch.Tensor, reference: torch.Tensor) -> torch.Tensor:
        """Evaluates LDR-FLIP between ``test`` and ``reference`` (N x 3 x H x W or 3 x H x W, or with
        ``alpha`` RGBA, as for :func:`flip_loss.ldr_flip`), accumulates the maps and returns this batch's per-image means
        (float64, N entries, on the input device; on the CPU for MPS, which has no float64)."""
        return self.update_error_map(metric_error_map(self, self._options_of_statistics(), test, reference))

    @torch.no_grad()
    def update_error_map(self, error_map: torch.Tensor) -> torch.Tensor:
        """Accumulates already computed error maps (N x 1 x H x W, or 1 x H x W for one image; values
        in [0, 1]: NaN, infinite values and values outside [0, 1] raise ``ValueError``, and such a map
        is not accumulated) and returns their per-image means (float64, on the map's device; on the
        CPU for MPS)."""
        opts = self._options_of_statistics()
        e = checked_error_batch(error_map, _WHO)
        check_pixel_capacity(self._num_pixels, e.numel(), _WHO)
        # Normal tensors whatever the mode of this call: inference tensors made under
        # torch.inference_mode could not be updated in place by a later call outside it.
        with torch.inference_mode(False):
            if self._stats is None:
                self._stats = empty_statistics(opts.bins, e.device, e.dtype)
                self._stats_options = opts
            self._stats = holding(self._stats, e.dtype)
        stats, per_image = fold(self._stats, e.to(self._stats.count.device))
        means = exact_means(per_image, e.shape[1])
        # One step with no call in it, so that an update stopped before it (Ctrl-C) leaves no trace.
        self._stats, self._num_pixels, self._means = stats, self._num_pixels + e.numel(), [*self._means, means]
        # float64 on the map's device (on the CPU for a device without float64, MPS); a copy, so
        # that changing it in place changes nothing the metric keeps.
        return means.to("cpu" if error_map.device.type == "mps" else error_map.device, copy=True)

    def _syncs(self) -> bool:
        from . import distributed

        return self.sync_on_compute and distributed.is_active(self.process_group)

    def compute(self) -> FLIPMetricResult:
        """Pooled values over all pixels seen (mean, weighted median and quartiles, min, max; the
        percentiles to within one histogram bucket, ``_percentiles``) and the per-image
        means: over every rank's images when synced (a collective: call it on every rank).
        Raises ``RuntimeError`` before the first update (on any rank, when synced)."""
        opts = self._options_of_statistics()
        means = torch.cat(self._means) if self._means else torch.zeros(0, dtype=torch.float64, device="cpu")
        stats = self._stats
        if self._syncs():
            stats, means = synced(stats, means, opts.bins, self.process_group)
        elif stats is None:
            raise RuntimeError("flip_loss.FLIPMetric: compute() called before any update()")
        return result_of(stats, means)

    def __repr__(self) -> str:
        data_range = "" if self.data_range == (0.0, 1.0) else f", data_range={self.data_range}"
        alpha = "" if self.alpha is None else f", alpha={self.alpha!r}, background={self.background!r}"
        sync = "" if self.sync_on_compute else ", sync_on_compute=False"
        return (
            f"FLIPMetric(pixels_per_degree={self.pixels_per_degree:.4f}, input_space={self.input_space!r}, "
            f"bins={self.bins}{data_range}{alpha}{sync}, images={sum(int(m.numel()) for m in self._means)})"
        )
