"""Forward-mode automatic differentiation through the Python API: computed with the pure-PyTorch
portable path (the oracle), exact, wherever the call carries a tangent.

Every entry point that runs the compiled ops (``ldr_flip``, multi-scale, ``hdr_flip``, ``FLIPLoss``,
NVIDIA's losses and ``compute_ldrflip``) gives under ``torch.func.jvp``/``jacfwd`` or ``forward_ad``
the directional derivative of the kernels' reverse mode; the compiled ops have no JVP, and where
the portable path cannot run the call (TorchScript, torch.compile, the raw ops) forward mode raises
rather than give a tangent of 0, as does ``FLIPMetric``, which is not differentiable. The oracle is
plain PyTorch: its forward mode gives reverse mode's Jacobian, at every kink its helpers handle
(clamps, |d|, the floored square roots, the branches), and finite differences where the functions
are smooth.
"""

import pytest
import torch
import torch.autograd.forward_ad as fwAD

import flip_loss
from flip_loss import _ops, oracle

REFUSED = r"forward-mode automatic differentiation .* is not supported"


def ldr_pair(shape=(2, 3, 10, 11), seed=0):
    g = torch.Generator().manual_seed(seed)
    ref = torch.rand(shape, generator=g, dtype=torch.float64)
    test = (ref + 0.1 * torch.randn(shape, generator=g, dtype=torch.float64)).clamp(0.02, 0.98)
    return test, ref


def hdr_pair(shape=(2, 3, 10, 11), seed=1):
    g = torch.Generator().manual_seed(seed)
    ref = torch.exp2(6 * torch.rand(shape, generator=g, dtype=torch.float64) - 3)
    return ref * (1 + 0.2 * torch.rand(shape, generator=g, dtype=torch.float64)), ref


def ycxcz(x):
    return flip_loss.color_space_transform(x, "srgb2ycxcz")


# entry point: (inputs, the function of the test image)
ENTRIES = {
    "ldr_flip": ("ldr", lambda t, r: flip_loss.ldr_flip(t, r, 30.0)),
    "ldr_flip-multiscale": ("ldr", lambda t, r: flip_loss.ldr_flip(t, r, [20.0, 40.0])),
    "hdr_flip": ("hdr", lambda t, r: flip_loss.hdr_flip(t, r, 30.0)),
    "hdr_flip-given": ("hdr", lambda t, r: flip_loss.hdr_flip(t, r, 30.0, "hable", -2.0, 2.0, 3)),
    "FLIPLoss": ("ldr", flip_loss.FLIPLoss(30.0)),
    "FLIPLoss-hdr": ("hdr", flip_loss.FLIPLoss(30.0, hdr=True)),
    "FLIPLoss-scripted": ("ldr", "scripted"),
    "LDRFLIPLoss": ("ldr", flip_loss.LDRFLIPLoss()),
    "HDRFLIPLoss": ("hdr", flip_loss.HDRFLIPLoss()),
    "compute_ldrflip": ("ldr", lambda t, r: flip_loss.compute_ldrflip(ycxcz(t), ycxcz(r), 30.0)),
    "FLIPMetric": ("ldr", lambda t, r: flip_loss.FLIPMetric(30.0).update(t, r)),
}


def _entry(name):
    kind, f = ENTRIES[name]
    if f == "scripted":
        f = torch.jit.script(flip_loss.FLIPLoss(30.0))
    return (ldr_pair() if kind == "ldr" else hdr_pair()), f


REFUSING = ("FLIPLoss-scripted", "FLIPMetric")


@pytest.mark.parametrize("name", [n for n in ENTRIES if n not in REFUSING])
def test_every_entry_point_computes_forward_mode_with_the_portable_path(name):
    (test, ref), f = _entry(name)
    g = torch.Generator().manual_seed(6)
    for which in (0, 1):  # a tangent on the test image, then on the reference
        x = (test, ref)[which].clone()
        v = torch.randn(x.shape, generator=g, dtype=x.dtype)

        def of(y, which=which):
            return f(y, ref) if which == 0 else f(test, y)

        _, tangent = torch.func.jvp(lambda y: of(y).sum(), (x,), (v,))
        with fwAD.dual_level():
            dual = fwAD.unpack_dual(of(fwAD.make_dual(x, v)).sum()).tangent
        x.requires_grad_()
        of(x).sum().backward()  # the compiled kernels' reverse mode
        reverse = (x.grad * v).sum()
        assert reverse.abs() > 1e-3
        torch.testing.assert_close(tangent, reverse, rtol=1e-9, atol=1e-12)
        torch.testing.assert_close(dual, tangent, rtol=0, atol=0)


