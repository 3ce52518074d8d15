"""Loading images as tensors (LDR with Pillow, OpenEXR with the ``openexr`` package) and saving
8-bit PNGs and OpenEXR files.

``load_image`` dispatches on the file extension. For LDR files it returns a 3 x H x W float32 tensor
of the stored code values scaled to [0, 1] (code / 255 for 8-bit, code / 65535 for 16-bit images),
i.e. still sRGB-encoded, as NVIDIA's evaluator loads PNGs; colour profiles, gamma chunks and EXIF
orientation are ignored. Grey images are repeated into three channels and alpha is dropped (not
composited). PNG, JPEG, BMP and TGA are the supported formats; other 8-bit formats Pillow reads also
load. ``.exr`` files are read by ``load_exr`` (linear HDR values, see there). Radiance ``.hdr`` and
``.pfm`` files are rejected with a clear message: they are not supported (convert them to OpenEXR).
Images of more than ``MAX_IMAGE_PIXELS`` pixels (2^27, e.g. 16384 x 8192) are refused from their
header, before any pixel is decoded (see there).

Pillow reduces 16-bit-per-channel colour PNGs to 8 bits when it decodes them. ``load_image`` keeps
the full 16 bits by decoding such files twice with Pillow's own PNG decoder, once for the high and
once for the low byte of every sample; if that is not possible with the installed Pillow it falls
back to the 8-bit values with a warning.
"""
import contextlib
import io
import os
import sys
import tempfile
import warnings

import numpy as np
import torch

__all__ = ["HDR_EXTENSIONS", "EXR_EXTENSIONS", "UNSUPPORTED_HDR_EXTENSIONS", "MAX_IMAGE_PIXELS", "is_hdr_path",
           "is_exr_path", "image_size", "load_image", "load_exr", "exr_size", "save_png", "save_exr"]

HDR_EXTENSIONS = (".exr", ".hdr", ".pfm")
EXR_EXTENSIONS = (".exr",)
UNSUPPORTED_HDR_EXTENSIONS = (".hdr", ".pfm")

# The largest image (width x height) the loaders accept: 2^27 = 134,217,728 pixels, e.g. 16384 x 8192,
# four times an 8K UHD frame. A header claiming more is refused before anything is decoded: such a
# file is far more likely damaged or a decompression bomb (a few kilobytes that expand to gigabytes)
# than a render, and FLIP on it would need tens of gigabytes. It stays below the size at which
# Pillow itself raises DecompressionBombError (twice Pillow's default MAX_IMAGE_PIXELS), so one
# limit and one message apply to every format.
MAX_IMAGE_PIXELS = 2 ** 27


def check_file(path) -> None:
    """Raises FileNotFoundError if ``path`` does not exist and ValueError if it is a directory."""
    if not os.path.exists(path):
        raise FileNotFoundError(f"image file '{path}' does not exist")
    if os.path.isdir(path):
        raise ValueError(f"cannot read image '{path}': it is a directory")


def is_hdr_path(path) -> bool:
    """True when ``path`` has an HDR image extension (.exr, .hdr, .pfm; case-insensitive)."""
    return os.path.splitext(os.fspath(path))[1].lower() in HDR_EXTENSIONS


def is_exr_path(path) -> bool:
    """True when ``path`` has the OpenEXR extension (.exr, case-insensitive)."""
    return os.path.splitext(os.fspath(path))[1].lower() in EXR_EXTENSIONS


def _unsupported_hdr_message(path) -> str:
    ext = os.path.splitext(os.fspath(path))[1]
    return (f"cannot read image '{path}': {ext} files (Radiance HDR / PFM) are not supported; "
            "convert the image to OpenEXR (.exr), which is read as HDR input")


def _too_large(path, claim: str) -> ValueError:
    return ValueError(f"cannot read image '{path}': {claim} more than the limit of {MAX_IMAGE_PIXELS} pixels "
                      "(2^27, e.g. 16384x8192); a header this large is most likely damaged or a "
                      "decompression bomb")


def _check_pixel_count(path, width: int, height: int) -> None:
    if width * height > MAX_IMAGE_PIXELS:
        raise _too_large(path, f"its header gives {width}x{height} pixels,")


