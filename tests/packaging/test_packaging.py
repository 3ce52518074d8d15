"""Packaging, tried as a new user would: the sdist is complete whatever machine makes it, and the
README's own-environment commands install it into a fresh virtual environment from which it
imports (from another directory), runs the command line and requires the supported torch range; the
wheel built on the way is one for every CPython from 3.10 (abi3).

The fresh environment gets torch by a path entry to the test environment's site-packages instead
of a 2.5 GB download on every CI run; pip sees that torch as installed, so the README's commands
run unchanged. The build is CPU-only (FLIP_LOSS_CUDA=0): CUDA compilation is covered by the
main build."""

import ast
import io
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import zipfile
from pathlib import Path

import pytest
import torch

import flip_loss
from flip_loss import torch_releases
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet

import elf

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

pytestmark = [
    pytest.mark.slow,  # builds an sdist and installs it in a fresh venv (minutes)
    pytest.mark.skipif(
        not os.path.exists(os.path.join(ROOT, ".git")),
        reason="needs the source checkout (git) to compare the sdist with",
    ),
]


def _run(cmd, cwd, env=None, timeout=1800):
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{cmd} failed ({proc.returncode}):\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    return proc


def _tracked_files():
    out = _run(["git", "ls-files"], ROOT).stdout.split()
    return {p for p in out if os.path.exists(os.path.join(ROOT, p))}


@pytest.fixture(scope="module")
def sdist(tmp_path_factory):
    out = tmp_path_factory.mktemp("sdist")
    # Without --skip-dependency-check: the build's requirements (pyproject.toml) are the supported
    # torch range, so a build next to whichever supported torch this environment holds meets them.
    _run([sys.executable, "-m", "build", "--sdist", "--no-isolation", "-o", str(out), ROOT], ROOT)
    (archive,) = list(out.glob("flip_loss-*.tar.gz")) + list(out.glob("flip-loss-*.tar.gz"))
    return archive


def test_sdist_has_every_tracked_file_but_the_repository_plumbing(sdist):
    with tarfile.open(sdist) as tar:
        names = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
    # Every tracked file but the repository's own plumbing: the sources, the CMake package, the
    # pins, the docs, and the tests, benchmarks and scripts with what they read.
    needed = {p for p in _tracked_files() if not p.startswith(".ci/") and p != ".gitignore"}
    assert any(p.endswith(".cu") for p in needed)  # the CUDA sources are tracked, so must ship
    missing = sorted(needed - names)
    assert not missing, f"the sdist lacks {missing}"
    assert not [n for n in names if n.endswith((".so", ".o", ".pyc"))], "the sdist carries build products"


@pytest.fixture(scope="module")
def fresh_install(sdist, tmp_path_factory):
    """The README's own-environment commands in a fresh venv: (venv, its site-packages, the
    environment the commands ran in, the wheel pip built from the sdist on the way)."""
    tmp_path = tmp_path_factory.mktemp("fresh")
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", str(venv)], tmp_path)
    py = venv / "bin" / "python"
    # torch (and the other pinned packages) from this environment, as if 'pip install torch' had run.
    site = _run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], tmp_path).stdout.strip()
    with open(os.path.join(site, "test_env_packages.pth"), "w") as f:
        f.write(sysconfig.get_paths()["purelib"] + "\n")
    env = dict(
        os.environ, FLIP_LOSS_CUDA="0", MAX_JOBS=os.environ.get("MAX_JOBS", "2"), PIP_NO_INDEX="1"
    )  # nothing may need downloading: every build tool is named in the README
    env.pop("PYTHONPATH", None)
    pip = [str(py), "-m", "pip", "install", "-q"]
    # The venv's own setuptools (an old one, from ensurepip) would hide the test environment's, which
    # torch's requirements accept.
    _run([str(py), "-m", "pip", "uninstall", "-y", "-q", "setuptools"], tmp_path, env)
    _run(pip + ["torch==" + torch.__version__.split("+")[0]], tmp_path, env)
    _run(pip + ["setuptools", "wheel", "ninja"], tmp_path, env)
    # The wheel pip builds from the sdist (as 'pip install --no-build-isolation <sdist>' does), kept
    # to read its tag and metadata: one wheel for every CPython from 3.10 (abi3) and every supported
    # torch (a range, not the build's release).
    wheels = tmp_path / "wheels"
    _run(
        [str(py), "-m", "pip", "wheel", "-q", "--no-build-isolation", "--no-deps", "-w", str(wheels), str(sdist)],
        tmp_path,
        env,
    )
    (wheel,) = wheels.glob("flip_loss-*.whl")
    _run(pip + [str(wheel)], tmp_path, env)
    return venv, site, env, wheel


