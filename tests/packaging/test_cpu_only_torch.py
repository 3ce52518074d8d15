"""One wheel for CPU-only and CUDA builds of torch: flip_loss._C (the ops' schemas and CPU kernels)
needs no CUDA library, so it loads where torch has none (PyTorch's CPU wheels, macOS, most
aarch64); the CUDA kernels live in flip_loss._C_cuda, loaded only with a CUDA build of torch, and
its failure to load leaves the CPU kernels working, and the first call on a CUDA device says why,
once. Both ask for no glibc or
libstdc++ symbol newer than manylinux_2_28 allows, whatever glibc built them (csrc/compat)."""

import importlib.machinery
import os
import re
import shutil
import subprocess
import sys

import pytest
import torch

import flip_loss
from flip_loss import _ops

import elf

# Libraries a CPU-only torch does not have: torch's CUDA halves, the CUDA runtime and driver, the
# CUDA maths and tool libraries (libcublas, libcufft, libcupti, ...) and NVIDIA's others.
CUDA_LIBRARY = re.compile(r"^lib(torch_cuda|c10_cuda|cuda|cu[a-z]|nv)")
# The CUDA runtime's and driver's C API (cudaMalloc, __cudaRegisterFatBinary, cuLaunchKernel) and
# c10::cuda's C++ names.
CUDA_SYMBOL = re.compile(r"^(__cuda|cuda[A-Z]|cu[A-Z]|_ZN3c104cuda)")


def extension_path(name):
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        path = os.path.join(os.path.dirname(flip_loss.__file__), name + suffix)
        if os.path.exists(path):
            return path
    return None


def cpu_module():
    path = extension_path("_C")
    assert path is not None and flip_loss.HAS_EXTENSION, f"flip_loss._C is not built: {_ops.IMPORT_ERROR}"
    return path


def test_cpu_module_needs_no_cuda_library():
    info = elf.read(cpu_module())
    assert "libtorch_cpu.so" in info.needed and "libc10.so" in info.needed, info.needed
    assert [lib for lib in info.needed if CUDA_LIBRARY.match(lib)] == [], info.needed
    assert sorted(s for s in info.imported | info.weak_imported if CUDA_SYMBOL.match(s)) == []


def test_cuda_module_holds_the_cuda_dependencies():
    path = extension_path("_C_cuda")
    if path is None:
        pytest.skip("built without CUDA kernels (FLIP_LOSS_CUDA=0 or no nvcc): no flip_loss._C_cuda")
    info = elf.read(path)
    assert "libtorch_cuda.so" in info.needed and any(lib.startswith("libcudart") for lib in info.needed), info.needed
    assert "__cudaRegisterFatBinary" in info.imported  # the kernels are in this module, not in _C
    if torch.version.cuda is not None and os.environ.get("FLIP_LOSS_CUDA_KERNELS", "1") == "1":
        assert "flip_loss._C_cuda" in sys.modules and _ops.CUDA_IMPORT_ERROR is None
        assert "cuda" in _ops.KERNEL_DEVICES["ldr_flip"]


# The newest symbol version manylinux_2_28 allows from each system library family (auditwheel's
# policy for x86_64 and aarch64; the tag's promise: every distribution with glibc 2.28 and GCC 8's
# libstdc++ on).
MANYLINUX_2_28 = {"GLIBC": (2, 28), "GLIBCXX": (3, 4, 24), "CXXABI": (1, 3, 11), "GCC": (4, 8, 0)}


