"""Loading images as tensors (LDR with Pillow, most 8-bit PNGs' pixels here: :func:`_png8_samples`;
OpenEXR with the ``openexr`` package) and saving 8-bit PNGs and OpenEXR files.

``load_image`` dispatches on the file extension. PNG, JPEG, BMP and TGA files give a 3 x H x W
float32 tensor of the stored code values / (2^depth - 1), still sRGB-encoded, as NVIDIA's evaluator
loads them (colour chunks and EXIF orientation ignored); grey is repeated into three channels;
alpha is dropped, or kept as a fourth channel with ``keep_alpha=True`` (see flip_loss.alpha), by
each format's specification: a PNG's transparent colour is matched in the file's own samples, a
TGA has alpha where its header says so. Other formats are refused, so are more than
``MAX_IMAGE_PIXELS`` pixels (from the header). ``.exr`` files are read by ``load_exr``.

Pillow reduces 16-bit colour PNGs to 8 bits; ``load_image`` keeps all 16 by decoding such files
twice, for the high and the low byte of every sample (8 bits with a warning where it cannot).

Every function here may be called from several threads at once and changes no process-wide state
(file descriptors, ``sys.stdout``/``sys.stderr``, warning filters, library settings): Pillow's
decompression-bomb warning is avoided rather than caught (:func:`_pillow_open`), and a damaged
OpenEXR file is recognised from its layout before OpenEXR reads its pixels (see "the layout of an
OpenEXR file" below), so that OpenEXR's library has nothing to print about it.
"""

import functools
import os
import struct
import warnings
import zlib
from typing import Callable, List, NamedTuple, Optional, Sequence, Tuple

import numpy as np
import torch

from .constants import MAX_IMAGE_PIXELS

__all__ = [
    "HDR_EXTENSIONS",
    "EXR_EXTENSIONS",
    "UNSUPPORTED_HDR_EXTENSIONS",
    "MAX_IMAGE_PIXELS",
    "is_hdr_path",
    "is_exr_path",
    "image_size",
    "alpha_convention",
    "load_image",
    "load_exr",
    "exr_size",
    "save_png",
    "save_exr",
]

HDR_EXTENSIONS = (".exr", ".hdr", ".pfm")
EXR_EXTENSIONS = (".exr",)
UNSUPPORTED_HDR_EXTENSIONS = (".hdr", ".pfm")


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
    return (
        f"cannot read image '{path}': {ext} files (Radiance HDR / PFM) are not supported; "
        "convert the image to OpenEXR (.exr), which is read as HDR input"
    )


def _too_large(path, claim: str) -> ValueError:
    return ValueError(
        f"cannot read image '{path}': {claim} more than the limit of {MAX_IMAGE_PIXELS} pixels "
        "(2^27, e.g. 16384x8192); a header this large is most likely damaged or a "
        "decompression bomb"
    )


def _check_pixel_count(path, width: int, height: int) -> None:
    if width * height > MAX_IMAGE_PIXELS:
        raise _too_large(path, f"its header gives {width}x{height} pixels,")


def _pillow_open(path: str):
    """``PIL.Image.open(path)`` without Pillow's decompression-bomb check: that check warns through
    the process-wide ``warnings`` machinery for headers between Pillow's limit and twice it, which
    only ``warnings.catch_warnings`` (process-wide state, not thread-safe) could silence, and
    :func:`_check_pixel_count` decides about the pixel count instead. The formats are tried as
    ``Image.open`` tries them, the one registered for the file's extension first."""
    from PIL import Image, UnidentifiedImageError

    with open(path, "rb") as f:
        prefix = f.read(16)
    extension = os.path.splitext(path)[1].lower()
    first = Image.registered_extensions().get(extension)  # also registers every plugin
    for name in dict.fromkeys(([first] if first else []) + list(Image.ID)):
        factory, accept = Image.OPEN[name]
        try:  # a check of the prefix may read past a short file's end (BMP's: struct.error)
            if accept is not None:
                verdict = accept(prefix)
                if isinstance(verdict, str) or not verdict:  # a string: rejected, with a reason
                    continue
            return factory(path)
        except (SyntaxError, IndexError, TypeError, struct.error):  # not this format
            continue
    raise UnidentifiedImageError(f"cannot identify image file {path!r}")


# The formats read with Pillow: NVIDIA's evaluator reads PNG, BMP and TGA; JPEG is read as well
# (MPO: a JPEG with further pictures, of which the first is read). Others are refused rather than
# read in whatever form Pillow gives them (floating-point TIFF, CMYK, animations).
_PILLOW_FORMATS = ("PNG", "JPEG", "MPO", "BMP", "TGA")


def _open(path):
    """Opens ``path`` with Pillow (the header only), checks its format and its pixel count."""
    from PIL import Image, UnidentifiedImageError

    try:
        im = _pillow_open(path)
    except Image.DecompressionBombError:  # a plugin's own check of a frame
        raise _too_large(path, "its header gives") from None
    except UnidentifiedImageError:
        what = "the file is empty" if os.path.getsize(path) == 0 else "not an image format Pillow recognises"
        raise ValueError(f"cannot read image '{path}': {what} (supported: PNG, JPEG, BMP, TGA)") from None
    except OSError as exc:
        raise ValueError(f"cannot read image '{path}': {exc.strerror or exc}") from None
    except ValueError as exc:  # a damaged header chunk (e.g. a PNG's tRNS) Pillow reads on opening
        raise ValueError(f"cannot read image '{path}': the file is damaged ({exc})") from None
    if im.format not in _PILLOW_FORMATS:
        im.close()
        raise ValueError(
            f"cannot read image '{path}': {im.format} images are not supported (supported: PNG, "
            "JPEG, BMP, TGA and OpenEXR)"
        )
    try:
        pillow_limit = Image.MAX_IMAGE_PIXELS
        if pillow_limit is not None and max(1, im.width) * max(1, im.height) > 2 * pillow_limit:
            raise _too_large(path, "its header gives")  # where Image.open raises DecompressionBombError
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


