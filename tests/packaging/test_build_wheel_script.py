"""scripts/build_wheel.sh's command line and outputs, on a small stand-in for the raw wheel (a
flip_loss wheel whose one module is a tiny shared library compiled with debug information), so
that no build is needed: a bad command line is refused with status 2 and writes nothing, a
released wheel is never finished again into its own folder (which wrote over it and emptied its
debug file), and OUTDIR gets the wheel and its debug files together or not at all. The release
steps on the real wheel: tests/packaging/test_packaging.py."""

import hashlib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "build_wheel.sh"
AUDITWHEEL = Path(sys.executable).parent / "auditwheel"
RAW_NAME = "flip_loss-0.1.0-cp310-abi3-linux_x86_64.whl"
RELEASED_NAME = "flip_loss-0.1.0-cp310-abi3-manylinux_2_28_x86_64.whl"
USAGE = "usage: bash scripts/build_wheel.sh [--from-wheel RAW.whl] OUTDIR"

pytestmark = pytest.mark.skipif(
    not all(shutil.which(tool) for tool in ("gcc", "objcopy", "readelf")) or os.uname().machine != "x86_64",
    reason="needs gcc and binutils on x86-64 to make the stand-in wheel",
)


def _script(args, cwd, auditwheel=AUDITWHEEL):
    env = dict(os.environ, PYTHON=sys.executable, AUDITWHEEL=str(auditwheel))
    return subprocess.run(["bash", str(SCRIPT), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


@pytest.fixture
def raw_wheel(tmp_path):
    """A wheel named as pip names this source's (linux_x86_64), holding flip_loss/_C.abi3.so with
    .debug_info sections."""
    tree = tmp_path / "src" / "flip_loss-0.1.0"
    (tree / "flip_loss").mkdir(parents=True)
    (tree / "flip_loss-0.1.0.dist-info").mkdir()
    (tree / "flip_loss" / "__init__.py").write_text("")
    source = tmp_path / "module.c"
    source.write_text("int flip_stand_in(int x) { return 2 * x + 1; }\n")
    subprocess.run(
        ["gcc", "-g", "-O1", "-shared", "-fPIC", "-o", str(tree / "flip_loss" / "_C.abi3.so"), str(source)],
        check=True,
    )
    info = tree / "flip_loss-0.1.0.dist-info"
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: flip-loss\nVersion: 0.1.0\n")
    (info / "WHEEL").write_text(
        "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: false\nTag: cp310-abi3-linux_x86_64\n"
    )
    (info / "RECORD").write_text("")
    folder = tmp_path / "raw"
    folder.mkdir()
    subprocess.run(
        [sys.executable, "-m", "wheel", "pack", "-d", str(folder), str(tree)], check=True, capture_output=True
    )
    wheel = folder / RAW_NAME
    assert wheel.is_file()
    return wheel


def _tree(path: Path):
    """Every file under path with its contents' digest (None when path does not exist)."""
    if not path.exists():
        return None
    return {
        str(p.relative_to(path)): hashlib.sha256(p.read_bytes()).hexdigest() for p in path.rglob("*") if p.is_file()
    }


def _has_debug_info(path: Path) -> bool:
    out = subprocess.run(["readelf", "-S", "-W", str(path)], check=True, capture_output=True, text=True).stdout
    return bool(re.search(r"\s\.debug_info\s", out))


@pytest.mark.parametrize(
    "args,message",
    [
        ([], "OUTDIR is missing"),
        (["--from-wheel"], "--from-wheel needs the wheel to finish"),
        (["--from-wheel", "{raw}"], "OUTDIR is missing"),
        (["--from-wheel", "{raw}", "out", "junk"], "one OUTDIR only, got 'out' and 'junk'"),
        (["--frm-wheel", "{raw}", "out"], "unknown option: --frm-wheel"),
        (["--from-wheel", "missing.whl", "out"], "--from-wheel: no such wheel: missing.whl"),
        (["--from-wheel", "{text}", "out"], "--from-wheel: {text} is not a wheel pip built from this source"),
        (["--from-wheel", "{raw}", "{text}"], "OUTDIR {text} exists and is not a directory"),
    ],
)
def test_a_bad_command_line_is_refused_with_status_2_and_writes_nothing(raw_wheel, tmp_path, args, message):
    text = tmp_path / "notes.txt"
    text.write_text("not a wheel\n")
    args = [a.format(raw=raw_wheel, text=text) for a in args]
    message = message.format(text=text)
    before = _tree(tmp_path)
    proc = _script(args, tmp_path)
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    assert f"build_wheel.sh: {message}" in proc.stderr and USAGE in proc.stderr, proc.stderr
    assert _tree(tmp_path) == before  # no OUTDIR, nothing else touched


def test_help_prints_the_usage():
    proc = _script(["--help"], ROOT)
    assert (proc.returncode, proc.stdout.strip(), proc.stderr) == (0, USAGE, "")


@pytest.mark.skipif(not AUDITWHEEL.exists(), reason="auditwheel missing: pip install -r requirements-release.txt")
def test_a_released_wheel_is_not_finished_again_over_itself(raw_wheel, tmp_path):
    out = tmp_path / "release"
    proc = _script(["--from-wheel", str(raw_wheel), str(out)], tmp_path)
    assert proc.returncode == 0, proc.stderr
    released, debug = out / RELEASED_NAME, out / "debug" / "_C.abi3.so.debug"
    assert sorted(_tree(out)) == ["debug/_C.abi3.so.debug", RELEASED_NAME]
    assert _has_debug_info(debug)
    before = _tree(out)
    # The released wheel given back with its own folder as OUTDIR: before, auditwheel wrote the
    # result over it and the debug file became one without debug information.
    proc = _script(["--from-wheel", str(released), str(out)], tmp_path)
    assert proc.returncode == 2 and "is not a wheel pip built from this source" in proc.stderr, proc.stderr
    assert _tree(out) == before and _has_debug_info(debug)


def test_a_failed_step_leaves_no_output(raw_wheel, tmp_path):
    # auditwheel refusing the wheel (a binary needing a newer glibc than the tag allows, say):
    # OUTDIR gets neither the wheel nor debug files that belong to no wheel.
    fake = tmp_path / "bin" / "auditwheel"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\necho 'auditwheel: too recent versioned symbols' >&2\nexit 1\n")
    fake.chmod(0o755)
    out = tmp_path / "release"
    proc = _script(["--from-wheel", str(raw_wheel), str(out)], tmp_path, auditwheel=fake)
    assert proc.returncode == 1 and "too recent versioned symbols" in proc.stderr, proc.stderr
    assert not out.exists()
    # An existing OUTDIR keeps what it held.
    out.mkdir()
    (out / "kept.txt").write_text("earlier release\n")
    before = _tree(out)
    proc = _script(["--from-wheel", str(raw_wheel), str(out)], tmp_path, auditwheel=fake)
    assert proc.returncode == 1 and _tree(out) == before
