"""Images with an alpha channel: the one rule by which ``ldr_flip``, ``hdr_flip``, ``FLIPLoss``,
``FLIPMetric`` and the command line turn an RGBA image into the RGB image FLIP compares.

FLIP compares what a viewer sees, so an RGBA image is first composited over a background, in the
values the image holds (sRGB-encoded values for sRGB input, as image viewers and browsers
composite 8-bit images; linear values for linear and HDR input):

* straight alpha (colour not multiplied by alpha; PNG's convention): ``rgb * a + bg * (1 - a)``;
* premultiplied alpha (colour already multiplied by alpha; OpenEXR's): ``rgb + bg * (1 - a)``;

with ``a`` clamped to [0, 1] as FLIP clamps colour values: the gradient passes on the closed interval
(a = 0 and a = 1 included) and is 0 beyond (docs/algorithm.md §7.4). A NaN or infinite alpha makes
its pixel NaN, which the ops refuse as they refuse a non-finite colour. An opaque pixel
(a = 1) keeps its colour exactly, so an all-opaque RGBA image gives the RGB image's map bit for
bit. The background is ``"black"`` (0), ``"white"`` (1: the top of the data range, or linear 1.0
for HDR), ``"checkerboard"`` (see :func:`checkerboard`) or an (r, g, b) triple given in the image's
own values. The composite is made of torch operations, differentiable in colour and alpha alike,
and works under torch.compile, on meta tensors and in TorchScript (a scripted ``FLIPLoss``).
"""

from typing import List, Union

import torch

from . import constants
from .constants import ALPHA_MODES, BACKGROUNDS
from .oracle import clamp

__all__ = ["ALPHA_MODES", "BACKGROUNDS", "checkerboard", "composite"]


def checkerboard(
    height: int,
    width: int,
    linear: bool = False,
    dtype: torch.dtype = torch.float32,
    device: torch.device = torch.device("cpu"),  # noqa: B008 (an immutable value)
) -> torch.Tensor:
    """The checkerboard background, 1 x ``height`` x ``width`` (the same grey in R, G and B): tiles
    of ``constants.CHECKERBOARD_TILE`` pixels, the dark grey where (row // tile + column // tile) is
    even (the top-left tile), the light one elsewhere; the sRGB-encoded greys of
    ``constants.CHECKERBOARD_SRGB``, or (``linear=True``) their linear values
    ``constants.CHECKERBOARD_LINEAR``."""
    tile = constants.CHECKERBOARD_TILE
    rows = torch.div(torch.arange(height, device=device), tile, rounding_mode="floor")
    columns = torch.div(torch.arange(width, device=device), tile, rounding_mode="floor")
    light = torch.remainder(rows.unsqueeze(1) + columns.unsqueeze(0), 2).to(dtype)
    if linear:
        dark, bright = constants.CHECKERBOARD_LINEAR[0], constants.CHECKERBOARD_LINEAR[1]
    else:
        dark, bright = constants.CHECKERBOARD_SRGB[0], constants.CHECKERBOARD_SRGB[1]
    return (dark + (bright - dark) * light).unsqueeze(0)


def unit_background(background: Union[str, List[float]], low: float, high: float) -> Union[str, List[float]]:
    """A checked background as :func:`composite` takes it for an LDR image mapped from the data
    range [low, high] to [0, 1]: a name stays a name, a triple is mapped as the image is."""
    if isinstance(background, str):
        return background
    width = high - low
    return [(v - low) / width for v in background]


def composite(image: torch.Tensor, alpha: str, background: Union[str, List[float]], linear: bool) -> torch.Tensor:
    """``image`` (... x C x H x W) as the RGB image FLIP compares: C = 3 is returned as it is (an
    opaque image); C = 4 is composited over ``background`` by the rule of the module docstring,
    ``alpha`` ``"straight"`` or ``"premultiplied"``, ``background`` a name of ``BACKGROUNDS`` or an
    (r, g, b) list in the image's values; ``linear``: the image holds linear values (the
    checkerboard's greys are then linear). Checked arguments only (see flip_loss.options)."""
    if image.shape[-3] != 4:
        return image
    rgb = image.narrow(-3, 0, 3)
    raw = image.narrow(-3, 3, 1)
    a = clamp(raw, 0.0, 1.0)
    # A non-finite alpha means nothing (the clamp would read +Inf as opaque and -Inf as
    # transparent, and a NaN vanishes where the rule does not multiply by alpha): raw - raw is 0
    # for a finite alpha (with zero gradient) and NaN otherwise, so the composite of such a pixel
    # is NaN, which the ops refuse as they refuse a non-finite colour, on every path.
    invalid = raw - raw
    straight = alpha == "straight"
    colour = (rgb * a if straight else rgb) + invalid
    if isinstance(background, str):
        if background == "black":
            return colour
        if background == "white":
            return colour + (1.0 - a)
        board = checkerboard(image.shape[-2], image.shape[-1], linear, image.dtype, image.device)
        return colour + board * (1.0 - a)
    # One full tensor per channel: TorchScript's torch.tensor(list) rounds the values to float32.
    rgb_background = torch.stack([torch.full([1, 1], v, dtype=image.dtype, device=image.device) for v in background])
    return colour + rgb_background * (1.0 - a)
