"""The raw ops' argument checks (csrc/ops/checks.h), the same on the CPU, CUDA and meta kernels
and in the test-only GPU emulator (tests/emulator); the shipped library registers the product's
ops only, each with every kernel; first-order-only backward ops; stopping a long HDR call with
Ctrl-C."""

import contextlib
import math
import os
import select
import signal
import subprocess
import sys
import threading
import time
import warnings

import pytest
import torch

import emulator
import flip_loss
from flip_loss import oracle
from op_names import BACKWARD_OPS, CPU_ONLY_OPS, FORWARD_OPS, PRODUCT_OPS, PUBLIC_OPS

# The limits the ops enforce (csrc/include/flip_loss/limits.h; test_one_source.py checks that
# flip_loss.constants states the same).
_LIMITS = flip_loss._C.limits()
MAX_PPD, MAX_EPS = _LIMITS["max_ppd"], _LIMITS["max_eps"]
MIN_EXPOSURES, MAX_EXPOSURES = _LIMITS["min_exposures"], _LIMITS["max_exposures"]
DEVICES = ["cpu", "meta", pytest.param("cuda", marks=pytest.mark.cuda)]

ALL_OPS = PUBLIC_OPS  # the ops with the public argument conventions that the checks below exercise
HAS_PPD = [n for n in ALL_OPS if not n.startswith("hunt_hyab")]
HAS_EPS = [n for n in ALL_OPS if not n.startswith("csf_filter")]
# Every op of the emulator (torch.ops.flip_emulator): the flip ops with a GPU launch sequence, and
# the fused forward kernel's.
EMULATED = [
    "ldr_flip",
    "ldr_flip_fused",
    "ldr_flip_backward",
    "hdr_flip",
    "hdr_flip_fused",
    "hdr_flip_backward",
    "csf_filter",
    "csf_filter_backward",
    "feature_difference",
    "feature_difference_backward",
]


def tensors_for(name, n=1, hw=(6, 7), dtype=torch.float64, seed=0):
    """The tensor arguments of op `name` (a real op or an emulated one), in order, on the CPU."""
    g = torch.Generator().manual_seed(seed)
    channels = 1 if name.startswith("feature") else 3
    a = 0.1 + 0.8 * torch.rand(n, channels, *hw, generator=g, dtype=dtype)
    b = 0.1 + 0.8 * torch.rand(n, channels, *hw, generator=g, dtype=dtype)
    if name.startswith("csf_filter"):
        images = [oracle.linear_rgb_to_opponent(a)]
    elif name.startswith("hdr_flip"):
        images = [
            torch.exp2(4 * a - 2),
            torch.exp2(4 * b - 2),
            torch.tensor([[-2.0, 0.0, 1.5]], dtype=dtype).expand(n, 3).contiguous(),
            torch.full((n,), 3, dtype=torch.int64),
        ]
    else:
        images = [a, b]
    if not name.endswith("_backward"):
        return images
    grad = torch.rand(n, 3 if name.startswith("csf_filter") else 1, *hw, generator=g, dtype=dtype)
    extra = [torch.zeros(n, 1, *hw, dtype=torch.int32)] if name.startswith("hdr_flip") else []
    return [grad] + images + extra


def call(name, tensors, ppd=30.0, eps=1e-15, namespace=None):
    """torch.ops.flip.<name> (or namespace.<name>) on these tensors with the given scalars (other
    options at defaults)."""
    op = getattr(namespace or torch.ops.flip, name)
    name = name.replace("_fused", "")  # the fused forwards take their op's arguments
    mask = [True, True]
    if name == "ldr_flip":
        return op(*tensors, ppd, "srgb", eps)
    if name == "ldr_flip_backward":
        return op(*tensors, ppd, "srgb", eps, mask)
    if name == "hdr_flip":
        return op(*tensors, ppd, "aces", eps)
    if name == "hdr_flip_backward":
        return op(*tensors, ppd, "aces", eps, mask)
    if name in ("csf_filter", "csf_filter_backward"):
        return op(*tensors, ppd)
    if name == "hunt_hyab":
        return op(*tensors, eps)
    if name == "hunt_hyab_backward":
        return op(*tensors, eps, mask)
    if name == "feature_difference":
        return op(*tensors, ppd, eps)
    return op(*tensors, ppd, eps, mask)


def emulate(name, tensors, ppd=30.0, eps=1e-15):
    """The emulated op `name` (see EMULATED), called like `call` calls the flip op."""
    return call(name, tensors, ppd, eps, namespace=emulator.ops())


def on(device, tensors):
    return [t.to(device) for t in tensors]


# ---- pixels_per_degree and eps: the decided limits, on every op and device ----

BAD_PPD = [math.nan, math.inf, -math.inf, 0.0, -1.0, -0.0, math.nextafter(MAX_PPD, math.inf), 1e30]
BAD_EPS = [math.nan, math.inf, -1.0, -1e-30, math.nextafter(MAX_EPS, 1.0), 10.0, 1e20]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", HAS_PPD)
def test_every_op_rejects_a_bad_pixels_per_degree(name, device):
    tensors = on(device, tensors_for(name))
    for ppd in BAD_PPD:
        with pytest.raises(ValueError, match="pixels_per_degree"):
            call(name, tensors, ppd=ppd)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", HAS_EPS)
