"""``FLIPLoss``: LDR-FLIP as an ``nn.Module`` loss."""
import torch

from . import _ops
from .constants import DEFAULT_EPS, DEFAULT_PPD
from .functional import _check_pair, ldr_flip

REDUCTIONS = ("mean", "sum", "none")


class FLIPLoss(torch.nn.Module):
    """LDR-FLIP loss between ``test`` (e.g. a network's output) and ``reference``.

    ``forward(test, reference)`` takes N x 3 x H x W (or 3 x H x W) tensors, sRGB in [0, 1] unless
    ``input_space="linear"``, and returns the mean (default), sum, or the whole error map
    (``reduction="none"``). Works with TorchScript (``torch.jit.script``) and ``torch.compile``.
    """

    pixels_per_degree: float
    input_space: str
    reduction: str
    eps: float

    def __init__(self, pixels_per_degree: float = DEFAULT_PPD, input_space: str = "srgb",
                 reduction: str = "mean", eps: float = DEFAULT_EPS):
        super().__init__()
        if reduction not in REDUCTIONS:
            raise ValueError(f"flip_loss: reduction must be one of {REDUCTIONS}, got {reduction!r}")
        # Validate the scalar options once, on a dummy pair.
        dummy = torch.zeros(1, 3, 1, 1)
        _check_pair(dummy, dummy, pixels_per_degree, input_space, eps)
        self.pixels_per_degree = float(pixels_per_degree)
        self.input_space = input_space.lower()
        self.reduction = reduction
        self.eps = float(eps)

    def forward(self, test: torch.Tensor, reference: torch.Tensor) -> torch.Tensor:
        if torch.jit.is_scripting():
            # TorchScript (and C++ programs loading the module) call the op directly; it checks
            # its arguments itself.
            error = torch.ops.flip.ldr_flip(test, reference, self.pixels_per_degree, self.input_space,
                                            self.eps)
        else:
            error = ldr_flip(test, reference, self.pixels_per_degree, self.input_space, self.eps)
        if self.reduction == "mean":
            return error.mean()
        if self.reduction == "sum":
            return error.sum()
        return error

    def extra_repr(self) -> str:
        return (f"pixels_per_degree={self.pixels_per_degree:.4f}, input_space={self.input_space!r}, "
                f"reduction={self.reduction!r}")