def _open(path):
    """Opens ``path`` with Pillow (the header only) and checks its pixel count."""
    from PIL import Image, UnidentifiedImageError

    try:
        with warnings.catch_warnings():
            # Pillow warns about headers above its own limit and raises above twice that; the pixel
            # count check below refuses all of them with one message.
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            im = Image.open(path)
    except Image.DecompressionBombError:
        raise _too_large(path, "its header gives") from None
    except UnidentifiedImageError:
        raise ValueError(f"cannot read image '{path}': not an image format Pillow recognises "
                         "(supported: PNG, JPEG, BMP, TGA)") from None
    except OSError as exc:
        raise ValueError(f"cannot read image '{path}': {exc.strerror or exc}") from None
    try:
        _check_pixel_count(path, *im.size)
    except ValueError:
        im.close()
        raise
    return im


def image_size(path):
    """(width, height) of an image file from its header (no pixel is decoded): LDR files through
    Pillow, OpenEXR files through :func:`exr_size`. Raises ``FileNotFoundError`` if ``path`` does
    not exist and ``ValueError`` if it is not an image :func:`load_image` reads (a directory, an
    unrecognised or unsupported format, more than ``MAX_IMAGE_PIXELS`` pixels)."""
    path = os.fspath(path)
    check_file(path)
    if is_exr_path(path):
        return exr_size(path)
    if is_hdr_path(path):
        raise ValueError(_unsupported_hdr_message(path))
    with _open(path) as im:
        return im.size


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
        raise ValueError(f"cannot read image '{path}': floating-point images in this format are not "
                         "supported (HDR input is read from OpenEXR .exr files)")
    if mode in ("RGB", "RGBA", "L", "LA"):
        a = np.asarray(im)
    else:
        a = np.asarray(im.convert("RGBA" if "A" in mode or mode == "P" else "RGB"))
    a = a[..., None] if a.ndim == 2 else a
    if a.shape[2] in (1, 2):  # grey (+ alpha)
        a = np.repeat(a[..., :1], 3, axis=2)
    return a[..., :3].astype(np.float32) / np.float32(255.0)


def load_image(path) -> torch.Tensor:
    """Loads an image file as a 3 x H x W float32 CPU tensor. LDR files (PNG, JPEG, BMP, TGA): values
    in [0, 1] (code values / 255 or / 65535: they stay sRGB-encoded); grey images are repeated into
    3 channels; alpha is dropped. ``.exr`` files: linear HDR values, see :func:`load_exr`.

    Raises ``FileNotFoundError`` if ``path`` does not exist and ``ValueError`` if it is not a
    readable image (a directory, a damaged or truncated file, an unsupported format such as
    Radiance ``.hdr`` or ``.pfm``, an EXR file without colour channels or with NaN/Inf values, more
    than ``MAX_IMAGE_PIXELS`` pixels).
    """
    path = os.fspath(path)
    check_file(path)
    if is_exr_path(path):
        return load_exr(path)
    if is_hdr_path(path):
        raise ValueError(_unsupported_hdr_message(path))
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


# ----------------------------------------------------------------------------------------------
# OpenEXR (the ``openexr`` package: OpenEXR's own Python bindings)
# ----------------------------------------------------------------------------------------------

_ALPHA_NAMES = ("a", "alpha")


def _openexr(purpose: str):
    try:
        import OpenEXR
    except ImportError as exc:
        raise ImportError(f"{purpose} needs the 'openexr' package, which could not be imported ({exc}); "
                          "install it with 'pip install openexr'") from None
    return OpenEXR


@contextlib.contextmanager
def _quiet_native_output():
    """Collects what is printed while OpenEXR reads a file instead of letting it reach the
    terminal: its C library reports errors on the process's standard error and the bindings print
    warnings to ``sys.stdout``. Yields a callable that returns the collected text (complete once the
    ``with`` block has ended). If the file descriptors cannot be redirected, only the Python streams
    are."""
    collected = {"text": ""}
    py_out = io.StringIO()
    saved = []
    tmp = None
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except Exception:  # noqa: BLE001 - a closed or odd stream: nothing to flush
        pass
    try:
        tmp = tempfile.TemporaryFile()
        for fd in (1, 2):
            saved.append((fd, os.dup(fd)))
        for fd, _ in saved:
            os.dup2(tmp.fileno(), fd)
    except OSError:
        for fd, copy in saved:
            os.dup2(copy, fd)
            os.close(copy)
        saved = []
    try:
        with contextlib.redirect_stdout(py_out), contextlib.redirect_stderr(py_out):
            yield lambda: collected["text"]
    finally:
        for fd, copy in saved:
            os.dup2(copy, fd)
            os.close(copy)
        native = ""
        if tmp is not None:
            tmp.seek(0)
            native = tmp.read().decode("utf-8", "replace")
            tmp.close()
        collected["text"] = (py_out.getvalue() + native).strip()


