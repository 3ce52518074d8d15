"""Python API: ldr_flip, FLIPLoss, torch.compile, TorchScript, fallback, validation."""

import math

import pytest
import torch

import flip_loss
from flip_loss import _ops
from flip_loss import oracle


def images(seed=0, shape=(2, 3, 20, 24), dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    a = torch.rand(shape, generator=g, dtype=dtype)
    b = (a + 0.1 * torch.randn(shape, generator=g, dtype=dtype)).clamp(0, 1)
    return a, b


def test_pixels_per_degree():
    assert flip_loss.DEFAULT_PPD == pytest.approx(67.02064327658225, rel=1e-12)
    assert flip_loss.pixels_per_degree(0.7, 0.7, 3840) == flip_loss.DEFAULT_PPD
    assert flip_loss.pixels_per_degree(1.0, 0.5, 1920) == pytest.approx(1920 / 0.5 * math.pi / 180)
    for bad in [(0, 0.7, 3840), (0.7, -1, 3840), (0.7, 0.7, float("nan"))]:
        with pytest.raises(ValueError):
            flip_loss.pixels_per_degree(*bad)


def test_ldr_flip_shapes_and_dtype():
    a, b = images()
    out = flip_loss.ldr_flip(a, b)
    assert out.shape == (2, 1, 20, 24) and out.dtype == torch.float32
    assert flip_loss.ldr_flip(a[0], b[0]).shape == (1, 20, 24)
    assert flip_loss.ldr_flip(a.double(), b.double()).dtype == torch.float64
    # Mixed dtypes are promoted.
    assert flip_loss.ldr_flip(a, b.double()).dtype == torch.float64


def test_input_space_linear_equals_decoded_srgb():
    a, b = images(dtype=torch.float64)
    srgb = flip_loss.ldr_flip(a, b, input_space="srgb")
    linear = flip_loss.ldr_flip(oracle.srgb_to_linear(a), oracle.srgb_to_linear(b), input_space="linear")
    torch.testing.assert_close(srgb, linear, rtol=0, atol=1e-12)
    assert torch.equal(flip_loss.ldr_flip(a, b, input_space="SRGB"), srgb)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_flip_loss_reductions(reduction):
    a, b = images()
    full = flip_loss.ldr_flip(a, b)
    out = flip_loss.FLIPLoss(reduction=reduction)(a, b)
    expected = {"mean": full.mean(), "sum": full.sum(), "none": full}[reduction]
    torch.testing.assert_close(out, expected)


def test_flip_loss_trains_towards_reference():
    a, b = images(shape=(1, 3, 16, 16))
    x = a.clone().requires_grad_()
    loss_fn = flip_loss.FLIPLoss()
    opt = torch.optim.Adam([x], lr=0.02)
    first = loss_fn(x, b).item()
    for _ in range(30):
        opt.zero_grad()
        loss = loss_fn(x, b)
        loss.backward()
        opt.step()
    assert loss_fn(x, b).item() < 0.5 * first


def test_torch_compile_fullgraph_matches_eager():
    torch._dynamo.reset()
    a, b = images(seed=3)
    loss_fn = flip_loss.FLIPLoss(pixels_per_degree=40.0)

    def step(x, y):
        return loss_fn(x, y)

    compiled = torch.compile(step, fullgraph=True, backend="aot_eager")
    x1, y1 = a.clone().requires_grad_(), b.clone().requires_grad_()
    x2, y2 = a.clone().requires_grad_(), b.clone().requires_grad_()
    eager = step(x1, y1)
    eager.backward()
    out = compiled(x2, y2)
    out.backward()
    torch.testing.assert_close(out, eager, rtol=0, atol=0)
    torch.testing.assert_close(x2.grad, x1.grad, rtol=0, atol=0)
    torch.testing.assert_close(y2.grad, y1.grad, rtol=0, atol=0)


def test_torch_compile_inductor_fullgraph():
    torch._dynamo.reset()
    a, b = images(seed=4)
    x = a.clone().requires_grad_()

    @torch.compile(fullgraph=True)
    def f(x, y):
        return torch.ops.flip.ldr_flip(x * 0.9 + 0.05, y, 30.0, "srgb", 1e-15).mean()

    out = f(x, b)
    out.backward()
    x_e = a.clone().requires_grad_()
    eager = torch.ops.flip.ldr_flip(x_e * 0.9 + 0.05, b, 30.0, "srgb", 1e-15).mean()
    eager.backward()
    torch.testing.assert_close(out, eager, rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(x.grad, x_e.grad, rtol=1e-5, atol=1e-8)


@pytest.mark.slow  # several compilations
@pytest.mark.parametrize(
    "kwargs",
    [
        {"pixels_per_degree": 30.0},
        {"pixels_per_degree": [20.0, 40.0], "ppd_weights": [1.0, 3.0]},
        {"pixels_per_degree": 30.0, "data_range": (-1.0, 2.0), "reduction": "sum"},
        {"hdr": True, "start_exposure": -1.0, "stop_exposure": 2.0, "num_exposures": 3},
    ],
    ids=["ldr", "multi-scale", "data-range", "hdr"],
)
def test_torch_compile_dynamic_fullgraph(kwargs):
    # dynamic=True passes the module's float options as symbolic values: the option checks must
    # trace them (options.is_finite), and one graph serves other image sizes.
    torch._dynamo.reset()
    loss = flip_loss.FLIPLoss(**kwargs)
    compiled = torch.compile(loss, fullgraph=True, dynamic=True)
    for shape in ((2, 3, 16, 18), (1, 3, 20, 11)):
        g = torch.Generator().manual_seed(sum(shape))
        a, b = torch.rand(shape, generator=g), torch.rand(shape, generator=g)
        x, y = a.clone().requires_grad_(), a.clone().requires_grad_()
        out, eager = compiled(x, b), loss(y, b)
        torch.testing.assert_close(out, eager, rtol=1e-6, atol=1e-7)
        out.backward()
        eager.backward()
        torch.testing.assert_close(x.grad, y.grad, rtol=1e-5, atol=1e-8)


def test_torchscript_save_load_forward_backward(tmp_path):
    a, b = images(seed=5)
    module = flip_loss.FLIPLoss(pixels_per_degree=30.0, reduction="sum")
    scripted = torch.jit.script(module)
    path = tmp_path / "flip.pt"
    scripted.save(str(path))
    loaded = torch.jit.load(str(path))
    x1, y1 = a.clone().requires_grad_(), b.clone().requires_grad_()
    x2, y2 = a.clone().requires_grad_(), b.clone().requires_grad_()
    eager = module(x1, y1)
    eager.backward()
    out = loaded(x2, y2)
    out.backward()
    torch.testing.assert_close(out, eager, rtol=0, atol=0)
    torch.testing.assert_close(x2.grad, x1.grad, rtol=0, atol=0)
    torch.testing.assert_close(y2.grad, y1.grad, rtol=0, atol=0)


def test_import_and_a_training_step_raise_no_deprecation_warning():
    """From torch 2.15 on TorchScript's entry points warn (FutureWarning; DeprecationWarning
    before): the package must not call them itself, on import or in normal use, so a user's
    `-W error` run sees only what their own code asks for. A fresh process, because this one has
    imported flip_loss already."""
    import subprocess
    import sys

    code = (
        "import torch, flip_loss\n"
        "g = torch.Generator().manual_seed(3)\n"
        "test = torch.rand(2, 3, 20, 24, generator=g).requires_grad_()\n"
        "reference = torch.rand(2, 3, 20, 24, generator=g)\n"
        "for module in (flip_loss.FLIPLoss(), flip_loss.FLIPLoss(reduction='none')):\n"
        "    module(test, reference).sum().backward()\n"
        "metric = flip_loss.FLIPMetric()\n"
        "metric.update(test.detach(), reference)\n"
        "print(flip_loss.HAS_EXTENSION, bool(test.grad.abs().sum() > 0), metric.compute().num_images)\n"
    )
    flags = ["-W", "error::DeprecationWarning", "-W", "error::FutureWarning"]
    out = subprocess.run([sys.executable, *flags, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [str(flip_loss.HAS_EXTENSION), "True", "2"]


def test_scripted_module_rejects_bad_input():
    scripted = torch.jit.script(flip_loss.FLIPLoss())
    a, b = images()
    with pytest.raises(torch.jit.Error, match="shapes differ"):
        scripted(a, b[..., :5])


def test_fallback_to_the_oracle_warns(monkeypatch):
    a, b = images()
    expected = flip_loss.ldr_flip(a, b)
    monkeypatch.setattr(_ops, "HAS_EXTENSION", False)
    monkeypatch.setattr(_ops, "_warned", set())
    with pytest.warns(RuntimeWarning, match="portable pure-PyTorch path"):
        out = flip_loss.ldr_flip(a, b)
    torch.testing.assert_close(out, expected, rtol=0, atol=1e-5)


@pytest.mark.parametrize(
    "case,exc",
    [
        ("channels", ValueError),
        ("shape", ValueError),
        ("int", TypeError),
        ("ppd", ValueError),
        ("space", ValueError),
        ("not-tensor", TypeError),
        ("dims", ValueError),
        ("eps", ValueError),
    ],
)
def test_api_bad_input_raises(case, exc):
    a, b = images()
    kwargs = {}
    if case == "channels":
        a, b = a[:, :1], b[:, :1]
    elif case == "shape":
        b = b[:, :, :10]
    elif case == "int":
        a, b = (a * 255).short(), (b * 255).short()  # uint8: 8-bit codes
    elif case == "ppd":
        kwargs["pixels_per_degree"] = -3
    elif case == "space":
        kwargs["input_space"] = "xyz"
    elif case == "not-tensor":
        a = a.numpy()
    elif case == "dims":
        a, b = a[0, 0], b[0, 0]
    elif case == "eps":
        kwargs["eps"] = float("inf")
    with pytest.raises(exc, match="flip_loss"):
        flip_loss.ldr_flip(a, b, **kwargs)


def test_module_rejects_bad_options():
    with pytest.raises(ValueError, match="reduction"):
        flip_loss.FLIPLoss(reduction="max")
    with pytest.raises(ValueError, match="pixels_per_degree"):
        flip_loss.FLIPLoss(pixels_per_degree=0)
    with pytest.raises(ValueError, match="input_space"):
        flip_loss.FLIPLoss(input_space="hdr")


def test_nan_input_raises():
    a, b = images()
    a[0, 0, 0, 0] = float("nan")
    with pytest.raises(RuntimeError, match="NaN"):
        flip_loss.ldr_flip(a, b)


@pytest.mark.cuda
def test_cuda_tensors_give_the_cpu_values():
    a, b = images()
    out = flip_loss.ldr_flip(a.cuda(), b.cuda())
    assert out.is_cuda
    torch.testing.assert_close(out.cpu(), flip_loss.ldr_flip(a, b), rtol=0, atol=1e-5)


def test_submodules_are_reachable_from_the_package_alone():
    import subprocess
    import sys

    code = (
        "import flip_loss; ref, test = flip_loss.cli.example_paths(); print(ref.endswith('example_reference.png'), "
        "callable(flip_loss.imageio.load_image))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "True"]


def test_flip_loss_under_autocast_is_float32():
    # FLIPLoss under torch.autocast: a bfloat16 input and a float32 one give a float32 loss (the
    # ops' Autocast kernels; every op's own check: tests/ops/test_op_tester.py).
    g = torch.Generator().manual_seed(0)
    a = torch.rand((2, 3, 16, 20), generator=g)
    b = (a + 0.1 * torch.randn((2, 3, 16, 20), generator=g)).clamp(0, 1)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        low = a.to(torch.bfloat16)
        assert flip_loss.FLIPLoss()(low, b).dtype == torch.float32
