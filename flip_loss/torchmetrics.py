"""``FLIPTorchMetric``: :class:`flip_loss.FLIPMetric` as a ``torchmetrics.Metric``, for PyTorch
Lightning and torchmetrics users (``pip install "flip-loss[torchmetrics]"``).

The statistics are :class:`flip_loss.FLIPMetric`'s (see :mod:`flip_loss.metric`), held as
torchmetrics states so that torchmetrics moves them with the module, resets them and syncs them
across ranks through their reductions (integer sums, minima, maxima: exact in any order);
``compute()`` returns the same :class:`flip_loss.FLIPMetricResult`, with the same values, as
``FLIPMetric`` on the same images.

    from flip_loss.torchmetrics import FLIPTorchMetric

    metric = FLIPTorchMetric().to(device)
    for test, reference in loader:
        metric.update(test, reference)
    result = metric.compute()          # result.pooled.mean, result.per_image_means, ...
    metric.reset()

In a ``LightningModule``: update it in ``validation_step`` and log
``self.metric.compute().pooled.mean`` in ``on_validation_epoch_end``, then ``reset()``.
"""

import functools

import torch

try:
    from torchmetrics import Metric
except ImportError as exc:  # pragma: no cover - depends on the installation
    raise ImportError(
        "flip_loss.torchmetrics needs the torchmetrics package: pip install "
        '"flip-loss[torchmetrics]" (or pip install torchmetrics)'
    ) from exc

from .constants import DEFAULT_PPD
from .metric import (
    FLIPMetricResult,
    Statistics,
    check_pixel_capacity,
    check_same_options,
    checked_error_batch,
    empty_statistics,
    exact_means,
    fold,
    metric_error_map,
    metric_options,
    result_of,
)

__all__ = ["FLIPTorchMetric"]

_WHO = "flip_loss.torchmetrics.FLIPTorchMetric"

_SPACES = ("srgb", "linear")
# The states _statistics() gathers, which update() changes in place.
_STATISTICS_STATES = ("count", "limbs", "bin_min", "bin_max", "min_value", "max_value")
_ALPHAS = (None, "straight", "premultiplied")
_BACKGROUNDS = ("black", "white", "checkerboard")


def settings_code(ppd: float, input_space: str, data_range, bins: int, alpha, background) -> torch.Tensor:
    """The options as an int64 tensor of 16-bit pieces (each value's float64 bits, four pieces per
    value): torchmetrics compares states with ``allclose``, whose tolerance is below 1 for values up
    to 65535, so two codes compare equal exactly when every option is equal."""
    named = isinstance(background, str)
    values = [
        float(ppd),
        float(_SPACES.index(input_space)),
        float(data_range[0]),
        float(data_range[1]),
        float(bins),
        float(_ALPHAS.index(alpha)),
        float(_BACKGROUNDS.index(background)) if named else -1.0,
    ] + ([0.0, 0.0, 0.0] if named else [float(v) for v in background])
    bits = torch.tensor(values, dtype=torch.float64, device="cpu").view(torch.int64)
    return torch.stack([(bits >> (16 * k)) & 0xFFFF for k in range(4)], dim=1)


def _same_settings(stacked: torch.Tensor) -> torch.Tensor:
    """The ``settings`` state's reduction (across ranks, and in ``forward``): every rank's metric
    must have the same options."""
    if not bool((stacked == stacked[0]).all()):
        raise ValueError(
            f"{_WHO}: the ranks' metrics have different options (pixels_per_degree, input_space, "
            "data_range, bins, alpha, background); give every rank the same"
        )
    return stacked[0]


