"""No crash for want of a kernel: a device the compiled kernels cannot serve (an NVIDIA GPU this
build holds no code for, a ROCm GPU, MPS, XPU) is decided once, said once naming the device and
why, and computed with the portable path (flip_loss.oracle) on every path: eager, torch.compile,
TorchScript, raw ops, the metric, the command line. Without a GPU, a GPU's answers are simulated
(the CUDA runtime's, the capability) and a device without kernels is the CPU with its kernels
taken out of the table."""

import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch

import flip_loss
from flip_loss import _ops, oracle
from flip_loss.constants import DEFAULT_EPS

ROOT = Path(__file__).resolve().parents[2]


class SimulatedCudaModule:
    """flip_loss._C_cuda's two questions, answered as a build for 8.0, 8.6 and 9.0 would on a GPU
    per device index: ``answers[index]`` is the CUDA runtime's error name, or None (runs)."""

    def __init__(self, answers):
        self.answers = answers
        self.asked = []

    def architectures(self):
        return "800,860,900"

    def kernel_image(self, index):
        self.asked.append(index)
        error = self.answers[index]
        return (error, 0, 0) if error else (None, 90, 90)


@pytest.fixture
def gpus(monkeypatch):
    """Two simulated NVIDIA GPUs, an RTX 5090 (12.0: no image in this build) and an H100 (9.0),
    with nothing decided or said yet."""
    module = SimulatedCudaModule({0: "cudaErrorNoKernelImageForDevice", 1: None, 2: "cudaErrorLaunchFailure"})
    monkeypatch.setattr(_ops, "_C_cuda", module)
    monkeypatch.setattr(_ops, "HAS_EXTENSION", True)
    monkeypatch.setattr(_ops, "KERNEL_DEVICES", {op: frozenset({"cpu", "cuda"}) for op in ("ldr_flip", "hdr_flip")})
    monkeypatch.setattr(_ops, "_cuda_verdicts", {})
    monkeypatch.setattr(_ops, "_warned", set())
    monkeypatch.setattr(torch.version, "hip", None)
    names = {0: "NVIDIA GeForce RTX 5090", 1: "NVIDIA H100 80GB HBM3", 2: "NVIDIA A100"}
    capabilities = {0: (12, 0), 1: (9, 0), 2: (8, 0)}
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i=None: names[i])
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda i=None: capabilities[i])
    return module


def test_a_gpu_the_build_holds_no_code_for_is_said_once_and_gets_the_portable_path(gpus):
    with pytest.warns(RuntimeWarning) as said:
        assert not _ops.kernels_run_on("ldr_flip", "cuda", 0)
    (message,) = [str(w.message) for w in said]
    assert message.startswith("flip_loss: cuda:0 (NVIDIA GeForce RTX 5090, compute capability 12.0): ")
    assert "compute capabilities 8.0, 8.6, 9.0" in message and "cudaErrorNoKernelImageForDevice" in message
    assert 'TORCH_CUDA_ARCH_LIST="12.0"' in message and "portable pure-PyTorch path" in message
    assert said[0].filename == __file__  # the warning names the caller's line
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # said once: HDR-FLIP, inference mode, a second call say nothing
        assert not _ops.kernels_run_on("hdr_flip", "cuda", 0)
        with torch.inference_mode():
            assert not _ops.kernels_run_on("ldr_flip", "cuda", 0)
        assert _ops.kernels_run_on("ldr_flip", "cuda", 1)  # a GPU it has code for: the kernels
    assert gpus.asked == [0, 1]  # each device asked once
    info = flip_loss.info("cuda:0", "cuda:1")
    assert info["devices"]["cuda:1"] == "compiled kernels" and "no code it can run" in info["devices"]["cuda:0"]
    assert info["cuda_architectures"] == "8.0, 8.6, 9.0" and gpus.asked == [0, 1]


def test_an_unexpected_cuda_error_decides_nothing(gpus):
    for _ in range(2):
        with pytest.raises(RuntimeError, match="cuda:2 runs the kernels failed: cudaErrorLaunchFailure"):
            _ops.kernels_run_on("ldr_flip", "cuda", 2)
    assert gpus.asked == [2, 2] and 2 not in _ops._cuda_verdicts


def test_the_decision_is_made_once_whatever_the_mode_of_the_first_call_compile(gpus):
    """The first call on a device may come while torch.compile traces: the decision is taken then
    (a constant of the graph, no graph break) and kept for later eager calls."""

    def step(x):
        return x * 2 if _ops.kernels_run_on("ldr_flip", "cuda", 0) else x + 1

    with pytest.warns(RuntimeWarning, match="cuda:0"):
        out = torch.compile(step, backend="eager", fullgraph=True)(torch.ones(3))
    assert torch.equal(out, torch.full((3,), 2.0)) and gpus.asked == [0]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert not _ops.kernels_run_on("ldr_flip", "cuda", 0)
    assert gpus.asked == [0]


def test_the_decision_is_marked_as_torch_compile_marks_a_constant():
    def probe():
        return None

    marked = torch.compiler.assume_constant_result(probe)
    assert vars(marked) and vars(_ops.kernels_run_on).items() >= vars(marked).items()


def test_devices_without_kernels_are_named_in_the_warning():
    for device, index, label in (("mps", None, "mps"), ("xpu", 1, "xpu:1")):
        key, message = _ops.fallback_notice("ldr_flip", device, index)
        assert message.startswith(f"flip_loss: {label}: ") and f"none for {device}" in message
        assert message.endswith("it uses the portable pure-PyTorch path (flip_loss.oracle)")


