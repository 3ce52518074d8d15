"""One check per option of the Python API, shared by ``ldr_flip``, ``hdr_flip``, ``exposures_for``,
``FLIPLoss`` and ``FLIPMetric`` (the tensor arguments are checked separately, where they are used).

Each check returns the value in the form the ops take (a float, an int, a lower-case name or a
(low, high) pair) or raises ``TypeError`` for a value of the wrong kind and ``ValueError`` for a
value of the right kind outside its limits (``flip_loss.constants``). The checks whose name has no
underscore take any Python value; the ``check_*_value`` helpers are TorchScript-compatible, so that
a scripted ``FLIPLoss`` applies the same limits when it runs.
"""

import math
import numbers
from typing import List, Optional, Tuple, Union

import numpy as np
import torch

from . import alpha as alpha_rule
from . import constants
from .constants import MAX_EXPOSURES

INPUT_SPACES = ("srgb", "linear")
TONE_MAPPERS = constants.TONE_MAPPERS


def is_finite(x: float) -> bool:
    """``math.isfinite`` in a form that torch.compile can trace when it passes a float option as a
    symbolic value (``dynamic=True``) and that TorchScript compiles: x - x is 0 for every finite
    x and NaN for an infinity or a NaN."""
    return x - x == 0.0


def real_number(name: str, value) -> float:
    """``value`` as a float: a Python or NumPy int or float, or a 0-dim real tensor. A bool is not
    a number here (``True`` for a pixels-per-degree is a mistake, not 1)."""
    if isinstance(value, torch.Tensor):
        if value.dim() != 0 or value.dtype == torch.bool or value.is_complex():
            raise TypeError(
                f"flip_loss: {name} must be a real number (a 0-dim real tensor is accepted), "
                f"got a tensor of shape {tuple(value.shape)} and dtype {value.dtype}"
            )
        return float(value)
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise TypeError(f"flip_loss: {name} must be a real number, got {type(value).__name__} {value!r}")
    try:
        return float(value)
    except OverflowError:  # an int beyond the float range
        return math.inf if value > 0 else -math.inf


def flag(name: str, value, who: str = "flip_loss") -> bool:
    """A True/False option (``hdr``, ``sync_on_compute``): a bool (or NumPy bool), nothing else; a
    string such as "no" is truthy and would switch the option on."""
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{who}: {name} must be True or False, got {value}")
    return bool(value)


def pixels_per_degree(distance_m: float, display_width_m: float, display_width_px: float) -> float:
    """Pixels per degree of visual angle for a display of ``display_width_px`` pixels spanning
    ``display_width_m`` metres, seen from ``distance_m`` metres (small-angle approximation)."""
    values = []
    for name, v in (
        ("distance_m", distance_m),
        ("display_width_m", display_width_m),
        ("display_width_px", display_width_px),
    ):
        x = real_number(name, v)  # Python, NumPy and 0-dim tensor numbers alike; TypeError otherwise
        if not (math.isfinite(x) and x > 0):
            raise ValueError(f"flip_loss: {name} must be a positive finite number, got {v!r}")
        values.append(x)
    return constants.display_ppd(*values)


def checked_pixels_per_degree(value) -> float:
    """A pixels-per-degree option, checked (``pixels_per_degree`` computes one from a display)."""
    v = real_number("pixels_per_degree", value)
    check_pixels_per_degree_value(v)
    return v


def check_pixels_per_degree_value(ppd: float) -> None:
    """TorchScript-compatible: a scripted ``FLIPLoss`` checks its pixels per degree on every call
    (the attribute can be changed after construction, and the ops only require it above 0)."""
    if not (is_finite(ppd) and constants.MIN_PPD <= ppd <= constants.MAX_PPD):
        raise ValueError(
            "flip_loss: pixels_per_degree must be a finite number from "
            + str(constants.MIN_PPD)
            + " to "
            + str(int(constants.MAX_PPD))
            + ", got "
            + str(ppd)
        )