def test_readme_install_in_a_fresh_venv_from_the_sdist(fresh_install, tmp_path):
    venv, site, env, wheel = fresh_install
    py = venv / "bin" / "python"
    assert wheel.name.endswith("-cp310-abi3-linux_x86_64.whl"), wheel.name
    with zipfile.ZipFile(wheel) as zf:
        (metadata,) = [n for n in zf.namelist() if n.endswith(".dist-info/METADATA")]
        requires = [
            line for line in zf.read(metadata).decode().splitlines() if re.match(r"Requires-Dist: torch[<>=!~ ;]", line)
        ]
        # FLIP_LOSS_CUDA=0: the CPU module alone, which needs no CUDA library (tests/packaging/test_cpu_only_torch.py)
        modules = sorted(n for n in zf.namelist() if n.endswith(".so"))
        assert modules == ["flip_loss/_C.abi3.so"], modules
        needed = elf.read(io.BytesIO(zf.read(modules[0]))).needed
    assert "libtorch_cpu.so" in needed and not [lib for lib in needed if "cuda" in lib or lib.startswith("libcu")], (
        needed
    )
    assert len(requires) == 1 and Requirement(requires[0].split(": ", 1)[1]).specifier == SpecifierSet(
        torch_releases.requirement().removeprefix("torch")
    ), requires

    # From another directory: the installed copy, with its compiled extension and its torch pin.
    check = (
        "import importlib.metadata as m, flip_loss, torch;"
        "assert flip_loss.HAS_EXTENSION, flip_loss._ops.IMPORT_ERROR;"
        "print(flip_loss.__file__);"
        "import re; print([r for r in m.requires('flip-loss') if re.split('[<>=!~ ;\\[]', r)[0] == 'torch']);"
        "print(m.version('flip-loss'));"
        "print(torch.jit.script(flip_loss.FLIPLoss())(torch.rand(1, 3, 8, 8), torch.rand(1, 3, 8, 8)).item())"
    )
    out = _run([str(py), "-c", check], tmp_path, env).stdout.splitlines()
    assert out[0].startswith(str(venv)), out
    (installed_requirement,) = ast.literal_eval(out[1])
    assert Requirement(installed_requirement).specifier == SpecifierSet(
        torch_releases.requirement().removeprefix("torch")
    )
    assert out[2] == flip_loss.__version__
    assert 0.0 < float(out[3]) < 1.0

    cli = _run([str(venv / "bin" / "flip-loss"), "--example", "-d", str(tmp_path / "maps"), "-v", "1"], tmp_path, env)
    assert "Mean:" in cli.stdout
    assert any(p.suffix == ".png" for p in (tmp_path / "maps").iterdir())


# A program that prints which flip_loss it imported, torch's version and one LDR-FLIP value of fixed
# inputs: the same value from two installs means the same kernels.
VALUE_SCRIPT = (
    "import torch, flip_loss;"
    "assert flip_loss.HAS_EXTENSION, flip_loss._ops.IMPORT_ERROR;"
    "print(flip_loss.__file__); print(torch.__version__);"
    "g = torch.Generator().manual_seed(0);"
    "t, r = torch.rand(1, 3, 16, 16, generator=g), torch.rand(1, 3, 16, 16, generator=g);"
    "print(repr(flip_loss.ldr_flip(t, r).mean().item()))"
)