@pytest.mark.parametrize("module", ["_C", "_C_cuda"])
def test_modules_need_no_symbol_newer_than_manylinux_2_28(module):
    """Built on a newer glibc (Debian 12: 2.36), exp, exp2, log, pow (GLIBC_2.29), dlsym (2.34) and
    libstdc++'s __libc_single_threaded (2.32) would otherwise be asked for at their newest
    versions; csrc/compat binds them to their oldest."""
    if not sys.platform.startswith("linux") or os.uname().machine not in ("x86_64", "aarch64"):
        pytest.skip("manylinux is for glibc Linux on x86_64 and aarch64")
    path = extension_path(module)
    if path is None:
        pytest.skip(f"flip_loss.{module} is not built")
    info = elf.read(path)
    too_new = []
    for library, versions in info.versions.items():
        for version in versions:
            family, _, number = version.partition("_")
            if family in MANYLINUX_2_28 and tuple(map(int, number.split("."))) > MANYLINUX_2_28[family]:
                too_new.append(f"{library}: {version}")
    assert too_new == []
    assert "GLIBC_2.2.5" in info.versions.get("libc.so.6", ()) or "GLIBC_2.17" in info.versions.get("libc.so.6", ())
    assert "__libc_single_threaded" not in info.imported | info.weak_imported


def test_cpu_module_loads_without_torch_cuda(tmp_path):
    """The CPU module loaded on its own, in a process where torch's Python package never runs (so
    nothing loads libtorch_cuda on its behalf), with every symbol bound at load time (RTLD_NOW):
    its schemas and CPU kernels register with the dispatcher of libtorch_cpu, its functions answer,
    and neither libtorch_cuda nor libc10_cuda is ever mapped. (A CUDA build of torch's own
    libtorch_cpu brings in the CUDA runtime; the check above shows the module needs none of it.)"""
    path = cpu_module()
    torch_lib = os.path.join(os.path.dirname(torch.__file__), "lib")
    code = f"""
import importlib.util, os, sys
sys.setdlopenflags(os.RTLD_NOW | os.RTLD_LOCAL)
spec = importlib.util.spec_from_file_location("flip_loss._C", {path!r})
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
assert "torch" not in sys.modules
print(module.cpu_capability())
print(module.limits()["max_exposures"])
with open("/proc/self/maps") as f:
    mapped = sorted({{os.path.basename(line.split()[-1]) for line in f if ".so" in line}})
print(" ".join(mapped))
"""
    env = dict(os.environ, LD_LIBRARY_PATH=torch_lib + os.pathsep + os.environ.get("LD_LIBRARY_PATH", ""))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    capability, max_exposures, mapped = out.stdout.splitlines()
    assert capability == flip_loss._C.cpu_capability()
    assert int(max_exposures) == flip_loss._C.limits()["max_exposures"]
    mapped = mapped.split()
    assert "libtorch_cpu.so" in mapped and os.path.basename(path) in mapped
    assert [lib for lib in mapped if lib.startswith(("libtorch_cuda", "libc10_cuda"))] == [], mapped


def package_copy(tmp_path, cuda_module_bytes):
    """A copy of the package whose flip_loss._C is this build's and whose _C_cuda holds the given
    bytes (None: no _C_cuda, as a build without CUDA kernels)."""
    package = tmp_path / "flip_loss"
    shutil.copytree(
        os.path.dirname(flip_loss.__file__), package, ignore=shutil.ignore_patterns("*.so", "*.pyd", "__pycache__")
    )
    os.symlink(cpu_module(), package / os.path.basename(cpu_module()))
    if cuda_module_bytes is not None:
        (package / "_C_cuda.abi3.so").write_bytes(cuda_module_bytes)
    return package


