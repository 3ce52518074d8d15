"""Every entry point under the process's defaults: ``torch.set_default_dtype(torch.float64)`` and
``torch.set_default_device(...)`` change nothing.

A tensor made without naming its device lands on the default device: under a CUDA default a
metric's statistics and results would mix devices, and under the meta default (the stand-in for a
GPU default on a machine without one, which fails the same calls) it has no values at all. One made
without naming its dtype would follow the default dtype. Each entry point runs on CPU tensors
made beforehand, once plainly and once under each default, and must give the same results: the
same values, dtypes and devices. FLIPTorchMetric's states start where torchmetrics puts a metric,
on the default device of its construction (``metric.device``), named.
"""

import contextlib
import io

import numpy as np
import pytest
import torch

import flip_loss
from flip_loss import alpha, colormaps, hdr, imageio


def ldr(seed=0, dtype=torch.float32, shape=(2, 3, 12, 13)):
    g = torch.Generator().manual_seed(seed)
    ref = torch.rand(shape, generator=g, dtype=dtype, device="cpu")
    return (ref + 0.1 * torch.randn(shape, generator=g, dtype=dtype, device="cpu")).clamp(0, 1), ref


def hdr_pair(seed=1, shape=(2, 3, 12, 13)):
    g = torch.Generator().manual_seed(seed)
    ref = torch.exp2(6 * torch.rand(shape, generator=g, dtype=torch.float32, device="cpu") - 3)
    return ref * (1 + 0.2 * torch.rand(shape, generator=g, dtype=torch.float32, device="cpu")), ref


def cpu(values, dtype=torch.float32):
    return torch.tensor(values, dtype=dtype, device="cpu")


def metric_values(metric, batches):
    for t, r in batches:
        metric.update(t, r)
    result = metric.compute()
    return list(result.pooled), result.per_image_means, result.num_pixels


def command_line(folder):
    """The command line run in this process on two PNG files: its exit code, what it printed (but
    the timings) and the bytes of every file it wrote."""
    folder.mkdir()
    test, ref = ldr(shape=(3, 16, 16))
    for name, image in (("test.png", test), ("ref.png", ref)):
        imageio.save_png(str(folder / name), (image.permute(1, 2, 0) * 255).round().to(torch.uint8).numpy())
    from flip_loss.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        code = main(["-r", str(folder / "ref.png"), "-t", str(folder / "test.png"), "-d", str(folder)])
    printed = [line.replace(str(folder), "") for line in out.getvalue().splitlines() if "seconds" not in line]
    written = {p.name: p.read_bytes() for p in sorted(folder.iterdir())}
    return code, printed, written