def pixels_per_degree_scales(value, weights=None) -> Tuple[List[float], List[float]]:
    """Multi-scale FLIP's viewing conditions: ``value`` is one pixels per degree (a number) or a
    non-empty list or tuple of them; ``weights`` (only with a list: a list or tuple of as many
    finite, non-negative numbers with a positive sum; None: equal weights) say how much each
    scale's map counts. Returns the checked values and the weights normalised to sum to 1, so that
    the multi-scale map is their weighted mean and stays in [0, 1]. One number gives ([ppd], [1.0])."""
    if isinstance(value, (list, tuple)):
        ppds: Union[float, List[float]] = [real_number("pixels_per_degree", v) for v in value]
    else:
        ppds = real_number("pixels_per_degree", value)
    w: Optional[List[float]] = None
    if weights is not None:
        if not isinstance(weights, (list, tuple)):
            raise TypeError(
                "flip_loss: ppd_weights must be a list or tuple of numbers, one per pixels_per_degree value, "
                f"got {type(weights).__name__}"
            )
        w = [real_number("ppd_weights", v) for v in weights]
    return checked_scales(ppds, w)


def checked_scales(value: Union[float, List[float]], weights: Optional[List[float]]) -> Tuple[List[float], List[float]]:
    """TorchScript-compatible core of ``pixels_per_degree_scales`` (a scripted ``FLIPLoss`` checks
    its scales on every call, since its attributes can be changed after construction): the values'
    limits, one finite non-negative weight per value with a positive sum, and the normalisation
    (the same arithmetic in eager and scripted code, so that both give the same bits)."""
    if isinstance(value, float):
        if weights is not None:
            raise ValueError(
                "flip_loss: ppd_weights only applies with a list of pixels_per_degree values (multi-scale FLIP)"
            )
        check_pixels_per_degree_value(value)
        return [value], [1.0]
    ppds = value
    if len(ppds) == 0:
        raise ValueError("flip_loss: pixels_per_degree must be a number or a non-empty list of numbers, got []")
    for ppd in ppds:
        check_pixels_per_degree_value(ppd)
    if weights is None:
        return ppds, [1.0 / len(ppds) for _ in ppds]
    if len(weights) != len(ppds):
        raise ValueError(
            "flip_loss: ppd_weights must have one weight per pixels_per_degree value: "
            + str(len(ppds))
            + " values, "
            + str(len(weights))
            + " weights"
        )
    top = 0.0
    for w in weights:
        if not (is_finite(w) and w >= 0):
            raise ValueError("flip_loss: ppd_weights must be finite and non-negative, got " + str(weights))
        top = max(top, w)
    if not top > 0:
        raise ValueError("flip_loss: ppd_weights must not all be 0, got " + str(weights))
    # Scaled to at most 1 first, so that no sum of finite weights overflows.
    scaled = [w / top for w in weights]
    total = 0.0
    for w in scaled:
        total += w
    return ppds, [w / total for w in scaled]


def eps(value) -> float:
    v = real_number("eps", value)
    check_eps_value(v)
    return v


def check_eps_value(eps: float) -> None:
    """TorchScript-compatible: a scripted ``FLIPLoss`` checks its eps on every call (the attribute
    can be changed after construction, and the ops would only say that it is out of range)."""
    if not (is_finite(eps) and 0 <= eps <= constants.MAX_EPS):
        raise ValueError(
            "flip_loss: eps must be a finite number from 0 to "
            + str(constants.MAX_EPS)
            + " (it only regularises the gradient; larger values change the metric itself), got "
            + str(eps)
        )


def _name(option: str, value, choices: Tuple[str, ...]) -> str:
    if not isinstance(value, str):
        raise TypeError(f"flip_loss: {option} must be a string, one of {choices}, got {type(value).__name__}")
    if value.lower() not in choices:
        raise ValueError(f"flip_loss: {option} must be one of {choices} (any case), got {value!r}")
    return value.lower()


def input_space(value) -> str:
    return _name("input_space", value, INPUT_SPACES)


def input_space_value(value: str) -> str:
    """TorchScript-compatible form of ``input_space`` for a string: the name in lower case, checked
    (a scripted ``FLIPLoss`` normalises its attribute on every call, as eager does)."""
    name = value.lower()
    if name != "srgb" and name != "linear":
        raise ValueError("flip_loss: input_space must be one of ('srgb', 'linear') (any case), got '" + value + "'")
    return name