def _png16_samples(path, rawmode, high, keep_alpha: bool, key):
    """H x W x C uint16 samples of a 16-bit colour PNG whose high bytes ``high`` Pillow decoded
    (C = 3, or 4 with the alpha channel of a file that has one, or the transparent colour ``key``,
    when ``keep_alpha``), obtained by decoding the file again with Pillow for the low bytes; None
    if not possible."""
    im = _open(path)
    try:
        t = im.tile[0]
        args = t[3]
        low_mode = _PNG16_LOW_BYTE_RAWMODE[rawmode]
        new_args = (low_mode,) + tuple(args[1:]) if isinstance(args, tuple) else low_mode
        im.tile = [t._replace(args=new_args) if hasattr(t, "_replace") else (t[0], t[1], t[2], new_args)]
        low = np.asarray(im)
        if low.shape != high.shape:
            return None
        if rawmode == "LA;16B":
            # low: (grey high, grey low, alpha high, alpha low) per pixel; high: the high bytes of
            # grey (once or repeated) and alpha (last)
            if not (np.array_equal(low[..., 0], high[..., 0]) and np.array_equal(low[..., 2], high[..., -1])):
                return None
            grey = low[..., 0].astype(np.uint16) * 256 + low[..., 1]
            planes = [grey] * 3
            if keep_alpha:
                planes.append(low[..., 2].astype(np.uint16) * 256 + low[..., 3])
            return np.stack(planes, axis=2)
        channels = 4 if keep_alpha and rawmode == "RGBA;16B" else 3
        samples = (high[..., :channels].astype(np.uint16) * 256 + low[..., :channels]).astype(np.uint16)
        return _with_key_alpha(samples, samples, key if keep_alpha and rawmode == "RGB;16B" else None)
    except Exception:  # noqa: BLE001 - any decoder difference means: keep the 8-bit values
        return None
    finally:
        im.close()


class _PngKey(NamedTuple):
    """The transparent colour of a grey or RGB PNG (its tRNS chunk): the key in the file's own
    samples (grey repeated), and the step between the samples of one 8-bit level Pillow decodes."""

    samples: Tuple[int, int, int]
    step: int  # 255 // (2^depth - 1) for a depth of 1, 2, 4 or 8 bits; 1 for 16 bits


def _png_key(path: str) -> Optional[_PngKey]:
    """The transparent colour a grey or RGB PNG names in a tRNS chunk, read from the file itself:
    Pillow keeps the key of a 2- or 4-bit grey image unscaled beside samples it scales to 8 bits,
    and gives 255 for any non-zero key of a 1-bit one; the PNG specification compares the key with
    the file's own samples. None for other files (and for files Pillow will refuse anyway)."""
    header = None
    try:
        with open(path, "rb") as f:
            if f.read(8) != b"\x89PNG\r\n\x1a\n":
                return None
            while True:
                length, tag = struct.unpack(">I4s", f.read(8))
                if tag in (b"IDAT", b"IEND") or length > 1 << 24:
                    return None
                data = f.read(length)
                f.seek(4, os.SEEK_CUR)  # the CRC
                if tag == b"IHDR" and length == 13:
                    header = data[8], data[9]  # bit depth, colour type
                elif tag == b"tRNS" and header is not None:
                    depth, colour_type = header
                    if colour_type not in (0, 2) or depth not in (1, 2, 4, 8, 16):
                        return None  # a palette's alpha (colour type 3) is Pillow's to apply
                    if len(data) != (2 if colour_type == 0 else 6):
                        return None
                    values = struct.unpack(f">{len(data) // 2}H", data)
                    step = 1 if depth == 16 else 255 // (2**depth - 1)
                    return _PngKey(values * 3 if colour_type == 0 else values, step)
    except (OSError, struct.error):
        return None


# 8-bit PNGs whose samples Pillow gives as the file stores them (np.asarray of the loaded image)
# are decoded here instead, in about half Pillow's time: the IDAT stream inflated by ISA-L (the optional
# `isal` package, as for save_png) or zlib, both without the GIL (the command line reads two pairs
# at once), its row filters reversed by the compiled extension (csrc/flip/cpu/png_unfilter.h).
# Whatever this path does not take, or finds amiss, is Pillow's: the same pixels, and for a
# damaged file Pillow's own verdict.
_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_PNG8_MODES = {0: "L", 2: "RGB", 4: "LA", 6: "RGBA"}  # colour type -> Pillow's mode
_PNG8_CHANNELS = {"L": 1, "LA": 2, "RGB": 3, "RGBA": 4}


@functools.lru_cache(maxsize=None)
def _png_inflate_module():
    """The zlib-compatible module that inflates PNG image data: ISA-L's when installed, else zlib."""
    try:
        from isal import isal_zlib
    except ImportError:
        return zlib
    return isal_zlib


def _png_unfilter() -> Optional[Callable]:
    """The compiled extension's ``png_unfilter``, or None."""
    from ._ops import extension_function

    return extension_function("png_unfilter")


def _png_image_data(f, im) -> Optional[bytearray]:
    """The IDAT chunks' payloads, one after another, of the PNG file open as ``f`` (at its start)
    that Pillow opened as ``im``; None unless the file is one :func:`_png8_samples` decodes: an
    8-bit, non-interlaced grey, grey + alpha, RGB or RGBA image as ``im`` describes it, one image
    (no animation), its IDAT chunks one after another within the file and followed by IEND alone
    (other chunks after the image data are read by Pillow, which may refuse them). The payloads
    are read into one buffer: a copy less than reading the file and joining them."""
    head = f.read(33)  # the signature and IHDR
    if len(head) != 33 or head[:8] != _PNG_SIGNATURE or head[8:16] != b"\0\0\0\x0dIHDR":
        return None
    width, height, depth, colour_type, compression, filter_method, interlace = struct.unpack_from(">IIBBBBB", head, 16)
    if (depth, compression, filter_method, interlace) != (8, 0, 0, 0) or _PNG8_MODES.get(colour_type) != im.mode:
        return None
    tile = im.tile[0]
    if (width, height) != im.size or width == 0 or height == 0 or tuple(tile[1]) != (0, 0, width, height):
        return None
    rawmode = tile[3][0] if isinstance(tile[3], tuple) else tile[3]
    if im.info.get("interlace") or rawmode != im.mode:  # Pillow decodes another layout
        return None
    file_size = os.fstat(f.fileno()).st_size
    spans: List[Tuple[int, int]] = []  # (offset, length) of each IDAT payload
    at = len(head)
    while True:
        if at + 12 > file_size:
            return None
        f.seek(at)
        length, tag = struct.unpack(">I4s", f.read(8))
        if at + 12 + length > file_size:
            return None
        if tag == b"IDAT":
            if not spans and at + 8 != tile[2]:  # not the image data Pillow found
                return None
            spans.append((at + 8, length))
        elif spans:
            if tag != b"IEND":
                return None
            break
        elif tag in (b"IEND", b"IHDR", b"acTL", b"fcTL", b"fdAT"):  # a second IHDR: Pillow takes the last
            return None
        at += 12 + length
    data = bytearray(sum(length for _, length in spans))
    view = memoryview(data)
    filled = 0
    for offset, length in spans:
        f.seek(offset)
        if f.readinto(view[filled : filled + length]) != length:
            return None
        filled += length
    return data