# Each entry point, called on inputs made here (on the CPU, in their own dtypes).
ENTRIES = {
    "ldr_flip": lambda: flip_loss.ldr_flip(*ldr()),
    "ldr_flip-float64": lambda: flip_loss.ldr_flip(*ldr(dtype=torch.float64)),
    "ldr_flip-multiscale": lambda: flip_loss.ldr_flip(*ldr(), pixels_per_degree=[30.0, 60.0]),
    "ldr_flip-rgba": lambda: flip_loss.ldr_flip(
        *ldr(shape=(2, 4, 12, 13)), alpha="straight", background="checkerboard"
    ),
    "hdr_flip": lambda: flip_loss.hdr_flip(*hdr_pair(), return_exposure_map=True),
    "hdr_flip-numbers": lambda: flip_loss.hdr_flip(
        *hdr_pair(), start_exposure=-2.0, stop_exposure=2.0, num_exposures=3
    ),
    "hdr_flip-tensors": lambda: flip_loss.hdr_flip(*hdr_pair(), start_exposure=cpu([-2.0, -1.0]), stop_exposure=2.0),
    "exposures_for": lambda: hdr.exposures_for(hdr_pair()[1], "aces", None, None, 4),
    "FLIPLoss": lambda: flip_loss.FLIPLoss(reduction="per_image")(
        *ldr(), torch.rand(2, 1, 12, 13, dtype=torch.float32, device="cpu")
    ),
    "FLIPLoss-hdr": lambda: flip_loss.FLIPLoss(hdr=True, start_exposure=cpu([-2.0, -1.0]))(*hdr_pair()),
    "FLIPLoss-scripted-hdr": lambda: torch.jit.script(flip_loss.FLIPLoss(hdr=True, stop_exposure=2.0))(*hdr_pair()),
    "LDRFLIPLoss": lambda: flip_loss.LDRFLIPLoss()(*ldr()),
    "HDRFLIPLoss": lambda: flip_loss.HDRFLIPLoss()(*hdr_pair()),
    "HDRFLIPLoss-given": lambda: flip_loss.HDRFLIPLoss()(
        *hdr_pair(), 30.0, "aces", cpu([-2.0, -1.0]).view(2, 1, 1, 1), 2.0
    ),
    "compute_start_stop_exposures": lambda: flip_loss.compute_start_stop_exposures(hdr_pair()[1], "hable", 0.85, 0.85),
    "tone_map": lambda: flip_loss.tone_map(hdr_pair()[0], "hable", cpu(0.5)),
    "compute_ldrflip": lambda: flip_loss.compute_ldrflip(
        *(flip_loss.color_space_transform(x, "srgb2ycxcz") for x in ldr()), 30.0
    ),
    "FLIPMetric": lambda: metric_values(flip_loss.FLIPMetric(bins=64), [ldr(2), ldr(3)]),
    "pool": lambda: list(flip_loss.pool(flip_loss.ldr_flip(*ldr()))),
    "weighted_histogram": lambda: flip_loss.weighted_histogram(flip_loss.ldr_flip(*ldr()), 10),
    "apply_colormap": lambda: colormaps.apply_colormap(flip_loss.ldr_flip(*ldr())[0, 0]),
    "composite": lambda: alpha.composite(ldr(shape=(2, 4, 6, 6))[0], "premultiplied", "checkerboard", False),
}


def _tensors(value):
    """Every tensor (and array, and number) in a result, in order."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, np.ndarray):
        return [torch.from_numpy(np.ascontiguousarray(value))]
    if isinstance(value, (int, float)):
        return [torch.tensor(float(value), dtype=torch.float64, device="cpu")]
    if isinstance(value, str) or value is None:
        return []
    return [t for v in value for t in _tensors(v)]


@contextlib.contextmanager
def process_default(which):
    if which == "float64":
        previous = torch.get_default_dtype()
        torch.set_default_dtype(torch.float64)
        try:
            yield
        finally:
            torch.set_default_dtype(previous)
    else:
        torch.set_default_device(which)
        try:
            yield
        finally:
            torch.set_default_device(None)


def assert_same(got, want):
    got, want = _tensors(got), _tensors(want)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert (g.device, g.dtype, g.shape) == (w.device, w.dtype, w.shape)
        assert torch.equal(g, w)


@pytest.mark.parametrize("default", ["float64", "meta"])
@pytest.mark.parametrize("name", list(ENTRIES))
def test_every_entry_point_ignores_the_process_defaults(name, default):
    torch.manual_seed(0)
    want = ENTRIES[name]()
    torch.manual_seed(0)
    with process_default(default):
        got = ENTRIES[name]()
    assert_same(got, want)


@pytest.mark.parametrize("default", ["float64", "meta"])
def test_the_command_line_in_process_ignores_the_process_defaults(default, tmp_path):
    want = command_line(tmp_path / "plain")
    with process_default(default):
        got = command_line(tmp_path / "default")
    assert want[0] == 0 and len(want[2]) > 2
    assert got == want


def test_torchmetrics_states_start_on_the_metrics_device_whatever_the_defaults():
    pytest.importorskip("torchmetrics")
    from flip_loss.torchmetrics import FLIPTorchMetric

    batches = [ldr(4), ldr(5)]
    want = metric_values(FLIPTorchMetric(bins=64), batches)
    with process_default("float64"):
        assert_same(metric_values(FLIPTorchMetric(bins=64), batches), want)
    metric = FLIPTorchMetric(bins=64)
    with process_default("meta"):  # built before: used, updated and computed under another default
        assert_same(metric_values(metric, batches), want)
    with process_default("meta"):  # built under it: torchmetrics puts the metric there
        built = FLIPTorchMetric(bins=64)
    assert built.device.type == "meta"
    assert all(t.device.type == "meta" for t in (built.count, built.limbs, built.min_value, built.settings))
