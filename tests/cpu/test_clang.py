"""The framework-free CPU core (csrc/flip/cpu, csrc/flip/*.h) built with clang, the compiler of macOS
and of many Linux distributions' LLVM toolchains: tests/cpp/core_outputs.cpp (every CPU kernel,
float32 and float64, and fastmath.h's float functions, on fixed inputs) compiled with clang++ and
setup.py's flags for it (-O3, the rounding rules; none of GCC's vectoriser switches), run at every
x86-64 level, against GCC's build (tests/helpers/core_outputs.py, shared with
tests/cpu/test_aarch64.py): every output bit for bit, float64 included, since both link the same C
library. Also that clang compiles the AVX2 and AVX-512 variants for those instruction sets
(csrc/flip/cpu/kernels_avx2.cpp, kernels_avx512.cpp: clang ignores GCC's target pragma).

scripts/setup.sh --with-clang installs clang (Debian's package); without it the tests skip."""

import os
import platform
import shutil
import subprocess
from pathlib import Path

import pytest

import core_outputs as core

pytestmark = pytest.mark.slow

CLANG = os.environ.get("FLIP_LOSS_CLANG", "clang++")
BUILD_DIR = core.BUILD_ROOT / "x86_64-clang"
# setup.py's flags when the compiler is not GCC (compiler_is_gcc): the rounding rules alone.
FLAGS = [*core.COMMON_FLAGS, "-O3"]


def _missing():
    if platform.machine() not in ("x86_64", "AMD64"):
        return f"compares x86-64 builds, and this machine is {platform.machine()}"
    missing = [f"{c} (Debian package {p})" for c, p in ((CLANG, "clang"), ("g++", "g++")) if shutil.which(c) is None]
    if missing:
        return "missing " + " and ".join(missing) + "; scripts/setup.sh --with-clang installs clang"
    return None


@pytest.fixture(scope="module")
def builds():
    """Both programs built (or found up to date): {"clang": folder, "gcc": folder}."""
    why = _missing()
    if why:
        pytest.skip(why)
    clang = (BUILD_DIR, *core.builds(CLANG, BUILD_DIR, FLAGS, ["core_outputs_own"]))
    gcc = core.reference_build()
    core.compile_all(clang[1] + gcc[1])
    core.finish(CLANG, *clang, names=("own",))
    core.finish("g++", *gcc)
    return {"clang": clang[0], "gcc": gcc[0]}


@pytest.fixture(scope="module")
def outputs(builds, tmp_path_factory):
    """{(compiler, level): records}: each program run at every level this CPU has."""
    written = tmp_path_factory.mktemp("clang_outputs")
    return {
        (name, level): records
        for name, folder in builds.items()
        for level, records in core.run_at_levels(folder / "core_outputs_own", written, name).items()
    }


def test_clang_and_gcc_give_the_same_bits_at_every_level(outputs):
    levels = sorted({level for _, level in outputs})
    assert "baseline" in levels
    reference = outputs[("gcc", "baseline")]
    # The records hold values, the NaN input was refused by both: a comparison of something.
    assert len(reference) > 100 and reference["float32.2x37x70.srgb.ldr_forward.map"].max() > 0.05
    for key, records in outputs.items():
        assert core.differing(records, reference) == {}, f"{key} differs from GCC's baseline"


@pytest.mark.parametrize("level, register", [("avx2", "%ymm"), ("avx512", "%zmm")])
def test_clang_builds_each_level_for_its_instruction_set(builds, level, register):
    """The variant of each level holds vector code of its width (thousands of operands, as GCC's at
    setup.py's -O3): clang ignores `#pragma GCC target`, so without its own form the variants would
    be the baseline again (the same bits, at the baseline's speed)."""
    listing = subprocess.run(
        ["objdump", "-d", "--no-show-raw-insn", Path(builds["clang"]) / f"kernels_{level}.o"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert listing.count(register) > 1000, f"clang's kernels_{level}.o has no {register} code"
