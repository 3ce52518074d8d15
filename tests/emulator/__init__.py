"""The test-only GPU emulator: torch.ops.flip_emulator, the CUDA kernels' launch sequences and block
code (csrc/flip/cuda/op_launches.h, kernel_bodies.h) run on the CPU, one fiber per CUDA thread with
barriers and shared memory checked (ops.cpp, emulate.cpp, block_runner.cpp). It is not part of
flip_loss: the test suite compiles it on first use into one build directory
(FLIP_LOSS_EMULATOR_BUILD_DIR, default build/torch-<release>/emulator, tests/helpers/build_dirs.py),
which ninja keeps up to date, so a test run compiles it at most once and later runs (and child
processes) only load it. mutant_ops() builds a second copy from mutated sources, for the checker's
own tests."""

import fcntl
import functools
import platform
import shutil
from pathlib import Path

import torch

from build_dirs import ROOT, build_dir
from flip_loss.torch_releases import target_version_macro

HERE = Path(__file__).resolve().parent
BUILD_DIR = build_dir("FLIP_LOSS_EMULATOR_BUILD_DIR", "emulator")


def has_fma():
    """Whether this CPU has fused multiply-add instructions (x86 FMA3; always on aarch64)."""
    if platform.machine() in ("aarch64", "arm64"):
        return True
    try:
        return " fma " in open("/proc/cpuinfo").read().replace("\n", " ")
    except OSError:
        return False


# The arithmetic of the device code (docs/algorithm.md §9.2): nvcc compiles it with -fmad=false, so
# it rounds every product and sum as written, and fuses the filter taps' multiply-adds that the
# source asks for (FLIP_FMADD, csrc/flip/cuda/filter_sums.h). Here the same: -ffp-contract=off (GCC
# contracts nothing either), and std::fma for those taps, which is the same single rounding with or
# without -mfma; -mfma (where the CPU has it) only makes it an instruction instead of a call into
# the C library. Also the stable ABI of the oldest supported torch (the headers the shared op glue,
# csrc/ops, is written for).
CXX_FLAGS = [
    "-O3",
    "-fno-math-errno",
    "-fno-trapping-math",
    "-ffp-contract=off",
    f"-DTORCH_TARGET_VERSION={target_version_macro()}",
]
if has_fma() and platform.machine() not in ("aarch64", "arm64"):
    CXX_FLAGS.append("-mfma")


SOURCES = ["ops.cpp", "emulate.cpp", "block_runner.cpp"]


def _load(name, build_dir, include_dir, defines=(), flags=CXX_FLAGS):
    from torch.utils import cpp_extension

    build_dir.mkdir(parents=True, exist_ok=True)
    # cpp_extension.load serialises builders with a file named lock in the build directory. Up to
    # some release (2.11 does) it waits while that file exists, so one left by a builder that was
    # killed (a test run stopped with Ctrl-C, a timed-out child) stalls every later load forever;
    # newer releases hold an flock on it and leave the file behind. An flock of our own, which the
    # kernel releases when its holder dies, guards the load: whoever holds it is the only builder,
    # so a lock file found then is stale.
    with open(build_dir / "load.flock", "w") as guard:
        fcntl.flock(guard, fcntl.LOCK_EX)
        (build_dir / "lock").unlink(missing_ok=True)
        cpp_extension.load(
            name=name,
            sources=[str(HERE / f) for f in SOURCES],
            extra_include_paths=[str(include_dir)],
            extra_cflags=list(flags) + [f"-D{d}" for d in defines],
            build_directory=str(build_dir),
            is_python_module=False,
            verbose=False,
        )
    return getattr(torch.ops, name)


@functools.cache
def ops():
    """torch.ops.flip_emulator, built (or brought up to date) and loaded on the first call."""
    return _load("flip_emulator", BUILD_DIR, ROOT / "csrc")


def _mutated(text, mutations, path):
    """text with each (file, original, mutated) of mutations for this file made selectable: the
    k-th mutation (k from 1) is in force while the emulator's setting `mutant` is k. An original
    ending in ";" is a statement (mutated: an if/else), any other an expression (a conditional)."""
    for k, (file, original, mutated) in enumerate(mutations, start=1):
        if file != path:
            continue
        if text.count(original) != 1:
            raise ValueError(f"mutation {k}: {original!r} is not in {file} exactly once")
        on = f"::flip_emulator::mutant() == {k}"
        if original.endswith(";"):
            text = text.replace(original, f"if ({on}) {{ {mutated} }} else {{ {original} }}")
        else:
            text = text.replace(original, f"({on} ? ({mutated}) : ({original}))")
    return text


@functools.cache
def mutant_ops(mutations):
    """torch.ops.flip_emulator_mutants: the emulator built from a copy of csrc/ in which each of
    `mutations` (a tuple of (path under csrc/, original expression, mutated expression)) is
    switched on by configure(mutant=k), k counting from 1. One build for all of them, kept in
    build/torch-<release>/emulator-mutants."""
    build_dir = BUILD_DIR.parent / (BUILD_DIR.name + "-mutants")
    src = build_dir / "csrc"
    for path in sorted((ROOT / "csrc").rglob("*")):
        if path.is_dir():
            continue
        rel = path.relative_to(ROOT / "csrc").as_posix()
        text = path.read_text() if path.suffix in (".h", ".cpp", ".inc", ".cu") else None
        out = src / rel
        out.parent.mkdir(parents=True, exist_ok=True)
        if text is None:
            shutil.copyfile(path, out)
            continue
        if any(m[0] == rel for m in mutations):
            text = text.replace("#pragma once\n", "#pragma once\nnamespace flip_emulator {\nint mutant();\n}\n", 1)
            text = _mutated(text, mutations, rel)
        if not out.exists() or out.read_text() != text:  # unchanged files keep their time: ninja rebuilds less
            out.write_text(text)
    registry = build_dir / "flip_loss" / "tone_mappers.inc"  # beside the copy, as csrc includes it
    registry.parent.mkdir(parents=True, exist_ok=True)
    if not registry.exists() or registry.read_bytes() != (ROOT / "flip_loss" / "tone_mappers.inc").read_bytes():
        shutil.copyfile(ROOT / "flip_loss" / "tone_mappers.inc", registry)
    return _load("flip_emulator_mutants", build_dir, src, ["FLIP_EMULATOR_LIBRARY=flip_emulator_mutants"])
