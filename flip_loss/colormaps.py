"""Colour maps for FLIP error maps (see docs/cli.md, "Colour maps").

``MAGMA`` (error maps) and ``VIRIDIS`` (HDR exposure maps) are the 256-entry tables of the standard
magma and viridis colour maps, as shipped by matplotlib 3.11.2
(``matplotlib.colormaps[name].colors``), rounded to 6 decimals and kept as data
(``flip_loss/data/magma.txt``, ``viridis.txt``): matplotlib is an optional extra (``plots``, for
histograms), and the maps must not depend on its version to stay identical to NVIDIA's tool.
The values are display values: they are written to 8-bit images as they are, with no sRGB encoding.

``apply_colormap`` looks a value ``v`` up at index ``int(v * 255 + 0.5)``, as NVIDIA's evaluator
does, and writes the colour as ``uint8(255 * c + 0.5)``; both are computed in float32 like the
evaluator, so that maps in [0, 1] give the same 8-bit colours as the ``flip`` tool. One deliberate
deviation: ``v`` is clamped to [0, 1] first (NaN counts as 0), so out-of-range values saturate at
the ends of the map; the evaluator instead wraps values above ~1.002 around to dark colours and
indexes out of bounds below ~-0.006.
"""

import os

import numpy as np

__all__ = ["MAGMA", "VIRIDIS", "apply_colormap", "colormap_indices", "to_grey_uint8"]


def _table(name: str):
    """A colour table of flip_loss/data as a tuple of 256 (r, g, b) tuples."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", f"{name}.txt")
    rows = np.loadtxt(path, dtype=np.float64, comments="#")
    if rows.shape != (256, 3):
        raise RuntimeError(f"flip_loss: the colour table {path} is damaged (shape {rows.shape})")
    return tuple(tuple(float(v) for v in row) for row in rows)


MAGMA = _table("magma")
VIRIDIS = _table("viridis")

_LUT_CACHE = {}


def _as_hw_float32(values_hw, what: str) -> np.ndarray:
    """``values_hw`` (torch tensor or array-like) as a 2-D float32 numpy array, not a copy where it
    already is one (the callers do not change it); leading dimensions of size 1 (e.g. the
    1 x H x W or 1 x 1 x H x W maps ``ldr_flip`` returns) are dropped."""
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a runtime dependency
        torch = None
    if torch is not None and isinstance(values_hw, torch.Tensor):
        a = values_hw.detach().to("cpu").float().numpy()
    else:
        a = np.asarray(values_hw)
        if a.dtype.kind not in "fiub":
            raise TypeError(f"flip_loss.colormaps.{what}: expected a real numeric array, got dtype {a.dtype}")
        a = a.astype(np.float32, copy=False)
    while a.ndim > 2 and a.shape[0] == 1:
        a = a[0]
    if a.ndim != 2:
        raise ValueError(
            f"flip_loss.colormaps.{what}: expected an H x W map (leading dimensions "
            f"of size 1 allowed), got shape {tuple(np.shape(values_hw))}"
        )
    return a


def _unit_float32(a: np.ndarray) -> np.ndarray:
    """A float32 copy of ``a`` clamped to [0, 1], NaN -> 0."""
    v = np.nan_to_num(a.astype(np.float32, copy=False), nan=0.0, posinf=1.0, neginf=0.0)
    return np.clip(v, 0.0, 1.0, out=v)


def _to_uint8(c: np.ndarray) -> np.ndarray:
    """uint8(255 * c + 0.5) in float32, for c already in [0, 1]."""
    return (c.astype(np.float32) * np.float32(255.0) + np.float32(0.5)).astype(np.uint8)


def _unit_codes(values_hw, what: str) -> np.ndarray:
    """uint8(255 * clamp(v, 0, 1) + 0.5) in float32 (NaN -> 0) of an H x W map: the colour table's
    index of each value, and the grey level of the --no-magma maps. (One copy, changed in place:
    the map of a 1080p pair takes a few milliseconds.)"""
    v = _unit_float32(_as_hw_float32(values_hw, what))
    v *= np.float32(255.0)
    v += np.float32(0.5)
    return v.astype(np.uint8)


def _lut(table) -> np.ndarray:
    key = id(table)
    hit = _LUT_CACHE.get(key)
    if hit is not None and hit[0] is table:
        return hit[1]
    t = np.asarray(table, dtype=np.float64)
    if t.shape != (256, 3):
        raise ValueError(
            f"flip_loss.colormaps.apply_colormap: the table must have 256 RGB entries, got shape {t.shape}"
        )
    if not np.isfinite(t).all():
        raise ValueError("flip_loss.colormaps.apply_colormap: the table contains NaN or inf")
    lut = np.ascontiguousarray(_to_uint8(np.clip(t, 0.0, 1.0).astype(np.float32)))  # rows of 3 bytes
    if table is MAGMA or table is VIRIDIS:  # this module's own tables: nothing can change them
        _LUT_CACHE[key] = (table, lut)
    return lut


def colormap_indices(values_hw) -> np.ndarray:
    """Table indices ``int(clamp(v, 0, 1) * 255 + 0.5)`` (computed in float32) as an H x W int64
    array."""
    return _unit_codes(values_hw, "colormap_indices").astype(np.int64)


def apply_colormap(values_hw, table=MAGMA) -> np.ndarray:
    """Colours an H x W map of values in [0, 1] (torch tensor or numpy array) with a 256-entry RGB
    ``table`` (``MAGMA`` by default, or ``VIRIDIS``, or any 256 x 3 array of values in [0, 1]).

    Returns an H x W x 3 ``uint8`` numpy array. Index ``int(v * 255 + 0.5)`` after clamping ``v`` to
    [0, 1] (NaN -> 0); colour ``uint8(255 * c + 0.5)``. Out-of-range values saturate instead of
    wrapping as in NVIDIA's evaluator (module docstring).
    """
    lut = _lut(table)
    values = _as_hw_float32(values_hw, "apply_colormap")
    from ._ops import extension_function

    colour_map = extension_function("colour_map")
    if colour_map is None:  # NumPy: the same colours
        return np.take(lut, _unit_codes(values, "apply_colormap"), axis=0)
    values = np.require(values, np.float32, ["C_CONTIGUOUS", "ALIGNED"])
    colours = np.empty(values.shape + (3,), np.uint8)
    colour_map(values.ctypes.data, values.size, lut.ctypes.data, colours.ctypes.data)
    return colours


def to_grey_uint8(values_hw) -> np.ndarray:
    """An H x W map of values in [0, 1] as an H x W ``uint8`` grey image,
    ``uint8(255 * clamp(v, 0, 1) + 0.5)`` (NaN -> 0), as the evaluator's ``--no-magma`` maps."""
    return _unit_codes(values_hw, "to_grey_uint8")