def _png8_samples(path: str, im, planar: bool = False) -> Optional[np.ndarray]:
    """The samples ``np.asarray`` gives of the PNG file ``path`` once Pillow has loaded it (opened as
    ``im``, not loaded), decoded here: H x W for grey, else H x W x C; with ``planar``, C x H x W
    whatever C. None where Pillow is to decode the file: see :func:`_png_image_data`, and a stream
    that does not inflate to exactly the image's filtered rows, a row filter type beyond 4, no
    compiled extension."""
    unfilter = _png_unfilter()
    if unfilter is None or im.format != "PNG" or len(im.tile) != 1 or getattr(im, "n_frames", 1) != 1:
        return None
    try:
        with open(path, "rb") as f:
            stream = _png_image_data(f, im)
        if stream is None:
            return None
        width, height = im.size
        channels = _PNG8_CHANNELS[im.mode]
        row_bytes = width * channels
        size = height * (row_bytes + 1)
        inflater = _png_inflate_module().decompressobj()
        # One byte more than the rows: a stream that holds more is left to Pillow, one that ends
        # early or fails its checksum too (eof: the stream's end and checksum were reached).
        rows = inflater.decompress(stream, size + 1)
        del stream
        if len(rows) != size or not inflater.eof:
            return None
        samples = np.empty((channels, height, width) if planar else (height, width, channels), np.uint8)
        rows_at = np.frombuffer(rows, np.uint8).ctypes.data
        if not unfilter(rows_at, samples.ctypes.data, height, row_bytes, channels, planar):
            return None
    except Exception:  # noqa: BLE001 - an inflate error or anything else: Pillow's verdict instead
        return None
    return samples[..., 0] if channels == 1 and not planar else samples


def _flip_channels(samples: np.ndarray, keep_alpha: bool, axis: int) -> np.ndarray:
    """The channels FLIP reads of an 8-bit image's samples, whose channels (grey, grey + alpha, RGB
    or RGBA) lie along ``axis``: 3, grey repeated into them, or with ``keep_alpha`` for an image with
    alpha 4, alpha last. Those of RGB and RGBA are ``samples`` itself or a view of it."""

    def channels(start: int, stop: int) -> np.ndarray:
        index = [slice(None)] * samples.ndim
        index[axis] = slice(start, stop)
        return samples[tuple(index)]

    count = samples.shape[axis]
    alpha = keep_alpha and count in (2, 4)
    if count == (4 if alpha else 3):
        return samples
    colour = channels(0, 3) if count >= 3 else np.repeat(channels(0, 1), 3, axis=axis)
    return np.concatenate([colour, channels(count - 1, count)], axis=axis) if alpha else colour


def _has_alpha(im) -> bool:
    """Whether an opened Pillow image has an alpha channel or a transparent colour (a palette PNG
    with a tRNS chunk; grey and RGB PNGs are read by :func:`_png_key`)."""
    return "A" in im.getbands() or "transparency" in im.info


def _with_key_alpha(colour: np.ndarray, samples: np.ndarray, key: Optional[Tuple[int, int, int]]) -> np.ndarray:
    """H x W x 3 ``colour`` with an alpha channel appended where ``key`` (the transparent colour of
    a PNG) is given: 0 where the file's own H x W x 3 ``samples`` are that colour, 1 (the largest
    value of ``colour``'s type) elsewhere."""
    if key is None:
        return colour
    opaque = ~np.all(samples.astype(np.int64) == np.asarray(key, np.int64), axis=2, keepdims=True)
    one = 65535 if colour.dtype == np.uint16 else 255
    return np.concatenate([colour, np.where(opaque, one, 0).astype(colour.dtype)], axis=2)


def _planar_float(samples: np.ndarray, largest: float) -> torch.Tensor:
    """C x H x W float32 ``samples / largest`` of H x W x C integer samples: 8-bit ones in one sweep
    by the compiled extension (each pixel's channels side by side), else by NumPy, which reorders
    the samples before it widens them (a quarter of the bytes to move for 8-bit ones)."""
    from ._ops import extension_function

    height, width, channels = samples.shape
    planes = np.empty((channels, height, width), np.float32)
    row_stride, pixel_stride, channel_stride = samples.strides
    convert = extension_function("byte_planes") if samples.dtype == np.uint8 and largest == 255.0 else None
    if convert is not None and channel_stride == 1 and channels <= pixel_stride and width * pixel_stride <= row_stride:
        convert(samples.ctypes.data, planes.ctypes.data, height, width, channels, row_stride, pixel_stride)
        return torch.from_numpy(planes)
    np.copyto(planes, samples.transpose(2, 0, 1), casting="safe")
    planes /= np.float32(largest)
    return torch.from_numpy(planes)


def _to_planes(
    path,
    im,
    keep_alpha: bool,
    key: Optional[_PngKey] = None,
    decoded: Optional[np.ndarray] = None,
    codes: bool = False,
) -> torch.Tensor:
    """C x H x W float32 in [0, 1] from an opened, loaded Pillow image: C = 3 (RGB), or 4 (RGBA)
    for an image with alpha (or the transparent colour ``key`` of a grey or RGB PNG) when
    ``keep_alpha``. ``decoded``: the image's ``np.asarray`` when decoded without Pillow (an L, LA,
    RGB or RGBA image, not loaded then; see :func:`_png8_samples`), as planes with ``codes``.
    ``codes``: an image of 8-bit samples as its uint8 codes instead (see :func:`load_image`)."""
    mode = im.mode
    if mode in ("I;16", "I;16B", "I;16L", "I;16N", "I"):
        a = np.asarray(im)
        if mode == "I" and (a.min() < 0 or a.max() > 65535):
            raise ValueError(f"cannot read image '{path}': 32-bit integer images are not supported")
        grey = np.repeat(a[..., None], 3, axis=2).astype(np.uint16)
        with_alpha = _with_key_alpha(grey, grey, key.samples if key is not None and keep_alpha else None)
        return _planar_float(with_alpha, 65535.0)
    if mode in ("F",) or mode.startswith("F;"):
        raise ValueError(
            f"cannot read image '{path}': floating-point images in this format are not "
            "supported (HDR input is read from OpenEXR .exr files)"
        )
    if mode not in ("1", "L", "LA", "P", "PA", "RGB", "RGBA"):
        raise ValueError(f"cannot read image '{path}': {mode} images are not supported (convert it to RGB)")
    if key is not None and mode in ("1", "L", "RGB"):  # the transparent colour, compared here
        a = np.asarray(im.convert("L") if mode == "1" else im)
        colour = np.repeat(a[..., None], 3, axis=2) if a.ndim == 2 else a
        samples = colour.astype(np.int64) // key.step if key.step > 1 else colour
        a = _with_key_alpha(colour, samples, key.samples if keep_alpha else None)
    elif mode in ("RGB", "RGBA", "L", "LA"):
        if decoded is not None and codes:  # planes
            return torch.from_numpy(_flip_channels(decoded, keep_alpha, 0))
        a = np.asarray(im) if decoded is None else decoded
    else:
        a = np.asarray(im.convert("RGBA" if _has_alpha(im) else "RGB"))
    colour = _flip_channels(a[..., None] if a.ndim == 2 else a, keep_alpha, 2)
    if codes:
        planes = np.ascontiguousarray(colour.transpose(2, 0, 1))  # a one-pixel image: Pillow's own, read-only
        return torch.from_numpy(planes if planes.flags.writeable else planes.copy())
    return _planar_float(colour, 255.0)


