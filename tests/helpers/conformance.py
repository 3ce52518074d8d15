"""Conformance helpers: deterministic image pairs and the comparison against flip-evaluator.

Not a test module: ``test_conformance.py`` (and other tests) import it. Images come only from the
crops committed under ``tests/data`` (see ``tests/data/LICENSE.md``).
"""

import functools
import io
from pathlib import Path

import numpy as np
from PIL import Image, ImageFilter

DATA_DIR = Path(__file__).resolve().parents[1] / "data"
CROPS = ("rug", "toys", "blocks")
DEFAULT_PPD = 67.0206451  # the evaluator's float32 default

# Agreement thresholds against flip-evaluator (float32 C++).
MEAN_ABS_TOL = 5e-5
P999_TOL = 2e-4
MAX_TOL = 2e-3
MEAN_TOL = 5e-5


@functools.lru_cache(maxsize=None)
def _load_crop_cached(name):
    with Image.open(DATA_DIR / f"{name}.png") as im:
        arr = np.asarray(im.convert("RGB"), dtype=np.float32) / np.float32(255.0)
    arr.setflags(write=False)
    return arr


def load_crop(name):
    """H x W x 3 float32 sRGB array in [0, 1] of the committed crop ``tests/data/<name>.png``."""
    return _load_crop_cached(name).copy()


# ---------------------------------------------------------------------------------------------
# Distortions (all take and return H x W x 3 float32 sRGB arrays in [0, 1])
# ---------------------------------------------------------------------------------------------


def _to_uint8_image(x):
    return Image.fromarray(np.clip(np.rint(x * 255.0), 0, 255).astype(np.uint8), "RGB")


def _from_image(im):
    return np.asarray(im.convert("RGB"), dtype=np.float32) / np.float32(255.0)


def _finish(x):
    return np.ascontiguousarray(np.clip(x, 0.0, 1.0), dtype=np.float32)


def add_noise(x, sigma, seed):
    rng = np.random.default_rng(seed)
    return _finish(x + rng.normal(0.0, sigma, size=x.shape))


def gaussian_blur(x, radius):
    return _from_image(_to_uint8_image(x).filter(ImageFilter.GaussianBlur(radius)))


def jpeg(x, quality):
    buf = io.BytesIO()
    _to_uint8_image(x).save(buf, format="JPEG", quality=quality)
    buf.seek(0)
    with Image.open(buf) as im:
        return _from_image(im)


def shift(x, dy, dx):
    """Shift content by (dy, dx) pixels, repeating the edge rows / columns."""
    h, w = x.shape[:2]
    rows = np.clip(np.arange(h) - dy, 0, h - 1)
    cols = np.clip(np.arange(w) - dx, 0, w - 1)
    return _finish(x[rows][:, cols])


def tint(x, gains):
    return _finish(x * np.asarray(gains, dtype=np.float32))


def flat(h, w, rgb):
    return _finish(np.broadcast_to(np.asarray(rgb, dtype=np.float32), (h, w, 3)))


def uniform(h, w, seed):
    return _finish(np.random.default_rng(seed).random((h, w, 3)))


# ---------------------------------------------------------------------------------------------
# Cases
# ---------------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=None)
def _cases_cached():
    rug, toys, blocks = (load_crop(n) for n in CROPS)
    odd = blocks[17:54, 31:84]  # 37 x 53
    tiny = uniform(5, 7, seed=11)
    out = [
        ("rug-noise-67", add_noise(rug, 0.03, seed=1), rug, DEFAULT_PPD),
        ("rug-blur-67", gaussian_blur(rug, 1.5), rug, DEFAULT_PPD),
        ("rug-jpeg-120", jpeg(rug, 20), rug, 120.0),
        ("blocks-jpeg-67", jpeg(blocks, 20), blocks, DEFAULT_PPD),
        ("blocks-shift-30", shift(blocks, 0, 1), blocks, 30.0),
        ("blocks-identical-67", blocks.copy(), blocks, DEFAULT_PPD),
        ("toys-tint-120", tint(toys, (1.08, 0.96, 0.88)), toys, 120.0),
        ("toys-noise-30", add_noise(toys, 0.05, seed=2), toys, 30.0),
        ("toys-vshift-67", shift(toys, 1, 0), toys, DEFAULT_PPD),
        ("odd-37x53-blur-67", gaussian_blur(odd, 1.0), _finish(odd), DEFAULT_PPD),
        ("odd-37x53-tint-30", tint(odd, (0.9, 1.0, 1.1)), _finish(odd), 30.0),
        ("tiny-5x7-noise-67", add_noise(tiny, 0.1, seed=3), tiny, DEFAULT_PPD),
        ("tiny-2x3-random-30", uniform(2, 3, seed=4), uniform(2, 3, seed=5), 30.0),
        ("tiny-1x1-67", flat(1, 1, (0.2, 0.6, 0.3)), flat(1, 1, (0.25, 0.5, 0.35)), DEFAULT_PPD),
        ("flat-24x31-67", flat(24, 31, (0.40, 0.50, 0.60)), flat(24, 31, (0.41, 0.50, 0.59)), DEFAULT_PPD),
        ("black-white-16x16-67", flat(16, 16, (0.0, 0.0, 0.0)), flat(16, 16, (1.0, 1.0, 1.0)), DEFAULT_PPD),
        ("random-33x29-120", uniform(33, 29, seed=6), uniform(33, 29, seed=7), 120.0),
    ]
    for cid, t, r, _ in out:
        assert t.shape == r.shape and t.dtype == np.float32 and r.dtype == np.float32, cid
        t.setflags(write=False)
        r.setflags(write=False)
    return tuple(out)


