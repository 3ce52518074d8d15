"""Building, running and reading tests/cpp/core_outputs.cpp (every kernel of the framework-free CPU
core on fixed inputs, its outputs' raw bytes in one file) with a given compiler, for the tests that
compare builds bit for bit: tests/cpu/test_aarch64.py (GCC for aarch64, run under qemu-user) and
tests/cpu/test_clang.py (clang for x86-64), both against GCC's x86-64 build, the reference, which
they share (build/core_outputs/x86_64-gcc, or FLIP_LOSS_CORE_OUTPUTS_BUILD_DIR). Each build's
objects and programs stay in their folder, rebuilt only when the sources, the program, the flags
or the compiler change."""

import hashlib
import os
import struct
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
PROGRAM = ROOT / "tests" / "cpp" / "core_outputs.cpp"
SERIAL_SEAM = ROOT / "benchmarks" / "serial_parallel_for.h"  # which PROGRAM includes
# The sources setup.py compiles into the CPU kernels (csrc/flip/cpu/*.cpp), with its flags (the
# rounding rules, and for GCC the vectoriser's switches) and its glibc compatibility header.
KERNEL_SOURCES = sorted((ROOT / "csrc" / "flip" / "cpu").glob("*.cpp"))
COMMON_FLAGS = ["-std=c++17", "-fno-math-errno", "-fno-trapping-math", "-ffp-contract=off", "-I", str(ROOT / "csrc")]
GCC_FLAGS = [*COMMON_FLAGS, "-fno-tree-pre", "-fschedule-insns", "-fsched-pressure"]
KERNEL_FLAGS = ["-I", str(ROOT / "csrc" / "compat"), "-include", str(ROOT / "csrc" / "compat" / "glibc_2_28.h")]
X86_LEVELS = ("baseline", "avx2", "avx512")
TIMEOUT_S = 600
BUILD_ROOT = Path(os.environ.get("FLIP_LOSS_CORE_OUTPUTS_BUILD_DIR", ROOT / "build" / "core_outputs"))
# The program linked with the kernels calling the C library ("own"), and with their calls of cbrt
# and exp2 going to the program's own definitions ("same"; see link).
NAMES = ("own", "same")


def run(cmd, env=None):
    proc = subprocess.run(
        [str(c) for c in cmd], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=TIMEOUT_S, env=env
    )
    assert proc.returncode == 0, f"{' '.join(map(str, cmd))} failed (exit {proc.returncode}):\n{proc.stdout[-6000:]}"
    return proc.stdout


def inputs_digest(cxx, flags):
    """A digest of what the objects are built from: the core's sources, the program and the header it
    includes, the flags and the compiler."""
    h = hashlib.sha256()
    h.update(" ".join(flags).encode())
    h.update(run([cxx, "--version"]).encode())
    files = [*(ROOT / "csrc" / "flip").rglob("*"), *(ROOT / "csrc" / "compat").rglob("*"), PROGRAM, SERIAL_SEAM]
    files.append(ROOT / "flip_loss" / "tone_mappers.inc")  # the tone mappers' rows, which the core includes
    for path in sorted(p for p in files if p.is_file()):
        h.update(str(path.relative_to(ROOT)).encode())
        h.update(path.read_bytes())
    return h.hexdigest()


def builds(cxx, out, flags, programs):
    """The compile commands of the kernels' objects and the program's into folder `out`: (commands,
    digest); no commands when the folder already holds `programs` built from these inputs."""
    out.mkdir(parents=True, exist_ok=True)
    digest = inputs_digest(cxx, flags)
    stamp = out / "inputs.sha256"
    if stamp.is_file() and stamp.read_text() == digest and all((out / p).is_file() for p in programs):
        return [], digest
    stamp.unlink(missing_ok=True)
    jobs = [[cxx, *flags, *KERNEL_FLAGS, "-c", src, "-o", out / f"{src.stem}.o"] for src in KERNEL_SOURCES]
    jobs.append([cxx, *flags, "-c", PROGRAM, "-o", out / "core_outputs.o"])
    return jobs, digest


def reference_build():
    """GCC's x86-64 build, the reference: (folder, compile commands still to run, digest). -O2, not
    setup.py's -O3, to save time: the kernels give the same bits at any optimisation level,
    vectorised or not (tests/cpu/test_fastmath.py, tests/cpu/test_cpu_dispatch.py), and a difference
    would show in the comparisons."""
    out = BUILD_ROOT / "x86_64-gcc"
    return (out, *builds("g++", out, [*GCC_FLAGS, "-O2"], [f"core_outputs_{n}" for n in NAMES]))


def link(cxx, out, names=NAMES):
    """Links the program from the objects in `out`: with the kernels' objects as built ("own"), and
    (with "same" in names) with copies whose calls of the C library's cbrt and exp2 (any symbol
    version: csrc/compat binds exp2 to glibc's oldest) go to the program's flip_same_cbrt and
    flip_same_exp2, which define both alike on every platform."""
    if "same" in names:
        tools = cxx[: -len("g++")]  # "" or "aarch64-linux-gnu-": the binutils of the same target
        renamed = set()
        for src in KERNEL_SOURCES:
            obj = out / f"{src.stem}.o"
            undefined = [line.split()[-1] for line in run([f"{tools}nm", "-u", obj]).splitlines() if line.strip()]
            renames = {
                name: f"flip_same_{name.split('@')[0]}" for name in undefined if name.split("@")[0] in ("cbrt", "exp2")
            }
            run(
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
    for name in names:
        suffix = ".o" if name == "own" else ".same.o"
        objects = [out / "core_outputs.o", *(out / f"{src.stem}{suffix}" for src in KERNEL_SOURCES)]
        run([cxx, *objects, "-o", out / f"core_outputs_{name}"])


def finish(cxx, out, jobs, digest, names=NAMES):
    """After compile_all: links a build whose objects were (re)compiled, and stamps it."""
    if jobs:
        link(cxx, out, names)
        (out / "inputs.sha256").write_text(digest)


def compile_all(jobs):
    """The compile commands, the kernels first (the longest), a few at a time."""
    jobs = sorted(jobs, key=lambda cmd: "kernels_" not in str(cmd[-3]))
    with ThreadPoolExecutor(max_workers=max(1, min(4, os.cpu_count() or 1))) as pool:
        list(pool.map(run, jobs))


def read(path):
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


def run_at_levels(program, written, tag):
    """{level that ran: records} of an x86-64 program run at every instruction-set level
    (FLIP_LOSS_CPU_CAPABILITY can only lower the level the CPU has)."""
    results = {}
    for level in X86_LEVELS:
        path = written / f"{tag}_{level}.bin"
        log = run([program, path], env=dict(os.environ, FLIP_LOSS_CPU_CAPABILITY=level))
        results[log.split()[1]] = read(path)
    return results


def bits(a):
    return a.view({4: "<u4", 8: "<u8"}[a.itemsize])


def differing(x, y):
    """Names of the records whose bits differ, with how many elements."""
    assert x.keys() == y.keys()
    return {k: int((bits(x[k]) != bits(y[k])).sum()) for k in x if not np.array_equal(bits(x[k]), bits(y[k]))}
