"""Loading LDR images as tensors and saving 8-bit PNGs (Pillow).

``load_image`` returns a 3 x H x W float32 tensor of the stored code values scaled to [0, 1]
(code / 255 for 8-bit, code / 65535 for 16-bit images), i.e. still sRGB-encoded, as NVIDIA's
evaluator loads PNGs; colour profiles, gamma chunks and EXIF orientation are ignored. Grey images
are repeated into three channels and alpha is dropped (not composited). PNG, JPEG, BMP and TGA
are the supported formats; other 8-bit formats Pillow reads also load. HDR formats (OpenEXR,
Radiance .hdr, PFM) are rejected with a clear message: HDR input is not supported yet.

Pillow reduces 16-bit-per-channel colour PNGs to 8 bits when it decodes them. ``load_image`` keeps
the full 16 bits by decoding such files twice with Pillow's own PNG decoder, once for the high and
once for the low byte of every sample; if that is not possible with the installed Pillow it falls
back to the 8-bit values with a warning.
"""
import os
import warnings

import numpy as np
import torch

__all__ = ["HDR_EXTENSIONS", "is_hdr_path", "load_image", "save_png"]

HDR_EXTENSIONS = (".exr", ".hdr", ".pfm")


def is_hdr_path(path) -> bool:
    """True when ``path`` has an HDR image extension (.exr, .hdr, .pfm; case-insensitive)."""
    return os.path.splitext(os.fspath(path))[1].lower() in HDR_EXTENSIONS


def _open(path):
    from PIL import Image, UnidentifiedImageError

    try:
        im = Image.open(path)
    except UnidentifiedImageError:
        raise ValueError(f"cannot read image '{path}': not an image format Pillow recognises "
                         "(supported: PNG, JPEG, BMP, TGA)") from None
    except OSError as exc:
        raise ValueError(f"cannot read image '{path}': {exc.strerror or exc}") from None
    return im


# 16-bit PNG colour types that Pillow decodes into 8-bit modes (raw mode Pillow uses, which keeps
# the high bytes) -> a raw mode with the same bits per pixel that keeps the low bytes instead.
# Grey+alpha: "RGBA" reads the 4 bytes of a pixel as (grey high, grey low, alpha high, alpha low).
_PNG16_LOW_BYTE_RAWMODE = {"RGB;16B": "RGB;16L", "RGBA;16B": "RGBA;16L", "LA;16B": "RGBA"}


def _png16_rgb(path, rawmode, high):
    """H x W x 3 uint16 samples of a 16-bit colour PNG whose high bytes ``high`` Pillow decoded,
    obtained by decoding the file again with Pillow for the low bytes; None if not possible."""
    im = _open(path)
    try:
        t = im.tile[0]
        args = t[3]
        low_mode = _PNG16_LOW_BYTE_RAWMODE[rawmode]
        new_args = (low_mode,) + tuple(args[1:]) if isinstance(args, tuple) else low_mode
        im.tile = [t._replace(args=new_args) if hasattr(t, "_replace")
                   else (t[0], t[1], t[2], new_args)]
        low = np.asarray(im)
        if low.shape != high.shape:
            return None
        if rawmode == "LA;16B":
            if not np.array_equal(low[..., 0], high[..., 0]):
                return None
            grey = low[..., 0].astype(np.uint16) * 256 + low[..., 1]
            return np.repeat(grey[..., None], 3, axis=2)
        return (high[..., :3].astype(np.uint16) * 256 + low[..., :3]).astype(np.uint16)
    except Exception:  # noqa: BLE001 - any decoder difference means: keep the 8-bit values
        return None
    finally:
        im.close()


