"""``FLIPLoss``: LDR-FLIP or HDR-FLIP as an ``nn.Module`` loss, with optional per-pixel weights
(masks)."""
import math
from typing import List, Optional, Tuple

import torch

from .constants import DEFAULT_EPS, DEFAULT_PPD
from .functional import _check_pair, ldr_flip
from .hdr import _exposure_grid, _luminance_range, _tone_mapper, exposure_anchor, hdr_flip

REDUCTIONS = ("mean", "sum", "none", "per_image")


def _is_compiling() -> bool:
    """True while torch.compile (dynamo) traces; data-dependent checks are then done with
    ``torch._assert_async`` instead of a Python ``raise``."""
    compiler = getattr(torch, "compiler", None)
    return bool(compiler is not None and hasattr(compiler, "is_compiling") and compiler.is_compiling())


def _check_weight_shape(error: torch.Tensor, weight: torch.Tensor) -> None:
    es: List[int] = error.shape
    ws: List[int] = weight.shape
    ok = len(ws) <= len(es)
    if ok:
        for i in range(1, len(ws) + 1):
            if ws[-i] != 1 and ws[-i] != es[-i]:
                ok = False
    if not ok:
        raise ValueError("flip_loss: weight of shape " + str(ws) + " does not broadcast to the error map "
                         "of shape " + str(es) + " (use N x 1 x H x W, 1 x 1 x H x W, H x W, ...)")


def weighted_reduce(error: torch.Tensor, weight: Optional[torch.Tensor], reduction: str,
                    check: bool = True) -> torch.Tensor:
    """Reduces a FLIP error map (N x 1 x H x W, or 1 x H x W) as ``FLIPLoss`` does.

    Without ``weight``: ``"mean"`` over all pixels, ``"sum"``, ``"per_image"`` (the mean of each
    image: N values, a 0-dim tensor for a 1 x H x W map) or ``"none"`` (the map itself).
    With ``weight`` (non-negative, finite, broadcastable to the map's shape without changing it; a
    bool mask counts as 0/1): ``"mean"`` = sum(w * e) / sum(w) over everything, ``"per_image"`` the
    same per image, ``"sum"`` = sum(w * e), ``"none"`` = w * e. A negative or non-finite weight, or a
    zero total weight for ``"mean"`` (for any image, for ``"per_image"``), raises ``ValueError``
    (``check=False`` skips these checks, which need a device-to-host sync; ``FLIPLoss`` skips them
    only under ``torch.compile``, where ``torch._assert_async`` checks instead).
    """
    if weight is None:
        if reduction == "mean":
            return error.mean()
        if reduction == "sum":
            return error.sum()
        if reduction == "per_image":
            return error.flatten(-3).mean(-1)
        return error
    if weight.dtype == torch.bool:
        w = weight.to(error.dtype)
    elif weight.is_floating_point():
        w = weight.to(error.dtype)
    else:
        raise TypeError("flip_loss: weight must be a floating-point or bool tensor, got " + str(weight.dtype))
    if w.device != error.device:
        raise ValueError("flip_loss: weight is on " + str(w.device) + " but the error map is on "
                         + str(error.device))
    _check_weight_shape(error, w)
    if check:
        if not bool(torch.isfinite(w).all()):
            raise ValueError("flip_loss: weight contains NaN or infinite values")
        if bool((w < 0).any()):
            raise ValueError("flip_loss: weight must be non-negative (it has negative entries)")
    weighted = error * w
    if reduction == "none":
        return weighted
    if reduction == "sum":
        return weighted.sum()
    w_full = w.expand(error.shape)
    if reduction == "per_image":
        totals = w_full.flatten(-3).sum(-1)
        if check:
            if bool((totals == 0).any()):
                raise ValueError("flip_loss: the weights of an image sum to zero, so its weighted mean "
                                 "is undefined (reduction='per_image')")
        else:
            torch._assert_async((totals != 0).all(), "flip_loss: the weights of an image sum to zero")
        return weighted.flatten(-3).sum(-1) / totals
    total = w_full.sum()
    if check:
        if bool(total == 0):
            raise ValueError("flip_loss: the weights sum to zero, so the weighted mean is undefined "
                             "(reduction='mean')")
    else:
        torch._assert_async(total != 0, "flip_loss: the weights sum to zero")
    return weighted.sum() / total


def _scripted_exposures(reference: torch.Tensor, anchor: float, start: Optional[float], stop: Optional[float],
                        num: Optional[int]) -> Tuple[torch.Tensor, torch.Tensor]:
    """TorchScript twin of ``flip_loss.hdr.exposures_for`` for scalar options (the same rule and
    helpers): the scripted module, and C++ programs that load it, get the automatic exposures too."""
    ref = reference
    if ref.dim() == 3:
        ref = ref.unsqueeze(0)
    n = ref.shape[0]
    s = torch.full([n], 0.0, dtype=torch.float32, device=ref.device)
    e = torch.full([n], 0.0, dtype=torch.float32, device=ref.device)
    if start is None or stop is None:
        auto = _luminance_range(ref, anchor)
        s = auto[0].to(torch.float32)
        e = auto[1].to(torch.float32)
    if start is not None:
        s = torch.full([n], start, dtype=torch.float32, device=ref.device)
    if stop is not None:
        e = torch.full([n], stop, dtype=torch.float32, device=ref.device)
    if num is None:
        counts = torch.clamp(torch.ceil(e - s), min=2.0).to(torch.int64)
        count_max = int(counts.max().item())
    else:
        counts = torch.full([n], num, dtype=torch.int64, device=ref.device)
        count_max = num
    return _exposure_grid(s, e, counts, count_max), counts


