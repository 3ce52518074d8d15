"""Metrics the suite can evaluate, and the adapter for any callable.

A metric is a callable ``metric(test, reference, ppd) -> tensor of N per-image scalars`` where
``test`` and ``reference`` are N×3×H×W float32 frames; larger must mean *more different* (wrap
similarity measures with a minus sign or ``1 − s``: the alignment score and the matching solver
need a difference; the metric must not modify its inputs, which are shared between metrics). A
:class:`Metric` adds a name and which frames it reads:

* ``input="display"`` (the default, and what a plain callable gets): the display-encoded frames
  the observer saw, sRGB-encoded values in [0, 1] after the display's peak-luminance scaling and
  clipping (protocol §1.3). LDR-FLIP, PSNR, SSIM and HyAB read these.
* ``input="linear"``: linear BT.709 RGB relative to the display peak (absolute cd/m² divided by
  ``Y_peak``; negative values clipped to 0, values above 1 kept). HDR-FLIP reads these.
"""

from dataclasses import dataclass
from typing import Callable, List, Optional, Sequence, Tuple

import torch

from . import colour

__all__ = [
    "Metric",
    "as_metric",
    "ldr_flip_metric",
    "hdr_flip_metric",
    "psnr_metric",
    "ssim_metric",
    "hyab_metric",
    "METRIC_NAMES",
    "DEFAULT_METRICS",
    "build_metrics",
    "MetricUnavailable",
]


class MetricUnavailable(RuntimeError):
    """A metric whose implementation is not installed (the message says what to install)."""


@dataclass
class Metric:
    name: str
    fn: Callable[[torch.Tensor, torch.Tensor, float], torch.Tensor]
    input: str = "display"
    description: str = ""

    def __post_init__(self):
        if self.input not in ("display", "linear"):
            raise ValueError(f"metric {self.name}: input must be 'display' or 'linear', got {self.input!r}")

    def __call__(self, test, reference, ppd):
        return self.fn(test, reference, ppd)


def as_metric(metric, name: Optional[str] = None) -> Metric:
    """A :class:`Metric` from a Metric or any callable ``(test, reference, ppd) -> (N,)``."""
    if isinstance(metric, Metric):
        return metric
    if not callable(metric):
        raise TypeError(f"a metric must be callable, got {type(metric).__name__}")
    return Metric(name or getattr(metric, "__name__", "metric"), metric, getattr(metric, "input", "display"))


# --------------------------------------------------------------------------------------------
# FLIP


def ldr_flip_metric() -> Metric:
    import flip_loss

    def ldr_flip_mean(test, reference, ppd):
        # eps=0: the published metric's values (the evaluator's setting).
        return flip_loss.ldr_flip(test, reference, float(ppd), input_space="srgb", eps=0.0).mean(dim=(1, 2, 3))

    return Metric(
        "LDR-FLIP",
        ldr_flip_mean,
        "display",
        "mean of the LDR-FLIP map of the display-encoded frames (sRGB, input_space='srgb', eps=0)",
    )


def hdr_flip_metric() -> Metric:
    import flip_loss

    def hdr_flip_mean(test, reference, ppd):
        # eps=0: the published metric's values (the evaluator's setting).
        out = flip_loss.hdr_flip(test, reference, float(ppd), eps=0.0)
        return out.reshape(out.shape[0], -1).mean(dim=1)

    return Metric(
        "HDR-FLIP",
        hdr_flip_mean,
        "linear",
        "mean of the HDR-FLIP map of linear BT.709 relative to Y_peak (default tone mapper; "
        "exposure range computed from the reference, which makes the metric blind to the "
        "absolute level), eps=0",
    )


# --------------------------------------------------------------------------------------------
# Baselines


def psnr_metric() -> Metric:
    def neg_psnr(test, reference, ppd):
        mse = (test - reference).square().mean(dim=(1, 2, 3)).double()
        return 10.0 * torch.log10(mse)  # = −PSNR (peak 1): larger = more different

    return Metric("PSNR", neg_psnr, "display", "−PSNR of the display-encoded frames (peak 1)")


