"""The framework-free CPU core (csrc/flip/cpu, csrc/flip/*.h) on aarch64: compiled with Debian's cross
compiler (g++-aarch64-linux-gnu) as setup.py compiles it, run under qemu-user, its outputs compared
with the same program built for this x86-64 machine (tests/cpp/core_outputs.cpp: every CPU kernel,
float32 and float64, and fastmath.h's float functions, on fixed inputs).

What must agree, and why (docs/algorithm.md §9.1, README "What is tested on which architecture"):
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

import hashlib
import os
import platform
import shutil
import struct
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
BUILD_DIR = Path(os.environ.get("FLIP_LOSS_AARCH64_BUILD_DIR", ROOT / "build" / "aarch64"))
PROGRAM = ROOT / "tests" / "cpp" / "core_outputs.cpp"
SERIAL_SEAM = ROOT / "benchmarks" / "serial_parallel_for.h"  # which PROGRAM includes
# The sources setup.py compiles into the CPU kernels (csrc/flip/cpu/*.cpp), with its flags for GCC
# (the rounding rules and the vectoriser's switches) and its glibc compatibility header. aarch64's
# build takes setup.py's -O3, the code users run; x86-64's, the reference, -O2 to save time: the
# kernels give the same bits at any optimisation level, vectorised or not (tests/cpu/test_fastmath.py,
# tests/cpu/test_cpu_dispatch.py), and a difference would show here.
KERNEL_SOURCES = sorted((ROOT / "csrc" / "flip" / "cpu").glob("*.cpp"))
CXX_FLAGS = [
    "-std=c++17",
    "-fno-math-errno",
    "-fno-trapping-math",
    "-ffp-contract=off",
    "-fno-tree-pre",
    "-fschedule-insns",
    "-fsched-pressure",
    "-I",
    str(ROOT / "csrc"),
]
OPTIMISATION = {"x86_64": "-O2", "aarch64": "-O3"}
KERNEL_FLAGS = ["-I", str(ROOT / "csrc" / "compat"), "-include", str(ROOT / "csrc" / "compat" / "glibc_2_28.h")]
CROSS_CXX = "aarch64-linux-gnu-g++"
SYSROOT = Path("/usr/aarch64-linux-gnu")  # Debian's libc6-arm64-cross, which qemu loads the program's libraries from
X86_LEVELS = ("baseline", "avx2", "avx512")
# float64 with each platform's C library: |aarch64 - x86-64| <= FLOAT64_BOUND * max|x86-64 output|,
# 2^-34, a thousandth of a float32 ulp; measured at most 8.5e-13 (about 2^-40): cbrt's and exp2's
# few ulp, carried through the maps and gradients.
FLOAT64_BOUND = 2.0**-34
# How far glibc's two builds' cbrt and exp2 may differ on FLIP's inputs (the "libm." records).
LIBM_MAX_ULP = 4
TIMEOUT_S = 600
# The program linked with the kernels calling each platform's C library, and the same cbrt and exp2.
NAMES = ("own", "same")


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


def _run(cmd, env=None):
    proc = subprocess.run(
        [str(c) for c in cmd], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=TIMEOUT_S, env=env
    )
    assert proc.returncode == 0, f"{' '.join(map(str, cmd))} failed (exit {proc.returncode}):\n{proc.stdout[-6000:]}"
    return proc.stdout


def _inputs_digest(cxx, flags):
    """A digest of what the objects are built from: the core's sources, the program and the header it
    includes, the flags and the compiler."""
    h = hashlib.sha256()
    h.update(" ".join(flags).encode())
    h.update(_run([cxx, "--version"]).encode())
    files = [*(ROOT / "csrc" / "flip").rglob("*"), *(ROOT / "csrc" / "compat").rglob("*"), PROGRAM, SERIAL_SEAM]
    for path in sorted(p for p in files if p.is_file()):
        h.update(str(path.relative_to(ROOT)).encode())
        h.update(path.read_bytes())
    return h.hexdigest()


def _builds(cxx, arch):
    """The build commands of the kernels' objects and the program's for one architecture: (folder,
    commands, digest); no commands when the folder already holds what these inputs give."""
    out = BUILD_DIR / arch
    out.mkdir(parents=True, exist_ok=True)
    flags = [*CXX_FLAGS, OPTIMISATION[arch]]
    digest = _inputs_digest(cxx, flags)
    stamp = out / "inputs.sha256"
    if stamp.is_file() and stamp.read_text() == digest and all((out / f"core_outputs_{n}").is_file() for n in NAMES):
        return out, [], digest
    stamp.unlink(missing_ok=True)
    jobs = [[cxx, *flags, *KERNEL_FLAGS, "-c", src, "-o", out / f"{src.stem}.o"] for src in KERNEL_SOURCES]
    jobs.append([cxx, *flags, "-c", PROGRAM, "-o", out / "core_outputs.o"])
    return out, jobs, digest


def _link(cxx, out):
    """Links the program twice: with the kernels' objects as built ("own"), and with copies whose calls
    of the C library's cbrt and exp2 (any symbol version: csrc/compat binds exp2 to glibc's oldest)
    go to the program's flip_same_cbrt and flip_same_exp2 ("same")."""
    tools = cxx[: -len("g++")]  # "" or "aarch64-linux-gnu-": the binutils of the same target
    renamed = set()
    for src in KERNEL_SOURCES:
        obj = out / f"{src.stem}.o"
        undefined = [line.split()[-1] for line in _run([f"{tools}nm", "-u", obj]).splitlines() if line.strip()]
        renames = {
            name: f"flip_same_{name.split('@')[0]}" for name in undefined if name.split("@")[0] in ("cbrt", "exp2")
        }
        _run(
            [
                f"{tools}objcopy",
                *(f"--redefine-sym={a}={b}" for a, b in renames.items()),
                obj,
                out / f"{src.stem}.same.o",
            ]
        )
        renamed |= set(renames.values())
    # The float64 kernels call both (Lab's cube root, HDR-FLIP's exposure scale).
    assert renamed == {"flip_same_cbrt", "flip_same_exp2"}, renamed
    for name, suffix in (("own", ".o"), ("same", ".same.o")):
        objects = [out / "core_outputs.o", *(out / f"{src.stem}{suffix}" for src in KERNEL_SOURCES)]
        _run([cxx, *objects, "-o", out / f"core_outputs_{name}"])


