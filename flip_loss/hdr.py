"""HDR-FLIP: automatic exposures and the functional API (docs/algorithm.md §5)."""

import math
from typing import List, Optional, Tuple, Union

import numpy as np
import torch

from . import alpha as alpha_rule
from . import constants, op_checks, options
from .constants import DEFAULT_EPS, DEFAULT_PPD, tone_coefficients
from ._ops import kernels_serve
from .tensor_values import host_table, is_compiling
from .image_checks import check_image, checked_pair
from .multiscale import weighted_sum

__all__ = ["TONE_MAPPERS", "exposure_anchor", "exposure_range", "exposures_for", "hdr_flip"]

TONE_MAPPERS = options.TONE_MAPPERS
ExposureArg = Union[None, float, int, torch.Tensor]


def exposure_anchor(tone_mapper: str = "aces", target: float = 0.85) -> float:
    """The scene value that ``tone_mapper`` maps to ``target`` (0.85 for the automatic exposures):
    the larger root of the quadratic, solved in float32 as NVIDIA's evaluator does (Reinhard uses
    x / (1 + x) here, as the evaluator does)."""
    f = np.float32
    k = [f(v) for v in tone_coefficients(options.tone_mapper(tone_mapper))]
    t = f(target)
    a, b, c = k[0] - t * k[3], k[1] - t * k[4], k[2] - t * k[5]
    if a == 0:
        return float(-c / b)
    d1 = f(-0.5) * (b / a)
    return float(d1 + np.sqrt(d1 * d1 - c / a, dtype=np.float32))


def as_batch(x: torch.Tensor) -> torch.Tensor:
    return x.unsqueeze(0) if x.dim() == 3 else x


def checked_reference(reference) -> torch.Tensor:
    """The reference, batched, after the checks every image gets (TypeError for a non-float tensor,
    ValueError for a wrong shape or an empty one)."""
    if not isinstance(reference, torch.Tensor):
        raise TypeError(f"flip_loss: reference must be a torch.Tensor, got {type(reference).__name__}")
    check_image("reference", reference)
    return as_batch(reference)


def exposure_range(
    reference: torch.Tensor, tone_mapper: str = "aces", median: str = "upper"
) -> Tuple[torch.Tensor, torch.Tensor]:
    """Automatic (start, stop) exposures in stops, one per image of ``reference`` (N x 3 x H x W
    linear HDR, or 3 x H x W), as tensors of shape N on the reference's device.

    start = log2(x* / max luminance), stop = log2(x* / median luminance), x* =
    ``exposure_anchor(tone_mapper)``; the median is the upper middle element (index floor(P/2) of the
    P sorted luminances), as flip-evaluator takes it, or with ``median="lower"`` the lower one
    (index floor((P - 1)/2), ``torch.median``'s, as NVIDIA's PyTorch loss takes it); the two differ
    only for an even pixel count. Like flip-evaluator 1.7, a median below float32 epsilon (more than half
    the pixels black) is raised to epsilon; unlike it, so is the maximum, so that an all-black
    reference gives start = stop (two identical exposures) instead of an error.

    Raises ``TypeError`` for a reference that is not a floating-point tensor and ``ValueError`` for a
    wrong shape, an empty reference, or a range that is not finite (NaN or infinite values in the
    reference); that check reads the two values per image back to the host.
    """
    ref = checked_reference(reference)
    lower = options.median_rule(median) == "lower"
    start, stop = _luminance_range(ref, exposure_anchor(tone_mapper), lower)
    rows = host_rows(torch.stack([start, stop]))
    if rows is not None:  # None: a reference without values (meta), whose range is not known
        check_range_rows(rows, False, False)
    return start, stop


def _luminance_range(ref: torch.Tensor, anchor: float, lower_median: bool = False) -> Tuple[torch.Tensor, torch.Tensor]:
    """The rule of ``exposure_range`` for a batched reference, unchecked. TorchScript-compatible: a
    scripted ``FLIPLoss(hdr=True)`` calls it too."""
    y_max, y_med = luminance_max_median(ref, lower_median)
    return torch.log2(torch.full_like(y_max, anchor) / y_max), torch.log2(torch.full_like(y_med, anchor) / y_med)


