"""The portable path (flip_loss.oracle, the pure-PyTorch implementation that also runs wherever the
compiled kernels do not): float32 work on a device without float64, memory flat in HDR-FLIP's
exposure count, and state that no caller, mode or default can change for later calls."""

import json
import os
import shutil
import subprocess
import sys

import pytest
import torch

import flip_loss
from flip_loss import colormaps, nvidia, oracle

PPD = 67.0206451

# A child that imports a copy of the package without the compiled extension, so that every entry
# point runs the portable path, and runs them all with float32 images under a dispatch mode that
# refuses what a device without float64 (MPS) would refuse: a float64 tensor of image size.
NO_FLOAT64_CHILD = r"""
import json, sys, warnings
sys.meta_path = [f for f in sys.meta_path if 'editable' not in repr(f).lower()]
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
warnings.simplefilter("ignore")
import flip_loss

N, H, W = 2, 24, 32


class NoFloat64(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor) and t.dtype == torch.float64 and t.numel() >= H * W:
                raise RuntimeError(f"{func} made a float64 tensor of {tuple(t.shape)}")
        return out


g = torch.Generator().manual_seed(0)
ref = torch.rand(N, 3, H, W, generator=g)
test = (ref + 0.05 * torch.randn(N, 3, H, W, generator=g)).clamp(0, 1)
hdr_ref = torch.exp2(6 * torch.rand(N, 3, H, W, generator=g) - 3)
hdr_test = hdr_ref * (1 + 0.2 * torch.rand(N, 3, H, W, generator=g))
out = {"file": flip_loss.__file__, "has_extension": flip_loss.HAS_EXTENSION}
with NoFloat64():
    x = test.clone().requires_grad_()
    loss = flip_loss.FLIPLoss(pixels_per_degree=[30.0, 60.0])(x, ref)
    loss.backward()
    out["ldr"] = [loss.item(), x.grad.abs().sum().item()]
    x = hdr_test.clone().requires_grad_()
    loss = flip_loss.hdr_flip(x, hdr_ref).mean()
    loss.backward()
    out["hdr"] = [loss.item(), x.grad.abs().sum().item()]
    # compute() works on the CPU, in float64 arrays of one entry per bucket: fewer than the pixels.
    metric = flip_loss.FLIPMetric(bins=256)
    metric.update(test, ref)
    result = metric.compute()
    out["metric"] = [result.pooled.mean, result.pooled.max] + result.per_image_means.tolist()
print(json.dumps(out))
"""