def _read(path):
    """{name: array} of the records core_outputs.cpp wrote."""
    data = Path(path).read_bytes()
    records, i = {}, 0
    while i < len(data):
        (length,) = struct.unpack_from("<I", data, i)
        name = data[i + 4 : i + 4 + length].decode()
        i += 4 + length
        dtype = {"f": "<f4", "d": "<f8", "i": "<i4"}[chr(data[i])]
        (count,) = struct.unpack_from("<Q", data, i + 1)
        i += 9
        records[name] = np.frombuffer(data, dtype=dtype, count=count, offset=i)
        i += records[name].nbytes
    return records


@pytest.fixture(scope="module")
def outputs(tmp_path_factory):
    """{(arch, libm[, level]): records} of both builds run on the same inputs: libm "own" (each
    platform's C library) or "same" (the same cbrt and exp2), x86-64's "own" at every level. The
    programs stay in the build directory (reused while their inputs are unchanged); what they write
    (about 100 MB) goes to a temporary directory."""
    why = _missing()
    if why:
        pytest.skip(why)
    compilers = {"aarch64": CROSS_CXX, "x86_64": "g++"}
    builds = {arch: _builds(cxx, arch) for arch, cxx in compilers.items()}
    # The kernels first, aarch64's (-O3, the longest) before all.
    jobs = [job for _, arch_jobs, _ in builds.values() for job in arch_jobs]
    jobs.sort(key=lambda cmd: "kernels_" not in str(cmd[-3]))
    with ThreadPoolExecutor(max_workers=max(1, min(4, os.cpu_count() or 1))) as pool:
        list(pool.map(_run, jobs))
    for arch, (out, arch_jobs, digest) in builds.items():
        if arch_jobs:
            _link(compilers[arch], out)
            (out / "inputs.sha256").write_text(digest)
    x86_dir, arm_dir = builds["x86_64"][0], builds["aarch64"][0]
    written = tmp_path_factory.mktemp("aarch64_outputs")
    results = {}
    for name in NAMES:
        for level in X86_LEVELS if name == "own" else ("",):
            path = written / f"x86_64_{name}{level}.bin"
            env = dict(os.environ, FLIP_LOSS_CPU_CAPABILITY=level) if level else None
            log = _run([x86_dir / f"core_outputs_{name}", path], env=env)
            # The level that ran (the variable can only lower it), for each run of the program.
            results[("x86_64", name) + ((log.split()[1],) if level else ())] = _read(path)
    # Both aarch64 programs at once: qemu runs each on one core.
    qemu_env = dict(os.environ, QEMU_LD_PREFIX=str(SYSROOT))
    runs = [[_qemu(), arm_dir / f"core_outputs_{name}", written / f"aarch64_{name}.bin"] for name in NAMES]
    with ThreadPoolExecutor(max_workers=len(runs)) as pool:
        logs = list(pool.map(lambda cmd: _run(cmd, env=qemu_env), runs))
    for name, log in zip(NAMES, logs):
        assert log.split()[:2] == ["capability", "baseline"], log[:200]
        results[("aarch64", name)] = _read(written / f"aarch64_{name}.bin")
    return results


def _bits(a):
    return a.view({4: "<u4", 8: "<u8"}[a.itemsize])


def _differing(x, y):
    """Names of the records whose bits differ, with how many elements."""
    assert x.keys() == y.keys()
    return {k: int((_bits(x[k]) != _bits(y[k])).sum()) for k in x if not np.array_equal(_bits(x[k]), _bits(y[k]))}


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
        differing = _differing(x86, arm)
        float32 = {k: n for k, n in differing.items() if not k.startswith(("float64.", "libm."))}
        assert not float32, f"aarch64 differs from x86-64 ({key[2]}) in {float32}"


def test_float64_outputs_are_bit_identical_with_the_same_libm(outputs):
    x86 = outputs[("x86_64", "same")]
    arm = outputs[("aarch64", "same")]
    # The "libm." records are the program's own calls of each C library, not the kernels'.
    assert {k for k in _differing(x86, arm) if not k.startswith("libm.")} == set()


def test_float64_outputs_are_within_the_bound_with_each_platforms_libm(outputs):
    x86 = outputs[("x86_64", "own", "baseline")]
    arm = outputs[("aarch64", "own")]
    differing = _differing(x86, arm)
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
    differing = {k for k in _differing(x86, arm) if k.startswith("libm.")}
    assert differing <= {"libm.cbrt", "libm.exp2"}, differing
    for k in differing:
        ulps = np.abs(_bits(x86[k]).astype(np.int64) - _bits(arm[k]).astype(np.int64)).max()
        assert ulps <= LIBM_MAX_ULP, f"{k}: {ulps} ulp"