def ssim_metric() -> Metric:
    """1 − SSIM (Wang et al. 2004: Gaussian window σ 1.5, K = (0.01, 0.03), per RGB channel,
    averaged) from ``pytorch-msssim`` when installed, else from scikit-image."""
    try:
        from pytorch_msssim import ssim
    except ImportError:
        ssim = None
    if ssim is not None:

        def one_minus_ssim(test, reference, ppd):
            return 1.0 - ssim(test, reference, data_range=1.0, size_average=False)

        return Metric(
            "SSIM",
            one_minus_ssim,
            "display",
            "1 − SSIM (pytorch-msssim: 11-px Gaussian window σ 1.5, per RGB channel, averaged) "
            "of the display-encoded frames",
        )
    try:
        from skimage.metrics import structural_similarity
    except ImportError:
        raise MetricUnavailable(
            "SSIM needs 'pytorch-msssim' (pip install pytorch-msssim) or 'scikit-image' (pip install scikit-image)"
        ) from None

    def one_minus_ssim_skimage(test, reference, ppd):
        t = test.detach().to("cpu", torch.float64).numpy()
        r = reference.detach().to("cpu", torch.float64).numpy()
        vals = [
            structural_similarity(
                t[i],
                r[i],
                data_range=1.0,
                channel_axis=0,
                gaussian_weights=True,
                sigma=1.5,
                use_sample_covariance=False,
            )
            for i in range(t.shape[0])
        ]
        return 1.0 - torch.tensor(vals, dtype=torch.float64)

    return Metric(
        "SSIM",
        one_minus_ssim_skimage,
        "display",
        "1 − SSIM (scikit-image structural_similarity, Gaussian window σ 1.5, per RGB channel, "
        "averaged) of the display-encoded frames",
    )


_LAB_WHITE = colour.D65_XYZ


def _lab(srgb: torch.Tensor) -> torch.Tensor:
    """CIELAB (D65 white) of sRGB-encoded N×3×H×W values in [0, 1] (float32 or float64)."""
    lin = colour.srgb_decode(srgb)
    # XYZ / white in one matrix product.
    m = colour.M_RGB_XYZ / torch.tensor(_LAB_WHITE, dtype=torch.float64)[:, None]
    t = torch.einsum("ij,njhw->nihw", m.to(lin), lin)
    delta = 6.0 / 29.0
    f = torch.where(t > delta**3, t.clamp_min(delta**3).pow(1.0 / 3.0), t / (3 * delta**2) + 4.0 / 29.0)
    fx, fy, fz = f.unbind(1)
    return torch.stack((116.0 * fy - 16.0, 500.0 * (fx - fy), 200.0 * (fy - fz)), dim=1)


def hyab_metric() -> Metric:
    def hyab(test, reference, ppd):
        d = _lab(test) - _lab(reference)
        per_pixel = d[:, 0].abs() + torch.hypot(d[:, 1], d[:, 2])
        return per_pixel.mean(dim=(1, 2), dtype=torch.float64)

    return Metric(
        "HyAB",
        hyab,
        "display",
        "mean HyAB distance |ΔL*| + ‖(Δa*, Δb*)‖ in CIELAB (D65) of the display-encoded frames, no spatial filtering",
    )


_FACTORIES = {
    "ldr-flip": ldr_flip_metric,
    "hdr-flip": hdr_flip_metric,
    "psnr": psnr_metric,
    "ssim": ssim_metric,
    "hyab": hyab_metric,
}
METRIC_NAMES = tuple(_FACTORIES)
DEFAULT_METRICS = METRIC_NAMES


def build_metrics(names: Sequence[str], strict: bool = False) -> Tuple[List[Metric], List[str]]:
    """The metrics named (case-insensitive, from :data:`METRIC_NAMES`) and notes on those that
    are unavailable (skipped, or raised when ``strict``). Unknown names raise ``ValueError``."""
    metrics, notes = [], []
    for name in names:
        key = name.strip().lower()
        if key not in _FACTORIES:
            raise ValueError(f"unknown metric {name!r}; choose from {', '.join(METRIC_NAMES)}")
        try:
            metrics.append(_FACTORIES[key]())
        except MetricUnavailable as e:
            if strict:
                raise
            notes.append(f"{name}: skipped: {e}")
    return metrics, notes