class FLIPLoss(torch.nn.Module):
    """LDR-FLIP (default) or HDR-FLIP (``hdr=True``) loss between ``test`` (e.g. a network's
    output) and ``reference``.

    HDR-FLIP takes linear HDR images (``input_space`` does not apply) and the options of
    :func:`flip_loss.hdr_flip`: ``tone_mapper``, and ``start_exposure``/``stop_exposure``/
    ``num_exposures`` (None: computed per image from the reference, as NVIDIA's evaluator does).

    ``forward(test, reference, weight=None)`` takes N x 3 x H x W (or 3 x H x W) tensors, sRGB in
    [0, 1] unless ``input_space="linear"``, and an optional non-negative per-pixel ``weight`` (or
    mask) broadcastable to the N x 1 x H x W error map. ``reduction``:

    * ``"mean"`` (default): mean over all pixels; with ``weight``: sum(w * e) / sum(w);
    * ``"sum"``: sum(e), or sum(w * e);
    * ``"per_image"``: a tensor of N per-image (weighted) means (0-dim for a 3 x H x W input);
    * ``"none"``: the error map (times ``weight`` when given).

    Negative or non-finite weights, and a zero total weight for ``"mean"``/``"per_image"``, raise
    ``ValueError``. Works with TorchScript (``torch.jit.script``) and ``torch.compile``.
    """

    pixels_per_degree: float
    input_space: str
    reduction: str
    eps: float
    hdr: bool
    tone_mapper: str
    start_exposure: Optional[float]
    stop_exposure: Optional[float]
    num_exposures: Optional[int]
    exposure_anchor: float

    def __init__(self, pixels_per_degree: float = DEFAULT_PPD, input_space: str = "srgb",
                 reduction: str = "mean", eps: float = DEFAULT_EPS, hdr: bool = False, tone_mapper: str = "aces",
                 start_exposure: Optional[float] = None, stop_exposure: Optional[float] = None,
                 num_exposures: Optional[int] = None):
        super().__init__()
        given = [k for k, v in (("start_exposure", start_exposure), ("stop_exposure", stop_exposure),
                                ("num_exposures", num_exposures)) if v is not None]
        if not hdr and (given or tone_mapper != "aces"):
            raise ValueError(f"flip_loss: {', '.join(given) or 'tone_mapper'} only apply with hdr=True")
        for name, v in (("start_exposure", start_exposure), ("stop_exposure", stop_exposure)):
            if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v)):
                raise ValueError(f"flip_loss: {name} must be a finite number, got {v!r}")
        if start_exposure is not None and stop_exposure is not None and start_exposure > stop_exposure:
            raise ValueError(f"flip_loss: start_exposure ({start_exposure}) must not exceed stop_exposure "
                             f"({stop_exposure})")
        if num_exposures is not None and (isinstance(num_exposures, bool) or not isinstance(num_exposures, int)
                                          or num_exposures < 2):
            raise ValueError(f"flip_loss: num_exposures must be an integer >= 2, got {num_exposures!r}")
        self.hdr = bool(hdr)
        self.tone_mapper = _tone_mapper(tone_mapper)
        self.start_exposure = None if start_exposure is None else float(start_exposure)
        self.stop_exposure = None if stop_exposure is None else float(stop_exposure)
        self.num_exposures = num_exposures
        self.exposure_anchor = exposure_anchor(self.tone_mapper)
        if reduction not in REDUCTIONS:
            raise ValueError(f"flip_loss: reduction must be one of {REDUCTIONS}, got {reduction!r}")
        # Validate the scalar options once, on a dummy pair.
        dummy = torch.zeros(1, 3, 1, 1)
        _check_pair(dummy, dummy, pixels_per_degree, input_space, eps)
        self.pixels_per_degree = float(pixels_per_degree)
        self.input_space = input_space.lower()
        self.reduction = reduction
        self.eps = float(eps)

    def forward(self, test: torch.Tensor, reference: torch.Tensor,
                weight: Optional[torch.Tensor] = None) -> torch.Tensor:
        if torch.jit.is_scripting():
            # TorchScript (and C++ programs loading the module) call the ops directly; they check
            # their arguments themselves.
            if self.hdr:
                exposures, counts = _scripted_exposures(reference, self.exposure_anchor, self.start_exposure,
                                                        self.stop_exposure, self.num_exposures)
                error = torch.ops.flip.hdr_flip(test, reference, exposures, counts, self.pixels_per_degree,
                                                self.tone_mapper, self.eps)[0]
            else:
                error = torch.ops.flip.ldr_flip(test, reference, self.pixels_per_degree, self.input_space,
                                                self.eps)
            check = True
        else:
            if self.hdr:
                error = hdr_flip(test, reference, self.pixels_per_degree, self.tone_mapper, self.start_exposure,
                                 self.stop_exposure, self.num_exposures, eps=self.eps)
            else:
                error = ldr_flip(test, reference, self.pixels_per_degree, self.input_space, self.eps)
            check = not _is_compiling()
        return weighted_reduce(error, weight, self.reduction, check)

    def extra_repr(self) -> str:
        if self.hdr:
            return (f"hdr=True, pixels_per_degree={self.pixels_per_degree:.4f}, tone_mapper={self.tone_mapper!r}, "
                    f"start_exposure={self.start_exposure}, stop_exposure={self.stop_exposure}, "
                    f"num_exposures={self.num_exposures}, reduction={self.reduction!r}")
        return (f"pixels_per_degree={self.pixels_per_degree:.4f}, input_space={self.input_space!r}, "
                f"reduction={self.reduction!r}")