def luminance_max_median(ref: torch.Tensor, lower_median: bool = False) -> Tuple[torch.Tensor, torch.Tensor]:
    """Per image of a batched reference, the largest and the median luminance (upper middle element,
    or the lower one with ``lower_median``), both raised to at least float32 epsilon, in float32
    (float64 for a float64 reference); NaN maxima for a reference with -inf values.
    TorchScript-compatible."""
    flt_epsilon = 1.1920928955078125e-07  # float32 epsilon, as a literal for TorchScript
    dt = torch.float64 if ref.dtype == torch.float64 else torch.float32
    # The exposures are settings of the metric, not a function to differentiate: the compiled op
    # gives them no gradient, so the pure-PyTorch fallback must not either.
    rgb = torch.clamp(ref.detach().to(dt), min=0.0)
    lum = (0.2126 * rgb[:, 0] + 0.7152 * rgb[:, 1] + 0.0722 * rgb[:, 2]).flatten(1)
    y_max = lum.amax(dim=1).clamp(min=flt_epsilon)
    # Negative values count as 0, but -inf is not a value: it makes the range undefined, as NaN
    # and +inf do (they reach y_max through the sum).
    neg_inf = torch.isneginf(ref.detach()).flatten(1).any(dim=1)
    y_max = torch.where(neg_inf, torch.full_like(y_max, float("nan")), y_max)
    # kthvalue counts from 1: the 0-based middle index P // 2 (upper) or (P - 1) // 2 (lower).
    middle = (lum.shape[1] - 1) // 2 if lower_median else lum.shape[1] // 2
    y_med = torch.kthvalue(lum, middle + 1, dim=1)[0].clamp(min=flt_epsilon)
    return y_max, y_med


def exposure_grid(start: torch.Tensor, stop: torch.Tensor, counts: torch.Tensor, count_max: int) -> torch.Tensor:
    """N x count_max exposures start + i (stop - start) / (count - 1), in float32 as the evaluator
    computes them (TorchScript-compatible)."""
    step = (stop - start) / (counts - 1).to(torch.float32)
    i = torch.arange(count_max, device=start.device, dtype=torch.float32)
    return (start.unsqueeze(1) + i.unsqueeze(0) * step.unsqueeze(1)).detach()


# The checks below need the values of the per-image exposure ranges, which may live on a GPU: each
# caller reads them back once, as one small table (host_rows), and checks that on the host. They
# are TorchScript-compatible, so that the scripted FLIPLoss(hdr=True) raises where eager does.


def host_rows(table: torch.Tensor) -> Optional[List[List[float]]]:
    """A small table (rows of per-image values) as Python floats: one device-to-host copy. None
    for a table without values (meta tensors, FakeTensors outside torch.compile): the checks are
    skipped there. Under vmap each row holds the values of every example (see host_table)."""
    if torch.jit.is_scripting():
        rows: List[List[float]] = table.to(torch.float64).cpu().tolist()
        return rows
    else:
        return _eager_host_rows(table)


def _eager_host_rows(table: torch.Tensor) -> Optional[List[List[float]]]:
    if is_compiling():  # a graph break: the values are real when the rest runs
        return table.to(torch.float64).cpu().tolist()
    host = host_table(table)
    return None if host is None else host.tolist()


def _origin(given: bool) -> str:
    return "" if given else " (computed from the reference)"


def check_range_rows(rows: List[List[float]], start_given: bool, stop_given: bool) -> None:
    """Image i's exposure range rows[0][i] (start) to rows[1][i] (stop) must be finite and in order;
    ``*_given`` say whether a bound was given by the caller or computed from the reference."""
    for i in range(len(rows[0])):
        start = rows[0][i]
        stop = rows[1][i]
        if (not start_given and not math.isfinite(start)) or (not stop_given and not math.isfinite(stop)):
            raise ValueError(
                "flip_loss: the automatic exposure range of image " + str(i) + " is undefined: "
                "the reference has NaN or infinite values (or luminances beyond the float range)"
            )
        if not (math.isfinite(start) and math.isfinite(stop)):
            raise ValueError(
                "flip_loss: start_exposure and stop_exposure must be finite, got "
                + str(start)
                + " and "
                + str(stop)
                + " for image "
                + str(i)
            )
        if start_given:
            options.check_exposure_value("start_exposure", start)
        if stop_given:
            options.check_exposure_value("stop_exposure", stop)
        if start > stop:
            advice = ""
            if start_given != stop_given:
                advice = "; give both exposures"
            raise ValueError(
                "flip_loss: start_exposure "
                + str(start)
                + _origin(start_given)
                + " must not exceed stop_exposure "
                + str(stop)
                + _origin(stop_given)
                + " (image "
                + str(i)
                + ")"
                + advice
            )


