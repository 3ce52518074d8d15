"""An install never fails for want of a compiler: from the sdist, on a machine whose C and C++
compilers are not there, pip installs a pure-Python flip-loss (a py3-none-any wheel for every torch
the portable path runs on), says why in one line, and the installed package says it again at run
time (flip_loss.info(), the fallback warning, the command line) while every device computes with
the portable path. A compiler that is there but fails stops the install with its own error: no
silent downgrade. setup.py's switch, FLIP_LOSS_EXTENSION, is read strictly.

The venvs get torch by a path entry to the test environment's site-packages (as test_packaging.py
does): nothing is downloaded."""

import json
import os
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from flip_loss import torch_releases

ROOT = Path(__file__).resolve().parents[2]
MISSING = {"CC": "/nonexistent/bin/cc", "CXX": "/nonexistent/bin/c++"}
# pip's wheel build from the sdist, verbose (pip shows the build's own lines only then), into a folder.
PIP_WHEEL = ["-m", "pip", "wheel", "-v", "--no-build-isolation", "--no-deps", "-w"]


def run(cmd, cwd, env, check=True):
    proc = subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=1800)
    if check:
        assert proc.returncode == 0, f"{cmd} failed ({proc.returncode}):\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    return proc


def clean_env(**extra):
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "FLIP_LOSS_EXTENSION", "CC", "CXX")}
    env.update(PIP_NO_INDEX="1", FLIP_LOSS_CUDA="0", **extra)
    return env


@pytest.fixture(scope="module")
def sdist(tmp_path_factory):
    out = tmp_path_factory.mktemp("sdist")
    run([sys.executable, "-m", "build", "--sdist", "--no-isolation", "-o", out, ROOT], ROOT, clean_env())
    (archive,) = out.glob("flip*loss-*.tar.gz")
    return archive


@pytest.fixture(scope="module")
def venv(tmp_path_factory):
    """A fresh venv that sees this environment's packages (torch, setuptools) through a path entry."""
    path = tmp_path_factory.mktemp("venv") / "venv"
    run([sys.executable, "-m", "venv", path], path.parent, clean_env())
    py = path / "bin" / "python"
    site = run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], path.parent, clean_env())
    (Path(site.stdout.strip()) / "test_env_packages.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    run([py, "-m", "pip", "uninstall", "-y", "-q", "setuptools"], path.parent, clean_env())
    return path


pytestmark = pytest.mark.slow  # builds an sdist and wheels from it (a minute)


def test_without_a_compiler_the_sdist_installs_pure_python(sdist, venv, tmp_path):
    py = venv / "bin" / "python"
    env = clean_env(**MISSING)
    wheels = tmp_path / "wheels"
    built = run([py, *PIP_WHEEL, wheels, sdist], tmp_path, env)
    output = (built.stdout + built.stderr).splitlines()
    said = {line.strip() for line in output if line.strip().startswith("flip-loss:")}
    assert len(said) == 1, said  # one line (pip shows the build's output with -v)
    (line,) = said
    assert "without the compiled kernels" in line and "CXX=/nonexistent/bin/c++ is not found" in line
    (wheel,) = wheels.glob("flip_loss-*.whl")
    assert wheel.name.endswith("-py3-none-any.whl"), wheel.name
    with zipfile.ZipFile(wheel) as zf:
        assert not [n for n in zf.namelist() if n.endswith((".so", ".pyd"))]
        assert "no compiler" in json.loads(zf.read("flip_loss/_install.json"))["why"]
        (metadata,) = [n for n in zf.namelist() if n.endswith(".dist-info/METADATA")]
        requires = [r for r in zf.read(metadata).decode().splitlines() if r.startswith("Requires-Dist: torch<")]
    assert requires == ["Requires-Dist: " + "torch<2.16,>=" + ".".join(map(str, torch_releases.PORTABLE_MIN_TORCH))]
    run([py, "-m", "pip", "install", "-q", "--no-deps", wheel], tmp_path, env)

    # From another directory: the installed copy, with its account of itself, computing.
    check = (
        "import json, warnings, torch, flip_loss\n"
        "with warnings.catch_warnings(record=True) as caught:\n"
        "    warnings.simplefilter('always')\n"
        "    value = flip_loss.ldr_flip(torch.rand(1, 3, 8, 8), torch.rand(1, 3, 8, 8)).mean().item()\n"
        "print(json.dumps({'file': flip_loss.__file__, 'info': flip_loss.info(), 'value': value,\n"
        "                  'warnings': [str(w.message) for w in caught]}))\n"
    )
    result = json.loads(run([py, "-c", check], tmp_path, env).stdout.splitlines()[-1])
    assert result["file"].startswith(str(venv))
    assert result["info"]["install"].startswith("pure Python, no compiled kernels: this flip-loss was installed")
    assert "CXX=/nonexistent/bin/c++ is not found" in result["info"]["install"]
    assert result["info"]["devices"] == {"cpu": "portable path"}
    (warning,) = result["warnings"]
    assert "CXX=/nonexistent/bin/c++ is not found" in warning and "portable pure-PyTorch path" in warning
    assert 0.0 < result["value"] < 1.0
    cli = run([venv / "bin" / "flip-loss", "--example", "-d", tmp_path / "maps"], tmp_path, env)
    assert "Mean:" in cli.stdout and "no compiler: CXX=" in cli.stderr


def test_a_compiler_that_fails_stops_the_install_with_its_error(sdist, venv, tmp_path):
    failing = tmp_path / "failing-c++"
    failing.write_text(
        "#!/bin/sh\n"
        '[ "$1" = --version ] && { echo "g++ (a compiler that fails) 12.2.0"; exit 0; }\n'
        "echo 'failing-c++: error: this compiler refuses every file' >&2\nexit 1\n"
    )
    failing.chmod(0o755)
    env = clean_env(CXX=str(failing))
    built = run([venv / "bin" / "python", *PIP_WHEEL, tmp_path, sdist], tmp_path, env, check=False)
    assert built.returncode != 0
    assert "this compiler refuses every file" in built.stdout + built.stderr
    assert "without the compiled kernels" not in built.stdout + built.stderr
    assert not list(tmp_path.glob("*.whl"))


def setup_py(tmp_path, **env):
    return run([sys.executable, ROOT / "setup.py", "--version"], tmp_path, clean_env(**env), check=False)


def test_the_switch_decides_and_is_read_strictly(tmp_path):
    """FLIP_LOSS_EXTENSION=0 installs pure Python whatever the machine has; =1 makes a reason to go
    without the kernels an error instead; anything else is refused."""
    pure = setup_py(tmp_path, FLIP_LOSS_EXTENSION="0")
    assert pure.returncode == 0 and "without the compiled kernels (FLIP_LOSS_EXTENSION=0)" in pure.stderr
    required = setup_py(tmp_path, FLIP_LOSS_EXTENSION="1", **MISSING)
    assert required.returncode == 1 and "FLIP_LOSS_EXTENSION=1" in required.stderr
    assert "CXX=/nonexistent/bin/c++ is not found" in required.stderr
    odd = setup_py(tmp_path, FLIP_LOSS_EXTENSION="maybe")
    assert odd.returncode == 1 and "FLIP_LOSS_EXTENSION='maybe' must be one of 1, true, on, yes, 0" in odd.stderr
