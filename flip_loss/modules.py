"""``FLIPLoss``: LDR-FLIP or HDR-FLIP as an ``nn.Module`` loss, with optional per-pixel weights
(masks)."""

import math
import numbers
from typing import Dict, List, Optional, Tuple, Union

import torch

from . import _ops, options
from .alpha import composite, unit_background
from .constants import DEFAULT_EPS, DEFAULT_PPD
from .functional import ldr_flip_with_look, unit_pair
from .tensor_values import host_table, is_compiling, is_device_call, is_plain_tensor
from .image_checks import check_image_pair, promoted_pair
from .multiscale import multiscale_op, multiscale_op_serves, weighted_sum
from .hdr import (
    check_range_rows,
    count_values,
    exposure_anchor,
    exposure_values,
    exposures_from_numbers,
    exposures_from_tensors,
    hdr_flip,
    host_rows,
)


def _ppd_hint() -> str:
    """Where pixels per degree goes, for the errors of a call that looks like one of NVIDIA's loss
    (whose forward takes it third). A function: TorchScript reads no module-level strings."""
    return (
        "; pixels per degree is not an argument of the call: give it to the constructor, "
        "FLIPLoss(pixels_per_degree=...)"
    )


def _check_weight_shape(error: torch.Tensor, weight: torch.Tensor) -> None:
    es: List[int] = error.shape
    ws: List[int] = weight.shape
    if len(ws) == 0:
        # A 0-dim tensor broadcasts to anything, but one number is no per-pixel weight: most likely
        # it is a pixels per degree passed as NVIDIA's loss takes it, FLIPLoss()(test, ref, ppd).
        raise ValueError(
            "flip_loss: weight must be a per-pixel weight map (N x 1 x H x W, H x W, ...), got a "
            "0-dim tensor" + _ppd_hint()
        )
    ok = len(ws) <= len(es)
    if ok:
        for i in range(1, len(ws) + 1):
            if ws[-i] != 1 and ws[-i] != es[-i]:
                ok = False
    if not ok:
        raise ValueError(
            "flip_loss: weight of shape " + str(ws) + " does not broadcast to the error map "
            "of shape " + str(es) + " (use N x 1 x H x W, 1 x 1 x H x W, H x W, ...)"
        )


def _weight_scale(weight: torch.Tensor, per_image: bool, positive_total: bool) -> torch.Tensor:
    """The largest weight (of each image with ``per_image``, else of all), 1 where that is 0, after
    checking the weight: finite, non-negative, and with ``positive_total`` not all zero (of any
    image with ``per_image``). ``weight`` has the error map's shape. One device-to-host copy (of
    three flags). TorchScript-compatible; eager and torch.compile call it through the
    ``flip_loss::weight_scale`` op below."""
    if per_image:
        peak = weight.flatten(-3).amax(-1)
    else:
        peak = weight.amax()
    table = torch.stack([~torch.isfinite(weight).all(), (weight < 0).any(), (peak == 0).any()])
    if torch.jit.is_scripting():
        flags: List[bool] = table.cpu().tolist()
    else:
        flags = _eager_weight_flags(table)
    if flags[0]:
        raise ValueError("flip_loss: weight contains NaN or infinite values")
    if flags[1]:
        raise ValueError("flip_loss: weight must be non-negative (it has negative entries)")
    if positive_total and flags[2]:
        if per_image:
            raise ValueError(
                "flip_loss: the weights of an image sum to zero, so its weighted mean is undefined "
                "(reduction='per_image')"
            )
        raise ValueError("flip_loss: the weights sum to zero, so the weighted mean is undefined (reduction='mean')")
    return torch.where(peak > 0, peak, torch.ones_like(peak))


def _eager_weight_flags(table: torch.Tensor) -> List[bool]:
    """The three flags of _weight_scale, each over every vmapped example (functorch transforms);
    all False for weights without values (meta tensors, FakeTensors), which cannot be checked."""
    if is_plain_tensor(table):  # the common case, without host_table's per-call cost
        return table.cpu().tolist()
    host = host_table(table)
    if host is None:
        return [False, False, False]
    return [bool(v) for v in (host != 0).any(1).tolist()]