def test_every_op_rejects_a_bad_eps(name, device):
    tensors = on(device, tensors_for(name))
    for eps in BAD_EPS:
        with pytest.raises(ValueError, match="eps"):
            call(name, tensors, eps=eps)


@pytest.mark.parametrize("name", ALL_OPS)
def test_limits_themselves_are_accepted(name):
    # The upper limits themselves are valid; the meta kernels say the same as the CPU kernels.
    tensors = tensors_for(name)
    for device in ("meta", "cpu"):
        out = call(name, on(device, tensors), ppd=MAX_PPD, eps=MAX_EPS)
        out = out if isinstance(out, (tuple, list)) else [out]
        if device == "cpu":
            assert all(torch.isfinite(o.double()).all() for o in out)


def test_largest_eps_keeps_the_map_in_unit_range(ops):
    # Why MAX_EPS is where it is (limits.h): identical images stay near 0, different ones within [0, 1].
    a, b = tensors_for("ldr_flip", n=2, hw=(24, 24))
    same = ops.ldr_flip(a, a, 67.0, "srgb", MAX_EPS)
    assert 0 < same.max() < 5e-4
    other = ops.ldr_flip(a, b, 67.0, "srgb", MAX_EPS)
    assert other.min() >= 0 and other.max() <= 1
    torch.testing.assert_close(other, oracle.ldr_flip(a, b, 67.0, "srgb", MAX_EPS), rtol=0, atol=1e-12)


# ---- shapes, dtypes, empty batches ----


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", ALL_OPS)
def test_every_op_rejects_an_empty_batch(name, device):
    tensors = on(device, tensors_for(name, n=0))
    with pytest.raises(ValueError, match="empty batch"):
        call(name, tensors)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", BACKWARD_OPS)
@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.bool, torch.complex64])
def test_every_backward_op_rejects_a_non_floating_grad(name, device, dtype):
    tensors = tensors_for(name)
    tensors[0] = tensors[0].to(dtype)
    with pytest.raises(TypeError, match="grad must have a floating-point dtype"):
        call(name, on(device, tensors))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", BACKWARD_OPS)
def test_every_backward_op_checks_the_grad_shape(name, device):
    tensors = tensors_for(name)
    tensors[0] = tensors[0][..., :-1]
    with pytest.raises(ValueError, match="grad must have shape"):
        call(name, on(device, tensors))


@pytest.mark.parametrize("device", DEVICES)
def test_wrong_dtypes_and_shapes_raise_type_and_value_errors(device):
    a, b = on(device, tensors_for("ldr_flip"))
    with pytest.raises(TypeError, match="floating-point dtype .* or be uint8"):
        call("ldr_flip", [(a * 255).to(torch.int16), (b * 255).to(torch.int16)])
    with pytest.raises(TypeError, match="dtypes differ"):
        call("ldr_flip", [a, b.float()])
    with pytest.raises(TypeError, match="dtypes differ"):
        call("ldr_flip", [a, (b * 255).to(torch.uint8)])
    # 8-bit codes have no gradient: the backward ops, like every op but ldr_flip, refuse them.
    grad, a, b = on(device, tensors_for("ldr_flip_backward"))
    with pytest.raises(TypeError, match=r"got Byte \(uint8 images, 8-bit codes, are taken by ldr_flip alone\)"):
        call("ldr_flip_backward", [grad, (a * 255).to(torch.uint8), (b * 255).to(torch.uint8)])
    with pytest.raises(ValueError, match="shapes differ"):
        call("ldr_flip", [a, b[..., :-1]])
    with pytest.raises(ValueError, match="3 channel"):
        call("ldr_flip", [a[:, :2], b[:, :2]])


# ---- HDR exposures and counts ----


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", ["hdr_flip", "hdr_flip_backward"])
def test_exposure_columns_and_count_dtypes_checked_on_every_device(name, device):
    tensors = tensors_for(name)
    o = 1 if name.endswith("_backward") else 0
    for columns in (MIN_EXPOSURES - 1, MAX_EXPOSURES + 1):
        bad = list(tensors)
        bad[o + 2] = torch.zeros(1, columns, dtype=torch.float64)
        with pytest.raises(ValueError, match="columns"):
            call(name, on(device, bad))
    for dtype in (torch.float32, torch.bool):
        bad = list(tensors)
        bad[o + 3] = bad[o + 3].to(dtype)
        with pytest.raises(TypeError, match="counts must be integers"):
            call(name, on(device, bad))


@pytest.mark.parametrize("name", ["hdr_flip", "hdr_flip_backward"])
def test_count_values_and_exposures_checked_on_the_cpu(name):
    tensors = tensors_for(name)
    o = 1 if name.endswith("_backward") else 0
    for count in (-1, 0, 1, 4):  # 3 exposure columns
        bad = list(tensors)
        bad[o + 3] = torch.tensor([count])
        with pytest.raises(ValueError, match=r"counts\[0\]"):
            call(name, bad)
        with pytest.raises(RuntimeError, match=r"counts\[0\]"):  # the C++ check alone (checks.h)
            emulate(name, bad)
    for value in (math.nan, math.inf, -math.inf):
        bad = list(tensors)
        bad[o + 2] = bad[o + 2].clone()
        bad[o + 2][0, 1] = value
        with pytest.raises(ValueError, match="not finite"):
            call(name, bad)