def test_the_wheel_built_next_to_this_torch_runs_next_to_the_oldest(fresh_install, tmp_path):
    """The stable-ABI binary targets the oldest supported release whichever supported torch compiles
    it: the wheel the fresh venv built (next to this environment's torch, the newest under
    scripts/test.sh) loads and computes next to the oldest (.venv-oldest-torch, which
    scripts/setup.sh --with-oldest-torch creates) the value it computes here."""
    oldest = Path(ROOT) / ".venv-oldest-torch" / "bin" / "python"
    if not oldest.exists():
        pytest.skip("no .venv-oldest-torch (scripts/setup.sh --with-oldest-torch creates it)")
    if torch_releases.release_of(torch.__version__) == torch_releases.MIN_TORCH:
        pytest.skip("this environment has the oldest supported torch already")
    venv, site, env, _ = fresh_install
    here = _run([str(venv / "bin" / "python"), "-c", VALUE_SCRIPT], tmp_path, env).stdout.splitlines()
    # PYTHONPATH, not the venv: the oldest environment's own torch, the fresh venv's flip_loss
    there = _run([str(oldest), "-c", VALUE_SCRIPT], tmp_path, dict(env, PYTHONPATH=site)).stdout.splitlines()
    assert there[0] == here[0] and there[0].startswith(str(venv)), (here, there)
    assert torch_releases.release_of(there[1]) == torch_releases.MIN_TORCH
    assert torch_releases.release_of(here[1]) > torch_releases.MIN_TORCH
    assert there[2] == here[2]


def _sections(path):
    """Section names of an ELF file, as binutils' readelf lists them."""
    out = _run(["readelf", "-S", "-W", str(path)], ROOT).stdout
    return set(re.findall(r"^\s*\[\s*\d+\]\s+(\S+)", out, flags=re.M))


def test_the_release_steps_finish_the_wheel(fresh_install, tmp_path):
    """scripts/build_wheel.sh's release steps on the wheel pip built from the sdist (docs/install.md,
    "Release wheels"): tagged manylinux_2_28 and abi3, nothing grafted in, the modules without their
    debug sections (kept apart, named by a debug link, still holding the debug information), and the
    result installs and computes what the raw wheel computes."""
    if not shutil.which("readelf") or not shutil.which("objcopy"):
        pytest.skip("binutils (readelf, objcopy) missing")
    auditwheel = Path(sys.executable).parent / "auditwheel"
    if not auditwheel.exists():
        pytest.skip("auditwheel missing: pip install -r requirements-release.txt (requirements-test.txt has it)")
    venv, site, env, raw = fresh_install
    out = tmp_path / "release"
    env = dict(env, PYTHON=str(venv / "bin" / "python"), AUDITWHEEL=str(auditwheel))
    _run(["bash", "scripts/build_wheel.sh", "--from-wheel", str(raw), str(out)], ROOT, env)
    (wheel,) = out.glob("flip_loss-*.whl")
    assert wheel.name.endswith("-cp310-abi3-manylinux_2_28_x86_64.whl"), wheel.name
    unpacked = tmp_path / "unpacked"
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        assert not [n for n in names if ".libs/" in n], names  # torch's libraries stay torch's
        zf.extractall(unpacked)
    with zipfile.ZipFile(raw) as zf:
        assert sorted(n for n in names if n.endswith(".so")) == sorted(n for n in zf.namelist() if n.endswith(".so"))
    for module in unpacked.glob("flip_loss/*.so"):
        debug = out / "debug" / (module.name + ".debug")
        assert "debug_info" in {s.lstrip(".") for s in _sections(debug)}, debug
        kept = _sections(module)
        assert ".gnu_debuglink" in kept and not [s for s in kept if s.startswith(".debug")], kept
        assert module.stat().st_size < debug.stat().st_size

    # Installed into a folder of its own, ahead of the raw wheel's install on PYTHONPATH: the same value.
    target = tmp_path / "target"
    py = str(venv / "bin" / "python")
    _run([py, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target), str(wheel)], tmp_path, env)
    released = _run([py, "-c", VALUE_SCRIPT], tmp_path, dict(env, PYTHONPATH=str(target))).stdout.splitlines()
    built = _run([py, "-c", VALUE_SCRIPT], tmp_path, env).stdout.splitlines()
    assert released[0].startswith(str(target)) and built[0].startswith(str(venv)), (released, built)
    assert released[2] == built[2]