def _check_readable_file(path: str) -> None:
    check_file(path)
    if not os.access(path, os.R_OK):
        raise ValueError(f"cannot read image '{path}': permission denied")


def _library_detail(path: str, exc, printed: str) -> str:
    """The most telling line of OpenEXR's complaint, without the repeated file name."""
    lines = [ln.strip() for ln in printed.splitlines() if ln.strip()]
    lines = [ln for ln in lines if not ln.startswith("Warning: Exception raised reading pixel data")]
    detail = lines[-1] if lines else str(exc)
    if detail.startswith("Unable to open") and detail.endswith("for read"):  # says no more than that
        detail = "its header cannot be parsed"
    for prefix in (f"{path}: ", f"{os.path.basename(path)}: "):
        if detail.startswith(prefix):
            detail = detail[len(prefix):]
    return detail


def _open_exr(path: str, header_only: bool):
    """Opens ``path`` with OpenEXR (header only, or with every channel as a separate array) and
    returns its first part; clear ``ValueError`` messages for what cannot be read."""
    _check_readable_file(path)
    try:
        OpenEXR = _openexr("reading OpenEXR files")
    except ImportError as exc:
        raise ValueError(f"cannot read image '{path}': {exc}") from None
    if not OpenEXR.isOpenExrFile(path):
        raise ValueError(f"cannot read image '{path}': not an OpenEXR file (it does not start with the "
                         "OpenEXR magic number)")
    failure = None
    with _quiet_native_output() as printed:
        try:
            f = OpenEXR.File(path, separate_channels=True, header_only=header_only)
            parts = f.parts
        except Exception as exc:  # noqa: BLE001 - the bindings raise RuntimeError or ValueError
            failure = exc
    if failure is not None or not parts:  # a damaged pixel block: a warning and no part, no exception
        detail = _library_detail(path, failure or "no readable image part", printed())
        raise ValueError(f"cannot read image '{path}': the OpenEXR file is damaged, truncated or of a "
                         f"kind this reader does not support ({detail})") from None
    part = parts[0]
    kind = str(part.header.get("type", ""))
    if "deep" in kind:
        raise ValueError(f"cannot read image '{path}': deep OpenEXR images are not supported")
    return part


def _select_channels(path: str, names):
    """Which stored channels give R, G and B: a list of three channel names or None (zero), from the
    channel names of an EXR file. R, G and B are matched by name (case-insensitive); without them, a
    single non-alpha channel is grey and two non-alpha channels are R and G (B = 0). Alpha (A) is
    ignored."""
    by_lower = {}
    for n in names:
        by_lower.setdefault(n.lower(), n)
    rgb = [by_lower.get(c) for c in ("r", "g", "b")]
    if any(rgb):
        return rgb
    colour = [n for n in names if n.lower() not in _ALPHA_NAMES]
    if len(colour) == 1:
        return [colour[0]] * 3
    if len(colour) == 2:
        return [colour[0], colour[1], None]
    listed = ", ".join(names) if names else "none"
    if not colour:
        raise ValueError(f"cannot read image '{path}': the OpenEXR file has no colour channel (channels: "
                         f"{listed}); expected R, G, B (or one grey channel)")
    raise ValueError(f"cannot read image '{path}': the OpenEXR file has no R, G, B channels (channels: "
                     f"{listed}); expected R, G, B by name (layered files are not supported), one grey "
                     "channel, or two channels")


def exr_size(path):
    """(width, height) of an OpenEXR file's data window, read from its header (the pixels are not
    decoded); also checks that the file has channels :func:`load_exr` can use. Raises
    ``FileNotFoundError`` / ``ValueError`` as :func:`load_exr` (also for more than
    ``MAX_IMAGE_PIXELS`` pixels)."""
    path = os.fspath(path)
    part = _open_exr(path, header_only=True)
    _select_channels(path, [c.name for c in part.header.get("channels", [])])
    lo, hi = part.header["dataWindow"]
    width, height = int(hi[0]) - int(lo[0]) + 1, int(hi[1]) - int(lo[1]) + 1
    _check_pixel_count(path, width, height)
    return width, height


