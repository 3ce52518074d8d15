"""The C++ side: builds the CMake project (libflip_ops + tests/cpp) and checks that a scripted
FLIPLoss saved from Python gives, when run by a LibTorch C++ program, the same error map and the
same input gradients as eager Python.

The build goes to build/cpp (kept between runs; only what changed is rebuilt). Set
FLIP_LOSS_CPP_BUILD_DIR to use another directory.
"""
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

import flip_loss

ROOT = Path(__file__).resolve().parents[1]
BUILD_DIR = Path(os.environ.get("FLIP_LOSS_CPP_BUILD_DIR", ROOT / "build" / "cpp"))
BUILD_TIMEOUT_S = 3600
LOG_TAIL_CHARS = 6000

if shutil.which("cmake") is None:
    pytest.skip("cmake is not on PATH: cannot build the C++ op library and tests", allow_module_level=True)


def _tail(text, n=LOG_TAIL_CHARS):
    return text if len(text) <= n else "...\n" + text[-n:]


def _run(cmd, what):
    proc = subprocess.run(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=BUILD_TIMEOUT_S)
    if proc.returncode != 0:
        pytest.fail(f"{what} failed (exit {proc.returncode}): {' '.join(map(str, cmd))}\n"
                    f"{_tail(proc.stdout)}", pytrace=False)
    return proc.stdout


def _executable(name):
    for candidate in (BUILD_DIR / "tests" / "cpp" / name, BUILD_DIR / "tests" / "cpp" / "Release" / name):
        if candidate.is_file():
            return candidate
    pytest.fail(f"the build did not produce {name} under {BUILD_DIR}", pytrace=False)


@pytest.fixture(scope="session")
def cpp_build():
    """Configures (once) and builds the CMake project; returns the build directory."""
    if not (BUILD_DIR / "CMakeCache.txt").is_file():
        cmd = ["cmake", "-S", str(ROOT), "-B", str(BUILD_DIR), "-DCMAKE_BUILD_TYPE=Release",
               f"-DCMAKE_PREFIX_PATH={torch.utils.cmake_prefix_path}", "-DFLIP_LOSS_BUILD_TESTS=ON"]
        if shutil.which("ninja"):
            cmd += ["-G", "Ninja"]
        _run(cmd, "CMake configure")
    # An existing build dir is reused: cmake --build reconfigures by itself when a CMakeLists changed.
    start = time.monotonic()
    _run(["cmake", "--build", str(BUILD_DIR), "-j2"], "CMake build")
    print(f"\n[test_cpp] cmake --build {BUILD_DIR}: {time.monotonic() - start:.1f} s")
    return BUILD_DIR


def _stale_extension_note():
    """A hint for failures: flip_loss._C (built by setup.py) older than the C++ sources means eager
    Python runs older kernels than the freshly built libflip_ops."""
    so = sys.modules.get("flip_loss._C")
    so_path = Path(getattr(so, "__file__", "") or "")
    if not so_path.is_file():
        return ""
    newest = max((p for p in (ROOT / "csrc").rglob("*") if p.suffix in (".h", ".cpp", ".cu", ".cuh")),
                 key=lambda p: p.stat().st_mtime, default=None)
    if newest is not None and newest.stat().st_mtime > so_path.stat().st_mtime:
        return (f"\nnote: {so_path.name} is older than {newest.relative_to(ROOT)}; rebuild it "
                "(python setup.py build_ext --inplace) so eager Python and C++ run the same kernels")
    return ""


class _Tensors(torch.nn.Module):
    """Container whose attributes a C++ program reads with module.attr(name).toTensor()."""

    def __init__(self, **tensors):
        super().__init__()
        for name, t in tensors.items():
            self.register_buffer(name, t)

    def forward(self) -> int:  # TorchScript needs a method to script
        return 0


@pytest.mark.filterwarnings("ignore:`torch.jit.script` is deprecated:DeprecationWarning")
def test_scripted_flip_loss_in_cpp_matches_eager_python(cpp_build, tmp_path):
    assert flip_loss.HAS_EXTENSION, "flip_loss._C is not built (python setup.py build_ext --inplace)"
    ppd = 30.0
    gen = torch.Generator().manual_seed(1234)
    test = torch.rand(2, 3, 24, 32, generator=gen, dtype=torch.float32)
    reference = torch.rand(2, 3, 24, 32, generator=gen, dtype=torch.float32)

    module_path, inputs_path, outputs_path = (tmp_path / n for n in ("module.pt", "inputs.pt", "outputs.pt"))
    torch.jit.script(flip_loss.FLIPLoss(reduction="none", pixels_per_degree=ppd)).save(str(module_path))
    torch.jit.script(_Tensors(test=test, reference=reference)).save(str(inputs_path))

    exe = _executable("flip_run_scripted")
    proc = subprocess.run([str(exe), str(module_path), str(inputs_path), str(outputs_path)],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600)
    assert proc.returncode == 0, f"{exe.name} failed (exit {proc.returncode}):\n{proc.stdout}"
    print(proc.stdout)

    out = dict(torch.load(str(outputs_path), weights_only=True))  # ((name, tensor), ...)
    assert set(out) == {"map", "grad_test", "grad_reference", "dispatcher_map"}

    # Eager Python, same inputs.
    t = test.clone().requires_grad_(True)
    r = reference.clone().requires_grad_(True)
    expected = flip_loss.ldr_flip(t, r, pixels_per_degree=ppd)
    expected.sum().backward()

    assert out["map"].shape == expected.shape == (2, 1, 24, 32)
    assert out["map"].dtype == torch.float32
    note = _stale_extension_note()
    for name in ("map", "dispatcher_map"):
        diff = (out[name] - expected.detach()).abs().max().item()
        assert diff <= 1e-6, f"{name}: max |C++ - eager Python| = {diff:.3g} > 1e-6{note}"
    for name, grad in (("grad_test", t.grad), ("grad_reference", r.grad)):
        assert out[name].shape == grad.shape, name
        torch.testing.assert_close(out[name], grad, rtol=1e-5, atol=1e-7, msg=lambda m: f"{name}: {m}{note}")
        assert out[name].abs().max().item() > 0, f"{name} is all zeros"
        assert torch.isfinite(out[name]).all(), f"{name} has non-finite values"