# A child that imports the copy (only it: an editable install's finder would supply the built
# package), with every warning recorded, and reports what loaded and what one CPU ldr_flip gives
# next to the pure-PyTorch oracle's value.
CHILD = """
import json, sys, warnings
sys.meta_path = [f for f in sys.meta_path if 'editable' not in repr(f).lower()]
import torch
if {hide_cuda}:
    torch.version.cuda = None  # as a CPU-only build of torch says
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import flip_loss
    from flip_loss import oracle
    g = torch.Generator().manual_seed(3)
    test, ref = torch.rand(2, 3, 24, 20, generator=g), torch.rand(2, 3, 24, 20, generator=g)
    value = flip_loss.ldr_flip(test, ref, pixels_per_degree=40.0)
    expected = oracle.ldr_flip(test, ref, pixels_per_degree=40.0)
    raw = torch.ops.flip.ldr_flip(test, ref, 40.0)  # the CPU kernel itself, no fallback possible
print(json.dumps({{
    "file": flip_loss.__file__,
    "has_extension": flip_loss.HAS_EXTENSION,
    "cuda_module_loaded": "flip_loss._C_cuda" in sys.modules,
    "cuda_import_error": flip_loss._ops.CUDA_IMPORT_ERROR,
    "devices": sorted(flip_loss._ops.KERNEL_DEVICES["ldr_flip"]),
    "kernel_difference": (raw - expected).abs().max().item(),
    "same_as_kernel": torch.equal(value, raw),
    "warnings": [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)],
    "cuda_notice": (flip_loss._ops.fallback_notice("ldr_flip", "cuda", 0) or (None, None))[1],
}}))
"""


def run_child(tmp_path, package, hide_cuda=False, **env):
    import json

    env = dict(os.environ, PYTHONPATH=str(tmp_path), **env)
    out = subprocess.run(
        [sys.executable, "-c", CHILD.format(hide_cuda=hide_cuda)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout.splitlines()[-1])
    if not result["file"].startswith(str(package)):
        pytest.skip(f"this environment imports flip_loss from {result['file']} even with the copy first on the path")
    return result


NOT_AN_ELF_FILE = b"not a shared library\n"


def test_a_cuda_module_that_does_not_load_leaves_the_cpu_kernels(tmp_path):
    if torch.version.cuda is None:
        pytest.skip("a CPU-only torch never loads flip_loss._C_cuda (the next test)")
    package = package_copy(tmp_path, NOT_AN_ELF_FILE)
    result = run_child(tmp_path, package, FLIP_LOSS_CUDA_KERNELS="1")
    assert result["has_extension"] is True and result["cuda_module_loaded"] is False
    assert result["devices"] == ["cpu"]
    # the CPU kernels computed it (the oracle agrees to float32 rounding)
    assert result["same_as_kernel"] is True and result["kernel_difference"] < 1e-5
    # nothing said while no CUDA tensor is in sight; the first call on a CUDA device would say,
    # naming the device, the module, the loader's reason and the fixes
    assert result["warnings"] == []
    message = result["cuda_notice"]
    assert message.startswith("flip_loss: cuda:0") and "portable pure-PyTorch path" in message
    assert "flip_loss._C_cuda" in message and str(package) in message
    assert "invalid ELF header" in message or "file too short" in message
    assert "FLIP_LOSS_CUDA_KERNELS=0" in message and "pip install --no-build-isolation ." in message
    assert "The CPU kernels are unaffected" in message
    assert result["cuda_import_error"] is not None and "flip_loss._C_cuda" in result["cuda_import_error"]


@pytest.mark.parametrize("why", ["cpu-only torch", "FLIP_LOSS_CUDA_KERNELS=0", "no CUDA module"])
def test_the_cuda_module_is_not_loaded_when_it_cannot_serve(tmp_path, why):
    """With a CPU-only torch (torch.version.cuda None) or FLIP_LOSS_CUDA_KERNELS=0, flip_loss does
    not even try _C_cuda (here a file that could not load, which would otherwise warn); a build
    without one is silent too. The CPU kernels serve in every case."""
    package = package_copy(tmp_path, None if why == "no CUDA module" else NOT_AN_ELF_FILE)
    env = {"FLIP_LOSS_CUDA_KERNELS": "0" if why == "FLIP_LOSS_CUDA_KERNELS=0" else "1"}
    result = run_child(tmp_path, package, hide_cuda=why == "cpu-only torch", **env)
    assert result["has_extension"] is True and result["cuda_module_loaded"] is False
    assert result["cuda_import_error"] is None and result["warnings"] == []
    assert result["devices"] == ["cpu"]
    assert result["same_as_kernel"] is True and result["kernel_difference"] < 1e-5