@pytest.mark.parametrize("name", REFUSING)
def test_the_scripted_loss_and_the_metric_refuse_forward_mode(name):
    (test, ref), f = _entry(name)
    exc, message = (
        (RuntimeError, REFUSED) if name == "FLIPLoss-scripted" else (NotImplementedError, "not differentiable")
    )
    with pytest.raises(exc, match=message):
        torch.func.jvp(lambda x: f(x, ref).sum(), (test,), (torch.randn_like(test),))
    with pytest.raises(exc, match=message):  # a tangent on the reference
        torch.func.jvp(lambda x: f(test, x).sum(), (ref,), (torch.randn_like(ref),))
    with fwAD.dual_level(), pytest.raises(exc, match=message):
        f(fwAD.make_dual(test, torch.randn_like(test)), ref)


def test_the_metric_refuses_a_gradient_transform():
    (test, ref), f = _entry("FLIPMetric")
    with pytest.raises(NotImplementedError, match="FLIPMetric is not differentiable"):
        torch.func.grad(lambda x: f(x, ref).sum())(test)


@pytest.mark.parametrize("name", ["FLIPLoss", "FLIPLoss-hdr", "LDRFLIPLoss", "HDRFLIPLoss"])
def test_compiled_losses_refuse_jvp(name):
    (test, ref), loss = _entry(name)
    torch._dynamo.reset()
    compiled = torch.compile(lambda t, v: torch.func.jvp(lambda x: loss(x, ref), (t,), (v,)), backend="eager")
    with pytest.raises(NotImplementedError, match=REFUSED):
        compiled(test, torch.randn_like(test))


# --- the oracle: forward mode as reverse mode, at the kinks too --------------------------------


def kinky_pair(shape=(1, 3, 6, 6), seed=2):
    """A test image with values on the clamps' bounds, outside [0, 1] and grey, against a reference
    equal to it in its lower rows (d = 0 in HyAB's and the features' floored square roots)."""
    g = torch.Generator().manual_seed(seed)
    test = torch.rand(shape, generator=g, dtype=torch.float64)
    ref = test.clone()
    ref[..., :2, :] = torch.rand(ref[..., :2, :].shape, generator=g, dtype=torch.float64)
    test[..., 0, 0], test[..., 0, 1], ref[..., 1, 1] = 0.0, 1.0, 0.0
    test[..., 2, 2], test[..., 3, 3], test[..., 4, 4] = 1.5, -0.2, 0.5
    return test, ref


EXPOSURES = torch.tensor([[-2.0, 0.0, 2.0]], dtype=torch.float64)
ORACLE_FUNCTIONS = {
    "ldr_flip": lambda t, r: oracle.ldr_flip(t, r, 30.0, "srgb", 1e-12),
    "ldr_flip-eps0": lambda t, r: oracle.ldr_flip(t, r, 30.0, "srgb", 0.0),
    "ldr_flip-linear": lambda t, r: oracle.ldr_flip(t, r, 30.0, "linear", 1e-12),
    "csf_filter": lambda t, r: oracle.csf_filter(oracle.linear_rgb_to_opponent(t), 30.0),
    "hunt_hyab": lambda t, r: oracle.hunt_hyab(t, r, 1e-12),
    "feature_difference": lambda t, r: oracle.feature_difference(t[:, :1], r[:, :1], 30.0, 1e-12),
    "hdr_flip": lambda t, r: oracle.hdr_flip(4 * t, 4 * r, 30.0, "aces", EXPOSURES, torch.tensor([3]), 1e-12)[0],
}