class FLIPTorchMetric(Metric):
    """LDR-FLIP accumulated over ``update(test, reference)`` calls as a torchmetrics metric.
    ``pixels_per_degree``, ``input_space``, ``data_range``, ``bins``, ``alpha`` and ``background``
    are those of :class:`flip_loss.FLIPMetric`; other keyword arguments go to ``torchmetrics.Metric``
    (``sync_on_compute``, ``process_group``, ...). The states are int64 and float64 by design:
    converting the module (``.to(dtype)``, ``set_dtype``, Lightning's precisions) moves them to its
    device but keeps their dtypes. Metrics with different options are never merged into one
    compute group of a ``MetricCollection`` (their ``settings`` states differ).

    The reductions: pixel counts and fixed-point limbs ``"sum"``, bucket and overall minima
    ``"min"`` and maxima ``"max"``, the per-image means ``"cat"`` (rank 0's first, each rank's in
    update order). The ``settings`` state holds the options exactly (``settings_code``):
    ``MetricCollection`` merges metrics into one compute group only when all their states are
    equal, so metrics with the same options share one evaluation and others never do. It also
    travels in a state dict (``persistent(True)``): a state dict of a metric with other options is
    refused (``ValueError``) when loaded, and so is a sync between ranks whose options differ."""

    is_differentiable = False
    higher_is_better = False
    full_state_update = False

    def __init__(
        self,
        pixels_per_degree: float = DEFAULT_PPD,
        input_space: str = "srgb",
        bins: int = 2**16,
        data_range=1.0,
        alpha=None,
        background="black",
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.pixels_per_degree, self.input_space, self.data_range = pixels_per_degree, input_space, data_range
        self.bins, self.alpha, self.background = bins, alpha, background
        # Stored as checked, by the rules an option set later meets when the metric runs.
        self._built_options = metric_options(self, _WHO)
        self.pixels_per_degree, self.input_space, self.data_range = self._built_options[:3]
        self.bins, self.alpha, self.background = self._built_options[3:]
        self.looked_at_device_inputs = False
        # torchmetrics makes the placeholder of a rank without per-image means in this dtype when it
        # syncs; it must match the other ranks' float64 means. Set before any state exists, so it
        # converts nothing.
        self.set_dtype(torch.float64)
        # The states start where torchmetrics says the metric is (self.device: the default device
        # at construction), named, so that no state depends on where a default put it.
        stats = empty_statistics(self.bins, self.device)
        self.add_state("count", stats.count, dist_reduce_fx="sum")
        self.add_state("limbs", stats.limbs, dist_reduce_fx="sum")
        self.add_state("bin_min", stats.bin_min, dist_reduce_fx="min")
        self.add_state("bin_max", stats.bin_max, dist_reduce_fx="max")
        self.add_state("min_value", stats.min, dist_reduce_fx="min")
        self.add_state("max_value", stats.max, dist_reduce_fx="max")
        self.add_state("per_image_means", [], dist_reduce_fx="cat")
        self.add_state(
            "settings",
            settings_code(*self._built_options).to(self.device),
            dist_reduce_fx=_same_settings,
        )

    def _apply(self, fn, exclude_state=()):
        # torchmetrics applies a module conversion to the states too (``.to(torch.bfloat16)``, as
        # Lightning's bf16-true does, would make the extremes bfloat16 and break the next update);
        # here every conversion moves the states (and a cached result) to its device only, keeping
        # the dtypes they are made for.
        this = super()._apply(functools.partial(_on_device_of, fn), exclude_state=exclude_state)
        # The placeholder of a rank without per-image means, when torchmetrics syncs, is made in
        # this dtype: it must stay that of the means.
        this._dtype = torch.float64
        return this

    def _options(self):
        """The options checked by the constructor's rules; its states are made for those it was
        built with (the histogram's size, the ``settings`` state), so they are fixed."""
        opts = metric_options(self, _WHO)
        check_same_options(self._built_options, opts, _WHO, "build another metric to use other options")
        return opts

    def _check_settings(self, have) -> None:
        """``have`` (a ``settings`` state) must be this metric's own options."""
        want = settings_code(*self._options())
        if not isinstance(have, torch.Tensor) or have.shape != want.shape or not torch.equal(have.cpu(), want):
            raise ValueError(
                f"{_WHO}: the state comes from a metric with other options; load states only into a "
                "metric built with the same pixels_per_degree, input_space, data_range, bins, alpha "
                "and background"
            )

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        # Checked before anything is loaded: a refused state leaves this metric as it was.
        if prefix + "settings" in state_dict:
            self._check_settings(state_dict[prefix + "settings"])
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def _statistics(self) -> Statistics:
        return Statistics(self.count, self.limbs, self.bin_min, self.bin_max, self.min_value, self.max_value)

    def _normal_states(self) -> None:
        """The statistics as normal tensors: states made or reset under ``torch.inference_mode``
        (the constructor's, torchmetrics' reset clones) are inference tensors, which no later update
        outside that mode could change in place. Their values are kept."""
        with torch.inference_mode(False):
            for name in _STATISTICS_STATES:
                state = getattr(self, name)
                if state.is_inference():
                    setattr(self, name, state.clone())

    def update(self, test: torch.Tensor, reference: torch.Tensor) -> None:
        """Evaluates LDR-FLIP between ``test`` and ``reference`` (as :meth:`flip_loss.FLIPMetric.update`)
        and accumulates the maps."""
        self._normal_states()
        with torch.no_grad():
            error = metric_error_map(self, self._options(), test, reference)
            e = checked_error_batch(error, _WHO).to(self.count.device)
            check_pixel_capacity(int(self.count.sum()), e.numel(), _WHO)
            stats, per_image = fold(self._statistics(), e)
            means = exact_means(per_image, e.shape[1]).to(self.count.device)
            for name, value in zip(_STATISTICS_STATES, stats):  # after the whole fold: Ctrl-C leaves no trace
                setattr(self, name, value)
            self.per_image_means.append(means)

    def _wrap_compute(self, compute):
        # torchmetrics squeezes every one-element tensor of a result; the per-image means stay a
        # 1-D tensor, as FLIPMetric returns them, also for a single image.
        wrapped = super()._wrap_compute(compute)

        @functools.wraps(wrapped)
        def compute_keeping_shapes(*args, **kwargs):
            result = wrapped(*args, **kwargs)
            if isinstance(result, FLIPMetricResult):
                result = result._replace(per_image_means=result.per_image_means.reshape(-1))
            return result

        return compute_keeping_shapes

    def compute(self) -> FLIPMetricResult:
        """The pooled values and per-image means, as :meth:`flip_loss.FLIPMetric.compute` returns
        them (over every rank's images when torchmetrics syncs). Raises ``RuntimeError`` when no
        image was seen."""
        self._check_settings(self.settings)
        means = self.per_image_means
        if isinstance(means, list):
            means = torch.cat(means) if means else torch.zeros(0, dtype=torch.float64, device="cpu")
        if int(self.count.sum()) == 0:
            raise RuntimeError(f"{_WHO}: compute() called before any update()")
        return result_of(self._statistics(), means)


def _on_device_of(fn, tensor: torch.Tensor) -> torch.Tensor:
    """``tensor`` on the device ``fn`` (a module conversion) moves tensors to, in its own dtype."""
    device = fn(torch.empty(0, dtype=tensor.dtype, device=tensor.device)).device
    return tensor.to(device)
