"""flip-loss: NVIDIA's FLIP image-difference metric as a fast, differentiable PyTorch loss.

Ops live in ``torch.ops.flip`` (registered by the compiled extension ``flip_loss._C``); this
package adds the Python API, pooling, colour maps, image I/O and a command-line evaluator.

Names inside the package: a name in a module's ``__all__`` is public API; the module's other names
without a leading underscore are used by other modules of the package (internal, not API); an
underscored name is used only in its own module (and by white-box tests).
"""

import sys as _sys

import torch as _torch

from . import torch_releases as _torch_releases

if _torch_releases.unsupported_reason(_torch.__version__):
    # Before anything else: an older torch would fail later with an AttributeError. (A torch older
    # than the compiled kernels need gets the portable path: flip_loss._ops.)
    raise ImportError(_torch_releases.unsupported_reason(_torch.__version__))

from . import _ops
from ._version import __version__
from .constants import DEFAULT_PPD
from .options import pixels_per_degree
from .functional import ldr_flip
from .hdr import exposure_range, hdr_flip
from .metric import FLIPMetric, FLIPMetricResult
from .modules import FLIPLoss

# NVIDIA's PyTorch loss API (its file was flip_loss.py, so its users import these from here).
from . import nvidia
from .nvidia import (
    HDRFLIPLoss,
    LDRFLIPLoss,
    color_space_transform,
    compute_ldrflip,
    compute_start_stop_exposures,
    feature_detection,
    generate_spatial_filter,
    hunt_adjustment,
    hyab,
    redistribute_errors,
    spatial_filter,
    tone_map,
)
from .pooling import PooledValues, pool, weighted_histogram

HAS_EXTENSION = _ops.HAS_EXTENSION


def info(*devices) -> dict:
    """What this install computes with: ``flip_loss`` and ``torch`` (the versions), ``install`` (its
    compiled kernels, or why it has none), ``cuda_architectures`` (the compute capabilities its CUDA
    kernels are compiled for, or None), ``devices`` (per device, ``"compiled"`` or why the portable
    path serves it instead) and ``portable_path``. ``devices`` names the devices to report
    (``"cuda:1"``, ``"mps"``); by default the CPU, the current CUDA device and MPS where torch has
    them. Asking about a CUDA device makes it decide, as its first call would."""
    return {"flip_loss": __version__, **_ops.info(*devices)}


__all__ = [
    "DEFAULT_PPD",
    "FLIPLoss",
    "FLIPMetric",
    "FLIPMetricResult",
    "HAS_EXTENSION",
    "HDRFLIPLoss",
    "LDRFLIPLoss",
    "PooledValues",
    "color_space_transform",
    "compute_ldrflip",
    "compute_start_stop_exposures",
    "exposure_range",
    "feature_detection",
    "generate_spatial_filter",
    "hdr_flip",
    "hunt_adjustment",
    "hyab",
    "info",
    "ldr_flip",
    "pixels_per_degree",
    "pool",
    "redistribute_errors",
    "spatial_filter",
    "tone_map",
    "weighted_histogram",
]


def __getattr__(name: str):
    # A submodule the package does not import itself (flip_loss.cli, flip_loss.imageio, ...) is
    # imported when first named, so `import flip_loss; flip_loss.cli.example_paths()` works.
    import importlib.util

    if not name.startswith("_") and importlib.util.find_spec(f"{__name__}.{name}") is not None:
        return importlib.import_module(f"{__name__}.{name}")
    # A missing name is often code written for another ``flip_loss`` (NVIDIA's single-file
    # flip_loss.py) meeting this package, or the reverse: say which one was imported, and from where.
    message = f"module {__name__!r} has no attribute {name!r}"
    if not name.startswith("__"):
        message += (
            f" (this is the flip-loss package {__version__}, imported from {__path__[0]}; NVIDIA's "
            "flip_loss.py API is here as LDRFLIPLoss, HDRFLIPLoss and the functions of flip_loss.nvidia, "
            + ", ".join(sorted(n for n in nvidia.__all__ if n[0].islower()))
            + ")"
        )
    error = AttributeError(message)
    # What Python's "Did you mean ...?" suggestion reads.
    error.name, error.obj = name, _sys.modules[__name__]
    raise error
