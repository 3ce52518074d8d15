"""The framework-free CPU core (csrc/flip/cpu, csrc/flip/*.h) on aarch64: compiled with Debian's cross
compiler (g++-aarch64-linux-gnu) as setup.py compiles it, run under qemu-user, its outputs compared
with the same program built for this x86-64 machine (tests/cpp/core_outputs.cpp: every CPU kernel,
float32 and float64, and fastmath.h's float functions, on fixed inputs).

What must agree, and why (docs/algorithm.md §9.1, docs/install.md "What is tested on which architecture"):
* float32, every output bit for bit, at every x86-64 level: the kernels use only IEEE +, -, *, /,
  sqrt and conversions, never contracted into fused multiply-adds (-ffp-contract=off, which aarch64's
  GCC would otherwise do by default), and fastmath.h's own transcendentals; the C library serves only
  the taps' exp (in double, then rounded) and HDR-FLIP's exp2f of each exposure.
* float64, bit for bit once the two C libraries agree: the double kernels call the C library's cbrt
  (Lab) and exp2 (the exposure scale), whose glibc builds differ (aarch64's contracts its own
  arithmetic into fused multiply-adds): cbrt by up to 4 ulp, exp2 by 1 ulp on FLIP's inputs. With
  both replaced by the same definition (the program's flip_same_cbrt and flip_same_exp2, which a
  second link's kernel objects call, renamed by objcopy) every float64 output agrees bit for bit;
  with each platform's own, within FLOAT64_BOUND of each output's largest magnitude.

scripts/setup.sh --with-aarch64 installs the cross compiler and qemu-user (Debian packages); without
them the tests skip, saying which is missing."""

import os
import platform
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

import core_outputs as core

pytestmark = pytest.mark.slow

BUILD_DIR = Path(os.environ.get("FLIP_LOSS_AARCH64_BUILD_DIR", core.ROOT / "build" / "aarch64"))
CROSS_CXX = "aarch64-linux-gnu-g++"
SYSROOT = Path("/usr/aarch64-linux-gnu")  # Debian's libc6-arm64-cross, which qemu loads the program's libraries from
# float64 with each platform's C library: |aarch64 - x86-64| <= FLOAT64_BOUND * max|x86-64 output|,
# 2^-34, a thousandth of a float32 ulp; measured at most 8.5e-13 (about 2^-40): cbrt's and exp2's
# few ulp, carried through the maps and gradients.
FLOAT64_BOUND = 2.0**-34
# How far glibc's two builds' cbrt and exp2 may differ on FLIP's inputs (the "libm." records).
LIBM_MAX_ULP = 4
PROGRAMS = [f"core_outputs_{n}" for n in core.NAMES]


def _qemu():
    return shutil.which("qemu-aarch64") or shutil.which("qemu-aarch64-static")


def _missing():
    """Why the comparison cannot run here, or None."""
    if platform.machine() not in ("x86_64", "AMD64"):
        return f"compares an aarch64 build with this machine's, which must be x86-64 (it is {platform.machine()})"
    missing = []
    if shutil.which("g++") is None:
        missing.append("g++ (Debian package g++)")
    if shutil.which(CROSS_CXX) is None or not (SYSROOT / "lib").is_dir():
        missing.append(f"{CROSS_CXX} (Debian package g++-aarch64-linux-gnu)")
    if _qemu() is None:
        missing.append("qemu-aarch64 (Debian package qemu-user)")
    if missing:
        return "missing " + " and ".join(missing) + "; scripts/setup.sh --with-aarch64 installs them"
    return None


@pytest.fixture(scope="module")
def outputs(tmp_path_factory):
    """{(arch, libm[, level]): records} of both builds run on the same inputs: libm "own" (each
    platform's C library) or "same" (the same cbrt and exp2), x86-64's "own" at every level. The
    programs stay in the build directory (reused while their inputs are unchanged); what they write
    (about 100 MB) goes to a temporary directory."""
    why = _missing()
    if why:
        pytest.skip(why)
    # aarch64's build takes setup.py's -O3, the code users run.
    arm = (BUILD_DIR / "aarch64", *core.builds(CROSS_CXX, BUILD_DIR / "aarch64", [*core.GCC_FLAGS, "-O3"], PROGRAMS))
    x86 = core.reference_build()
    # The kernels first, aarch64's (-O3, the longest) before all.
    core.compile_all(arm[1] + x86[1])
    core.finish(CROSS_CXX, *arm)
    core.finish("g++", *x86)
    x86_dir, arm_dir = x86[0], arm[0]
    written = tmp_path_factory.mktemp("aarch64_outputs")
    results = {}
    for name in core.NAMES:
        for level in core.X86_LEVELS if name == "own" else ("",):
            path = written / f"x86_64_{name}{level}.bin"
            env = dict(os.environ, FLIP_LOSS_CPU_CAPABILITY=level) if level else None
            log = core.run([x86_dir / f"core_outputs_{name}", path], env=env)
            # The level that ran (the variable can only lower it), for each run of the program.
            results[("x86_64", name) + ((log.split()[1],) if level else ())] = core.read(path)
    # Both aarch64 programs at once: qemu runs each on one core.
    qemu_env = dict(os.environ, QEMU_LD_PREFIX=str(SYSROOT))
    runs = [[_qemu(), arm_dir / f"core_outputs_{name}", written / f"aarch64_{name}.bin"] for name in core.NAMES]
    with ThreadPoolExecutor(max_workers=len(runs)) as pool:
        logs = list(pool.map(lambda cmd: core.run(cmd, env=qemu_env), runs))
    for name, log in zip(core.NAMES, logs):
        assert log.split()[:2] == ["capability", "baseline"], log[:200]
        results[("aarch64", name)] = core.read(written / f"aarch64_{name}.bin")
    return results


