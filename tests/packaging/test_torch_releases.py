"""An older torch than flip-loss supports gets one clear error naming the minimum, at build time
(setup.py) and at import, never a failure half-way through registering ops; the supported range
is stated once (flip_loss/torch_releases.py) and the documents repeat it."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from flip_loss import torch_releases
from flip_loss.torch_releases import MIN_TORCH, NEWEST_TORCH, release_of, spelled

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


def test_the_range_accepts_the_installed_torch_and_refuses_older_releases():
    assert MIN_TORCH <= NEWEST_TORCH
    assert torch_releases.unsupported_reason(torch.__version__) is None
    older = (MIN_TORCH[0], MIN_TORCH[1] - 1) if MIN_TORCH[1] else (MIN_TORCH[0] - 1, 99)
    reason = torch_releases.unsupported_reason(f"{spelled(older)}.1")
    assert reason is not None and f">= {spelled(MIN_TORCH)}" in reason and f"{spelled(older)}.1" in reason
    assert torch_releases.unsupported_reason(f"{spelled(MIN_TORCH)}.0") is None
    assert torch_releases.unsupported_reason(f"{spelled(NEWEST_TORCH)}.0+cu132") is None


def fake_torch(tmp_path, version):
    """A directory holding a 'torch' package that only has a __version__: first on sys.path, it
    stands in for an old release at the points where flip-loss looks at the version."""
    pkg = tmp_path / "torch"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(f"__version__ = {version!r}\n")
    return str(tmp_path)


def test_importing_with_an_older_torch_names_the_minimum(tmp_path):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([fake_torch(tmp_path, "2.7.1"), str(ROOT)]))
    result = subprocess.run(
        [sys.executable, "-c", "import flip_loss"], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert result.returncode != 0
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: flip-loss needs torch >= " + spelled(MIN_TORCH)), result.stderr
    assert "torch 2.7.1" in last and "AttributeError" not in result.stderr


def test_building_with_an_older_torch_names_the_minimum(tmp_path):
    env = dict(os.environ, PYTHONPATH=fake_torch(tmp_path, "2.7.1"))
    result = subprocess.run(
        [sys.executable, str(ROOT / "setup.py"), "--version"], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert result.returncode == 1
    assert f"flip-loss needs torch >= {spelled(MIN_TORCH)}" in result.stderr and "torch 2.7.1" in result.stderr


def test_the_documents_state_the_range_the_code_enforces():
    stated = f"{spelled(MIN_TORCH)}–{spelled(NEWEST_TORCH)}"
    for doc in ("README.md", "docs/api.md"):
        assert f"torch {stated}" in (ROOT / doc).read_text(encoding="utf-8"), doc