def automatic_counts(
    start: torch.Tensor, stop: torch.Tensor, start_given: bool, stop_given: bool
) -> Tuple[torch.Tensor, int, int]:
    """Checks the ranges (as check_range_rows) and returns the automatic counts max(2, ceil(stop -
    start)) (int64, on the device), their maximum, which must not exceed MAX_EXPOSURES, and their
    minimum (read in the same copy to the host). Without values to read (meta tensors) both are
    taken as MAX_EXPOSURES, a bound of every count (and no sign of counts that differ)."""
    counts = torch.clamp(torch.ceil(stop - start), min=2.0)
    rows = host_rows(torch.stack([start, stop, counts]))
    if rows is None:
        return counts.to(torch.int64), constants.MAX_EXPOSURES, constants.MAX_EXPOSURES
    check_range_rows(rows, start_given, stop_given)
    count_max = 0
    for i in range(len(rows[2])):
        count = int(rows[2][i])
        if count > constants.MAX_EXPOSURES:
            what = "the dynamic range of reference image " + str(i)
            if start_given or stop_given:
                what = "the exposure range of image " + str(i)
            limit = str(constants.MAX_EXPOSURES)
            raise ValueError(
                "flip_loss: "
                + what
                + ", from "
                + str(rows[0][i])
                + " to "
                + str(rows[1][i])
                + " stops, needs "
                + str(count)
                + " exposures, more than the limit of "
                + limit
                + "; pass num_exposures (at most "
                + limit
                + "), or start_exposure and stop_exposure for a narrower range"
            )
        count_max = max(count_max, count)
    return counts.to(torch.int64), count_max, int(min(rows[2]))


def exposures_from_numbers(
    ref: torch.Tensor,
    anchor: float,
    start: Optional[float],
    stop: Optional[float],
    num: Optional[int],
    lower_median: bool = False,
) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``exposures_for`` of a checked, batched reference for options that are numbers or None: eager
    calls with such options and the scripted ``FLIPLoss(hdr=True)`` (whose attributes can be changed
    after construction, so the numbers are checked again). Reads values back to the host only when
    something is computed from the reference or the count is automatic."""
    n = ref.shape[0]
    if num is not None:
        options.check_exposure_count_value(num)
    if start is not None:
        options.check_exposure_value("start_exposure", start)
    if stop is not None:
        options.check_exposure_value("stop_exposure", stop)
    if start is not None and stop is not None:
        options.check_exposure_order(start, stop)
        s = torch.full([n], start, dtype=torch.float32, device=ref.device)
        e = torch.full([n], stop, dtype=torch.float32, device=ref.device)
        if num is not None:
            counts = torch.full([n], num, dtype=torch.int64, device=ref.device)
            return exposure_grid(s, e, counts, num), counts, s, e
    else:
        auto = _luminance_range(ref, anchor, lower_median)
        if start is None:
            s = auto[0].to(torch.float32)
        else:
            s = torch.full([n], start, dtype=torch.float32, device=ref.device)
        if stop is None:
            e = auto[1].to(torch.float32)
        else:
            e = torch.full([n], stop, dtype=torch.float32, device=ref.device)
    if num is None:
        counts, count_max, _ = automatic_counts(s, e, start is not None, stop is not None)
    else:
        rows = host_rows(torch.stack([s, e]))
        if rows is not None:
            check_range_rows(rows, start is not None, stop is not None)
        counts = torch.full([n], num, dtype=torch.int64, device=ref.device)
        count_max = num
    return exposure_grid(s, e, counts, count_max), counts, s, e


# Options given as tensors (one value, or one per image): the rule of hdr_flip, FLIPLoss and the
# scripted FLIPLoss alike (TorchScript-compatible).


def _real_tensor(value: torch.Tensor, name: str) -> None:
    if value.dtype == torch.bool or value.is_complex():
        raise TypeError("flip_loss: " + name + " must hold real numbers, got dtype " + str(value.dtype))


def _per_image(value: torch.Tensor, n: int, name: str) -> torch.Tensor:
    if value.numel() == 1:
        return value.flatten().expand(n)
    if value.numel() != n:
        raise ValueError(
            "flip_loss: "
            + name
            + " must be a number or have one value per image ("
            + str(n)
            + "), got shape "
            + str(list(value.shape))
        )
    return value.flatten()


def exposure_values(value: torch.Tensor, n: int, device: torch.device, name: str) -> torch.Tensor:
    """A start or stop exposure tensor as N float32 values on ``device`` (not yet checked: see
    check_range_rows)."""
    _real_tensor(value, name)
    return _per_image(value.detach().to(device=device, dtype=torch.float32), n, name)


def count_values(value: torch.Tensor, n: int, device: torch.device) -> Tuple[torch.Tensor, int]:
    """Given counts (one, or one per image), each checked as options.exposure_count checks a number
    (read back to the host for that), as N int64 values on ``device``, and their maximum (under
    vmap, over every example; MAX_EXPOSURES for counts without values, on meta tensors)."""
    _real_tensor(value, "num_exposures")
    given = _per_image(value.detach().to(torch.float64), n, "num_exposures")
    rows = host_rows(given.unsqueeze(0))
    count_max = constants.MAX_EXPOSURES
    if rows is not None:
        count_max = 0
        for v in rows[0]:
            count_max = max(count_max, options.check_exposure_count_number(v))
    return given.to(device=device, dtype=torch.int64), count_max


def exposures_from_tensors(
    ref: torch.Tensor,
    anchor: float,
    start: Optional[torch.Tensor],
    stop: Optional[torch.Tensor],
    num: Optional[torch.Tensor],
    lower_median: bool = False,
) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``exposures_for`` of a checked, batched reference for options given as tensors (one value or
    one per image) or None: the values are read back once to be checked."""
    n = ref.shape[0]
    if start is not None and stop is not None:
        s = exposure_values(start, n, ref.device, "start_exposure")
        e = exposure_values(stop, n, ref.device, "stop_exposure")
    else:
        auto_start, auto_stop = _luminance_range(ref, anchor, lower_median)
        if start is None:
            s = auto_start.to(torch.float32)
        else:
            s = exposure_values(start, n, ref.device, "start_exposure")
        if stop is None:
            e = auto_stop.to(torch.float32)
        else:
            e = exposure_values(stop, n, ref.device, "stop_exposure")
    if num is None:
        counts, count_max, _ = automatic_counts(s, e, start is not None, stop is not None)
    else:
        counts, count_max = count_values(num, n, ref.device)
        rows = host_rows(torch.stack([s, e]))
        if rows is not None:
            check_range_rows(rows, start is not None, stop is not None)
    return exposure_grid(s, e, counts, count_max), counts, s, e


