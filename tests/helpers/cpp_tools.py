"""Building and running the C++ side from pytest (shared by test_cpp.py and test_deploy.py): the
root CMake project in one build directory (FLIP_LOSS_CPP_BUILD_DIR, default
build/torch-<release>/cpp, tests/helpers/build_dirs.py), kept between runs so that only what changed is
rebuilt."""

import contextlib
import fcntl
import os
import shutil
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest
import torch

from build_dirs import ROOT, build_dir

BUILD_DIR = build_dir("FLIP_LOSS_CPP_BUILD_DIR", "cpp")
TIMEOUT_S = 3600
LOG_TAIL_CHARS = 6000


def tail(text, n=LOG_TAIL_CHARS):
    return text if len(text) <= n else "...\n" + text[-n:]


def run(cmd, what, timeout=TIMEOUT_S, env=None):
    """Runs a build step in the repository root; fails the test with the log tail on error."""
    start = time.monotonic()
    proc = subprocess.run(
        [str(c) for c in cmd],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=timeout,
        env=env,
    )
    if proc.returncode != 0:
        pytest.fail(
            f"{what} failed (exit {proc.returncode}): {' '.join(map(str, cmd))}\n{tail(proc.stdout)}", pytrace=False
        )
    print(f"[cpp] {what}: {time.monotonic() - start:.1f} s")
    return proc.stdout


def generator_args():
    return ["-G", "Ninja"] if shutil.which("ninja") else []


def compiler_cache_args():
    """ccache, where installed, for the compiles: the framework-free CPU core (flip_cpu_core, the
    slowest part) compiles without torch's flags, so each torch release's build reuses the objects
    of the first."""
    return ["-DCMAKE_CXX_COMPILER_LAUNCHER=ccache"] if shutil.which("ccache") else []


@contextlib.contextmanager
def build_lock():
    """One C++ build at a time across the test runs of scripts/test.sh (one per torch release, side
    by side): the second then finds the core's objects in the compiler cache, and the two cores of a
    small machine are no slower for it."""
    (ROOT / "build").mkdir(exist_ok=True)
    with open(ROOT / "build" / "cpp-build.lock", "w") as lock:  # closing it releases the lock
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def build_library():
    """Configures BUILD_DIR once and builds libflip_ops and tests/cpp; returns BUILD_DIR."""
    if shutil.which("cmake") is None:
        pytest.skip("cmake is not on PATH: cannot build the C++ op library and tests")
    if not (BUILD_DIR / "CMakeCache.txt").is_file():
        run(
            [
                "cmake",
                "-S",
                ROOT,
                "-B",
                BUILD_DIR,
                "-DCMAKE_BUILD_TYPE=Release",
                f"-DCMAKE_PREFIX_PATH={torch.utils.cmake_prefix_path}",
                "-DFLIP_LOSS_BUILD_TESTS=ON",
                *compiler_cache_args(),
                *generator_args(),
            ],
            "configure the library",
        )
    # An existing build dir is reused: cmake --build reconfigures by itself when a CMakeLists changed.
    with build_lock():
        run(["cmake", "--build", BUILD_DIR, "-j2"], "build the library and tests/cpp")
    return BUILD_DIR


def executable(build_dir: Path, name: str) -> Path:
    for candidate in (
        build_dir / name,
        build_dir / "Release" / name,
        build_dir / "tests" / "cpp" / name,
        build_dir / "tests" / "cpp" / "Release" / name,
    ):
        if candidate.is_file():
            return candidate
    pytest.fail(f"the build did not produce {name} under {build_dir}", pytrace=False)


def torch_wheel_library_dirs():
    """The library directories of the nvidia-* wheels installed next to torch (site-packages/nvidia/
    <name>/lib), which libtorch_cuda.so loads its CUDA libraries from; empty for a CPU-only torch or
    one that is not a wheel."""
    site_packages = Path(torch.__file__).resolve().parents[1]
    return sorted({p.resolve() for p in site_packages.glob("nvidia/*/lib") if p.is_dir()})


def libraries_not_from_wheels(binary: Path, wheel_dirs):
    """What the dynamic loader resolves for binary (ldd, no LD_LIBRARY_PATH) among the libraries
    that torch's nvidia-* wheels hold: ({soname: path} of those loaded from another directory,
    the number resolved)."""
    if shutil.which("ldd") is None:
        pytest.skip("ldd is not on PATH")
    env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    out = run(["ldd", binary], f"ldd {binary.name}", timeout=120, env=env)
    wheel_names = {f.name for d in wheel_dirs for f in d.iterdir()}
    elsewhere, resolved = {}, 0
    for line in out.splitlines():
        name, arrow, rest = line.strip().partition(" => ")
        if not arrow or name not in wheel_names:
            continue
        path = Path(rest.split(" (")[0])
        resolved += 1
        if not path.is_file() or path.resolve().parent not in wheel_dirs:
            elsewhere[name] = str(path)
    return elsewhere, resolved


def stale_extension_note():
    """A hint for failures: flip_loss._C (built by setup.py) older than the C++ sources means eager
    Python runs older kernels than the freshly built libflip_ops."""
    so = sys.modules.get("flip_loss._C")
    so_path = Path(getattr(so, "__file__", "") or "")
    if not so_path.is_file():
        return ""
    newest = max(
        (p for p in (ROOT / "csrc").rglob("*") if p.suffix in (".h", ".cpp", ".cu", ".cuh")),
        key=lambda p: p.stat().st_mtime,
        default=None,
    )
    if newest is not None and newest.stat().st_mtime > so_path.stat().st_mtime:
        return (
            f"\nnote: {so_path.name} is older than {newest.relative_to(ROOT)}; rebuild it "
            "(python setup.py build_ext --inplace) so eager Python and C++ run the same kernels"
        )
    return ""


class Tensors(torch.nn.Module):
    """Container whose attributes a C++ program reads with module.attr(name).toTensor()."""

    def __init__(self, **tensors):
        super().__init__()
        for name, t in tensors.items():
            self.register_buffer(name, t)

    def forward(self) -> int:  # TorchScript needs a method to script
        return 0


def script(module):
    with warnings.catch_warnings():  # DeprecationWarning, FutureWarning from torch 2.15 on
        warnings.filterwarnings("ignore", message="`torch.jit.script` is deprecated")
        return torch.jit.script(module)