def load_exr(path) -> torch.Tensor:
    """Loads an OpenEXR file as a 3 x H x W float32 CPU tensor of its linear values (the data window
    of the first part; the display window is ignored).

    Channels R, G and B are taken by name (case-insensitive); a file with a single (non-alpha)
    channel is read as grey in all three, one with two channels as (first, second, 0) in channel-name
    order; alpha is ignored; half, float and uint channels are converted to float32. Negative values
    are kept (HDR-FLIP counts them as 0).

    Raises ``FileNotFoundError`` if ``path`` does not exist and ``ValueError`` if it cannot be read:
    not an OpenEXR file, damaged or truncated, deep or with subsampled channels, no colour channel,
    or NaN / infinite values in the colour channels used (the message names the file and counts
    them: HDR-FLIP needs finite values, and replacing them silently would change the result).
    """
    path = os.fspath(path)
    exr_size(path)  # the header's checks (channels, pixel count) before the pixels are decoded
    part = _open_exr(path, header_only=False)
    channels = part.channels
    names = sorted(channels.keys())
    chosen = _select_channels(path, names)
    arrays = {}
    for name in {n for n in chosen if n is not None}:
        ch = channels[name]
        if getattr(ch, "xSampling", 1) != 1 or getattr(ch, "ySampling", 1) != 1:
            raise ValueError(f"cannot read image '{path}': channel '{name}' is subsampled "
                             f"({ch.xSampling}x{ch.ySampling}); subsampled (e.g. luminance/chroma) "
                             "OpenEXR files are not supported")
        a = np.asarray(ch.pixels)
        if a.ndim != 2:
            raise ValueError(f"cannot read image '{path}': channel '{name}' has an unexpected shape "
                             f"{a.shape}")
        arrays[name] = a.astype(np.float32)
    shape = next(iter(arrays.values())).shape
    if any(a.shape != shape for a in arrays.values()):
        raise ValueError(f"cannot read image '{path}': its channels differ in size")
    if shape[0] == 0 or shape[1] == 0:
        raise ValueError(f"cannot read image '{path}': it has no pixels")
    rgb = np.stack([arrays[n] if n is not None else np.zeros(shape, np.float32) for n in chosen])
    finite = np.isfinite(rgb)
    if not finite.all():
        n_nan = int(np.isnan(rgb).sum())
        n_inf = int(rgb.size - finite.sum()) - n_nan
        raise ValueError(f"cannot read image '{path}': it holds {n_nan + n_inf} non-finite value(s) "
                         f"({n_nan} NaN, {n_inf} infinite) in its colour channels; HDR-FLIP needs "
                         "finite values (fix or clamp them before the evaluation)")
    return torch.from_numpy(np.ascontiguousarray(rgb))


def save_exr(path, chw, half: bool = False) -> None:
    """Writes linear values to the OpenEXR file ``path`` (ZIP compression): a C x H x W numpy array
    or tensor with C = 3 (channels R, G, B), 4 (R, G, B, A) or 1 (Y, a grey image), or an H x W
    array (grey). Stored as 32-bit float, or 16-bit half with ``half=True`` (values beyond the half
    range become infinite). Values are written as they are (no clamping); the parent directory must
    exist. Raises ``OSError`` when the file cannot be written."""
    OpenEXR = _openexr("flip_loss.imageio.save_exr")
    if isinstance(chw, torch.Tensor):
        chw = chw.detach().to("cpu", torch.float32).numpy()
    a = np.asarray(chw)
    if a.ndim == 2:
        a = a[None]
    if a.ndim != 3 or a.shape[0] not in (1, 3, 4) or a.shape[1] == 0 or a.shape[2] == 0:
        raise ValueError("flip_loss.imageio.save_exr: expected a C x H x W image with C = 1, 3 or 4 "
                         f"(or H x W), got shape {a.shape}")
    if not np.issubdtype(a.dtype, np.number):
        raise TypeError(f"flip_loss.imageio.save_exr: expected numbers, got {a.dtype}")
    dtype = np.float16 if half else np.float32
    names = {1: ("Y",), 3: ("R", "G", "B"), 4: ("R", "G", "B", "A")}[a.shape[0]]
    with np.errstate(over="ignore"):  # beyond the half range: +-inf, as OpenEXR stores it
        channels = {n: np.ascontiguousarray(a[i].astype(dtype)) for i, n in enumerate(names)}
    header = {"compression": OpenEXR.ZIP_COMPRESSION, "type": OpenEXR.scanlineimage}
    path = os.fspath(path)
    try:
        OpenEXR.File(header, channels).write(path)
    except RuntimeError as exc:
        raise OSError(f"cannot write the OpenEXR file '{path}': {exc}") from None