def _to_float_rgb(path, im) -> np.ndarray:
    """H x W x 3 float32 in [0, 1] from an opened, loaded Pillow image."""
    mode = im.mode
    if mode in ("I;16", "I;16B", "I;16L", "I;16N", "I"):
        a = np.asarray(im)
        if mode == "I" and (a.min() < 0 or a.max() > 65535):
            raise ValueError(f"cannot read image '{path}': 32-bit integer images are not supported")
        a = a.astype(np.float32) / np.float32(65535.0)
        return np.repeat(a[..., None], 3, axis=2)
    if mode in ("F",) or mode.startswith("F;"):
        raise ValueError(f"cannot read image '{path}': floating-point images are not supported "
                         "(HDR input is not supported yet)")
    if mode in ("RGB", "RGBA", "L", "LA"):
        a = np.asarray(im)
    else:
        a = np.asarray(im.convert("RGBA" if "A" in mode or mode == "P" else "RGB"))
    a = a[..., None] if a.ndim == 2 else a
    if a.shape[2] in (1, 2):  # grey (+ alpha)
        a = np.repeat(a[..., :1], 3, axis=2)
    return a[..., :3].astype(np.float32) / np.float32(255.0)


def load_image(path) -> torch.Tensor:
    """Loads an LDR image file as a 3 x H x W float32 CPU tensor in [0, 1] (code values / 255 or
    / 65535: the values stay sRGB-encoded). Grey images are repeated into 3 channels; alpha is
    dropped.

    Raises ``FileNotFoundError`` if ``path`` does not exist and ``ValueError`` if it is not a
    readable LDR image (a directory, a damaged or truncated file, an unsupported or HDR format).
    """
    path = os.fspath(path)
    if not os.path.exists(path):
        raise FileNotFoundError(f"image file '{path}' does not exist")
    if os.path.isdir(path):
        raise ValueError(f"cannot read image '{path}': it is a directory")
    if is_hdr_path(path):
        raise ValueError(f"cannot read image '{path}': HDR input ({os.path.splitext(path)[1]}) is "
                         "not supported yet; only LDR images (PNG, JPEG, BMP, TGA) can be loaded")
    if not os.access(path, os.R_OK):
        raise ValueError(f"cannot read image '{path}': permission denied")
    im = _open(path)
    try:
        with im:
            rawmode = None
            if im.format == "PNG" and len(im.tile) == 1:
                args = im.tile[0][3]
                rawmode = args[0] if isinstance(args, tuple) else args
            try:
                im.load()
            except (OSError, SyntaxError, ValueError) as exc:
                raise ValueError(f"cannot read image '{path}': the file is damaged or truncated "
                                 f"({exc})") from None
            if im.width == 0 or im.height == 0:
                raise ValueError(f"cannot read image '{path}': it has no pixels")
            if rawmode in _PNG16_LOW_BYTE_RAWMODE:
                rgb16 = _png16_rgb(path, rawmode, np.asarray(im))
                if rgb16 is None:
                    warnings.warn(f"flip_loss: could not decode the 16-bit PNG '{path}' at full "
                                  "precision with this Pillow; using its 8-bit values",
                                  RuntimeWarning, stacklevel=2)
                    a = _to_float_rgb(path, im)
                else:
                    a = rgb16.astype(np.float32) / np.float32(65535.0)
            else:
                a = _to_float_rgb(path, im)
    except ValueError:
        raise
    except (OSError, SyntaxError) as exc:  # decoder errors Pillow raises lazily
        raise ValueError(f"cannot read image '{path}': {exc}") from None
    return torch.from_numpy(np.ascontiguousarray(a.transpose(2, 0, 1)))


def save_png(path, hwc_uint8) -> None:
    """Writes an 8-bit image to ``path`` as PNG: an H x W x 3 (RGB), H x W x 4 (RGBA), H x W x 1 or
    H x W (grey) ``uint8`` numpy array or tensor. The parent directory must exist."""
    from PIL import Image

    if isinstance(hwc_uint8, torch.Tensor):
        hwc_uint8 = hwc_uint8.detach().to("cpu").numpy()
    a = np.asarray(hwc_uint8)
    if a.dtype != np.uint8:
        raise TypeError(f"flip_loss.imageio.save_png: expected uint8 values, got {a.dtype}")
    if a.ndim == 3 and a.shape[2] == 1:
        a = a[..., 0]
    if not (a.ndim == 2 or (a.ndim == 3 and a.shape[2] in (3, 4))) or a.size == 0:
        raise ValueError("flip_loss.imageio.save_png: expected an H x W, H x W x 1, H x W x 3 or "
                         f"H x W x 4 image, got shape {a.shape}")
    Image.fromarray(np.ascontiguousarray(a)).save(os.fspath(path), format="PNG")
