"""What a user sees when the compiled extension is missing (e.g. an unbuilt source checkout that
shadows an installed copy): a message that says so and how to fix it, from the import, from the
fallback warning and from torch.jit.script, instead of a 'circular import' or a missing attribute."""

import ast
import os
import shutil
import subprocess
import sys

import pytest
import torch

import flip_loss
from flip_loss import _ops


def _run_with_the_copy(tmp_path, code):
    """The lines ``code`` prints in a child whose first path entry is ``tmp_path`` (the copy of the
    package there); the first must be the imported flip_loss's file, else the test skips."""
    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    if not lines[0].startswith(str(tmp_path)):
        pytest.skip(f"this environment imports flip_loss from {lines[0]} even with the copy first on the path")
    return lines


def test_message_for_an_unbuilt_checkout(tmp_path):
    package = tmp_path / "flip_loss"
    shutil.copytree(os.path.dirname(flip_loss.__file__), package, ignore=shutil.ignore_patterns("_C.*", "__pycache__"))
    (tmp_path / "setup.py").write_text("# a source checkout\n")
    # the real import, in a child whose only flip_loss is the unbuilt copy (an editable install's
    # finder would otherwise supply the built extension)
    code = (
        "import sys; sys.meta_path = [f for f in sys.meta_path if 'editable' not in repr(f).lower()]; "
        "import flip_loss; print(flip_loss.__file__); print(flip_loss.HAS_EXTENSION); "
        "print(flip_loss._ops.IMPORT_ERROR)"
    )
    lines = _run_with_the_copy(tmp_path, code)
    assert lines[1] == "False"
    assert "not built" in lines[2] and str(package) in lines[2] and "pip install --no-build-isolation -e ." in lines[2]


def test_torchscript_says_the_extension_is_missing(monkeypatch):
    monkeypatch.setattr(_ops, "HAS_EXTENSION", False)
    monkeypatch.setattr(_ops, "IMPORT_ERROR", "the compiled extension flip_loss._C is not built in DIR")
    with pytest.raises(RuntimeError, match="needs the compiled ops.*not built in DIR"):
        torch.jit.script(flip_loss.FLIPLoss())


def test_fallback_warning_repeats_the_reason(monkeypatch):
    monkeypatch.setattr(_ops, "HAS_EXTENSION", False)
    monkeypatch.setattr(_ops, "IMPORT_ERROR", "the compiled extension flip_loss._C is not built in DIR")
    monkeypatch.setattr(_ops, "_warned", set())
    with pytest.warns(RuntimeWarning, match="not built in DIR.*portable pure-PyTorch path"):
        assert not _ops.use_extension(torch.zeros(1))


def test_a_binary_that_does_not_load_is_said_at_import_once(tmp_path):
    """A flip_loss._C that is there but does not load (a broken install, a binary for another
    platform) is reported when flip_loss is imported, with the loader's reason and the fix, and
    the fallback that follows says nothing more."""
    package = tmp_path / "flip_loss"
    shutil.copytree(
        os.path.dirname(flip_loss.__file__), package, ignore=shutil.ignore_patterns("*.so", "*.pyd", "__pycache__")
    )
    (package / "_C.abi3.so").write_bytes(b"not a shared library\n")
    code = (
        "import sys, warnings; sys.meta_path = [f for f in sys.meta_path if 'editable' not in repr(f).lower()]\n"
        "import torch\n"
        "with warnings.catch_warnings(record=True) as caught:\n"
        "    warnings.simplefilter('always')\n"
        "    import flip_loss\n"
        "    at_import = [str(w.message) for w in caught if w.category is RuntimeWarning]\n"
        "    value = flip_loss.ldr_flip(torch.zeros(1, 3, 8, 8), torch.ones(1, 3, 8, 8)).mean().item()\n"
        "    later = [str(w.message) for w in caught if w.category is RuntimeWarning][len(at_import):]\n"
        "print(flip_loss.__file__); print(flip_loss.HAS_EXTENSION); print(repr(at_import)); print(repr(later)); "
        "print(value)\n"
    )
    lines = _run_with_the_copy(tmp_path, code)
    assert lines[1] == "False"
    (message,) = ast.literal_eval(lines[2])
    assert f"flip_loss._C in {package} could not be loaded" in message
    assert "invalid ELF header" in message or "file too short" in message
    assert "pip install --no-build-isolation ." in message and "portable pure-PyTorch path" in message
    assert ast.literal_eval(lines[3]) == []  # the fallback itself warns no more
    assert 0.0 < float(lines[4]) <= 1.0  # the pure-PyTorch oracle computed it