def test_unused_exposure_columns_are_not_read(ops):
    # Only the first counts[n] exposures of a row count: padding may hold anything.
    test, ref, ex, _ = tensors_for("hdr_flip", n=2)
    counts = torch.tensor([3, 2])
    padded = ex.clone()
    padded[1, 2] = math.nan
    got = ops.hdr_flip(test, ref, padded, counts, 30.0, "aces", 1e-15)
    want = ops.hdr_flip(test, ref, ex, counts, 30.0, "aces", 1e-15)
    for x, y in zip(got, want):
        assert torch.equal(x, y)


def test_largest_exposure_count_runs_and_matches_the_oracle(ops):
    test, ref = tensors_for("hdr_flip", hw=(5, 4))[:2]
    ex = torch.linspace(-12, 12, MAX_EXPOSURES, dtype=torch.float64).unsqueeze(0)
    counts = torch.tensor([MAX_EXPOSURES])
    got, _, index = ops.hdr_flip(test, ref, ex, counts, 30.0, "aces", 1e-15)
    want, _, _ = oracle.hdr_flip(test, ref, 30.0, "aces", ex, counts, 1e-15)
    torch.testing.assert_close(got, want, rtol=0, atol=1e-12)
    assert index.max() > 0


@pytest.mark.cuda
def test_cuda_clamps_counts_instead_of_reading_them(ops):
    # Checking counts on the GPU would synchronise; values outside [2, E] act as the nearest bound.
    test, ref, ex, _ = on("cuda", tensors_for("hdr_flip", n=2))
    got = ops.hdr_flip(test, ref, ex, torch.tensor([-4, 99], device="cuda"), 30.0, "aces", 1e-15)
    want = ops.hdr_flip(test, ref, ex, torch.tensor([2, 3], device="cuda"), 30.0, "aces", 1e-15)
    for x, y in zip(got, want):
        torch.testing.assert_close(x, y, rtol=0, atol=0)


# ---- the single-stage ops' documented range ----


def test_stage_ops_stay_in_unit_range_for_unit_range_inputs(ops):
    # Every pair of a 9-level RGB grid: the maximum, 1, is reached by pure blue against pure green.
    levels = torch.linspace(0, 1, 9, dtype=torch.float64)
    colours = torch.stack(torch.meshgrid(levels, levels, levels, indexing="ij"), -1).reshape(-1, 3)
    k = len(colours)
    a = colours.repeat_interleave(k, 0).T.reshape(1, 3, k, k).contiguous()
    b = colours.repeat(k, 1).T.reshape(1, 3, k, k).contiguous()
    colour = ops.hunt_hyab(a, b, 0.0)
    assert colour.min() >= 0 and abs(colour.max().item() - 1) < 1e-12
    # Feature error of a black image against binary patterns at several scales.
    y0 = torch.zeros(1, 1, 32, 32, dtype=torch.float64)
    rows, cols = torch.meshgrid(torch.arange(32), torch.arange(32), indexing="ij")
    for pattern in (rows >= 16, (rows + cols) % 2 == 0, cols % 2 == 0, (rows == 16) & (cols == 16)):
        for ppd in (1.0, 4.0, 67.0):
            f = ops.feature_difference(y0, pattern.double().expand(1, 1, 32, 32).contiguous(), ppd, 0.0)
            assert f.min() >= 0 and f.max() <= 1


def test_stage_ops_do_not_clamp_out_of_range_inputs(ops):
    # Documented: outside [0, 1] the values exceed 1, exactly as the reference formula gives them.
    a = torch.zeros(1, 3, 4, 4, dtype=torch.float64)
    b = a.clone()
    b[:, 0], b[:, 2] = 10.0, 10.0
    colour = ops.hunt_hyab(a, b, 0.0)
    assert colour.max() > 1
    torch.testing.assert_close(colour, oracle.hunt_hyab(a, b, 0.0), rtol=1e-12, atol=0)
    y0, step = torch.zeros(1, 1, 8, 8, dtype=torch.float64), torch.zeros(1, 1, 8, 8, dtype=torch.float64)
    step[..., 4:, :] = 3.0
    feature = ops.feature_difference(y0, step, 67.0, 0.0)
    assert feature.max() > 1
    torch.testing.assert_close(feature, oracle.feature_difference(y0, step, 67.0, 0.0), rtol=1e-12, atol=0)


# ---- double backward: the second order is the portable path's ----

EXPOSURES = [[-2.0, 0.0, 1.5]]
FIRST_ORDER = {
    "ldr_flip": lambda x, y: torch.ops.flip.ldr_flip(x, y, 30.0, "srgb", 1e-15),
    "hdr_flip": lambda x, y: torch.ops.flip.hdr_flip(
        x, y, torch.tensor(EXPOSURES, dtype=x.dtype), torch.tensor([3]), 30.0, "aces", 1e-15
    )[0],
    "csf_filter": lambda x, y: torch.ops.flip.csf_filter(x, 30.0),
    "hunt_hyab": lambda x, y: torch.ops.flip.hunt_hyab(x, y, 1e-15),
    "feature_difference": lambda x, y: torch.ops.flip.feature_difference(x, y, 30.0, 1e-15),
}
PORTABLE = {
    "ldr_flip": lambda x, y: oracle.ldr_flip(x, y, 30.0, "srgb", 1e-15),
    "hdr_flip": lambda x, y: oracle.hdr_flip(
        x, y, 30.0, "aces", torch.tensor(EXPOSURES, dtype=x.dtype), torch.tensor([3]), 1e-15
    )[0],
    "csf_filter": lambda x, y: oracle.csf_filter(x, 30.0),
    "hunt_hyab": lambda x, y: oracle.hunt_hyab(x, y, 1e-15),
    "feature_difference": lambda x, y: oracle.feature_difference(x, y, 30.0, 1e-15),
}


