"""The test-only GPU emulator: torch.ops.flip_emulator, the CUDA kernels' per-thread code
(csrc/flip/passes.h) run on the CPU (ops.cpp, emulate.cpp). It is not part of flip_loss: the test
suite compiles it on first use into one build directory (FLIP_LOSS_EMULATOR_BUILD_DIR, default
build/torch-<release>/emulator, tests/build_dirs.py), which ninja keeps up to date, so a test run
compiles it at most once and later runs (and child processes) only load it."""

import fcntl
import functools
from pathlib import Path

import torch

from build_dirs import ROOT, build_dir
from flip_loss.torch_releases import target_version_macro

HERE = Path(__file__).resolve().parent
BUILD_DIR = build_dir("FLIP_LOSS_EMULATOR_BUILD_DIR", "emulator")

# As setup.py compiles the shipped kernels: the same rounding (no contraction into FMA), and the
# stable ABI of the oldest supported torch (the headers the shared op glue, csrc/ops, is written for).
CXX_FLAGS = [
    "-O3",
    "-fno-math-errno",
    "-fno-trapping-math",
    "-ffp-contract=off",
    f"-DTORCH_TARGET_VERSION={target_version_macro()}",
]


@functools.cache
def ops():
    """torch.ops.flip_emulator, built (or brought up to date) and loaded on the first call."""
    from torch.utils import cpp_extension

    BUILD_DIR.mkdir(parents=True, exist_ok=True)
    # cpp_extension.load serialises builders with a file named lock in the build directory. Up to
    # some release (2.11 does) it waits while that file exists, so one left by a builder that was
    # killed (a test run stopped with Ctrl-C, a timed-out child) stalls every later load forever;
    # newer releases hold an flock on it and leave the file behind. An flock of our own, which the
    # kernel releases when its holder dies, guards the load: whoever holds it is the only builder,
    # so a lock file found then is stale.
    with open(BUILD_DIR / "load.flock", "w") as guard:
        fcntl.flock(guard, fcntl.LOCK_EX)
        (BUILD_DIR / "lock").unlink(missing_ok=True)
        cpp_extension.load(
            name="flip_emulator",
            sources=[str(HERE / "ops.cpp"), str(HERE / "emulate.cpp")],
            extra_include_paths=[str(ROOT / "csrc")],
            extra_cflags=CXX_FLAGS,
            build_directory=str(BUILD_DIR),
            is_python_module=False,
            verbose=False,
        )
    return torch.ops.flip_emulator