def _is_tensor_option(value) -> bool:
    """Whether an eager option takes the tensor path: a tensor with dimensions, or one whose value
    cannot be read as a number (a 0-dim tensor vmapped over, one value per example)."""
    return isinstance(value, torch.Tensor) and (
        value.dim() > 0 or torch._C._functorch.is_functorch_wrapped_tensor(value)
    )


def option_tensor(name: str, value: ExposureArg) -> Optional[torch.Tensor]:
    """An eager option as the tensor exposures_from_tensors takes (a number is checked here for its
    type, as options.exposure and options.exposure_count check it)."""
    if value is None or _is_tensor_option(value):
        return value
    if name == "num_exposures":
        return torch.tensor(float(options.exposure_count(value)), dtype=torch.float64, device="cpu")
    return torch.tensor(options.exposure(name, value), dtype=torch.float64, device="cpu")


def exposures_for(
    reference: torch.Tensor,
    tone_mapper: str = "aces",
    start_exposure: ExposureArg = None,
    stop_exposure: ExposureArg = None,
    num_exposures: ExposureArg = None,
    median: str = "upper",
):
    """(exposures N x E, counts N, start N, stop N) for ``reference``: automatic where not given
    (with the median rule ``median`` of ``exposure_range``).
    Exposures are start + i (stop - start) / (count - 1), in float32 as the evaluator computes them.

    Each option is a number (a 0-dim tensor counts as one) or a tensor with one value per image.
    Raises ``ValueError`` for a range that is not finite (given, or automatic for a reference with
    NaN or infinite values), a given bound outside [-149, 127], start above stop, a count that is
    not a whole number from 2 to
    ``MAX_EXPOSURES`` (an automatic count above it too), and ``TypeError`` for values of the wrong
    kind. Given numbers for all three options need no device-to-host copy; anything computed from the
    reference or given per image is read back once (a few values per image) to be checked.
    """
    ref = checked_reference(reference)
    tone_mapper = options.tone_mapper(tone_mapper)
    lower = options.median_rule(median) == "lower"
    # The anchor only matters (and is only computed, with NumPy, outside torch.compile's reach)
    # when a bound comes from the reference.
    anchor = exposure_anchor(tone_mapper) if start_exposure is None or stop_exposure is None else 0.0
    if not any(_is_tensor_option(v) for v in (start_exposure, stop_exposure, num_exposures)):
        return exposures_from_numbers(
            ref,
            anchor,
            None if start_exposure is None else options.exposure("start_exposure", start_exposure),
            None if stop_exposure is None else options.exposure("stop_exposure", stop_exposure),
            None if num_exposures is None else options.exposure_count(num_exposures),
            lower,
        )
    return exposures_from_tensors(
        ref,
        anchor,
        option_tensor("start_exposure", start_exposure),
        option_tensor("stop_exposure", stop_exposure),
        option_tensor("num_exposures", num_exposures),
        lower,
    )


