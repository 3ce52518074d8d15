"""The float transcendentals of the CPU kernels (csrc/flip/fastmath.h: pow, cbrt, x^1.4, log) are
within 1 ulp of the exact value over the ranges FLIP uses and the whole float range, give the
standard library's special values, and give the same bits in vectorised and scalar loops and at
every instruction-set level the machine has (compiled here for the x86-64 baseline and, where the
CPU has it, for AVX2 + FMA and AVX-512, with the flags setup.py uses for the kernels).

The checks run in tests/cpp/fastmath_accuracy.cpp, compiled with g++ into build/fastmath."""

import os
import platform
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BUILD_DIR = Path(os.environ.get("FLIP_LOSS_FASTMATH_BUILD_DIR", ROOT / "build" / "fastmath"))
SOURCE = ROOT / "tests" / "cpp" / "fastmath_accuracy.cpp"
# As setup.py compiles the CPU kernels (the rounding rules and the vectoriser's switches).
CXX_FLAGS = [
    "-std=c++17",
    "-O3",
    "-fno-math-errno",
    "-fno-trapping-math",
    "-fno-tree-pre",
    "-fschedule-insns",
    "-fsched-pressure",
    "-ffp-contract=off",
]
LEVELS = {
    "baseline": [],
    "avx2": ["-mavx2", "-mfma"],
    "avx512": ["-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512dq", "-mfma"],
}
# The bound documented in fastmath.h and docs/algorithm.md.
MAX_ULP = 1.0


def _cpu_flags():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def _runnable_levels():
    if platform.machine() not in ("x86_64", "AMD64"):
        return ["baseline"]
    flags = _cpu_flags()
    levels = ["baseline"]
    if {"avx2", "fma"} <= flags:
        levels.append("avx2")
    if {"avx512f", "avx512bw", "avx512vl", "avx512dq"} <= flags:
        levels.append("avx512")
    return levels


def _compile(name, flags):
    """(executable, compiler output, return code) of the accuracy program built with flags."""
    cxx = shutil.which("g++")
    if cxx is None:
        pytest.skip("no g++")
    BUILD_DIR.mkdir(parents=True, exist_ok=True)
    exe = BUILD_DIR / f"fastmath_accuracy_{name}"
    proc = subprocess.run(
        [cxx, *flags, "-I", str(ROOT / "csrc"), str(SOURCE), "-o", str(exe)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=600,
    )
    return exe, proc.stdout, proc.returncode


def _build(level):
    flags = CXX_FLAGS + (LEVELS[level] if platform.machine() in ("x86_64", "AMD64") else [])
    exe, out, code = _compile(level, flags)
    assert code == 0, out
    return exe


def _run(exe, *args):
    proc = subprocess.run([str(exe), *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600)
    return proc.returncode, proc.stdout


@pytest.fixture(scope="module")
def outputs():
    return {level: _run(_build(level)) for level in _runnable_levels()}


@pytest.mark.slow
def test_within_one_ulp_everywhere(outputs):
    _, out = outputs["baseline"]
    rows = [line.split() for line in out.splitlines() if line and not line.startswith(("special", "vector"))]
    assert len(rows) == 11, out
    for name, worst, count, at in rows:
        assert int(count) > 10000, f"{name}: only {count} values checked"
        assert float(worst) <= MAX_ULP, f"{name}: {worst} ulp at x = {at} (bound {MAX_ULP})"


def test_special_values_match_the_standard_library(outputs):
    _, out = outputs["baseline"]
    specials = [line for line in out.splitlines() if line.startswith("special")]
    assert len(specials) >= 30
    failed = [line for line in specials if " FAIL " in line]
    assert not failed, "\n".join(failed)


def test_vector_and_scalar_loops_agree_bit_for_bit(outputs):
    for level, (code, out) in outputs.items():
        line = next(line for line in out.splitlines() if line.startswith("vector_scalar_mismatches"))
        assert line.split()[1] == "0", f"{level}: {line}"
        assert code == 0, f"{level}: exit {code}\n{out}"


def test_no_undefined_behaviour_on_any_input():
    """The same program under UBSan (including float-to-int conversions out of range, e.g. of a NaN):
    it feeds every special value, so undefined behaviour anywhere on those paths aborts it."""
    sanitize = ["-fsanitize=undefined,float-cast-overflow", "-fno-sanitize-recover=all"]
    exe, out, code = _compile("ubsan", [f for f in CXX_FLAGS if f != "-O3"] + ["-O1"] + sanitize)
    if code != 0 and "ubsan" in out:
        pytest.skip("this compiler has no UBSan runtime")
    assert code == 0, out
    code, out = _run(exe, "997")  # a coarser sweep: the sanitised build is slower
    assert code == 0 and "runtime error" not in out, out


def test_every_instruction_set_level_gives_the_same_results(outputs):
    if len(outputs) < 2:
        pytest.skip("this CPU runs only the baseline level")
    baseline = outputs["baseline"][1]
    for level, (_, out) in outputs.items():
        assert out == baseline, f"{level} differs from the baseline:\n{out}\n---\n{baseline}"