@pytest.mark.parametrize("name", list(ORACLE_FUNCTIONS))
def test_oracle_forward_mode_gives_reverse_modes_jacobian_at_the_kinks(name):
    test, ref = kinky_pair()
    f = ORACLE_FUNCTIONS[name]
    for i, g in enumerate((lambda x: f(x, ref), lambda x: f(test, x))):
        x = test if i == 0 else ref
        reverse = torch.func.jacrev(g)(x)
        forward = torch.func.jacfwd(g)(x)
        if i == 0:
            assert reverse.abs().sum() > 0, "a kink case with no gradient at all tells nothing"
        # Rounding apart (the convolutions' order of sums differs between the modes): a kink
        # handled differently shows as a difference of the derivative's own size.
        torch.testing.assert_close(forward, reverse, rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize("name", list(ORACLE_FUNCTIONS))
def test_oracle_forward_mode_follows_finite_differences(name):
    test, ref = ldr_pair((1, 3, 8, 9), seed=3)
    f = ORACLE_FUNCTIONS[name]
    v = torch.randn(test.shape, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    _, tangent = torch.func.jvp(lambda x: f(x, ref).sum(), (test,), (v,))
    h = 1e-6
    central = (f(test + h * v, ref).sum() - f(test - h * v, ref).sum()) / (2 * h)
    assert tangent.abs() > 1e-3
    torch.testing.assert_close(tangent, central, rtol=1e-6, atol=1e-9)


@pytest.fixture
def oracle_serves(monkeypatch):
    """The package as it runs where no compiled kernel serves the device: the portable path."""
    monkeypatch.setattr(_ops, "KERNEL_DEVICES", {op: frozenset() for op in _ops.KERNEL_DEVICES})
    monkeypatch.setattr(_ops, "_warned", set())


@pytest.mark.parametrize("name", ["ldr_flip", "ldr_flip-multiscale", "hdr_flip", "FLIPLoss", "HDRFLIPLoss"])
@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # the portable path's notice
def test_the_portable_path_supports_forward_mode(name, oracle_serves):
    """Where the portable path computes (a device the kernels cannot serve), the API calls the
    oracle itself: forward mode is its own, reverse mode's directional derivative. The raw ops,
    whose Python kernels would run the oracle there, refuse it as everywhere."""
    (test, ref), f = _entry(name)
    v = torch.randn(test.shape, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    _, tangent = torch.func.jvp(lambda x: f(x, ref).sum(), (test,), (v,))
    x = test.clone().requires_grad_()
    f(x, ref).sum().backward()
    assert tangent.abs() > 1e-3
    torch.testing.assert_close(tangent, (x.grad * v).sum(), rtol=1e-10, atol=1e-12)
    raw = torch.ops.flip.ldr_flip if name.startswith("ldr") or name == "FLIPLoss" else None
    if raw is not None:
        with pytest.raises(NotImplementedError, match=REFUSED):
            torch.func.jvp(lambda x: raw(x, ref, 30.0, "srgb", 1e-15).sum(), (test,), (v,))


def test_forward_and_second_order_under_autocast_compute_in_float32():
    """The portable path follows the ops' autocast rule: float32 inside torch.autocast, whose
    bfloat16 convolutions put the tangent 50 % off and a second derivative 12 %."""
    g = torch.Generator().manual_seed(7)
    t, r, v = (torch.rand(1, 3, 8, 8, generator=g) for _ in range(3))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        _, tangent = torch.func.jvp(lambda a: flip_loss.ldr_flip(a, r).sum(), (t,), (v,))
        x = t.clone().requires_grad_()
        (first,) = torch.autograd.grad(flip_loss.ldr_flip(x, r).sum(), x, create_graph=True)
    (second,) = torch.autograd.grad((first * v).sum(), x)  # outside autocast, as a training step would
    t64, r64, v64 = t.double(), r.double(), v.double()
    _, exact = torch.func.jvp(lambda a: flip_loss.ldr_flip(a, r64).sum(), (t64,), (v64,))
    x64 = t64.clone().requires_grad_()
    (first64,) = torch.autograd.grad(flip_loss.ldr_flip(x64, r64).sum(), x64, create_graph=True)
    (second64,) = torch.autograd.grad((first64 * v64).sum(), x64)
    assert tangent.dtype == torch.float32
    torch.testing.assert_close(tangent.double(), exact, rtol=1e-5, atol=0)
    torch.testing.assert_close(second.double(), second64, rtol=1e-3, atol=1e-4)  # float32's rounding
