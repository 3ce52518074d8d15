"""The framework-free C++ check programs of tests/cpp (csrc's host-compilable code, no torch),
compiled with g++ and run from pytest. Each prints "ALL CHECKED" last and exits 0 when every check
holds, or names the first that failed."""

import shutil
import subprocess

import pytest

from build_dirs import ROOT


def run_check_program(source, workdir, flags=("-O2",)):
    """Compiles ``source`` (a path under tests/cpp) into ``workdir`` with g++ (C++17, every warning
    an error, csrc on the include path, plus ``flags``), runs it and returns its output's lines;
    fails the test unless it built and ended with "ALL CHECKED". Skips without g++."""
    cxx = shutil.which("g++")
    if cxx is None:
        pytest.skip("no g++")
    exe = workdir / source.stem
    build = subprocess.run(
        [cxx, "-std=c++17", *flags, "-Wall", "-Wextra", "-Werror", "-I", str(ROOT / "csrc"), str(source)]
        + ["-o", str(exe)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=600,
    )
    assert build.returncode == 0, build.stdout
    # A deadlock (a value destroyed under a lock, say) ends at the timeout.
    run = subprocess.run([str(exe)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120)
    lines = run.stdout.strip().splitlines()
    assert run.returncode == 0 and lines and lines[-1] == "ALL CHECKED", run.stdout
    return lines
