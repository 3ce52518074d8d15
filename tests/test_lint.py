"""The tree is linted and formatted by its own rules: ruff (pyproject.toml's [tool.ruff]) for Python,
clang-format (.clang-format) for C++ and CUDA, with the versions requirements-test.txt pins. To fix
what these tests report: `.venv/bin/ruff format . && .venv/bin/ruff check --fix .` and
`git ls-files '*.h' '*.cpp' '*.cu' '*.inc' | xargs .venv/bin/clang-format -i`."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CXX_SUFFIXES = (".h", ".hpp", ".cpp", ".cc", ".cu", ".cuh", ".inc")


def tool(name):
    # The pinned tools live beside this interpreter (the project's .venv); PATH is the fallback.
    here = Path(sys.executable).parent / name
    found = str(here) if here.exists() else shutil.which(name)
    if found is None:
        pytest.skip(f"{name} is not installed (pip install -r requirements-test.txt installs it)")
    return found


def tracked(suffixes):
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: the tracked files are unknown")
    names = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, check=True, capture_output=True).stdout
    files = [n for n in names.decode().split("\0") if n.endswith(suffixes) and (ROOT / n).exists()]
    assert files, "no tracked files found"
    return files


def run(cmd):
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)


def test_python_passes_ruff_check():
    result = run([tool("ruff"), "check", "--no-cache", "--output-format", "concise", *tracked((".py",))])
    assert result.returncode == 0, result.stdout + result.stderr


def test_python_is_formatted():
    result = run([tool("ruff"), "format", "--no-cache", "--check", *tracked((".py",))])
    assert result.returncode == 0, "not formatted (run `ruff format`):\n" + result.stdout + result.stderr


def test_cxx_is_formatted():
    files = tracked(CXX_SUFFIXES)
    result = run([tool("clang-format"), "--dry-run", "--Werror", *files])
    assert result.returncode == 0, "not formatted (run `clang-format -i`):\n" + result.stderr[-4000:]