@pytest.mark.parametrize("name", FORWARD_OPS)
def test_double_backward_is_the_portable_paths(name):
    x, y = (tensors_for(name) + [None])[:2]  # csf_filter has one input
    second = {}
    for which, fn in (("op", FIRST_ORDER[name]), ("portable", PORTABLE[name])):
        xs = x.clone().requires_grad_()
        # Squared, so that a linear stage (the CSF filter) has a second derivative too.
        (plain,) = torch.autograd.grad((fn(xs, y) ** 2).sum(), xs)
        (first,) = torch.autograd.grad((fn(xs, y) ** 2).sum(), xs, create_graph=True)
        if which == "op":  # create_graph=True changes nothing in the kernels' first-order gradient
            torch.testing.assert_close(first.detach(), plain, rtol=0, atol=0)
        (second[which],) = torch.autograd.grad((first**2).sum(), xs)
    assert second["portable"].abs().max() > 1e-6, "a case with no second derivative tells nothing"
    torch.testing.assert_close(second["op"], second["portable"], rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("name", FORWARD_OPS)
def test_gradgradcheck(name):
    x, y = (tensors_for(name, hw=(4, 5)) + [None])[:2]
    inputs = (x.clone().requires_grad_(),) if y is None else (x.clone().requires_grad_(), y.clone().requires_grad_())
    fn = FIRST_ORDER[name]
    # fast_mode: finite differences along random directions, not one per input element (minutes).
    assert torch.autograd.gradgradcheck(lambda *a: fn(*a) if len(a) == 2 else fn(a[0], None), inputs, fast_mode=True)


def test_gradient_penalty_through_flip():
    # A WGAN-GP style penalty: grad of the loss w.r.t. the input, its norm, backward to the weights.
    x, y = tensors_for("ldr_flip")
    grads = []
    for fn in (FIRST_ORDER["ldr_flip"], PORTABLE["ldr_flip"]):
        w = torch.tensor(0.5, dtype=torch.float64, requires_grad=True)
        (g,) = torch.autograd.grad(fn(x * w, y).mean(), w, create_graph=True)
        (g**2).backward()
        grads.append(w.grad)
    assert grads[1].abs() > 1e-6
    torch.testing.assert_close(grads[0], grads[1], rtol=1e-9, atol=0)


@pytest.mark.parametrize("name", BACKWARD_OPS)
def test_backward_ops_called_directly_are_first_order_only(name):
    tensors = tensors_for(name)
    tensors[0].requires_grad_()
    out = call(name, tensors)
    out = out if isinstance(out, (tuple, list)) else [out]
    with torch.no_grad():
        expected = call(name, [t.detach() for t in tensors])
    expected = expected if isinstance(expected, (tuple, list)) else [expected]
    for o, e in zip(out, expected):
        assert o.requires_grad
        torch.testing.assert_close(o.detach(), e, rtol=0, atol=0)
    with pytest.raises(RuntimeError, match=f"flip::{name} is not differentiable"):
        torch.autograd.grad(out[0].sum(), tensors[0])


@pytest.mark.parametrize("name", BACKWARD_OPS)
def test_opcheck_backward_ops_with_inputs_that_require_grad(name):
    tensors = [t.requires_grad_() if t.is_floating_point() else t for t in tensors_for(name, dtype=torch.float32)]
    args = {
        "ldr_flip_backward": (30.0, "srgb", 1e-15, [True, True]),
        "hdr_flip_backward": (30.0, "aces", 1e-15, [True, True]),
        "csf_filter_backward": (30.0,),
        "hunt_hyab_backward": (1e-15, [True, True]),
        "feature_difference_backward": (30.0, 1e-15, [True, True]),
    }[name]
    op = getattr(torch.ops.flip, name).default
    torch.library.opcheck(
        op, (*tensors, *args), test_utils=("test_schema", "test_autograd_registration", "test_faketensor")
    )
    # opcheck's AOTAutograd test differentiates the outputs: the documented error, not a silent None.
    with pytest.raises(Exception, match="double backward"):
        torch.library.opcheck(op, (*tensors, *args), test_utils="test_aot_dispatch_dynamic")


# ---- the shipped library: the product's ops only, each with every kernel ----


def test_the_library_registers_only_the_product_ops_each_with_every_kernel():
    # Test-only code (the GPU emulator) lives outside it; every op, backward ops included, has the
    # kernels of each dispatch key, CUDA too when the library was built with CUDA (but for the
    # CPU-only multi-scale pair: on CUDA each scale is an ldr_flip call).
    registered = {name for name in torch._C._dispatch_get_all_op_names() if name.startswith("flip::")}
    assert registered == {f"flip::{name}" for name in PRODUCT_OPS}
    has = torch._C._dispatch_has_kernel_for_dispatch_key
    with_cuda = any(has(f"flip::{name}", "CUDA") for name in PRODUCT_OPS)
    for name in sorted(PRODUCT_OPS):
        cuda = ("CUDA",) if with_cuda and name not in CPU_ONLY_OPS else ()
        for key in ("CPU", "Meta", "Autograd") + cuda:
            assert has(f"flip::{name}", key), f"flip::{name} has no {key} kernel"
    for name in CPU_ONLY_OPS:
        assert not has(f"flip::{name}", "CUDA")


# ---- the emulator: checked like the op it emulates; nothing cached before the checks ----

EMULATION_SCRIPT = r"""
import math, torch, flip_loss
from flip_loss import oracle
from test_op_checks import EMULATED, emulate, tensors_for

import emulator
em = emulator.ops()
a, b = tensors_for("ldr_flip")
hdr, hdr_back = tensors_for("hdr_flip"), tensors_for("hdr_flip_backward")
mask = [True, True]
bad_calls = {
    "integer image": lambda: em.ldr_flip(a.to(torch.int32), b.to(torch.int32), 30.0, "srgb", 0.0),
    "mismatched shapes": lambda: em.ldr_flip(a, b[..., :3], 30.0, "srgb", 0.0),
    "feature image for ldr": lambda: em.ldr_flip_fused(a[:, :1], b[:, :1], 30.0, "srgb", 0.0),
    "csf image for features": lambda: em.feature_difference(a, b, 30.0, 0.0),
    "grad of wrong shape": lambda: em.ldr_flip_backward(a[:, :1, :3], a, b, 30.0, "srgb", 0.0, mask),
    "csf grad of one channel": lambda: em.csf_filter_backward(a[:, :1], a, 30.0),
    "bad space": lambda: em.ldr_flip(a, b, 30.0, "rgb", 0.0),
    "bad tone mapper": lambda: em.hdr_flip(*hdr, 30.0, "agx", 0.0),
    "bad fused tone mapper": lambda: em.hdr_flip_fused(*hdr, 30.0, "agx", 0.0),
    "bad eps": lambda: em.ldr_flip(a, b, 30.0, "srgb", 1.0),
    "one exposure column": lambda: em.hdr_flip(hdr[0], hdr[1], hdr[2][:, :1], hdr[3], 30.0, "aces", 0.0),
    "count above the columns": lambda: em.hdr_flip_fused(*hdr[:3], torch.tensor([4]), 30.0, "aces", 0.0),
    "index of wrong dtype": lambda: em.hdr_flip_backward(*hdr_back[:5], torch.zeros(1, 1, 6, 7, dtype=torch.int64),
                                                         30.0, "aces", 0.0, mask),
}
for label, bad in bad_calls.items():
    try:
        bad()
    except RuntimeError as exc:  # the C++ checks (checks.h), as the stable ABI carries them
        assert str(exc).startswith("flip"), (label, exc)
    else:
        raise AssertionError("accepted: " + label)
# A bad pixels_per_degree, to every emulated op, is rejected before any taps are built or cached.
for name in EMULATED:
    for ppd in (math.nan, math.inf, -math.inf, 0.0, -1.0, 2e4):
        try:
            emulate(name, tensors_for(name), ppd=ppd)
        except RuntimeError as exc:
            assert "pixels_per_degree" in str(exc), (name, ppd, exc)
        else:
            raise AssertionError(f"accepted: {name} with ppd {ppd}")
# The shared tap cache still serves new and old ppd values: ordinary ldr_flip calls are right.
for ppd in (30.0, 23.5, 67.0):
    got = torch.ops.flip.ldr_flip(a, b, ppd, "srgb", 1e-15)
    want = oracle.ldr_flip(a, b, ppd, "srgb", 1e-15)
    assert (got - want).abs().max().item() < 1e-12, ppd
print("ALL CHECKED")
"""


def child_env():
    env = dict(os.environ)
    here = os.path.dirname(os.path.abspath(__file__))
    tests = os.path.dirname(here)
    roots = [os.path.dirname(os.path.dirname(os.path.abspath(flip_loss.__file__))), here, tests]
    roots.append(os.path.join(tests, "helpers"))
    env["PYTHONPATH"] = os.pathsep.join(roots + [env.get("PYTHONPATH", "")])
    return env


def test_gpu_emulation_checks_arguments_and_keeps_the_tap_cache_sound():
    # In a child process: before the checks, some of these calls crashed the process or left the
    # process-wide tap cache returning NaN for every later ldr_flip.
    proc = subprocess.run(
        [sys.executable, "-c", EMULATION_SCRIPT],
        env=child_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0 and "ALL CHECKED" in proc.stdout, proc.stdout[-3000:]


# ---- Ctrl-C stops a long HDR call ----

INTERRUPT_SCRIPT = r"""
import sys, time, torch, flip_loss
direction = sys.argv[1]
n, h, w, e = 8, 320, 320, flip_loss._C.limits()["max_exposures"]
g = torch.Generator().manual_seed(0)
ref = torch.exp2(8 * torch.rand(n, 3, h, w, generator=g) - 4)
test = ref * (1 + 0.2 * torch.rand(ref.shape, generator=g))
exposures = torch.linspace(-10, 10, e).expand(n, e).contiguous()
counts = torch.full((n,), e)
small = [t[:1, :, :16, :16] for t in (test, ref)] + [exposures[:1, :3], torch.tensor([3])]
before = torch.ops.flip.hdr_flip(*small, 30.0, "aces", 1e-15)
if direction == "forward":
    run = lambda: torch.ops.flip.hdr_flip(test, ref, exposures, counts, 30.0, "aces", 1e-15)
else:
    # Every exposure wins somewhere, so the backward recomputes all e of them.
    index = (torch.arange(h * w, dtype=torch.int32) % e).reshape(1, 1, h, w).expand(n, 1, h, w).contiguous()
    grad = torch.ones(n, 1, h, w)
    run = lambda: torch.ops.flip.hdr_flip_backward(grad, test, ref, exposures, counts, index, 30.0, "aces",
                                                   1e-15, [True, True])
start = time.monotonic()
try:
    print("started", flush=True)
    run()
    print("finished", flush=True)
except KeyboardInterrupt:
    print(f"interrupted after {time.monotonic() - start:.1f} s", flush=True)
after = torch.ops.flip.hdr_flip(*small, 30.0, "aces", 1e-15)
print("usable" if all(torch.equal(x, y) for x, y in zip(before, after)) else "broken", flush=True)
"""


@pytest.mark.skipif(sys.platform == "win32", reason="SIGINT")
@pytest.mark.parametrize("direction", ["forward", "backward"])
def test_ctrl_c_stops_a_long_hdr_call(direction):
    # Uninterrupted, the call runs for minutes on two cores (8 x the most exposures allowed, each an
    # LDR pass over 320 x 320); a SIGINT must stop it at the next exposure with KeyboardInterrupt,
    # leaving the process usable.
    proc = subprocess.Popen(
        [sys.executable, "-c", INTERRUPT_SCRIPT, direction],
        env=child_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        ready, _, _ = select.select([proc.stdout], [], [], 120)
        assert ready and proc.stdout.readline().strip() == "started"
        time.sleep(1.0)
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=90)  # a hang (the old behaviour) fails here
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, out
    lines = out.splitlines()
    assert lines[0].startswith("interrupted after") and lines[1] == "usable", out


# Ctrl-C in every mode a call can run in: the Autograd kernels (eager, no_grad, a gradient wanted),
# torch.inference_mode (which skips them), the Python API and TorchScript. Each interrupted call must
# raise KeyboardInterrupt (from TorchScript, which turns every exception into a RuntimeError, one
# that names it) and leave nothing behind: afterwards a call that fails in the kernel (NaN
# input: RuntimeError) or in the Python API's checks (ppd -1: ValueError) raises its own error, in
# this thread and in another one, and no exception is left pending in the extension.
MODES_INTERRUPT_SCRIPT = r"""
import contextlib, sys, threading, torch, flip_loss
n, h, w, e = 8, 320, 320, flip_loss._C.limits()["max_exposures"]
g = torch.Generator().manual_seed(0)
ref = torch.exp2(8 * torch.rand(n, 3, h, w, generator=g) - 4)
test = ref * (1 + 0.2 * torch.rand(ref.shape, generator=g))
exposures = torch.linspace(-10, 10, e).expand(n, e).contiguous()
counts = torch.full((n,), e)
api_exposures = dict(start_exposure=-10.0, stop_exposure=10.0, num_exposures=e)
# A scripted FLIPLoss calls torch.ops.flip.hdr_flip from TorchScript.
scripted = torch.jit.script(flip_loss.FLIPLoss(hdr=True, reduction="none", **api_exposures))
runs = {
    "eager": (contextlib.nullcontext, lambda: torch.ops.flip.hdr_flip(test, ref, exposures, counts, 30.0, "aces", 0.0)),
    "no_grad": (torch.no_grad, lambda: torch.ops.flip.hdr_flip(test, ref, exposures, counts, 30.0, "aces", 0.0)),
    "autograd": (contextlib.nullcontext,
                 lambda: torch.ops.flip.hdr_flip(test.requires_grad_(), ref, exposures, counts, 30.0, "aces", 0.0)),
    "inference_mode": (torch.inference_mode,
                       lambda: torch.ops.flip.hdr_flip(test, ref, exposures, counts, 30.0, "aces", 0.0)),
    "api_inference_mode": (torch.inference_mode, lambda: flip_loss.hdr_flip(test, ref, **api_exposures)),
    "script_inference_mode": (torch.inference_mode, lambda: scripted(test, ref)),
    # The CPU kernel without flip_loss's kernels above it: its RuntimeError names the exception,
    # which nobody is left to re-raise, so it is dropped.
    "cpu_kernel_alone": (contextlib.nullcontext, lambda: torch.ops.flip.hdr_flip.default.redispatch(
        torch._C.DispatchKeySet(torch._C.DispatchKey.CPU), test, ref, exposures, counts, 30.0, "aces", 0.0)),
}
small = torch.rand(1, 3, 8, 8, generator=g)
nan = small.clone()
nan[0, 0, 0, 0] = float("nan")
failing = {
    "RuntimeError": lambda: torch.ops.flip.ldr_flip(nan, small, 30.0, "srgb", 0.0),
    "ValueError": lambda: flip_loss.ldr_flip(small, small, -1.0),
}


def outcome(context, call):
    try:
        with context():
            call()
        return "returned"
    except BaseException as exc:  # noqa: BLE001 (what the call raised is the result)
        # TorchScript turns every exception into a RuntimeError that names it.
        named = not isinstance(exc, KeyboardInterrupt) and "KeyboardInterrupt" in str(exc)
        return type(exc).__name__ + ("(KeyboardInterrupt)" if named else "")


def in_thread(context, call):
    seen = []
    thread = threading.Thread(target=lambda: seen.append(outcome(context, call)))
    thread.start()
    thread.join()
    return seen[0]


for mode, (context, run) in runs.items():
    test.requires_grad_(False)
    print("started", mode, flush=True)
    results = [outcome(context, run)]
    for expected, call in failing.items():
        results += [outcome(context, call), in_thread(context, call), in_thread(contextlib.nullcontext, call)]
    results.append("pending" if flip_loss._C.take_interrupt() is not None else "clear")
    print(mode, *results, flush=True)
"""


@pytest.mark.skipif(sys.platform == "win32", reason="SIGINT")
def test_ctrl_c_in_every_mode_raises_keyboard_interrupt_and_leaves_nothing():
    proc = subprocess.Popen(
        [sys.executable, "-c", MODES_INTERRUPT_SCRIPT],
        env=child_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    results, lines = {}, []
    # Blocking reads (select would not see lines already in the reader's buffer); a hang is killed.
    watchdog = threading.Timer(600, proc.kill)
    watchdog.start()
    try:
        for line in proc.stdout:
            lines.append(line)
            words = line.split()
            if words[:1] == ["started"]:
                time.sleep(1.0)  # well inside the call, which runs for over a minute uninterrupted
                proc.send_signal(signal.SIGINT)
            elif words and words[0] in MODES:
                results[words[0]] = words[1:]
        proc.wait(timeout=60)
    finally:
        watchdog.cancel()
        if proc.poll() is None:
            proc.kill()
        proc.communicate()
    assert proc.returncode == 0, "".join(lines)
    own = ["RuntimeError"] * 3 + ["ValueError"] * 3
    expected = {mode: ["KeyboardInterrupt", *own, "clear"] for mode in MODES}
    expected["script_inference_mode"][0] = expected["cpu_kernel_alone"][0] = "RuntimeError(KeyboardInterrupt)"
    assert results == expected, "".join(lines)


MODES = (
    "eager",
    "no_grad",
    "autograd",
    "inference_mode",
    "api_inference_mode",
    "script_inference_mode",
    "cpu_kernel_alone",
)


# ---- the Python side of the ops and their C++ kernels reject alike ----


def _bad_calls():
    """Bad calls of every op family, each failing a different check."""
    a, b = tensors_for("ldr_flip")
    f, g = tensors_for("feature_difference")
    hdr, hdr_back = tensors_for("hdr_flip"), tensors_for("hdr_flip_backward")
    grad, mask = tensors_for("ldr_flip_backward")[0], [True, True]
    ops = torch.ops.flip
    _, sens = ops._ldr_flip_with_sensitivities(a, b, 30.0, "srgb", 0.0, mask)
    scales, weights = [20.0, 40.0], [0.5, 0.5]
    _, multi_sens = ops._ldr_flip_multiscale(a, b, scales, weights, "srgb", 0.0, mask)
    return {
        "integer image": lambda: ops.ldr_flip(a.to(torch.int32), b.to(torch.int32), 30.0, "srgb", 0.0),
        "dtypes differ": lambda: ops.ldr_flip(a, b.float(), 30.0, "srgb", 0.0),
        "codes and values": lambda: ops.ldr_flip(a.to(torch.uint8), b, 30.0, "srgb", 0.0),
        "codes without gradient": lambda: ops.ldr_flip_backward(
            grad, a.to(torch.uint8), b.to(torch.uint8), 30.0, "srgb", 0.0, mask
        ),
        "codes into HDR-FLIP": lambda: ops.hdr_flip(
            hdr[0].to(torch.uint8), hdr[1].to(torch.uint8), *hdr[2:], 30.0, "aces", 0.0
        ),
        "shapes differ": lambda: ops.ldr_flip(a, b[..., :3], 30.0, "srgb", 0.0),
        "two dimensions": lambda: ops.hunt_hyab(a[0, 0], b[0, 0], 0.0),
        "channels": lambda: ops.feature_difference(a, b, 30.0, 0.0),
        "empty batch": lambda: ops.csf_filter(a[:0], 30.0),
        "ppd": lambda: ops.ldr_flip(a, b, math.nan, "srgb", 0.0),
        "eps": lambda: ops.feature_difference(f, g, 30.0, 1.0),
        "space": lambda: ops.ldr_flip(a, b, 30.0, "rgb", 0.0),
        "tone mapper": lambda: ops.hdr_flip(*hdr, 30.0, "agx", 0.0),
        "exposure columns": lambda: ops.hdr_flip(hdr[0], hdr[1], hdr[2][:, :1], hdr[3], 30.0, "aces", 0.0),
        "count dtype": lambda: ops.hdr_flip(*hdr[:3], hdr[3].double(), 30.0, "aces", 0.0),
        "counts shape": lambda: ops.hdr_flip(*hdr[:3], hdr[3][:0], 30.0, "aces", 0.0),
        "grad dtype": lambda: ops.ldr_flip_backward(grad.to(torch.int64), a, b, 30.0, "srgb", 0.0, mask),
        "grad shape": lambda: ops.hunt_hyab_backward(grad[..., :2], a, b, 0.0, mask),
        "index dtype": lambda: ops.hdr_flip_backward(*hdr_back[:5], hdr_back[5].long(), 30.0, "aces", 0.0, mask),
        "index shape": lambda: ops.hdr_flip_backward(*hdr_back[:5], hdr_back[5][..., :2], 30.0, "aces", 0.0, mask),
        "no sensitivities asked": lambda: ops._ldr_flip_with_sensitivities(a, b, 30.0, "srgb", 0.0, [False, False]),
        "sensitivities dtype": lambda: ops._ldr_flip_backward_from_sensitivities(
            grad, sens.float(), a, b, 30.0, "srgb", mask
        ),
        "sensitivities shape": lambda: ops._ldr_flip_backward_from_sensitivities(
            grad, sens, a, b, 30.0, "srgb", [True, False]
        ),
        "short output_mask": lambda: ops.ldr_flip_backward(grad, a, b, 30.0, "srgb", 0.0, [True]),
        "long output_mask": lambda: ops._ldr_flip_multiscale(a, b, scales, weights, "srgb", 0.0, [False] * 3),
        "no scales": lambda: ops._ldr_flip_multiscale(a, b, [], [], "srgb", 0.0, mask),
        "a scale's ppd": lambda: ops._ldr_flip_multiscale(a, b, [20.0, 0.0], weights, "srgb", 0.0, mask),
        "weights per scale": lambda: ops._ldr_flip_multiscale(a, b, scales, [1.0], "srgb", 0.0, mask),
        "negative weight": lambda: ops._ldr_flip_multiscale(a, b, scales, [1.0, -1.0], "srgb", 0.0, mask),
        "multi-scale eps": lambda: ops._ldr_flip_multiscale(a, b, scales, weights, "srgb", 1.0, mask),
        "multi-scale space": lambda: ops._ldr_flip_multiscale(a, b, scales, weights, "rgb", 0.0, mask),
        "multi-scale sensitivities shape": lambda: ops._ldr_flip_multiscale_backward(
            grad, multi_sens, a, b, scales[:1], weights[:1], "srgb", mask
        ),
        "multi-scale sensitivities dtype": lambda: ops._ldr_flip_multiscale_backward(
            grad, multi_sens.float(), a, b, scales, weights, "srgb", mask
        ),
        "multi-scale gradients asked": lambda: ops._ldr_flip_multiscale_backward(
            grad, multi_sens, a, b, scales, weights, "srgb", [False, False]
        ),
        "count value": lambda: ops.hdr_flip(*hdr[:3], torch.tensor([4]), 30.0, "aces", 0.0),
        "exposure value": lambda: ops.hdr_flip_backward(
            hdr_back[0], hdr_back[1], hdr_back[2], hdr_back[3] * math.nan, *hdr_back[4:], 30.0, "aces", 0.0, mask
        ),
    }


@contextlib.contextmanager
def kernels_alone():
    """flip_loss's BackendSelect kernels replaced by fallthroughs for the block: a call under
    inference_mode then meets the C++ kernels' checks alone, as the C++ API does; the kernels
    registered before are back after it."""
    lib = torch.library.Library("flip", "IMPL")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "overriding a previously registered kernel"
        for name in PRODUCT_OPS:
            lib.impl(name, torch.library.fallthrough_kernel, "BackendSelect", allow_override=True)
    try:
        yield
    finally:
        lib._destroy()


@pytest.mark.parametrize("label", sorted(_bad_calls()))
def test_the_kernels_reject_what_the_python_side_rejects_with_the_same_message(label):
    # A call from Python meets the Python checks (op_checks.py) on every path: in the op's Autograd
    # kernel, or, where autograd is skipped (torch.inference_mode; inference tensors outside it),
    # in its BackendSelect kernel: the same class and message. The C++ kernel alone (checks.h, what
    # the C++ API meets) raises RuntimeError on every torch release (checks.h says why) with the
    # same message.
    bad = _bad_calls()[label]
    with pytest.raises((TypeError, ValueError)) as python_side:
        bad()
    with torch.inference_mode():
        inference_bad = _bad_calls()[label]  # its tensors are inference tensors
        with pytest.raises(type(python_side.value)) as inference:
            bad()
    assert str(inference.value) == str(python_side.value)
    with pytest.raises(type(python_side.value)) as inference_tensors:
        inference_bad()
    assert str(inference_tensors.value) == str(python_side.value)
    with kernels_alone(), torch.inference_mode(), pytest.raises(RuntimeError) as kernel:
        bad()
    assert type(kernel.value) is RuntimeError and str(kernel.value) == str(python_side.value)
    with torch.inference_mode(), pytest.raises(type(python_side.value)):
        bad()  # the BackendSelect kernels are back


def test_inference_mode_keeps_the_errors_of_torchscript_and_torch_compile():
    # A scripted call meets the same Python check in and out of inference_mode (TorchScript names
    # the class in its RuntimeError), a compiled one the fake kernel's, which checks first on
    # either side; a good call under inference_mode gives the eager map.
    a, b = tensors_for("ldr_flip")

    def f(x, y, ppd: float):
        return torch.ops.flip.ldr_flip(x, y, ppd, "srgb", 0.0)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # torch.jit.script is deprecated in newer releases
        scripted = torch.jit.script(f)
    compiled = torch.compile(f, backend="aot_eager", fullgraph=True)
    message = "ValueError.*flip: pixels_per_degree must be a finite number"
    for context in (contextlib.nullcontext, torch.inference_mode):
        for fn in (scripted, compiled):
            with context(), pytest.raises(RuntimeError, match=message):
                fn(a, b, -1.0)
            with context():
                assert torch.equal(fn(a, b, 30.0), f(a, b, 30.0))