def test_the_portable_path_needs_no_float64_tensor_of_image_size(tmp_path):
    shutil.copytree(
        os.path.dirname(flip_loss.__file__),
        tmp_path / "flip_loss",
        ignore=shutil.ignore_patterns("*.so", "*.pyd", "__pycache__", "data"),
    )
    shutil.copytree(os.path.join(os.path.dirname(flip_loss.__file__), "data"), tmp_path / "flip_loss" / "data")
    run = subprocess.run(
        [sys.executable, "-c", NO_FLOAT64_CHILD],
        cwd=tmp_path,
        env=dict(os.environ, PYTHONPATH=str(tmp_path)),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    got = json.loads(run.stdout.splitlines()[-1])
    if not got["file"].startswith(str(tmp_path)):
        pytest.skip(f"this environment imports flip_loss from {got['file']} even with the copy first on the path")
    assert got["has_extension"] is False
    # The same inputs through the compiled kernels, here: the portable path computed FLIP.
    g = torch.Generator().manual_seed(0)
    ref = torch.rand(2, 3, 24, 32, generator=g)
    test = (ref + 0.05 * torch.randn(2, 3, 24, 32, generator=g)).clamp(0, 1)
    hdr_ref = torch.exp2(6 * torch.rand(2, 3, 24, 32, generator=g) - 3)
    hdr_test = hdr_ref * (1 + 0.2 * torch.rand(2, 3, 24, 32, generator=g))
    x = test.clone().requires_grad_()
    loss = flip_loss.FLIPLoss(pixels_per_degree=[30.0, 60.0])(x, ref)
    loss.backward()
    assert got["ldr"] == pytest.approx([loss.item(), x.grad.abs().sum().item()], rel=1e-4)
    x = hdr_test.clone().requires_grad_()
    loss = flip_loss.hdr_flip(x, hdr_ref).mean()
    loss.backward()
    assert got["hdr"] == pytest.approx([loss.item(), x.grad.abs().sum().item()], rel=1e-4)
    metric = flip_loss.FLIPMetric(bins=256)
    metric.update(test, ref)
    result = metric.compute()
    want = [result.pooled.mean, result.pooled.max] + result.per_image_means.tolist()
    assert got["metric"] == pytest.approx(want, rel=1e-5)


def _saved_bytes(exposures):
    """Bytes autograd keeps between HDR-FLIP's forward and backward with ``exposures`` exposures."""
    g = torch.Generator().manual_seed(1)
    ref = torch.exp2(6 * torch.rand(1, 3, 24, 32, generator=g) - 3)
    test = (ref * (1 + 0.1 * torch.randn(1, 3, 24, 32, generator=g))).clamp(min=0).requires_grad_()
    grid = torch.linspace(-4.0, 4.0, exposures).view(1, exposures)
    saved = {}

    def pack(t):
        saved[(t.data_ptr(), t.dtype, tuple(t.shape))] = t.numel() * t.element_size()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        error = oracle.hdr_flip(test, ref, 30.0, "aces", grid, torch.tensor([exposures]))[0]
    error.mean().backward()
    assert test.grad.abs().sum() > 0
    return sum(saved.values())


def test_hdr_flip_keeps_memory_flat_in_the_exposure_count():
    assert _saved_bytes(16) <= 1.25 * _saved_bytes(2)


def test_hdr_flip_gradient_is_the_gradient_of_its_maximum():
    # Recomputed exposure by exposure, it is autograd's gradient through the whole sweep.
    g = torch.Generator().manual_seed(2)
    ref = torch.exp2(6 * torch.rand(2, 3, 12, 16, generator=g, dtype=torch.float64) - 3)
    test = (ref * (1 + 0.2 * torch.randn(2, 3, 12, 16, generator=g, dtype=torch.float64))).clamp(min=0)
    exposures = torch.tensor([[-3.0, -1.0, 1.0, 3.0], [-2.0, 0.0, 2.0, 2.0]], dtype=torch.float64)
    counts = torch.tensor([4, 3])
    weights = torch.rand(2, 1, 12, 16, generator=g, dtype=torch.float64)
    grads = []
    for sweep in (
        lambda t, r: oracle.hdr_flip(t, r, 30.0, "hable", exposures, counts)[0],
        lambda t, r: oracle._exposure_maximum(t, r, exposures, [4, 3], 30.0, "hable", 1e-15)[0],
    ):
        t, r = test.clone().requires_grad_(), ref.clone().requires_grad_()
        (sweep(t, r) * weights).sum().backward()
        grads.append((t.grad, r.grad))
    torch.testing.assert_close(grads[0], grads[1], rtol=1e-12, atol=1e-15)


# ---- state that no caller, mode or default can change for later calls ----------------------------


def _pair(seed, h=12, w=14, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    return torch.rand(1, 3, h, w, generator=g, dtype=dtype), torch.rand(1, 3, h, w, generator=g, dtype=dtype)


def test_taps_handed_out_are_the_callers_own():
    t, r = _pair(3)
    map_before = oracle.ldr_flip(t, r, PPD)
    kernel_before = nvidia.generate_spatial_filter(PPD, "A", dtype=torch.float64)[0]
    for taps in (oracle.csf_taps(PPD), oracle.feature_taps(PPD)):
        for name, v in taps.items():
            if name != "radius":
                v.mul_(0.5)
    for v in oracle.csf_taps64(PPD)[1:]:
        v.mul_(0.5)
    assert torch.equal(oracle.ldr_flip(t, r, PPD), map_before)
    assert torch.equal(nvidia.generate_spatial_filter(PPD, "A", dtype=torch.float64)[0], kernel_before)
    assert oracle.csf_taps(PPD)["y"].sum().item() == pytest.approx(1.0, rel=1e-14)
    assert oracle.feature_taps(PPD)["g"].sum().item() == pytest.approx(1.0, rel=1e-14)


def test_a_call_under_inference_mode_leaves_nothing_for_later_calls():
    ppd = 23.25  # seen by no other call of this process
    t, r = _pair(4)
    with torch.inference_mode():
        first = oracle.ldr_flip(t, r, ppd)
    x = t.clone().requires_grad_()
    second = oracle.ldr_flip(x, r, ppd)
    second.sum().backward()
    assert torch.equal(first, second.detach()) and x.grad.abs().sum() > 0


def test_a_call_with_fake_tensors_leaves_nothing_for_later_calls():
    from torch._subclasses.fake_tensor import FakeTensorMode

    ppd = 27.75  # seen by no other call of this process
    t, r = _pair(5)
    with FakeTensorMode() as fake:
        shape = oracle.ldr_flip(fake.from_tensor(t), fake.from_tensor(r), ppd).shape
    assert shape == (1, 1, 12, 14)
    x = t.clone().requires_grad_()
    oracle.ldr_flip(x, r, ppd).sum().backward()
    assert torch.isfinite(x.grad).all() and x.grad.abs().sum() > 0


def test_a_default_device_leaves_nothing_for_later_calls():
    ppd = 33.5  # seen by no other call of this process
    t, r = _pair(6)
    with torch.device("meta"):
        first = oracle.ldr_flip(t, r, ppd)  # the inputs' device, not the default
    assert torch.equal(first, oracle.ldr_flip(t, r, ppd))


def test_the_package_imports_under_any_default_device():
    code = (
        "import torch; torch.set_default_device('meta')\n"
        "import flip_loss, flip_loss.psychophysics.colour as colour\n"
        "torch.set_default_device('cpu')\n"
        "t = torch.rand(1, 3, 8, 8); r = torch.rand(1, 3, 8, 8)\n"
        "assert torch.equal(flip_loss.oracle.ldr_flip(t, r), flip_loss.oracle.ldr_flip(t, r))\n"
        "assert colour.M_XYZ_LMS.device.type == 'cpu'\n"
        "print(flip_loss.oracle.cmax(), flip_loss.nvidia._ANCHORS[('lower', 'aces')])\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    cmax, anchor = map(float, run.stdout.split())
    assert cmax == oracle.cmax() and anchor == nvidia._ANCHORS[("lower", "aces")]


def test_a_colour_table_changed_after_use_is_read_again():
    values = torch.linspace(0, 1, 8).view(1, 8)
    table = tuple([list(c) for c in colormaps.MAGMA])
    before = colormaps.apply_colormap(values, table)
    table[255][0] = 0.0  # the caller's own table, changed in place
    after = colormaps.apply_colormap(values, table)
    assert after[0, -1, 0] == 0 and before[0, -1, 0] != 0