def hdr_flip(
    test: torch.Tensor,
    reference: torch.Tensor,
    pixels_per_degree: float = DEFAULT_PPD,
    tone_mapper: str = "aces",
    start_exposure: ExposureArg = None,
    stop_exposure: ExposureArg = None,
    num_exposures: ExposureArg = None,
    return_exposure_map: bool = False,
    eps: float = DEFAULT_EPS,
    median: str = "upper",
    alpha: Optional[str] = None,
    background="black",
    ppd_weights: Optional[List[float]] = None,
):
    """HDR-FLIP error map between linear HDR images ``test`` and ``reference`` (N x 3 x H x W or
    3 x H x W, non-negative; negative values count as 0). The per-pixel maximum of LDR-FLIP over
    exposures from ``start_exposure`` to ``stop_exposure`` stops (``num_exposures`` of them), each
    image exposed by 2^c, tone mapped (a name of ``TONE_MAPPERS``, any case) and clamped.
    Exposures left as None are computed per image from the reference (``exposure_range``); each
    may also be a tensor with one value per image; a given start or stop exposure lies in
    [MIN_EXPOSURE_STOPS, MAX_EXPOSURE_STOPS] = [-149, 127]; a count is a whole number from 2 to
    ``MAX_EXPOSURES`` (256), an automatic one included (see ``exposures_for`` for the errors).
    ``median`` picks the median rule of the automatic stop exposure (see ``exposure_range``):
    ``"upper"`` (default, flip-evaluator's) or ``"lower"`` (NVIDIA's PyTorch loss's).
    Returns the map (N x 1 x H x W), and with ``return_exposure_map=True`` also the exposure map
    (winning exposure index / (count - 1), 0 where no exposure wins). Differentiable in both images.
    RGBA images (4 channels) need ``alpha="straight"`` or ``alpha="premultiplied"``: each is
    composited over ``background`` (``"black"``, ``"white"`` = linear 1.0, ``"checkerboard"`` or a
    non-negative linear (r, g, b) triple) in linear values before anything else, the automatic
    exposures included (:mod:`flip_loss.alpha`).

    Multi-scale HDR-FLIP: a list (or tuple) of ``pixels_per_degree`` values gives the weighted mean
    of the maps at each, ``ppd_weights`` as :func:`flip_loss.ldr_flip` takes them; the exposures
    are computed once for all scales. It has no single exposure map: ``return_exposure_map=True``
    then raises ``ValueError``.
    """
    mode, bg = options.alpha_options(alpha, background)
    test, reference = checked_pair(test, reference, mode is not None)
    ppds, weights = options.pixels_per_degree_scales(pixels_per_degree, ppd_weights)
    if return_exposure_map and len(ppds) > 1:
        raise ValueError(
            "flip_loss: return_exposure_map=True needs one pixels_per_degree: each scale of multi-scale "
            "HDR-FLIP has its own exposure map"
        )
    eps = options.eps(eps)
    tm = options.tone_mapper(tone_mapper)
    if mode is not None:
        options.check_background_value(bg, 0.0, math.inf)
        test, reference = (alpha_rule.composite(test, mode, bg, True), alpha_rule.composite(reference, mode, bg, True))
    unbatched = test.dim() == 3
    t, r = as_batch(test), as_batch(reference)
    serve = kernels_serve("hdr_flip", t, r)
    if serve:  # before the exposures, which a tangent would reach first (torch.compile of jvp)
        op_checks.refuse_forward_mode("hdr_flip", t, r)
    exposures, counts, _, _ = exposures_for(r, tm, start_exposure, stop_exposure, num_exposures, median)
    if serve:

        def maps_at(ppd):
            return torch.ops.flip.hdr_flip(t, r, exposures, counts, ppd, tm, eps)

    else:
        from . import oracle

        def maps_at(ppd):
            return oracle.hdr_flip(t, r, ppd, tm, exposures, counts, eps)

    if len(ppds) == 1:
        error, emap, _ = maps_at(ppds[0])
    else:
        error, emap = weighted_sum([maps_at(ppd)[0] for ppd in ppds], weights), None
    if unbatched:
        error = error.squeeze(0)
        emap = None if emap is None else emap.squeeze(0)
    return (error, emap) if return_exposure_map else error