def name_value(value: Optional[str]) -> Optional[str]:
    """TorchScript-compatible: a name option (``tone_mapper``, ``alpha``, ``background``) as the
    checks compare it, in lower case (names are taken in any case); None stays None."""
    if value is None:
        return None
    return value.lower()


def background_value(value: Union[str, List[float]]) -> Union[str, List[float]]:
    """TorchScript-compatible: a background name in lower case; an (r, g, b) triple as it is."""
    if isinstance(value, str):
        return value.lower()
    return value


def tone_mapper(value) -> str:
    return _name("tone_mapper", value, TONE_MAPPERS)


# Which middle element of an even number of luminances is the median of the automatic stop
# exposure (docs/algorithm.md §7.7): "upper" (index P // 2, flip-evaluator's rule, the default) or
# "lower" (index (P - 1) // 2, torch.median's, the rule of NVIDIA's PyTorch loss).
MEDIAN_RULES = ("upper", "lower")


def median_rule(value) -> str:
    return _name("median", value, MEDIAN_RULES)


def reduction(value) -> str:
    if not isinstance(value, str):
        raise TypeError(f"flip_loss: reduction must be a string, got {type(value).__name__}")
    check_reduction_value(value)
    return value


def check_reduction_value(reduction: str) -> None:
    """TorchScript-compatible: ``FLIPLoss`` checks its reduction on every call, because the
    attribute can be changed after construction. The list of reductions lives here only."""
    if reduction not in ["mean", "sum", "none", "per_image"]:
        raise ValueError(
            "flip_loss: reduction must be one of 'mean', 'sum', 'none', 'per_image', got '" + reduction + "'"
        )


def data_range(value) -> Tuple[float, float]:
    """The (low, high) range of LDR input values: ``high`` alone (a number, low = 0) or a pair."""
    if isinstance(value, (tuple, list)):
        if len(value) != 2:
            raise ValueError(f"flip_loss: data_range must be a number or a (low, high) pair, got {value!r}")
        low, high = real_number("data_range low", value[0]), real_number("data_range high", value[1])
    else:
        low, high = 0.0, real_number("data_range", value)
    if not (is_finite(low) and is_finite(high) and low < high):
        raise ValueError(
            f"flip_loss: data_range must be finite with low < high (a single number is "
            f"the high end, with low = 0), got {value!r}"
        )
    check_data_range_value(low, high)
    return low, high


def check_mode_options(
    hdr: bool, tone_mapper: str, exposures_given: List[str], data_range: Tuple[float, float]
) -> None:
    """TorchScript-compatible: the options that belong to one mode of ``FLIPLoss`` only, checked
    together (by its constructor and on every call, eager and scripted, since any of them may be
    set after construction): ``tone_mapper`` (a checked name) other than ACES and the exposure
    options (``exposures_given``: the names of those not None) only with ``hdr=True``, a
    ``data_range`` (a checked pair) other than (0, 1) only without. Otherwise one of them would be
    silently ignored."""
    if not hdr:
        ignored = exposures_given
        if tone_mapper != "aces":
            ignored = ignored + ["tone_mapper"]
        if len(ignored) > 0:
            raise ValueError(
                "flip_loss: the HDR-FLIP options " + ", ".join(ignored) + " apply only with hdr=True; LDR-FLIP "
                "would ignore them"
            )
    elif data_range[0] != 0.0 or data_range[1] != 1.0:
        raise ValueError(
            "flip_loss: data_range only applies to LDR-FLIP (hdr=False); HDR inputs are linear scene "
            "values, and HDR-FLIP would ignore data_range=(" + str(data_range[0]) + ", " + str(data_range[1]) + ")"
        )


def check_data_range_value(low: float, high: float) -> None:
    """TorchScript-compatible check of a (low, high) data range: finite, low < high, and a width
    that is finite and whose reciprocal is finite (the mapping to [0, 1] divides by it; an infinite
    width, as (-1e308, 1e308) has, would map every value to 0)."""
    if not (
        is_finite(low) and is_finite(high) and low < high and is_finite(high - low) and is_finite(1.0 / (high - low))
    ):
        raise ValueError(
            "flip_loss: data_range must be finite with low < high and a width (high - low) that "
            "is finite and whose reciprocal is finite, got (" + str(low) + ", " + str(high) + ")"
        )


