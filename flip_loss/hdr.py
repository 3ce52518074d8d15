"""HDR-FLIP: automatic exposures and the functional API (flip_reference.md §4)."""
import math
from typing import Optional, Tuple, Union

import numpy as np
import torch

from . import _ops
from .constants import DEFAULT_EPS, DEFAULT_PPD
from .functional import _checked_pair

TONE_MAPPERS = ("aces", "hable", "reinhard")
ExposureArg = Union[None, float, int, torch.Tensor]


def _tone_mapper(name) -> str:
    if not isinstance(name, str) or name.lower() not in TONE_MAPPERS:
        raise ValueError(f"flip_loss: tone_mapper must be one of {TONE_MAPPERS} (any case), got {name!r}")
    return name.lower()


def exposure_anchor(tone_mapper: str = "aces") -> float:
    """The scene value that ``tone_mapper`` maps to 0.85: the larger root of the quadratic, solved
    in float32 as NVIDIA's evaluator does (Reinhard uses x / (1 + x) here, as the evaluator does)."""
    from .reference import tone_coefficients

    f = np.float32
    k = [f(v) for v in tone_coefficients(_tone_mapper(tone_mapper))]
    t = f(0.85)
    a, b, c = k[0] - t * k[3], k[1] - t * k[4], k[2] - t * k[5]
    if a == 0:
        return float(-c / b)
    d1 = f(-0.5) * (b / a)
    return float(d1 + np.sqrt(d1 * d1 - c / a, dtype=np.float32))


def _batched(x: torch.Tensor) -> torch.Tensor:
    return x.unsqueeze(0) if x.dim() == 3 else x


def exposure_range(reference: torch.Tensor, tone_mapper: str = "aces") -> Tuple[torch.Tensor, torch.Tensor]:
    """Automatic (start, stop) exposures in stops, one per image of ``reference`` (N x 3 x H x W
    linear HDR, or 3 x H x W), as tensors of shape N on the reference's device.

    start = log2(x* / max luminance), stop = log2(x* / median luminance), x* =
    ``exposure_anchor(tone_mapper)``; the median is the upper middle element (index floor(P/2) of the
    P sorted luminances). Like flip-evaluator 1.7, a median below float32 epsilon (more than half
    the pixels black) is raised to epsilon; unlike it, so is the maximum, so that an all-black
    reference gives start = stop (two identical exposures) instead of an error.
    """
    if not isinstance(reference, torch.Tensor) or reference.dim() not in (3, 4) or reference.shape[-3] != 3:
        raise ValueError("flip_loss: reference must be an N x 3 x H x W or 3 x H x W tensor")
    return _luminance_range(_batched(reference), exposure_anchor(tone_mapper))


def _luminance_range(ref: torch.Tensor, anchor: float) -> Tuple[torch.Tensor, torch.Tensor]:
    """The rule of ``exposure_range`` for a batched reference. TorchScript-compatible: a scripted
    ``FLIPLoss(hdr=True)`` calls it too."""
    flt_epsilon = 1.1920928955078125e-07  # float32 epsilon, as a literal for TorchScript
    dt = torch.float64 if ref.dtype == torch.float64 else torch.float32
    rgb = torch.clamp(ref.to(dt), min=0.0)
    lum = (0.2126 * rgb[:, 0] + 0.7152 * rgb[:, 1] + 0.0722 * rgb[:, 2]).flatten(1)
    y_max = lum.amax(dim=1).clamp(min=flt_epsilon)
    y_med = torch.kthvalue(lum, lum.shape[1] // 2 + 1, dim=1)[0].clamp(min=flt_epsilon)
    return torch.log2(torch.full_like(y_max, anchor) / y_max), torch.log2(torch.full_like(y_med, anchor) / y_med)


def _exposure_grid(start: torch.Tensor, stop: torch.Tensor, counts: torch.Tensor, count_max: int) -> torch.Tensor:
    """N x count_max exposures start + i (stop - start) / (count - 1), in float32 as the evaluator
    computes them (TorchScript-compatible)."""
    step = (stop - start) / (counts - 1).to(torch.float32)
    i = torch.arange(count_max, device=start.device, dtype=torch.float32)
    return start.unsqueeze(1) + i.unsqueeze(0) * step.unsqueeze(1)


def _per_image(value: ExposureArg, n: int, device, name: str) -> Optional[torch.Tensor]:
    if value is None:
        return None
    if isinstance(value, torch.Tensor):
        v = value.to(device=device, dtype=torch.float32).flatten()
        if v.numel() == 1:
            v = v.expand(n)
        if v.numel() != n:
            raise ValueError(f"flip_loss: {name} must be a number or have one value per image ({n}), "
                             f"got {tuple(value.shape)}")
        return v
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"flip_loss: {name} must be a finite number or a tensor, got {value!r}")
    return torch.full((n,), float(value), dtype=torch.float32, device=device)