def cases():
    """List of (case_id, test_hwc, reference_hwc, ppd): deterministic H x W x 3 float32 sRGB
    pairs in [0, 1] covering noise, blur, JPEG, shifts, tints, odd / tiny sizes, flat images,
    black vs white, and pixels_per_degree 30, 67.02 and 120. Arrays are read-only."""
    return list(_cases_cached())


def case_ids():
    return [c[0] for c in _cases_cached()]


def get_case(case_id):
    for c in _cases_cached():
        if c[0] == case_id:
            return c
    raise KeyError(case_id)


# ---------------------------------------------------------------------------------------------
# Oracle and comparison
# ---------------------------------------------------------------------------------------------


def evaluator_map(test_hwc, reference_hwc, ppd):
    """LDR-FLIP map (H x W float64) from flip-evaluator for sRGB inputs (note its argument
    order: reference first)."""
    import flip_evaluator

    # Fresh writable copies: the binding rejects read-only arrays (and the C++ side works on
    # copies anyway).
    ref = np.array(reference_hwc, dtype=np.float32, order="C", copy=True)
    tst = np.array(test_hwc, dtype=np.float32, order="C", copy=True)
    err, _, _ = flip_evaluator.evaluate(
        ref, tst, "LDR", inputsRGB=True, applyMagma=False, computeMeanError=False, parameters={"ppd": float(ppd)}
    )
    err = np.asarray(err)
    if err.ndim == 3:
        err = err[..., 0]
    return err.astype(np.float64)


def agreement(ours_hw, theirs_hw):
    """Statistics of |ours - theirs| as a dict."""
    ours = np.asarray(ours_hw, dtype=np.float64)
    theirs = np.asarray(theirs_hw, dtype=np.float64)
    d = np.abs(ours - theirs)
    worst = np.unravel_index(np.argmax(d), d.shape)
    return {
        "mean_abs": float(d.mean()),
        "p999": float(np.quantile(d, 0.999)),
        "frac_within": float(np.mean(d <= P999_TOL)),
        "max_abs": float(d.max()),
        "mean_diff": float(abs(ours.mean() - theirs.mean())),
        "worst_pos": tuple(int(i) for i in worst),
        "worst_ours": float(ours[worst]),
        "worst_theirs": float(theirs[worst]),
        "mean_ours": float(ours.mean()),
        "mean_theirs": float(theirs.mean()),
    }


def assert_agrees(ours_hw, theirs_hw, label=""):
    """Assert that our map agrees with the evaluator's: mean |d| <= 5e-5, 99.9 % of pixels within
    2e-4, every pixel within 2e-3, and |mean(ours) - mean(theirs)| <= 5e-5."""
    ours = np.asarray(ours_hw, dtype=np.float64)
    theirs = np.asarray(theirs_hw, dtype=np.float64)
    assert ours.shape == theirs.shape, f"{label}: shape {ours.shape} vs evaluator {theirs.shape}"
    assert np.all(np.isfinite(ours)), f"{label}: non-finite values in our map"
    s = agreement(ours, theirs)
    failures = []
    if s["mean_abs"] > MEAN_ABS_TOL:
        failures.append(f"mean |d| {s['mean_abs']:.3g} > {MEAN_ABS_TOL:g}")
    if s["frac_within"] < 0.999:
        failures.append(
            f"only {100 * s['frac_within']:.3f} % of pixels within {P999_TOL:g} (99.9th percentile |d| {s['p999']:.3g})"
        )
    if s["max_abs"] > MAX_TOL:
        failures.append(f"max |d| {s['max_abs']:.3g} > {MAX_TOL:g}")
    if s["mean_diff"] > MEAN_TOL:
        failures.append(f"|mean difference| {s['mean_diff']:.3g} > {MEAN_TOL:g}")
    if failures:
        raise AssertionError(
            f"{label}: FLIP map disagrees with flip-evaluator: "
            + "; ".join(failures)
            + f"\n  worst pixel (row, col) {s['worst_pos']}: ours {s['worst_ours']:.8g}, "
            f"evaluator {s['worst_theirs']:.8g}"
            + f"\n  stats: mean |d| {s['mean_abs']:.3g}, p99.9 {s['p999']:.3g}, max {s['max_abs']:.3g},"
            f" map means ours {s['mean_ours']:.8g} / evaluator {s['mean_theirs']:.8g}"
            f" (size {ours.shape})"
        )
    return s