CHILD_ROCM = """
import sys
sys.meta_path = [f for f in sys.meta_path if 'editable' not in repr(f).lower()]
import torch
torch.version.hip, torch.version.cuda = "6.2.41133", None  # what a ROCm build of torch says
import flip_loss
from flip_loss import _ops
print("flip_loss._C_cuda" in sys.modules)
print(_ops.fallback_notice("ldr_flip", "cuda", 0)[1])
"""


def test_a_rocm_torch_never_loads_the_cuda_kernels_and_says_rocm():
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run(
        [sys.executable, "-c", CHILD_ROCM], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr
    loaded, message = out.stdout.splitlines()[-2:]
    assert loaded == "False"
    assert message.startswith("flip_loss: cuda:0") and "ROCm build (HIP 6.2.41133)" in message
    assert "NVIDIA GPUs only" in message and "portable pure-PyTorch path" in message


@pytest.fixture
def cpu_without_kernels(monkeypatch, ops):
    """The CPU as a device the compiled kernels do not serve (as MPS or an unsupported GPU is)."""
    monkeypatch.setattr(_ops, "KERNEL_DEVICES", {op: frozenset() for op in ("ldr_flip", "hdr_flip")})
    monkeypatch.setattr(_ops, "_warned", set())


def pair(hdr=False, grad=False):
    g = torch.Generator().manual_seed(7)
    test, ref = torch.rand(2, 3, 20, 18, generator=g), torch.rand(2, 3, 20, 18, generator=g)
    if hdr:
        test, ref = test * 3, ref * 3
    return test.requires_grad_(grad), ref


def oracle_loss(test, ref, hdr):
    if hdr:
        exposures, counts = flip_loss.hdr.exposures_for(ref)[:2]
        return oracle.hdr_flip(test, ref, flip_loss.DEFAULT_PPD, "aces", exposures, counts)[0].mean()
    return oracle.ldr_flip(test, ref).mean()


@pytest.mark.parametrize("hdr", [False, True])
def test_every_path_on_a_device_without_kernels_is_the_portable_one_script(cpu_without_kernels, hdr):
    """Eager, TorchScript (which calls the ops directly), raw ops with and without autograd and the
    metric give the portable path's values and gradients, bit for bit; one warning, naming the device."""
    test, ref = pair(hdr, grad=True)
    expected = oracle_loss(test, ref, hdr)
    (expected_grad,) = torch.autograd.grad(expected, test)
    loss = flip_loss.FLIPLoss(hdr=hdr)
    scripted = torch.jit.script(flip_loss.FLIPLoss(hdr=hdr))
    with pytest.warns(RuntimeWarning) as said:
        for module in (loss, scripted):
            value = module(test, ref)
            (grad,) = torch.autograd.grad(value, test)
            assert torch.equal(value, expected) and torch.equal(grad, expected_grad)
    assert [str(w.message).split(";")[0] for w in said] == [
        "flip_loss: cpu: flip-loss has compiled kernels for CPUs and NVIDIA GPUs (CUDA) only, none for cpu"
    ]
    if not hdr:
        with torch.inference_mode():
            raw = torch.ops.flip.ldr_flip(test.detach(), ref, flip_loss.DEFAULT_PPD, "srgb", DEFAULT_EPS)
        assert torch.equal(raw, oracle.ldr_flip(test.detach(), ref))
        metric = flip_loss.FLIPMetric()
        metric.update(test.detach(), ref)
        assert metric.compute().pooled.mean == pytest.approx(oracle.ldr_flip(test.detach(), ref).double().mean().item())


def test_a_device_without_kernels_under_compile_is_the_portable_path(cpu_without_kernels, monkeypatch):
    """The compiled graph computes with the portable path (here a stand-in for it, cheap to trace:
    tracing the oracle itself is the portable path's own matter), with no graph break."""

    def stand_in(test, reference, ppd, space, eps):
        return (test - reference).abs().mean(-3, keepdim=True)

    monkeypatch.setattr(oracle, "ldr_flip", stand_in)
    test, ref = pair(grad=True)
    with pytest.warns(RuntimeWarning, match="flip_loss: cpu: "):
        value = torch.compile(flip_loss.FLIPLoss(), backend="aot_eager", fullgraph=True)(test, ref)
    expected = stand_in(test, ref, None, None, None).mean()
    torch.testing.assert_close(value, expected, rtol=1e-6, atol=0)
    (grad,) = torch.autograd.grad(value, test)
    torch.testing.assert_close(grad, torch.autograd.grad(expected, test)[0])


def test_the_command_line_says_the_device_once(cpu_without_kernels, tmp_path, capsys):
    from flip_loss.cli import main
    from flip_loss.imageio import save_png

    test, ref = pair()
    paths = []
    for name, image in (("ref", ref[0]), ("test", test[0])):
        paths.append(tmp_path / f"{name}.png")
        save_png(paths[-1], (image.permute(1, 2, 0) * 255).round().to(torch.uint8))
    assert main(["-r", str(paths[0]), "-t", str(paths[1]), str(paths[1]), "-nerm", "-d", str(tmp_path)]) == 0
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "flip_loss: cpu: " in lines[0] and "portable pure-PyTorch path" in lines[0]
