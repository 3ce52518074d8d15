"""A torch older than the compiled kernels need (MIN_TORCH) gets the pure-Python package, at build
time (setup.py builds no kernels, saying why) and at import (the portable path on every device);
one older than the portable path allows (PORTABLE_MIN_TORCH) gets one clear error naming it, at
build time and at import, never a failure half-way through. The supported ranges are stated once
(flip_loss/torch_releases.py) and the documents repeat them."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from flip_loss import torch_releases
from flip_loss.torch_releases import MIN_TORCH, NEWEST_TORCH, PORTABLE_MIN_TORCH, release_of, spelled

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    "version, release",
    [
        ("2.11.0", (2, 11)),
        ("2.11.0+cu130", (2, 11)),
        ("2.15.0+cpu", (2, 15)),
        ("2.12.0a0+git12ab", (2, 12)),
        ("2.9.1", (2, 9)),
        ("3.0.0", (3, 0)),
        ("2.10", (2, 10)),
    ],
)
def test_release_of_reads_every_spelling_of_a_torch_version(version, release):
    assert release_of(version) == release


def test_an_unreadable_version_is_an_error():
    with pytest.raises(ValueError, match="unrecognised"):
        release_of("nightly")


def older_than(release):
    return (release[0], release[1] - 1) if release[1] else (release[0] - 1, 99)


def test_the_ranges_accept_the_installed_torch_and_refuse_older_releases():
    assert PORTABLE_MIN_TORCH <= MIN_TORCH <= NEWEST_TORCH
    assert torch_releases.unsupported_reason(torch.__version__) is None
    assert torch_releases.kernels_unsupported_reason(torch.__version__) is None
    older = older_than(PORTABLE_MIN_TORCH)
    reason = torch_releases.unsupported_reason(f"{spelled(older)}.1")
    assert reason is not None and f">= {spelled(PORTABLE_MIN_TORCH)}" in reason and f"{spelled(older)}.1" in reason
    between = older_than(MIN_TORCH)
    assert torch_releases.unsupported_reason(f"{spelled(PORTABLE_MIN_TORCH)}.0") is None
    assert torch_releases.unsupported_reason(f"{spelled(between)}.1") is None
    reason = torch_releases.kernels_unsupported_reason(f"{spelled(between)}.1")
    assert reason is not None and f">= {spelled(MIN_TORCH)}" in reason and f"{spelled(between)}.1" in reason
    assert torch_releases.kernels_unsupported_reason(f"{spelled(MIN_TORCH)}.0") is None
    assert torch_releases.kernels_unsupported_reason(f"{spelled(NEWEST_TORCH)}.0+cu132") is None
    assert torch_releases.requirement(kernels=False) == f"torch>={spelled(PORTABLE_MIN_TORCH)},<2.16"


def fake_torch(tmp_path, version):
    """A directory holding a 'torch' package that only has a __version__: first on sys.path, it
    stands in for an old release at the points where flip-loss looks at the version."""
    pkg = tmp_path / "torch"
    pkg.mkdir(exist_ok=True)
    (pkg / "__init__.py").write_text(f"__version__ = {version!r}\n")
    return str(tmp_path)


def test_importing_with_a_torch_older_than_the_portable_path_names_the_minimum(tmp_path):
    version = f"{spelled(older_than(PORTABLE_MIN_TORCH))}.1"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([fake_torch(tmp_path, version), str(ROOT)]))
    result = subprocess.run(
        [sys.executable, "-c", "import flip_loss"], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert result.returncode != 0
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: flip-loss needs torch >= " + spelled(PORTABLE_MIN_TORCH)), result.stderr
    assert f"torch {version}" in last and "AttributeError" not in result.stderr


def setup_py(tmp_path, version, extension=None):
    """``setup.py --version`` with a torch of ``version`` (and FLIP_LOSS_EXTENSION=``extension``)."""
    env = {k: v for k, v in os.environ.items() if k != "FLIP_LOSS_EXTENSION"}
    env["PYTHONPATH"] = fake_torch(tmp_path, version)
    if extension is not None:
        env["FLIP_LOSS_EXTENSION"] = extension
    return subprocess.run(
        [sys.executable, str(ROOT / "setup.py"), "--version"], cwd=tmp_path, env=env, capture_output=True, text=True
    )


def test_building_with_a_torch_older_than_the_portable_path_names_the_minimum(tmp_path):
    version = f"{spelled(older_than(PORTABLE_MIN_TORCH))}.1"
    result = setup_py(tmp_path, version)
    assert result.returncode == 1
    assert f"flip-loss needs torch >= {spelled(PORTABLE_MIN_TORCH)}" in result.stderr and version in result.stderr


def test_building_with_a_torch_older_than_the_kernels_installs_pure_python(tmp_path):
    """Between the two floors the build goes on without the kernels and says why in one line;
    FLIP_LOSS_EXTENSION=1 (the kernels or an error) stops it instead."""
    version = f"{spelled(older_than(MIN_TORCH))}.1"
    result = setup_py(tmp_path, version)
    assert result.returncode == 0, result.stderr
    (line,) = [ln for ln in result.stderr.splitlines() if ln.startswith("flip-loss:")]
    assert "without the compiled kernels" in line and f"need torch >= {spelled(MIN_TORCH)}" in line and version in line
    refused = setup_py(tmp_path, version, extension="1")
    assert refused.returncode == 1 and "FLIP_LOSS_EXTENSION=1" in refused.stderr and version in refused.stderr


def test_the_documents_state_the_ranges_the_code_enforces():
    kernels = f"torch {spelled(MIN_TORCH)}–{spelled(NEWEST_TORCH)}"
    portable = f"torch {spelled(PORTABLE_MIN_TORCH)}–{spelled(older_than(MIN_TORCH))}"
    for doc in ("README.md", "docs/api.md"):
        text = (ROOT / doc).read_text(encoding="utf-8")
        assert kernels in text and portable in text, doc