# The weight checks as an op: under torch.compile it is one opaque node whose result (the scale) is
# used by the reduction, so it is neither traced into a graph break nor dropped as dead code, and
# it raises the same ValueError as eager, on every device. (torch._assert_async would kill a CUDA
# context instead of raising.) It reads flags back to the host, so CUDA graphs must not capture it.
# A torch older than the compiled kernels' (the portable path alone) may lack custom_op or the tag:
# there torch.compile calls the checks themselves, a graph break at the flags' read-back.
if hasattr(torch.library, "custom_op") and hasattr(torch.Tag, "cudagraph_unsafe"):

    @torch.library.custom_op("flip_loss::weight_scale", mutates_args=(), tags=(torch.Tag.cudagraph_unsafe,))
    def _weight_scale_op(weight: torch.Tensor, per_image: bool, positive_total: bool) -> torch.Tensor:
        return _weight_scale(weight, per_image, positive_total)

    @_weight_scale_op.register_fake
    def _(weight, per_image, positive_total):
        return weight.new_empty(weight.shape[:-3] if per_image else ())

else:
    _weight_scale_op = _weight_scale


def _as(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``x`` in ``dtype``, without a (no-op) cast node in traced graphs when it already is."""
    return x if x.dtype == dtype else x.to(dtype)


def weighted_reduce(error: torch.Tensor, weight: Optional[torch.Tensor], reduction: str) -> torch.Tensor:
    """Reduces a FLIP error map (N x 1 x H x W, or 1 x H x W) as ``FLIPLoss`` does.

    Without ``weight``: ``"mean"`` over all pixels, ``"sum"``, ``"per_image"`` (the mean of each
    image: N values, a 0-dim tensor for a 1 x H x W map) or ``"none"`` (the map itself).
    With ``weight`` (non-negative, finite, broadcastable to the map's shape without changing it; a
    bool mask counts as 0/1): ``"mean"`` = sum(w * e) / sum(w) over everything, ``"per_image"`` the
    same per image, ``"sum"`` = sum(w * e), ``"none"`` = w * e. A negative or non-finite weight, or a
    zero total weight for ``"mean"`` (for any image, for ``"per_image"``), raises ``ValueError``, in
    eager, TorchScript and torch.compile alike; the check reads three flags back from the device.

    Sums are accumulated in float32, or float64 when the map or the weight is float64, whatever the
    map's dtype (a float16 map's sums overflow at 65504), and the result is cast to the map's dtype
    at the end. Weights are divided by their largest value before they are used (and the sums
    multiplied back by it where the result is not scale-free), so that weights of 1e38 or 1e-45 give
    the same means as weights of 1.
    """
    if torch.jit.is_scripting():
        options.check_reduction_value(reduction)
    else:
        options.reduction(reduction)  # any value: one of another type gets the constructor's TypeError
    if not error.is_floating_point():  # an integer map's sums would wrap
        raise TypeError("flip_loss: the error map must be floating point, got " + str(error.dtype))
    if not torch.jit.is_scripting():
        if weight is not None and not isinstance(weight, torch.Tensor):
            hint = _ppd_hint() if isinstance(weight, numbers.Real) and not isinstance(weight, bool) else ""
            raise TypeError("flip_loss: weight must be a torch.Tensor (or None), got " + type(weight).__name__ + hint)
    if weight is None:
        if reduction == "none":
            return error
        e = _as(error, torch.float64 if error.dtype == torch.float64 else torch.float32)
        if reduction == "mean":
            return _as(e.mean(), error.dtype)
        if reduction == "sum":
            return _as(e.sum(), error.dtype)
        return _as(e.flatten(-3).mean(-1), error.dtype)
    if weight.dtype != torch.bool and not weight.is_floating_point():
        raise TypeError("flip_loss: weight must be a floating-point or bool tensor, got " + str(weight.dtype))
    if weight.device != error.device:
        raise ValueError(
            "flip_loss: weight is on " + str(weight.device) + " but the error map is on " + str(error.device)
        )
    _check_weight_shape(error, weight)
    acc = torch.float32
    if error.dtype == torch.float64 or weight.dtype == torch.float64:
        acc = torch.float64
    e = _as(error, acc)
    w = _as(weight, acc)
    per_image = reduction == "per_image"
    positive_total = reduction == "mean" or per_image
    # The scale is a constant for autograd: every reduction below is exact in it (scale-free, or
    # multiplied back), so the gradient with respect to the weight is that of the formula.
    checked = w.detach().expand(e.shape)
    if torch.jit.is_scripting():
        scale = _weight_scale(checked, per_image, positive_total)
    elif is_compiling():
        scale = _weight_scale_op(checked, per_image, positive_total)
    else:
        # Eager calls the checks directly: the same function, without the op's dispatch, whose
        # first call imports torch._dynamo (a second or more, once per process).
        scale = _weight_scale(checked, per_image, positive_total)
    if per_image:
        scale = scale.unsqueeze(-1).unsqueeze(-1).unsqueeze(-1)
    unit = w / scale  # in [0, 1]
    weighted = e * unit
    if reduction == "none":
        return _as(weighted * scale, error.dtype)
    if reduction == "sum":
        return _as(weighted.sum() * scale, error.dtype)
    totals = unit.expand(e.shape)
    if per_image:
        return _as(weighted.flatten(-3).sum(-1) / totals.flatten(-3).sum(-1), error.dtype)
    return _as(weighted.sum() / totals.sum(), error.dtype)


def _exposure_option(name: str, value):
    """A start or stop exposure as FLIPLoss keeps it: None, a checked float, or (a tensor with
    dimensions: one value per image, as hdr_flip takes it) a detached copy whose values are checked
    (real, finite, within the exposure limits; against the batch size when the loss runs)."""
    if value is None:
        return None
    if isinstance(value, torch.Tensor) and value.dim() > 0:
        rows = host_rows(exposure_values(value, value.numel(), value.device, name).unsqueeze(0))
        for i, v in enumerate([] if rows is None else rows[0]):
            if not math.isfinite(v):
                raise ValueError(f"flip_loss: {name} must be finite, got {v} for image {i}")
            options.check_exposure_value(name, v)
        return value.detach().clone()
    v = options.exposure(name, value)
    options.check_exposure_value(name, v)
    return v


def _check_exposure_options(start, stop) -> None:
    """Given start and stop exposures in order (checked image by image where both are tensors of
    matching sizes; the rest when the loss runs and knows the batch size)."""
    if start is None or stop is None:
        return
    if not isinstance(start, torch.Tensor) and not isinstance(stop, torch.Tensor):
        options.check_exposure_order(start, stop)
        return
    device = start.device if isinstance(start, torch.Tensor) else stop.device
    s = torch.as_tensor(start, dtype=torch.float32, device=device).flatten()
    e = torch.as_tensor(stop, dtype=torch.float32, device=device).flatten()
    if s.numel() == e.numel() or s.numel() == 1 or e.numel() == 1:
        n = max(s.numel(), e.numel())
        rows = host_rows(
            torch.stack(
                [s.to(e.device).expand(n) if s.numel() == 1 else s.to(e.device), e.expand(n) if e.numel() == 1 else e]
            )
        )
        if rows is not None:
            check_range_rows(rows, True, True)


def _count_option(value):
    """num_exposures as FLIPLoss keeps it: None, a checked int, or a detached copy of a tensor with
    dimensions (one count per image), each value checked."""
    if value is None:
        return None
    if isinstance(value, torch.Tensor) and value.dim() > 0:
        count_values(value, value.numel(), value.device)
        return value.detach().clone()
    return options.exposure_count(value)


# The scripted forward's views of the exposure attributes (TorchScript refines a Union by isinstance).


def _scripted_tensor(value: Optional[Union[float, torch.Tensor]]) -> Optional[torch.Tensor]:
    """The attribute if it is a tensor, else None."""
    if isinstance(value, torch.Tensor):
        return value
    else:
        return None


def _scripted_count(value: Optional[Union[int, torch.Tensor]]) -> Optional[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return value
    else:
        return None


def _scripted_as_tensor(value: Optional[Union[float, torch.Tensor]]) -> Optional[torch.Tensor]:
    """The attribute as the tensor path takes it (a number as a 0-dim tensor, None as None)."""
    if isinstance(value, torch.Tensor):
        return value
    else:
        if value is None:
            return None
        return torch.tensor(value, dtype=torch.float64, device=torch.device("cpu"))


def _scripted_count_as_tensor(value: Optional[Union[int, torch.Tensor]]) -> Optional[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return value
    else:
        if value is None:
            return None
        return torch.tensor(float(value), dtype=torch.float64, device=torch.device("cpu"))


def _scripted_number(value: Optional[Union[float, torch.Tensor]]) -> Optional[float]:
    if isinstance(value, torch.Tensor):  # not reached: the caller takes the tensor path
        return float(value.item())
    else:
        return value


def _scripted_int(value: Optional[Union[int, torch.Tensor]]) -> Optional[int]:
    if isinstance(value, torch.Tensor):  # not reached: the caller takes the tensor path
        return int(value.item())
    else:
        return value


def _exposures_given(
    start: Optional[Union[float, torch.Tensor]],
    stop: Optional[Union[float, torch.Tensor]],
    num: Optional[Union[int, torch.Tensor]],
) -> List[str]:
    """The names of FLIPLoss's exposure options that are set (not None). TorchScript-compatible."""
    given: List[str] = []
    if start is not None:
        given.append("start_exposure")
    if stop is not None:
        given.append("stop_exposure")
    if num is not None:
        given.append("num_exposures")
    return given