# 16-bit BMP pixels: the bits of each of R, G and B, by Pillow's raw mode. Pillow widens an n-bit
# value v to 8 bits as floor(v * 255 / (2^n - 1)); NVIDIA's evaluator (and most decoders) repeat its
# bits, (v << (8 - n)) | (v >> (2n - 8)), which differs by 1 for some values.
_BMP16_BITS = {"BGR;15": (5, 5, 5), "BGR;16": (5, 6, 5)}


def _bmp16_as_nvidia(a: torch.Tensor, bits: Tuple[int, int, int]) -> torch.Tensor:
    """3 x H x W float32 colour of a 16-bit BMP as Pillow widened it -> as NVIDIA's evaluator does."""
    out = a.numpy().copy()
    for c, n in enumerate(bits):
        code = np.rint(out[c] * 255).astype(np.int64)
        v = -(-code * (2**n - 1) // 255)  # the stored value: Pillow's widening is one-to-one
        out[c] = ((v << (8 - n)) | (v >> (2 * n - 8))).astype(np.float32) / np.float32(255.0)
    return torch.from_numpy(out)


def _tga_alpha(path: str) -> Optional[str]:
    """Whether a TGA file has alpha, by its header and the TGA 2.0 extension area: None (no alpha),
    "straight" or "premultiplied". Its header must give alpha bits, and only 32-bit colour and
    16-bit grey images have alpha Pillow reads as such (the one bit of a 16-bit colour image is
    read inverted by Pillow and ignored by NVIDIA's evaluator); the extension area, when there is
    one, says whether those bits are alpha at all (attribute type 3: straight, 4: premultiplied)."""
    try:
        with open(path, "rb") as f:
            header = f.read(18)
            f.seek(0, os.SEEK_END)
            size = f.tell()
            if len(header) != 18:
                return None
            image_type, depth, alpha_bits = header[2], header[16], header[17] & 0x0F
            colour32 = image_type in (2, 10) and depth == 32
            if alpha_bits == 0 or not (colour32 or (image_type in (3, 11) and depth == 16)):
                return None
            if size < 18 + 26:
                return "straight"
            f.seek(size - 26)
            footer = f.read(26)
            if footer[8:] != b"TRUEVISION-XFILE.\0":
                return "straight"
            extension = struct.unpack("<I", footer[:4])[0]
            if extension == 0 or extension + 495 > size - 26:
                return "straight"
            f.seek(extension + 494)
            kind = f.read(1)[0]
    except OSError:
        return None
    return {3: "straight", 4: "premultiplied"}.get(kind)


def alpha_convention(path) -> str:
    """How the colour of an image file with alpha relates to its alpha, by its format's
    specification: ``"premultiplied"`` for OpenEXR (and a TGA file whose extension area says so),
    ``"straight"`` for the others (PNG, TGA, ...)."""
    path = os.fspath(path)
    if is_exr_path(path):
        return "premultiplied"
    if os.path.splitext(path)[1].lower() == ".tga" and os.path.isfile(path):
        return _tga_alpha(path) or "straight"
    return "straight"


def load_image(path, keep_alpha: bool = False, codes: bool = False) -> torch.Tensor:
    """Loads an image file as a 3 x H x W float32 CPU tensor. LDR files (PNG, JPEG, BMP, TGA): values
    in [0, 1] (code values / (2^depth - 1): they stay sRGB-encoded); grey images are repeated into
    3 channels; alpha is dropped, or with ``keep_alpha=True`` returned as a fourth channel (4 x H x W,
    alpha in [0, 1], for files with an alpha channel or a transparent colour; see
    :func:`alpha_convention`). ``.exr`` files: linear HDR values, see :func:`load_exr`.

    ``codes=True``: a file of 8 bits per sample comes back as its uint8 codes k instead, which
    :func:`flip_loss.ldr_flip` reads as the values k / 255 (the same map, from a quarter of the
    bytes); other files as above.

    Raises ``FileNotFoundError`` if ``path`` does not exist and ``ValueError`` if it is not a
    readable image (a directory, a damaged or truncated file, an unsupported format such as GIF,
    TIFF, CMYK JPEG, Radiance ``.hdr`` or ``.pfm``, an EXR file without colour channels or with
    NaN/Inf values, more than ``MAX_IMAGE_PIXELS`` pixels).
    """
    path = os.fspath(path)
    check_file(path)
    if is_exr_path(path):
        return load_exr(path, keep_alpha)
    if is_hdr_path(path):
        raise ValueError(_unsupported_hdr_message(path))
    if not os.access(path, os.R_OK):
        raise ValueError(f"cannot read image '{path}': permission denied")
    im = _open(path)
    try:
        with im:
            rawmode = None
            if im.format in ("PNG", "BMP") and len(im.tile) == 1:
                args = im.tile[0][3]
                rawmode = args[0] if isinstance(args, tuple) else args
            key = _png_key(path) if im.format == "PNG" else None
            if im.format == "TGA" and _tga_alpha(path) is None:
                keep_alpha = False  # the fourth byte of its pixels is not alpha by the file's header
            decoded = _png8_samples(path, im, codes) if im.format == "PNG" and key is None else None
            try:
                if decoded is None:
                    im.load()
            except (OSError, SyntaxError, ValueError) as exc:
                raise ValueError(f"cannot read image '{path}': the file is damaged or truncated ({exc})") from None
            if im.width == 0 or im.height == 0:
                raise ValueError(f"cannot read image '{path}': it has no pixels")
            if im.format == "PNG" and rawmode in _PNG16_LOW_BYTE_RAWMODE:
                samples = _png16_samples(path, rawmode, np.asarray(im), keep_alpha, key and key.samples)
                if samples is None:
                    warnings.warn(
                        f"flip_loss: could not decode the 16-bit PNG '{path}' at full "
                        "precision with this Pillow; using its 8-bit values",
                        RuntimeWarning,
                        stacklevel=2,
                    )
                    # the 8-bit values are the high bytes: so is the transparent colour then
                    key = key and _PngKey(tuple(v >> 8 for v in key.samples), 1)
                    a = _to_planes(path, im, keep_alpha, key)
                else:
                    a = _planar_float(samples, 65535.0)
            else:
                bmp16 = im.format == "BMP" and rawmode in _BMP16_BITS
                a = _to_planes(path, im, keep_alpha, key, decoded, codes and not bmp16)
                if bmp16:
                    a = _bmp16_as_nvidia(a, _BMP16_BITS[rawmode])
    except ValueError:
        raise
    except (OSError, SyntaxError) as exc:  # decoder errors Pillow raises lazily
        raise ValueError(f"cannot read image '{path}': {exc}") from None
    return a


# PNG files are written here rather than by Pillow, with one filter and one deflate encoder chosen
# for FLIP maps, what flip-loss writes most: Pillow's default (an adaptive filter per row, zlib level
# 6) took six times as long as evaluating a 1080p pair. A map's noise defeats the row filters, so
# rows are stored unfiltered. The deflate stream comes from ISA-L (the optional `isal` package:
# `pip install flip-loss[png]`) at level 2, else from zlib at level 1: on 1080p magma maps of
# renders (benchmarks/cli_bench.py --encodings) 2.1 MB in about 13 ms against zlib's 2.3 MB in
# about 65 ms. Either encoder's output depends only on its input, level and version: a rerun with
# the same install writes the same bytes.
PNG_ENCODERS = {"isal": 2, "zlib": 1}  # encoder -> level, in order of preference
_PNG_COLOUR_TYPES = {1: 0, 3: 2, 4: 6}  # channels -> PNG colour type (grey, RGB, RGBA)
_IDAT_BYTES = 1 << 20  # the compressed stream in chunks of 1 MiB, as encoders commonly write it
# The rows go to the encoder a block at a time, each block small enough to stay in the core's cache
# between being laid out and being deflated (about a tenth less time than the whole image at once).
_PNG_BLOCK_BYTES = 1 << 18


@functools.lru_cache(maxsize=None)
def png_encoder() -> Tuple[str, Callable[[], "object"]]:
    """The deflate encoder :func:`save_png` uses: its name ("isal" or "zlib") and a function that
    makes a compressor (``compress(data)``, ``flush()``) of the zlib stream."""
    try:
        from isal import isal_zlib
    except ImportError:
        return "zlib", functools.partial(zlib.compressobj, PNG_ENCODERS["zlib"])
    return "isal", functools.partial(isal_zlib.compressobj, PNG_ENCODERS["isal"])


def _png_chunk(tag: bytes, data) -> bytes:
    return struct.pack(">I", len(data)) + tag + bytes(data) + struct.pack(">I", zlib.crc32(data, zlib.crc32(tag)))


def save_png(path, hwc_uint8) -> None:
    """Writes an 8-bit image to ``path`` as PNG: an H x W x 3 (RGB), H x W x 4 (RGBA), H x W x 1 or
    H x W (grey) ``uint8`` numpy array or tensor. The parent directory must exist. The rows are
    stored unfiltered and deflated by :func:`png_encoder`'s encoder, no ancillary chunk. The file
    is opened once the whole stream is deflated: an error before leaves any file there as it was."""
    if isinstance(hwc_uint8, torch.Tensor):
        hwc_uint8 = hwc_uint8.detach().to("cpu").numpy()
    a = np.asarray(hwc_uint8)
    if a.dtype != np.uint8:
        raise TypeError(f"flip_loss.imageio.save_png: expected uint8 values, got {a.dtype}")
    if a.ndim == 2:
        a = a[..., None]
    if a.ndim != 3 or a.shape[2] not in _PNG_COLOUR_TYPES or a.size == 0:
        raise ValueError(
            "flip_loss.imageio.save_png: expected an H x W, H x W x 1, H x W x 3 or "
            f"H x W x 4 image, got shape {np.shape(hwc_uint8)}"
        )
    height, width, channels = a.shape
    block_rows = max(1, min(height, _PNG_BLOCK_BYTES // (1 + width * channels)))
    rows = np.zeros((block_rows, 1 + width * channels), np.uint8)  # each row: filter type 0 (none), samples
    compressor = png_encoder()[1]()
    stream = bytearray()
    for top in range(0, height, block_rows):
        count = min(block_rows, height - top)
        rows[:count, 1:] = a[top : top + count].reshape(count, -1)
        stream += compressor.compress(rows[:count])
    stream += compressor.flush()
    header = struct.pack(">IIBBBBB", width, height, 8, _PNG_COLOUR_TYPES[channels], 0, 0, 0)
    data = memoryview(stream)
    with open(os.fspath(path), "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + _png_chunk(b"IHDR", header))
        for i in range(0, len(data), _IDAT_BYTES):
            f.write(_png_chunk(b"IDAT", data[i : i + _IDAT_BYTES]))
        f.write(_png_chunk(b"IEND", b""))


# ----------------------------------------------------------------------------------------------
# OpenEXR (the ``openexr`` package: OpenEXR's own Python bindings)
# ----------------------------------------------------------------------------------------------

_ALPHA_NAMES = ("a", "alpha")


def _openexr(purpose: str):
    try:
        import OpenEXR
    except ImportError as exc:
        raise ImportError(
            f"{purpose} needs the 'openexr' package, which could not be imported ({exc}); "
            "install it with 'pip install openexr'"
        ) from None
    return OpenEXR


def _check_readable_file(path: str) -> None:
    check_file(path)
    if not os.access(path, os.R_OK):
        raise ValueError(f"cannot read image '{path}': permission denied")


# --- the layout of an OpenEXR file, checked before OpenEXR reads its pixels --------------------
#
# OpenEXR's C library reports a damaged chunk table or chunk (a truncated file, most often) on the
# process's standard error, and its Python bindings add a line on sys.stdout; silencing them would
# take redirecting file descriptors 1 and 2 (or replacing sys.stdout), which belong to the whole
# process and would swallow what other threads print meanwhile. So the reader first checks what
# OpenEXR checks before it decodes a chunk, from the file itself, as OpenEXR does it: the chunk
# table fits in the file; an incomplete table (a writer that did not finish, a damaged offset) is
# rebuilt by walking the chunks; every chunk of the full-resolution image starts with the leader
# expected of it (its part, its scanline or tile) and a packed size that fits both the chunk and
# the file. A file that fails is refused with a clean message before OpenEXR sees it. What this
# does not follow is left to OpenEXR, which may then print a line: a damaged header (OpenEXR
# raises, or reads it otherwise), compressed data damaged in place, a compression it does not know.

_EXR_MAGIC = b"\x76\x2f\x31\x01"
_EXR_TILED, _EXR_NON_IMAGE, _EXR_MULTIPART = 0x200, 0x800, 0x1000
# Scanlines per chunk by compression (NONE, RLE, ZIPS, ZIP, PIZ, PXR24, B44, B44A, DWAA, DWAB,
# HTJ2K256, HTJ2K32, LJ2K, ZSTD); a part with another compression is not checked.
_EXR_LINES_PER_CHUNK = {
    0: 1,
    1: 1,
    2: 1,
    3: 16,
    4: 32,
    5: 16,
    6: 32,
    7: 32,
    8: 32,
    9: 256,
    10: 256,
    11: 32,
    12: 256,
    13: 1,
}
_EXR_DECREASING_Y = 1
# Beyond this many chunks the leaders are not read (it would take longer than it is worth).
_EXR_MAX_CHECKED_CHUNKS = 1 << 20


class _ExrLayout(Exception):
    """The file's layout is not one this check follows: OpenEXR decides."""


class _ExrPart(NamedTuple):
    tiled: bool
    leaders: List[tuple]  # per chunk, in table order: (y,) or (tile x, tile y, level x, level y)
    unpacked: List[Optional[int]]  # per chunk, its size decoded (None: subsampled channels, unchecked)
    largest: List[Optional[int]]  # per chunk, the largest packed size OpenEXR accepts
    uncompressed: bool  # then the packed size is the decoded size
    y_min: int
    lines: int  # scanlines per chunk
    decreasing: bool


def _exr_headers(f):
    """(version flags, [{attribute name: (type, value bytes)} per part], offset of the chunk
    tables) of the OpenEXR file open (buffered) as ``f``."""
    head = f.read(8)
    if len(head) != 8 or head[:4] != _EXR_MAGIC:
        raise _ExrLayout
    flags = struct.unpack("<i", head[4:])[0] & ~0xFF

    def cstring() -> bytes:
        out = bytearray()
        while True:
            c = f.read(1)
            if not c:
                raise _ExrLayout
            if c == b"\0":
                return bytes(out)
            out += c
            if len(out) > 255:
                raise _ExrLayout

    headers = []
    while True:
        header = {}
        while True:
            name = cstring()
            if not name:
                break
            kind = cstring()
            size_bytes = f.read(4)
            if len(size_bytes) != 4:
                raise _ExrLayout
            size = struct.unpack("<i", size_bytes)[0]
            value = f.read(size) if size >= 0 else b""
            if size < 0 or len(value) != size:
                raise _ExrLayout
            header[name] = (kind, value)
        if not flags & _EXR_MULTIPART:
            headers.append(header)
            break
        if not header:  # the empty header that ends a multi-part file's headers
            break
        headers.append(header)
    return flags, headers, f.tell()


def _exr_channel_bytes(header: dict) -> Optional[int]:
    """Bytes per pixel over all channels, or None when a channel is subsampled."""
    data = header.get(b"channels", (None, b""))[1]
    total, at = 0, 0
    while at < len(data) and data[at] != 0:
        end = data.index(b"\0", at)
        if end + 17 > len(data):
            raise _ExrLayout
        pixel_type, _, x_sampling, y_sampling = struct.unpack("<iB3xii", data[end + 1 : end + 17])
        if pixel_type not in (0, 1, 2):
            raise _ExrLayout
        if (x_sampling, y_sampling) != (1, 1):
            return None
        total += 2 if pixel_type == 1 else 4
        at = end + 17
    return total


def _exr_levels(size: int, rounding_up: bool) -> int:
    """Number of mipmap / ripmap levels along an axis of ``size`` pixels (OpenEXR's roundLog2 + 1)."""
    y, r = 0, 0
    while size > 1:
        r |= size & 1
        y += 1
        size >>= 1
    return y + (r if rounding_up else 0) + 1


def _exr_level_size(size: int, level: int, rounding_up: bool) -> int:
    out = size >> level
    if rounding_up and (out << level) < size:
        out += 1
    return max(out, 1)


def _exr_part(flags: int, header: dict, multipart: bool) -> _ExrPart:
    """What the chunks of a part must hold, from its header."""
    if multipart:
        kind = header.get(b"type", (None, b""))[1].rstrip(b"\0")
    else:
        kind = b"tiledimage" if flags & _EXR_TILED else b"scanlineimage"
    if flags & _EXR_NON_IMAGE or kind not in (b"scanlineimage", b"tiledimage"):
        raise _ExrLayout  # deep data: refused elsewhere
    window = header.get(b"dataWindow", (None, b""))[1]
    compression = header.get(b"compression", (None, b""))[1]
    if len(window) != 16 or len(compression) != 1:
        raise _ExrLayout
    x_min, y_min, x_max, y_max = struct.unpack("<4i", window)
    width, height = x_max - x_min + 1, y_max - y_min + 1
    if width <= 0 or height <= 0 or width * height > MAX_IMAGE_PIXELS:
        raise _ExrLayout
    pixel_bytes = _exr_channel_bytes(header)
    order = header.get(b"lineOrder", (None, b"\0"))[1]
    decreasing = order[:1] == bytes([_EXR_DECREASING_Y])
    if kind == b"scanlineimage":
        lines = _EXR_LINES_PER_CHUNK.get(compression[0])
        if lines is None:
            raise _ExrLayout
        leaders = [(y,) for y in range(y_min, y_max + 1, lines)]
        if pixel_bytes is None:
            unpacked = largest = [None] * len(leaders)
        else:  # the bound is a whole chunk's size, also for a shorter last chunk
            unpacked = [pixel_bytes * width * min(lines, y_max + 1 - y) for (y,) in leaders]
            largest = [pixel_bytes * width * lines] * len(leaders)
        return _ExrPart(False, leaders, unpacked, largest, compression[0] == 0, y_min, lines, decreasing)
    tiles = header.get(b"tiles", (None, b""))[1]
    if len(tiles) != 9:
        raise _ExrLayout
    tile_w, tile_h, mode = struct.unpack("<IIB", tiles)
    level_mode, rounding_up = mode & 0x0F, bool(mode & 0x10)
    if tile_w == 0 or tile_h == 0 or level_mode > 2:
        raise _ExrLayout
    if level_mode == 0:
        levels = [(0, 0)]
    elif level_mode == 1:
        levels = [(level, level) for level in range(_exr_levels(max(width, height), rounding_up))]
    else:
        levels = [
            (lx, ly) for ly in range(_exr_levels(height, rounding_up)) for lx in range(_exr_levels(width, rounding_up))
        ]
    leaders, unpacked = [], []
    for lx, ly in levels:
        level_w, level_h = _exr_level_size(width, lx, rounding_up), _exr_level_size(height, ly, rounding_up)
        for ty in range(-(-level_h // tile_h)):
            for tx in range(-(-level_w // tile_w)):
                leaders.append((tx, ty, lx, ly))
                texels = min(tile_w, level_w - tx * tile_w) * min(tile_h, level_h - ty * tile_h)
                unpacked.append(None if pixel_bytes is None else texels * pixel_bytes)
        if len(leaders) > _EXR_MAX_CHECKED_CHUNKS:
            raise _ExrLayout
    return _ExrPart(True, leaders, unpacked, unpacked, compression[0] == 0, y_min, 1, decreasing)


def _exr_leader_size(part: _ExrPart, multipart: bool) -> int:
    return (4 if multipart else 0) + (16 if part.tiled else 4) + 4


def _exr_walk(f, part: _ExrPart, index: int, multipart: bool, offset: int, file_size: int):
    """(coordinates, offset after the chunk) of the chunk at ``offset`` as OpenEXR reads it while
    it rebuilds a chunk table, or None where it fails (a short read, another part, a packed size
    beyond the file)."""
    size = _exr_leader_size(part, multipart)
    leader = _exr_read_at(f, offset, size)
    if leader is None:
        return None
    fields = struct.unpack(f"<{size // 4}i", leader)
    if multipart:
        if fields[0] != index:
            return None
        fields = fields[1:]
    packed = fields[-1]
    if packed < 0 or packed > file_size:
        return None
    return tuple(fields[:-1]), offset + size + packed


def _exr_rebuilt_table(
    f, part: _ExrPart, index: int, multipart: bool, table: Sequence[int], walk_from: int, file_size: int
) -> Tuple[List[int], Optional[str]]:
    """The chunk table OpenEXR makes of an incomplete one (a writer that did not finish, a damaged
    offset), and the first complaint it prints meanwhile (or None): it walks the chunks from
    ``walk_from``, each at the listed offset if that lies ahead inside the file and right after
    the previous one otherwise, and keeps each chunk whose leader names coordinates of the part
    (scanlines: the ones expected there); 0 where none was found."""
    count = len(table)
    by_coordinates = {leader: i for i, leader in enumerate(part.leaders)} if part.tiled else None
    rebuilt = [0] * count
    position = walk_from
    for ci in range(count):
        if position <= table[ci] < file_size:
            position = table[ci]
        chunk_start = position
        computed = count - 1 - ci if part.decreasing and not part.tiled else ci
        what = f"chunk {ci + 1} of {count}" + (f" of part {index}" if multipart else "")
        walked = _exr_walk(f, part, index, multipart, chunk_start, file_size)
        if walked is None:
            return rebuilt, f"{what}: no valid chunk at offset {chunk_start} (the file is incomplete or damaged)"
        coordinates, position = walked
        if part.tiled:
            found = by_coordinates.get(coordinates)
            if found is None:
                return rebuilt, f"{what}: the chunk at offset {chunk_start} names no tile of the image {coordinates}"
        else:
            offset_in_window = coordinates[0] - part.y_min
            found = abs(offset_in_window) // part.lines * (1 if offset_in_window >= 0 else -1)
            if found < 0:
                return rebuilt, f"{what}: the chunk at offset {chunk_start} names scanline {coordinates[0]}"
            if found != computed:  # scanlines must come in order (OpenEXR says nothing of it)
                chunk_start = 0
        if found < count and rebuilt[found] == 0:
            rebuilt[found] = chunk_start
    return rebuilt, None


def _exr_read_at(f, offset: int, size: int) -> Optional[bytes]:
    f.seek(offset)
    data = f.read(size)
    return data if len(data) == size else None


def _exr_chunk_problem(
    f, part: _ExrPart, index: int, multipart: bool, what: str, chunk: int, offset: int, table_end: int, file_size: int
) -> Optional[str]:
    """What OpenEXR would complain about in chunk ``chunk`` of part ``index`` at ``offset``."""
    expected = part.leaders[chunk]
    where = f"tile {expected}" if part.tiled else f"scanline {expected[0]}"
    if not table_end <= offset <= file_size:
        return f"{what} ({where}) is missing: the file is incomplete or its chunk table is damaged"
    leader_size = _exr_leader_size(part, multipart)
    leader = _exr_read_at(f, offset, leader_size)
    if leader is None:
        return f"{what} ({where}) is cut short by the end of the file"
    fields = struct.unpack(f"<{leader_size // 4}i", leader)
    if multipart:
        if fields[0] != index:
            return f"{what} ({where}) says it belongs to part {fields[0]}"
        fields = fields[1:]
    coordinates, packed = tuple(fields[:-1]), fields[-1]
    if coordinates != expected:
        said = f"tile {coordinates}" if part.tiled else f"scanline {coordinates[0]}"
        return f"{what} says {said}, expected {where}"
    largest, unpacked = part.largest[chunk], part.unpacked[chunk]
    if packed < 0 or (
        largest is not None
        and (packed > largest or (packed == 0 and unpacked > 0) or (part.uncompressed and packed != unpacked))
    ):
        return f"{what} ({where}) gives an impossible packed size of {packed} bytes"
    end = offset + leader_size + packed
    if end > file_size:
        return f"{what} ({where}) ends {end - file_size} bytes past the end of the file"
    return None


def _exr_layout_problem(path: str) -> Optional[str]:
    """What OpenEXR would report on stderr about the chunk table or the chunks of the OpenEXR file
    ``path``, or None: nothing this check finds."""
    try:
        with open(path, "rb") as f:
            file_size = os.fstat(f.fileno()).st_size
            flags, headers, tables = _exr_headers(f)
            multipart = bool(flags & _EXR_MULTIPART)
            if not headers:
                raise _ExrLayout
            parts = [_exr_part(flags, h, multipart) for h in headers]
            if multipart:  # each part gives its chunk count; one that differs is not followed
                for h, part in zip(headers, parts):
                    given = h.get(b"chunkCount", (None, b""))[1]
                    if len(given) != 4 or struct.unpack("<i", given)[0] != len(part.leaders):
                        raise _ExrLayout
            total = sum(len(part.leaders) for part in parts)
            if tables + 8 * total > file_size:
                return f"its chunk table is cut short ({total} chunks, the file ends after {file_size} bytes)"
            if total > _EXR_MAX_CHECKED_CHUNKS:
                return None
            offsets = struct.unpack(f"<{total}Q", _exr_read_at(f, tables, 8 * total))
            walk_from = tables + 8 * total  # where the chunks begin
            at = 0
            for index, part in enumerate(parts):
                count = len(part.leaders)
                table_end = tables + 8 * (at + count)
                table = list(offsets[at : at + count])
                at += count
                if not all(table_end <= offset < file_size for offset in table):
                    table, problem = _exr_rebuilt_table(f, part, index, multipart, table, walk_from, file_size)
                    if problem is not None:
                        return problem
                for chunk, offset in enumerate(table):
                    if part.tiled and part.leaders[chunk][2:] != (0, 0):
                        continue  # OpenEXR reads the full-resolution level only
                    what = f"chunk {chunk + 1} of {count}" + (f" of part {index}" if multipart else "")
                    problem = _exr_chunk_problem(f, part, index, multipart, what, chunk, offset, table_end, file_size)
                    if problem is not None:
                        return problem
                # The next part's chunks follow this part's last one (OpenEXR's walk starts there).
                last = max(table)
                walked = _exr_walk(f, part, index, multipart, last, file_size)
                if walked is None:
                    raise _ExrLayout
                walk_from = walked[1]
    except (_ExrLayout, OSError, struct.error, ValueError, OverflowError):
        return None
    return None


def _library_detail(path: str, exc) -> str:
    """The telling part of OpenEXR's complaint, without the repeated file name."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    detail = lines[-1] if lines else type(exc).__name__
    if detail.startswith("Unable to open") and detail.endswith("for read"):  # says no more than that
        detail = "its header cannot be parsed"
    for prefix in (f"{path}: ", f"{os.path.basename(path)}: "):
        if detail.startswith(prefix):
            detail = detail[len(prefix) :]
    return detail


def _damaged_exr(path: str, detail: str) -> ValueError:
    return ValueError(
        f"cannot read image '{path}': the OpenEXR file is damaged, truncated or of a kind this "
        f"reader does not support ({detail})"
    )


def _open_exr(path: str, header_only: bool):
    """Opens ``path`` with OpenEXR (header only, or with every channel as a separate array) and
    returns its first part; clear ``ValueError`` messages for what cannot be read. Before the
    pixels are read, the file's chunks are checked (see above), so that OpenEXR has nothing to
    print about them."""
    _check_readable_file(path)
    try:
        OpenEXR = _openexr("reading OpenEXR files")
    except ImportError as exc:
        raise ValueError(f"cannot read image '{path}': {exc}") from None
    if not OpenEXR.isOpenExrFile(path):
        raise ValueError(
            f"cannot read image '{path}': not an OpenEXR file (it does not start with the OpenEXR magic number)"
        )
    if not header_only:
        problem = _exr_layout_problem(path)
        if problem is not None:
            raise _damaged_exr(path, problem)
    try:
        f = OpenEXR.File(path, separate_channels=True, header_only=header_only)
        parts = f.parts
    except Exception as exc:  # noqa: BLE001 - the bindings raise RuntimeError or ValueError
        raise _damaged_exr(path, _library_detail(path, exc)) from None
    if not parts:  # a damaged pixel block the check above did not see: no part, no exception
        raise _damaged_exr(path, "no readable image part")
    part = parts[0]
    kind = str(part.header.get("type", ""))
    if "deep" in kind:
        raise ValueError(f"cannot read image '{path}': deep OpenEXR images are not supported")
    return part


def _select_channels(path: str, names) -> Tuple[list, Optional[str]]:
    """(the stored channels that give R, G and B: three names, None for a channel of zeros; the
    alpha channel or None) from the channel names of an EXR file, by the rule of :func:`load_exr`.
    Raises ValueError for a file with no colour channel this rule finds, or one it cannot tell."""
    by_lower = {}
    for n in names:
        if n.lower() in ("r", "g", "b", "a") and n.lower() in by_lower:
            raise ValueError(
                f"cannot read image '{path}': the OpenEXR file has two channels named "
                f"'{by_lower[n.lower()]}' and '{n}'; which one is meant cannot be told"
            )
        by_lower.setdefault(n.lower(), n)
    alpha = by_lower.get("a", by_lower.get("alpha"))
    rgb = [by_lower.get(c) for c in ("r", "g", "b")]
    found = [n for n in rgb if n is not None]
    if len(found) == 1:  # one colour channel is a grey image, whatever its name says
        return found * 3, alpha
    if found:
        return rgb, alpha
    others = [n for n in names if n.lower() not in _ALPHA_NAMES]
    if len(others) == 1:
        return others * 3, alpha
    if len(names) == 1:  # an alpha channel alone is the only picture there is
        return list(names) * 3, None
    listed = ", ".join(names) if names else "none"
    if not others:
        raise ValueError(f"cannot read image '{path}': the OpenEXR file has no colour channel (channels: {listed})")
    if {"ry", "by"} & set(by_lower):
        raise ValueError(
            f"cannot read image '{path}': luminance/chroma OpenEXR images (channels: {listed}) are "
            "not supported; convert the image to R, G, B channels"
        )
    raise ValueError(
        f"cannot read image '{path}': the OpenEXR file has no R, G, B channels (channels: {listed}); "
        "expected R, G and/or B by name or a single grey channel (layered files are not supported)"
    )


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


def load_exr(path, keep_alpha: bool = False) -> torch.Tensor:
    """Loads an OpenEXR file as a 3 x H x W float32 CPU tensor of its linear values (the data window
    of the first part; the display window is ignored).

    The colour channels are R, G and B by name (the whole name, any case: ``diffuse.R`` is not R):
    all three, two with the third 0, or one of them alone, read as grey (its value in all three).
    A file without R, G and B is grey from its one channel other than alpha (any name: Y, Z, ...),
    or from its only channel. Alpha (A, or alpha, any case) is ignored, or with ``keep_alpha=True``
    returned as a fourth channel (4 x H x W) when the file has one beside its colour (premultiplied
    by OpenEXR's convention, see :func:`alpha_convention`). Half, float and uint channels become
    float32 values; negative values are kept (HDR-FLIP counts them as 0). Tiled and mipmapped files
    give their full-resolution level. docs/cli.md says where NVIDIA's evaluator reads otherwise.

    Raises ``FileNotFoundError`` if ``path`` does not exist and ``ValueError`` if it cannot be read:
    not an OpenEXR file, damaged or truncated, deep, subsampled colour or alpha channels, no colour
    channel by the rule above (two or more other channels, layers alone, luminance/chroma images),
    two channels named alike but for case (R and r), or NaN / infinite values in the channels used
    (the message names the file and counts them: HDR-FLIP needs finite values, and replacing them
    silently would change the result).
    """
    path = os.fspath(path)
    exr_size(path)  # the header's checks (channels, pixel count) before the pixels are decoded
    part = _open_exr(path, header_only=False)
    channels = part.channels
    names = sorted(channels.keys())
    chosen, alpha = _select_channels(path, names)
    alpha = alpha if keep_alpha else None
    if alpha is not None:
        chosen = chosen + [alpha]
    arrays = {}
    for name in {n for n in chosen if n is not None}:
        ch = channels[name]
        if getattr(ch, "xSampling", 1) != 1 or getattr(ch, "ySampling", 1) != 1:
            raise ValueError(
                f"cannot read image '{path}': channel '{name}' is subsampled "
                f"({ch.xSampling}x{ch.ySampling}); subsampled (e.g. luminance/chroma) "
                "OpenEXR files are not supported"
            )
        a = np.asarray(ch.pixels)
        if a.ndim != 2:
            raise ValueError(f"cannot read image '{path}': channel '{name}' has an unexpected shape {a.shape}")
        arrays[name] = a.astype(np.float32)
    shape = next(iter(arrays.values())).shape
    if any(a.shape != shape for a in arrays.values()):
        raise ValueError(f"cannot read image '{path}': its channels differ in size")
    if shape[0] == 0 or shape[1] == 0:
        raise ValueError(f"cannot read image '{path}': it has no pixels")
    image = np.stack([arrays[n] if n is not None else np.zeros(shape, np.float32) for n in chosen])
    finite = np.isfinite(image)
    if not finite.all():
        n_nan = int(np.isnan(image).sum())
        n_inf = int(image.size - finite.sum()) - n_nan
        where = "colour and alpha channels" if alpha is not None else "colour channels"
        raise ValueError(
            f"cannot read image '{path}': it holds {n_nan + n_inf} non-finite value(s) "
            f"({n_nan} NaN, {n_inf} infinite) in its {where}; HDR-FLIP needs "
            "finite values (fix or clamp them before the evaluation)"
        )
    return torch.from_numpy(np.ascontiguousarray(image))


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
        raise ValueError(
            f"flip_loss.imageio.save_exr: expected a C x H x W image with C = 1, 3 or 4 (or H x W), got shape {a.shape}"
        )
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