def exposure(name: str, value) -> float:
    """A start or stop exposure given as one number (stops), finite. Its range is checked where
    exposures are used (``check_exposure_value``: ``hdr_flip``, ``exposures_for``, ``FLIPLoss``),
    so that the command line can give its own messages for values outside it."""
    v = real_number(name, value)
    if not is_finite(v):
        raise ValueError(f"flip_loss: {name} must be a finite number, got {v!r}")
    return v


def check_exposure_value(name: str, value: float) -> None:
    """TorchScript-compatible: a given start or stop exposure must be finite and within
    [MIN_EXPOSURE_STOPS, MAX_EXPOSURE_STOPS] (2^c a nonzero, finite float32; see constants)."""
    if not (is_finite(value) and constants.MIN_EXPOSURE_STOPS <= value <= constants.MAX_EXPOSURE_STOPS):
        raise ValueError(
            "flip_loss: "
            + name
            + " must be a finite number from "
            + str(int(constants.MIN_EXPOSURE_STOPS))
            + " to "
            + str(int(constants.MAX_EXPOSURE_STOPS))
            + " stops (2^c must be a nonzero, finite "
            "float32, the precision of the exposures), got " + str(value)
        )


def whole_number(name: str, value, low: int, high: float, who: str = "flip_loss") -> int:
    """A count: a whole number from ``low`` to ``high``, given as a Python or NumPy number or a 0-dim
    real tensor (3.0 and ``torch.tensor(3)`` are 3; 2.5 is rejected, not truncated; a bool is not a
    number)."""
    try:
        v = real_number(name, value)
    except TypeError as exc:
        raise TypeError(str(exc).replace("flip_loss:", who + ":", 1)) from None
    if math.isnan(v) or (is_finite(v) and v != math.floor(v)):
        raise ValueError(f"{who}: {name} must be a whole number, got {value!r}")
    if not (low <= v <= high and is_finite(v)):
        limits = f"at least {low}" if high == math.inf else f"from {low} to {high}"
        raise ValueError(f"{who}: {name} must be {limits}, got {value!r}")
    return int(v)


def exposure_count(value, name: str = "num_exposures") -> int:
    """An exposure count: a whole number (an integral float or tensor value is accepted; 2.5 is
    not truncated but rejected) from 2 to ``MAX_EXPOSURES``."""
    return whole_number(name, value, 2, MAX_EXPOSURES)


def check_exposure_count_number(value: float, name: str = "num_exposures") -> int:
    """TorchScript-compatible form of ``exposure_count`` for a value read back from a tensor."""
    if math.isnan(value) or (is_finite(value) and value != math.floor(value)):
        raise ValueError("flip_loss: " + name + " must be a whole number, got " + str(value))
    if not (2 <= value <= constants.MAX_EXPOSURES):
        raise ValueError(
            "flip_loss: " + name + " must be from 2 to " + str(constants.MAX_EXPOSURES) + ", got " + str(value)
        )
    return int(value)


def check_exposure_count_value(count: int) -> None:
    """TorchScript-compatible range check of a count that is already an int. (TorchScript reads a
    module-level number only as a module attribute, hence ``constants.MAX_EXPOSURES``.)"""
    if count < 2 or count > constants.MAX_EXPOSURES:
        raise ValueError(
            "flip_loss: num_exposures must be from 2 to " + str(constants.MAX_EXPOSURES) + ", got " + str(count)
        )


def check_exposure_order(start: float, stop: float) -> None:
    """TorchScript-compatible: given start and stop exposures must be finite, within their range
    (``check_exposure_value``) and in order."""
    if not (is_finite(start) and is_finite(stop)):
        raise ValueError(
            "flip_loss: start_exposure and stop_exposure must be finite, got " + str(start) + " and " + str(stop)
        )
    check_exposure_value("start_exposure", start)
    check_exposure_value("stop_exposure", stop)
    if start > stop:
        raise ValueError(
            "flip_loss: start_exposure (" + str(start) + ") must not exceed stop_exposure (" + str(stop) + ")"
        )