class FLIPLoss(torch.nn.Module):
    """LDR-FLIP (default) or HDR-FLIP (``hdr=True``) loss between ``test`` (e.g. a network's
    output) and ``reference``.

    LDR-FLIP takes the options of :func:`flip_loss.ldr_flip` (``input_space``, ``data_range``).
    HDR-FLIP takes linear HDR images (``input_space`` and ``data_range`` do not apply) and the
    options of :func:`flip_loss.hdr_flip`: ``tone_mapper``, and ``start_exposure``/``stop_exposure``/
    ``num_exposures`` (None: computed per image from the reference, as NVIDIA's evaluator does;
    numbers, or tensors with one value per image, as ``hdr_flip`` takes them, scripted too).
    Every option is checked when the module is built (``TypeError``/``ValueError``, limits in
    ``flip_loss.constants``) and again when it runs. Pixels per degree is an option of the
    constructor: a 0-dim ``weight`` (a ppd passed as NVIDIA's loss takes it) is refused.

    ``forward(test, reference, weight=None)`` takes N x 3 x H x W (or 3 x H x W) tensors, sRGB in
    [0, 1] unless ``input_space="linear"`` or ``data_range`` says otherwise, and an optional
    non-negative per-pixel ``weight`` (or mask) broadcastable to the N x 1 x H x W error map.
    ``reduction``:

    * ``"mean"`` (default): mean over all pixels; with ``weight``: sum(w * e) / sum(w);
    * ``"sum"``: sum(e), or sum(w * e);
    * ``"per_image"``: a tensor of N per-image (weighted) means (0-dim for a 3 x H x W input);
    * ``"none"``: the error map (times ``weight`` when given).

    ``alpha`` and ``background`` take RGBA inputs as :func:`flip_loss.ldr_flip` and
    :func:`flip_loss.hdr_flip` do (composited over the background first; :mod:`flip_loss.alpha`).

    Multi-scale FLIP: ``pixels_per_degree`` may be a list of values and ``ppd_weights`` one
    non-negative weight for each (default: equal); the loss is then that of the weighted mean of the
    maps at each scale (weights normalised to sum to 1), as :func:`flip_loss.ldr_flip` computes it.

    Negative or non-finite weights, and a zero total weight for ``"mean"``/``"per_image"``, raise
    ``ValueError``. Works with TorchScript (``torch.jit.script``) and ``torch.compile``, which make
    the same checks.
    """

    # One value, or a list of them (multi-scale: the weighted mean of the maps, ppd_weights).
    pixels_per_degree: Union[float, List[float]]
    ppd_weights: Optional[List[float]]
    input_space: str
    reduction: str
    eps: float
    data_range: Tuple[float, float]
    hdr: bool
    tone_mapper: str
    # A number, or a tensor of one value per image (as hdr_flip takes them), or None (automatic).
    start_exposure: Optional[Union[float, torch.Tensor]]
    stop_exposure: Optional[Union[float, torch.Tensor]]
    num_exposures: Optional[Union[int, torch.Tensor]]
    exposure_anchors: Dict[str, float]
    alpha: Optional[str]
    background: Union[str, List[float]]

    def __init__(
        self,
        pixels_per_degree: float = DEFAULT_PPD,
        input_space: str = "srgb",
        reduction: str = "mean",
        eps: float = DEFAULT_EPS,
        hdr: bool = False,
        tone_mapper: str = "aces",
        start_exposure: Optional[float] = None,
        stop_exposure: Optional[float] = None,
        num_exposures: Optional[int] = None,
        data_range=1.0,
        alpha: Optional[str] = None,
        background="black",
        ppd_weights: Optional[List[float]] = None,
    ):
        super().__init__()
        self.hdr = options.flag("hdr", hdr)
        ppds, _ = options.pixels_per_degree_scales(pixels_per_degree, ppd_weights)
        multi_scale = isinstance(pixels_per_degree, (list, tuple))
        self.pixels_per_degree = ppds if multi_scale else ppds[0]
        self.ppd_weights = None if ppd_weights is None else [float(w) for w in ppd_weights]
        self.input_space = options.input_space(input_space)
        self.reduction = options.reduction(reduction)
        self.eps = options.eps(eps)
        self.data_range = options.data_range(data_range)
        self.tone_mapper = options.tone_mapper(tone_mapper)
        self.start_exposure = _exposure_option("start_exposure", start_exposure)
        self.stop_exposure = _exposure_option("stop_exposure", stop_exposure)
        _check_exposure_options(self.start_exposure, self.stop_exposure)
        self.num_exposures = _count_option(num_exposures)
        options.check_mode_options(
            self.hdr,
            self.tone_mapper,
            _exposures_given(self.start_exposure, self.stop_exposure, self.num_exposures),
            self.data_range,
        )
        self.alpha, self.background = options.alpha_options(alpha, background)
        if self.hdr:
            options.check_background_value(self.background, 0.0, math.inf)
        else:
            options.check_background_value(self.background, self.data_range[0], self.data_range[1])
        # every tone mapper's anchor, for the scripted forward (which cannot run exposure_anchor), looked
        # up per call because tone_mapper may be changed after construction
        self.exposure_anchors = {name: exposure_anchor(name) for name in options.TONE_MAPPERS}
        # Whether an eager call has looked at the value range of inputs on a GPU (once per module,
        # since that is a host synchronisation; see flip_loss.functional).
        self._looked_at_device_inputs = False

    def __prepare_scriptable__(self):
        # A scripted module calls torch.ops.flip.* directly; without the compiled extension
        # TorchScript would only say "object has no attribute ldr_flip".
        if not _ops.HAS_EXTENSION:
            raise RuntimeError(f"flip_loss: torch.jit.script(FLIPLoss) needs the compiled ops, and {_ops.IMPORT_ERROR}")
        return self

    def forward(
        self, test: torch.Tensor, reference: torch.Tensor, weight: Optional[torch.Tensor] = None
    ) -> torch.Tensor:
        """The loss of ``test`` against ``reference`` (N x 3 x H x W or 3 x H x W, same shape and
        device), reduced by ``reduction``, optionally weighted per pixel by ``weight`` (non-negative,
        broadcastable to the N x 1 x H x W error map; a bool mask counts as 0/1). Pixels per degree
        and the other options belong to the constructor. Differentiable in both images."""
        if torch.jit.is_scripting():
            # TorchScript (and C++ programs loading the module) call the ops directly, after the
            # checks eager makes in Python (the ops check the scalar options and the values).
            # Every option attribute is normalised and checked as eager does (names in any case),
            # since it may have been set after construction: an assignment to a scripted module
            # cannot be intercepted, so the one rule for all three paths is "when it runs".
            alpha = options.name_value(self.alpha)
            background = options.background_value(self.background)
            options.check_alpha_value(alpha, background)
            input_space = options.input_space_value(self.input_space)
            options.check_eps_value(self.eps)
            tone_mapper = self.tone_mapper.lower()
            if tone_mapper not in self.exposure_anchors:
                raise ValueError(
                    "flip_loss: tone_mapper must be one of '"
                    + "', '".join(list(self.exposure_anchors.keys()))
                    + "', got '"
                    + self.tone_mapper
                    + "'"
                )
            options.check_data_range_value(self.data_range[0], self.data_range[1])
            options.check_mode_options(
                self.hdr,
                tone_mapper,
                _exposures_given(self.start_exposure, self.stop_exposure, self.num_exposures),
                self.data_range,
            )
            check_image_pair(test, reference, alpha is not None, not self.hdr)
            # The ops require only ppd > 0; the Python API's limits (and the weights) are checked here.
            ppds, weights = options.checked_scales(self.pixels_per_degree, self.ppd_weights)
            test, reference = promoted_pair(test, reference)  # as eager does
            if self.hdr:
                if alpha is not None:
                    options.check_background_value(background, 0.0, math.inf)
                    test = composite(test, alpha, background, True)
                    reference = composite(reference, alpha, background, True)
                ref = reference if reference.dim() == 4 else reference.unsqueeze(0)
                anchor = self.exposure_anchors[tone_mapper]
                start = self.start_exposure
                stop = self.stop_exposure
                num = self.num_exposures
                if (
                    _scripted_tensor(start) is not None
                    or _scripted_tensor(stop) is not None
                    or _scripted_count(num) is not None
                ):
                    exposures, counts, _, _ = exposures_from_tensors(
                        ref,
                        anchor,
                        _scripted_as_tensor(start),
                        _scripted_as_tensor(stop),
                        _scripted_count_as_tensor(num),
                    )
                else:
                    exposures, counts, _, _ = exposures_from_numbers(
                        ref, anchor, _scripted_number(start), _scripted_number(stop), _scripted_int(num)
                    )
                maps = [
                    torch.ops.flip.hdr_flip(test, reference, exposures, counts, ppd, tone_mapper, self.eps)[0]
                    for ppd in ppds
                ]
                error = weighted_sum(maps, weights)
            else:
                test, reference = unit_pair(test, reference, self.data_range, alpha is None and len(ppds) == 1)
                if alpha is not None:
                    low, high = self.data_range
                    options.check_background_value(background, low, high)
                    unit = unit_background(background, low, high)
                    linear = input_space == "linear"
                    test = composite(test, alpha, unit, linear)
                    reference = composite(reference, alpha, unit, linear)
                # As ldr_flip: one _ldr_flip_multiscale call on the CPU, else one ldr_flip per scale.
                if len(ppds) > 1 and multiscale_op_serves(test.device):
                    error = multiscale_op(test, reference, ppds, weights, input_space, self.eps)
                else:
                    maps = [torch.ops.flip.ldr_flip(test, reference, ppd, input_space, self.eps) for ppd in ppds]
                    error = weighted_sum(maps, weights)
        else:
            # The constructor's rules, for options set after construction (a scripted module's
            # attributes have their types; eager ones can hold anything). input_space is checked in
            # either mode, as the constructor and the scripted module check it.
            hdr = options.flag("hdr", self.hdr)
            options.input_space(self.input_space)
            options.check_mode_options(
                hdr,
                options.tone_mapper(self.tone_mapper),
                _exposures_given(self.start_exposure, self.stop_exposure, self.num_exposures),
                options.data_range(self.data_range),
            )
            if hdr:
                error = hdr_flip(
                    test,
                    reference,
                    self.pixels_per_degree,
                    self.tone_mapper,
                    self.start_exposure,
                    self.stop_exposure,
                    self.num_exposures,
                    eps=self.eps,
                    alpha=self.alpha,
                    background=self.background,
                    ppd_weights=self.ppd_weights,
                )
            else:
                look = not self._looked_at_device_inputs
                if is_device_call(test):
                    self._looked_at_device_inputs = True
                error = ldr_flip_with_look(
                    test,
                    reference,
                    self.pixels_per_degree,
                    self.input_space,
                    self.eps,
                    self.data_range,
                    look,
                    self.alpha,
                    self.background,
                    self.ppd_weights,
                )
        return weighted_reduce(error, weight, self.reduction)

    def extra_repr(self) -> str:
        alpha = "" if self.alpha is None else f", alpha={self.alpha!r}, background={self.background!r}"
        if isinstance(self.pixels_per_degree, list):
            ppd = "[" + ", ".join(f"{p:.4f}" for p in self.pixels_per_degree) + "]"
            if self.ppd_weights is not None:
                ppd += f", ppd_weights={self.ppd_weights}"
        else:
            ppd = f"{self.pixels_per_degree:.4f}"
        if self.hdr:
            return (
                f"hdr=True, pixels_per_degree={ppd}, tone_mapper={self.tone_mapper!r}, "
                f"start_exposure={self.start_exposure}, stop_exposure={self.stop_exposure}, "
                f"num_exposures={self.num_exposures}, reduction={self.reduction!r}{alpha}"
            )
        data_range = "" if self.data_range == (0.0, 1.0) else f", data_range={self.data_range}"
        return (
            f"pixels_per_degree={ppd}, input_space={self.input_space!r}, "
            f"reduction={self.reduction!r}{data_range}{alpha}"
        )