def exposures_for(reference: torch.Tensor, tone_mapper: str = "aces", start_exposure: ExposureArg = None,
                  stop_exposure: ExposureArg = None, num_exposures: ExposureArg = None):
    """(exposures N x E, counts N, start N, stop N) for ``reference``: automatic where not given.
    Exposures are start + i (stop - start) / (count - 1), in float32 as the evaluator computes them.
    Only an automatic count needs a device-to-host copy (to size E)."""
    ref = _batched(reference)
    n, device = ref.shape[0], ref.device
    start = _per_image(start_exposure, n, device, "start_exposure")
    stop = _per_image(stop_exposure, n, device, "stop_exposure")
    if start is None or stop is None:
        auto_start, auto_stop = exposure_range(ref, tone_mapper)
        start = auto_start.float() if start is None else start
        stop = auto_stop.float() if stop is None else stop
    if isinstance(start_exposure, (int, float)) and isinstance(stop_exposure, (int, float)):
        if start_exposure > stop_exposure:
            raise ValueError(f"flip_loss: start_exposure ({start_exposure}) must not exceed stop_exposure "
                             f"({stop_exposure})")
    elif bool((start > stop).any()):
        raise ValueError("flip_loss: start_exposure must not exceed stop_exposure (for every image)")
    if num_exposures is None:
        counts = torch.clamp(torch.ceil(stop - start), min=2).to(torch.int64)
        e = int(counts.max())
    elif isinstance(num_exposures, torch.Tensor):
        counts = num_exposures.to(device=device, dtype=torch.int64).flatten().expand(n).contiguous()
        e = int(counts.max())
        if int(counts.min()) < 2:
            raise ValueError("flip_loss: num_exposures must be at least 2")
    else:
        if isinstance(num_exposures, bool) or not isinstance(num_exposures, int) or num_exposures < 2:
            raise ValueError(f"flip_loss: num_exposures must be an integer >= 2, got {num_exposures!r}")
        counts = torch.full((n,), num_exposures, dtype=torch.int64, device=device)
        e = num_exposures
    return _exposure_grid(start, stop, counts, e), counts, start, stop


def hdr_flip(test: torch.Tensor, reference: torch.Tensor, pixels_per_degree: float = DEFAULT_PPD,
             tone_mapper: str = "aces", start_exposure: ExposureArg = None, stop_exposure: ExposureArg = None,
             num_exposures: ExposureArg = None, return_exposure_map: bool = False, eps: float = DEFAULT_EPS):
    """HDR-FLIP error map between linear HDR images ``test`` and ``reference`` (N x 3 x H x W or
    3 x H x W, non-negative; negative values count as 0). The per-pixel maximum of LDR-FLIP over
    exposures from ``start_exposure`` to ``stop_exposure`` stops (``num_exposures`` of them), each
    image exposed by 2^c, tone mapped (``"aces"``, ``"hable"`` or ``"reinhard"``) and clamped.
    Exposures left as None are computed per image from the reference (``exposure_range``); each
    may also be a tensor with one value per image. Returns the map (N x 1 x H x W), and with
    ``return_exposure_map=True`` also the exposure map (winning exposure index / (count - 1), 0
    where no exposure wins). Differentiable in both images.
    """
    test, reference = _checked_pair(test, reference, pixels_per_degree, "linear", eps)
    tm = _tone_mapper(tone_mapper)
    unbatched = test.dim() == 3
    t, r = _batched(test), _batched(reference)
    exposures, counts, _, _ = exposures_for(r, tm, start_exposure, stop_exposure, num_exposures)
    if _ops.use_extension(t, r, op="hdr_flip"):
        error, emap, _ = torch.ops.flip.hdr_flip(t, r, exposures, counts, float(pixels_per_degree), tm, float(eps))
    else:
        from . import reference as ref_impl

        error, emap, _ = ref_impl.hdr_flip(t, r, float(pixels_per_degree), tm, exposures, counts, float(eps))
    if unbatched:
        error, emap = error.squeeze(0), emap.squeeze(0)
    return (error, emap) if return_exposure_map else error