def alpha(value) -> Optional[str]:
    """What a fourth image channel is: None (none is taken: images are RGB), ``"straight"`` or
    ``"premultiplied"`` alpha (see flip_loss.alpha)."""
    if value is None:
        return None
    return _name("alpha", value, alpha_rule.ALPHA_MODES)


def background(value) -> Union[str, List[float]]:
    """The background an RGBA image is composited over: a name of ``flip_loss.alpha.BACKGROUNDS``
    (lower case) or an (r, g, b) triple of finite numbers (a list of floats); its range is checked
    where the data range is known (``check_background_value``)."""
    if isinstance(value, str):
        return _name("background", value, alpha_rule.BACKGROUNDS)
    if not isinstance(value, (tuple, list)):
        raise TypeError(
            f"flip_loss: background must be one of {alpha_rule.BACKGROUNDS} or an (r, g, b) triple of "
            f"numbers, got {type(value).__name__}"
        )
    if len(value) != 3:
        raise ValueError(
            f"flip_loss: background must be one of {alpha_rule.BACKGROUNDS} or an (r, g, b) triple of "
            f"numbers, got {len(value)} values"
        )
    rgb = [real_number("background", v) for v in value]
    if not all(is_finite(v) for v in rgb):
        raise ValueError(f"flip_loss: background must hold finite numbers, got {tuple(value)!r}")
    return rgb


def alpha_options(alpha_value, background_value) -> Tuple[Optional[str], Union[str, List[float]]]:
    """``alpha`` and ``background`` checked together: a background other than black needs an alpha
    rule (it would be silently ignored otherwise)."""
    mode = alpha(alpha_value)
    bg = background(background_value)
    check_alpha_value(mode, bg)
    return mode, bg


def check_alpha_value(alpha: Optional[str], background: Union[str, List[float]]) -> None:
    """TorchScript-compatible: ``alpha`` one of the rules (or None, and then the background black),
    ``background`` a name or an (r, g, b) triple of finite numbers, as ``alpha_options`` returns
    them (a scripted ``FLIPLoss`` checks its attributes, which may be changed after construction,
    on every call)."""
    if alpha is not None:
        if alpha != "straight" and alpha != "premultiplied":
            raise ValueError("flip_loss: alpha must be None, 'straight' or 'premultiplied', got '" + alpha + "'")
    if isinstance(background, str):
        if background != "black" and background != "white" and background != "checkerboard":
            raise ValueError(
                "flip_loss: background must be 'black', 'white', 'checkerboard' or an (r, g, b) "
                "triple, got '" + background + "'"
            )
        named_black = background == "black"
    else:
        if len(background) != 3:
            raise ValueError(
                "flip_loss: background must be an (r, g, b) triple, got " + str(len(background)) + " values"
            )
        for v in background:
            if not is_finite(v):
                raise ValueError("flip_loss: background must hold finite numbers, got " + str(background))
        named_black = False
    if alpha is None and not named_black:
        raise ValueError(
            "flip_loss: background only applies to images with an alpha channel: give "
            "alpha='straight' or alpha='premultiplied' with it"
        )


def check_background_value(background: Union[str, List[float]], low: float, high: float) -> None:
    """TorchScript-compatible: an (r, g, b) background lies in the images' value range [low, high]
    (LDR: the data range; HDR: low = 0, high = inf), as the images' colours do; a value outside it is
    refused rather than clamped."""
    if isinstance(background, str):
        return
    for v in background:
        if not (low <= v <= high):
            if math.isinf(high):
                raise ValueError(
                    "flip_loss: an HDR background must be non-negative linear values, got " + str(background)
                )
            raise ValueError(
                "flip_loss: background values must lie in the data range ["
                + str(low)
                + ", "
                + str(high)
                + "], got "
                + str(background)
            )


def bins(value, who: str = "flip_loss") -> int:
    """A histogram bucket count (FLIPMetric, FLIPTorchMetric): a whole number (the rule of
    ``whole_number``) from 1 to 2**24 (seven arrays of that many entries are kept on the device)."""
    return whole_number("bins", value, 1, 2**24, who)
