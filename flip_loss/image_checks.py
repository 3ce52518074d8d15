"""The image checks shared by every entry point (``ldr_flip``, ``hdr_flip``, ``FLIPLoss``, NVIDIA's
API): dtype, shape and matching sizes, with a TypeError or ValueError that names the argument; and
what LDR-FLIP's uint8 images mean (:func:`code_values`)."""

from typing import List, Tuple

import torch


def code_values(image: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """An image of 8-bit codes (uint8 samples k) as the values k / 255 in ``dtype``, each correctly
    rounded: what the kernels read uint8 images as. The divisor is a tensor on the image's device:
    divided by a number, PyTorch's CUDA kernels multiply by its rounded reciprocal, which gives
    other values for some codes. TorchScript-compatible."""
    return image.to(dtype) / torch.full((), 255.0, dtype=dtype, device=image.device)


def pair_values(test: torch.Tensor, reference: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """A pair with uint8 images as LDR-FLIP reads them: each uint8 one as its values
    (:func:`code_values`) in the other image's dtype, float32 beside another uint8 one; float images
    as they are. TorchScript-compatible."""
    test_codes = test.dtype == torch.uint8
    ref_codes = reference.dtype == torch.uint8
    dtype = torch.float32
    if not test_codes:
        dtype = test.dtype
    elif not ref_codes:
        dtype = reference.dtype
    if test_codes:
        test = code_values(test, dtype)
    if ref_codes:
        reference = code_values(reference, dtype)
    return test, reference


def _dtype_name(t: torch.Tensor) -> str:
    """The name of a non-floating dtype for a message, in eager and TorchScript alike (whose
    str(dtype) is a number)."""
    names = {
        "torch.uint8": t.dtype == torch.uint8,
        "torch.int8": t.dtype == torch.int8,
        "torch.int16": t.dtype == torch.int16,
        "torch.int32": t.dtype == torch.int32,
        "torch.int64": t.dtype == torch.int64,
        "torch.bool": t.dtype == torch.bool,
        "torch.complex64": t.dtype == torch.complex64,
        "torch.complex128": t.dtype == torch.complex128,
    }
    for name, matches in names.items():
        if matches:
            return name
    return str(t.dtype)


def check_image(name: str, t: torch.Tensor, rgba: bool = False, codes: bool = False) -> None:
    """The checks of one image that need no data: a float dtype (or, with ``codes``, uint8: 8-bit
    codes, which LDR-FLIP alone takes), N x 3 x H x W or 3 x H x W (with ``rgba``, 4 channels too),
    not empty. TorchScript-compatible."""
    if not t.is_floating_point() and not (codes and t.dtype == torch.uint8):
        if codes:
            raise TypeError(
                "flip_loss: " + name + " must have a floating-point dtype or be uint8 (8-bit codes k, "
                "read as k / 255), got " + _dtype_name(t)
            )
        advice = "; convert 8-bit images with .float() / 255 (or pass data_range=255)"
        if t.dtype == torch.uint8:
            advice = (
                ": uint8 images (8-bit codes k, the values k / 255) are LDR images, which ldr_flip, "
                "FLIPLoss and FLIPMetric take as they are; HDR-FLIP takes linear floating-point values"
            )
        raise TypeError("flip_loss: " + name + " must have a floating-point dtype, got " + _dtype_name(t) + advice)
    if (t.dim() == 3 or t.dim() == 4) and t.shape[-3] == 4 and not rgba:
        # Whoever passes RGBA must say what alpha means: guessing straight or premultiplied would
        # silently change the result for half of the images.
        raise ValueError(
            "flip_loss: " + name + " has 4 channels (RGBA, shape " + str(list(t.shape)) + "), and FLIP "
            "compares RGB images: ldr_flip, hdr_flip, FLIPLoss and FLIPMetric composite it over "
            "background= (default 'black') given alpha='straight' (colour not multiplied by alpha, "
            "as PNG stores it) or alpha='premultiplied' (colour multiplied by alpha, as OpenEXR "
            "stores it); or drop alpha with " + name + "[..., :3, :, :]"
        )
    if (t.dim() != 3 and t.dim() != 4) or (t.shape[-3] != 3 and not (rgba and t.shape[-3] == 4)):
        layout = "N x 3 x H x W or 3 x H x W (RGB)"
        if rgba:
            layout = "N x C x H x W or C x H x W with C = 3 (RGB) or 4 (RGBA)"
        raise ValueError("flip_loss: " + name + " must be " + layout + ", got shape " + str(list(t.shape)))
    if t.numel() == 0:
        raise ValueError("flip_loss: " + name + " is empty (shape " + str(list(t.shape)) + ")")


def _without_channels(t: torch.Tensor) -> List[int]:
    shape: List[int] = t.shape
    return shape[:-3] + shape[-2:]


def check_image_pair(test: torch.Tensor, reference: torch.Tensor, rgba: bool = False, codes: bool = False) -> None:
    """The checks of an image pair that need no data (dtype, layout, emptiness, matching shapes and
    devices); with ``rgba`` each image may have an alpha channel (4 channels), and the shapes must
    match but for the channels (an RGB image beside an RGBA one is opaque); with ``codes`` either
    may be uint8. TorchScript-compatible: a scripted ``FLIPLoss`` makes them too."""
    check_image("test", test, rgba, codes)
    check_image("reference", reference, rgba, codes)
    if rgba:
        same_shape = _without_channels(test) == _without_channels(reference)
    else:
        same_shape = test.shape == reference.shape
    if not same_shape:
        raise ValueError(
            "flip_loss: test and reference shapes differ: "
            + str(list(test.shape))
            + " vs "
            + str(list(reference.shape))
        )
    if test.device != reference.device:
        raise ValueError(
            "flip_loss: test and reference are on different devices: "
            + str(test.device)
            + " vs "
            + str(reference.device)
        )


def checked_pair(test, reference, rgba: bool = False, codes: bool = False):
    """Checks an image pair (see check_image_pair) and promotes two floating-point dtypes to a
    common one (a uint8 image is left to :func:`unit_pair`)."""
    for name, t in (("test", test), ("reference", reference)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"flip_loss: {name} must be a torch.Tensor, got {type(t).__name__}")
    check_image_pair(test, reference, rgba, codes)
    return promoted_pair(test, reference)


def promoted_pair(test: torch.Tensor, reference: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """Two floating-point images of different dtypes in their common one; a pair with a uint8
    image as it is. TorchScript-compatible."""
    if test.dtype != reference.dtype and test.dtype != torch.uint8 and reference.dtype != torch.uint8:
        common = torch.promote_types(test.dtype, reference.dtype)
        test, reference = test.to(common), reference.to(common)
    return test, reference
