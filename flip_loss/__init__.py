"""flip-loss: NVIDIA's FLIP image-difference metric as a fast, differentiable PyTorch loss.

Ops live in ``torch.ops.flip`` (registered by the compiled extension ``flip_loss._C``); this
package adds the Python API, pooling, colour maps, image I/O and a command-line evaluator.
"""
from . import _ops
from .constants import DEFAULT_PPD, pixels_per_degree
from .functional import ldr_flip
from .hdr import exposure_range, hdr_flip
from .metric import FLIPMetric, FLIPMetricResult
from .modules import FLIPLoss
from .pooling import PooledValues, pool, weighted_histogram

HAS_EXTENSION = _ops.HAS_EXTENSION

__all__ = [
    "DEFAULT_PPD", "FLIPLoss", "FLIPMetric", "FLIPMetricResult", "HAS_EXTENSION", "PooledValues", "exposure_range", "hdr_flip", "ldr_flip",
    "pixels_per_degree", "pool", "weighted_histogram",
]
__version__ = "0.1.0"