def test_the_outputs_are_meaningful(outputs):
    arm = outputs[("aarch64", "own")]
    # Every kernel ran and reported finite inputs, and the input with a NaN was refused.
    oks = {k: int(v[0]) for k, v in arm.items() if k.endswith(".ok")}
    assert len(oks) > 50
    assert {k for k, v in oks.items() if v != 1} == {
        "float32.1x5x9.nan.ldr_forward.ok",
        "float64.1x5x9.nan.ldr_forward.ok",
    }
    assert all(oks[k] == 0 for k in oks if ".nan." in k)
    # Every run wrote the same records, and each record holds values (a kernel that wrote nothing
    # would leave its zero-filled output, the same bits on both machines): the comparisons below
    # compare something, the "same" programs' included.
    for key, records in outputs.items():
        assert records.keys() == arm.keys(), key
    for k, v in arm.items():
        if not k.endswith(".ok"):
            assert np.any(v[np.isfinite(v)] if v.dtype.kind == "f" else v), f"{k} holds only zeros"
    for dtype in ("float32", "float64"):
        assert arm[f"{dtype}.2x37x70.srgb.ldr_forward.map"].max() > 0.05
        assert np.abs(arm[f"{dtype}.2x37x70.srgb.ldr_backward.g_test"]).max() > 0
        assert set(np.unique(arm[f"{dtype}.2x21x70.hdr_aces.forward.index"])) >= {0, 1, 2}


def test_float32_outputs_are_bit_identical_at_every_x86_level(outputs):
    arm = outputs[("aarch64", "own")]
    levels = [key for key in outputs if key[:2] == ("x86_64", "own") and len(key) == 3]
    assert {key[2] for key in levels} >= {"baseline"}
    for key in levels:
        x86 = outputs[key]
        differing = core.differing(x86, arm)
        float32 = {k: n for k, n in differing.items() if not k.startswith(("float64.", "libm."))}
        assert not float32, f"aarch64 differs from x86-64 ({key[2]}) in {float32}"


def test_float64_outputs_are_bit_identical_with_the_same_libm(outputs):
    x86 = outputs[("x86_64", "same")]
    arm = outputs[("aarch64", "same")]
    # The "libm." records are the program's own calls of each C library, not the kernels'.
    assert {k for k in core.differing(x86, arm) if not k.startswith("libm.")} == set()


def test_float64_outputs_are_within_the_bound_with_each_platforms_libm(outputs):
    x86 = outputs[("x86_64", "own", "baseline")]
    arm = outputs[("aarch64", "own")]
    differing = core.differing(x86, arm)
    worst = {}
    for k in differing:
        if not k.startswith("float64."):
            continue
        a, b = x86[k], arm[k]
        assert a.dtype == np.float64 and np.array_equal(np.isfinite(a), np.isfinite(b)), k
        scale = np.abs(a[np.isfinite(a)]).max()
        worst[k] = float(np.abs(a - b)[np.isfinite(a)].max() / scale)
    assert any(k.startswith("float64.") for k in x86)
    too_far = {k: w for k, w in worst.items() if w > FLOAT64_BOUND}
    assert not too_far, f"beyond {FLOAT64_BOUND:.3g} of the largest magnitude: {too_far}"
    # The filters alone call no function that differs: csf_filter and feature_difference agree.
    assert not [k for k in differing if ".csf_" in k or ".feature_" in k], differing


def test_the_c_libraries_differ_only_in_cbrt_and_exp2(outputs):
    x86 = outputs[("x86_64", "own", "baseline")]
    arm = outputs[("aarch64", "own")]
    libm = {k for k in x86 if k.startswith("libm.")}
    assert len(libm) == 8
    differing = {k for k in core.differing(x86, arm) if k.startswith("libm.")}
    assert differing <= {"libm.cbrt", "libm.exp2"}, differing
    for k in differing:
        ulps = np.abs(core.bits(x86[k]).astype(np.int64) - core.bits(arm[k]).astype(np.int64)).max()
        assert ulps <= LIBM_MAX_ULP, f"{k}: {ulps} ulp"
