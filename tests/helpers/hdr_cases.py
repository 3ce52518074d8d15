"""HDR conformance pairs: linearised crops lifted into HDR, and helpers around flip-evaluator's
HDR mode (its argument order is (reference, test); it exits the process when start > stop, so
callers must never hand it an all-black reference)."""

import numpy as np
import torch

from conformance import load_crop


def srgb_decode(x):
    return np.where(x <= 0.04045, x / 12.92, ((np.maximum(x, 0.04045) + 0.055) / 1.055) ** 2.4)


def lifted(name, lo=-2.0, hi=6.0, crop=None):
    """A crop linearised and multiplied by an exposure ramp from 2^lo to 2^hi across its width."""
    img = srgb_decode(load_crop(name).astype(np.float64))
    if crop is not None:
        img = img[: crop[0], : crop[1]]
    ramp = np.exp2(np.linspace(lo, hi, img.shape[1]))[None, :, None]
    return (img * ramp).astype(np.float32)


def cases():
    """(case_id, test_hwc, reference_hwc, ppd, parameters) with parameters as flip-evaluator takes them."""
    rng = np.random.default_rng(7)
    out = []
    blocks = lifted("blocks")
    noisy = np.clip(blocks * (1 + 0.1 * rng.standard_normal(blocks.shape)), 0, None).astype(np.float32)
    out.append(("blocks-noise-aces-auto", noisy, blocks, 67.02, {"tonemapper": "aces"}))
    out.append(("blocks-noise-hable-auto", noisy, blocks, 67.02, {"tonemapper": "hable"}))
    out.append(("blocks-noise-reinhard-auto", noisy, blocks, 67.02, {"tonemapper": "reinhard"}))
    rug = lifted("rug", -4, 3)
    fire = rug.copy()
    idx = rng.integers(0, rug.shape[0] * rug.shape[1], 40)
    fire.reshape(-1, 3)[idx] = rng.uniform(50, 400, (40, 3)).astype(np.float32)  # fireflies
    out.append(("rug-fireflies-aces-auto", fire, rug, 30.0, {"tonemapper": "aces"}))
    toys = lifted("toys", 0, 4, crop=(37, 53))
    blur = (toys + np.roll(toys, 1, 0) + np.roll(toys, 1, 1)) / 3
    out.append(
        (
            "toys-37x53-blur-aces-given",
            blur.astype(np.float32),
            toys,
            120.0,
            {"tonemapper": "aces", "startExposure": -3.0, "stopExposure": 1.5, "numExposures": 5},
        )
    )
    out.append(
        (
            "toys-37x53-blur-hable-start-only",
            blur.astype(np.float32),
            toys,
            67.02,
            {"tonemapper": "hable", "startExposure": -1.0},
        )
    )
    small = lifted("toys", 1, 2, crop=(5, 7))
    out.append(
        (
            "tiny-5x7-tint-reinhard-auto",
            (small * np.float32([1.1, 1.0, 0.9])).astype(np.float32),
            small,
            67.02,
            {"tonemapper": "reinhard"},
        )
    )
    half_black = blocks.copy()
    half_black[:, : int(0.6 * blocks.shape[1])] = 0  # median luminance 0
    out.append(
        (
            "zero-median-aces-auto",
            np.clip(half_black * 1.2, 0, None).astype(np.float32),
            half_black,
            30.0,
            {"tonemapper": "aces"},
        )
    )
    return out


def evaluator(test_hwc, ref_hwc, ppd, params):
    import flip_evaluator

    p = dict(params)
    p["ppd"] = ppd
    err, _, used = flip_evaluator.evaluate(
        np.ascontiguousarray(ref_hwc).copy(),
        np.ascontiguousarray(test_hwc).copy(),
        "HDR",
        applyMagma=False,
        computeMeanError=False,
        parameters=p,
    )
    return err[..., 0].astype(np.float64), used


def nchw(hwc, dtype=torch.float32):
    return torch.from_numpy(np.ascontiguousarray(hwc)).permute(2, 0, 1).unsqueeze(0).to(dtype).contiguous()


def our_args(params):
    """flip_loss.hdr_flip keyword arguments for flip-evaluator parameters."""
    return {
        "tone_mapper": params.get("tonemapper", "aces"),
        "start_exposure": params.get("startExposure"),
        "stop_exposure": params.get("stopExposure"),
        "num_exposures": params.get("numExposures"),
    }


def exposure_strips(dtype):
    """Two items whose brightness rises 14 stops from left to right (37 x 150), so that each
    exposure wins in a vertical strip: the case where the CUDA tiled backward skips whole tiles.
    Returns (test, reference, exposures, counts, generator); the generator goes on to draw the
    incoming gradient, so the CUDA and emulator tests use the same one."""
    g = torch.Generator().manual_seed(12)
    ramp = torch.exp2(torch.linspace(-7, 7, 150, dtype=dtype))
    ref = ramp * (0.5 + torch.rand(2, 3, 37, 150, generator=g, dtype=dtype))
    test = ref * (1 + 0.2 * torch.randn(ref.shape, generator=g, dtype=dtype)).clamp(min=0.1)
    ex = torch.tensor([[-5.0, -1.0, 3.0], [-3.0, 2.0, 2.0]], dtype=dtype)
    counts = torch.tensor([3, 2])
    return test, ref, ex, counts, g
