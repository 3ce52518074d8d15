"""The FLIP_LOSS_* environment variables, read by one rule everywhere (flip_loss/environment.py; in
C++ csrc/flip/environment.h): a switch takes 1/true/on/yes and 0/false/off/no in any case, a choice
its names in any case, an empty value counts as unset, and any other value is refused with a message
naming the variable, by the package at import, the command line, setup.py and the C++ kernels alike.
Before, ``FLIP_LOSS_CUDA_KERNELS=False`` (or ``OFF``, ``No``, `` 0``) silently left the CUDA kernels
on, and an unknown ``FLIP_LOSS_CPU_CAPABILITY`` was ignored."""

import os
import subprocess
import sys

import pytest

from flip_loss import distributed, environment

from build_dirs import ROOT
from check_programs import run_check_program

OFF_SPELLINGS = ["0", "false", "False", "FALSE", "off", "OFF", "no", "No"]
ON_SPELLINGS = ["1", "true", "True", "on", "ON", "yes", "Yes"]
REFUSED = [" 0", "0 ", "False ", "2", "enable", "nein", "\t1"]


def _python(code, **env):
    """Runs ``code`` (or, for a list, those arguments) in a fresh interpreter with ``env`` added;
    (exit code, output)."""
    run = subprocess.run(
        [sys.executable, *(code if isinstance(code, list) else ["-c", code])],
        env={**os.environ, **env},
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=300,
    )
    return run.returncode, run.stdout


@pytest.mark.parametrize("value", OFF_SPELLINGS + ON_SPELLINGS + [""] + REFUSED)
def test_a_switch_takes_its_documented_spellings_and_nothing_else(value, monkeypatch):
    monkeypatch.setenv("FLIP_LOSS_CUDA_KERNELS", value)
    if value in REFUSED:
        with pytest.raises(ValueError, match=f"FLIP_LOSS_CUDA_KERNELS='{value}' must be one of 1, true, on, yes, 0"):
            environment.switch("FLIP_LOSS_CUDA_KERNELS", True)
    else:
        assert environment.switch("FLIP_LOSS_CUDA_KERNELS", "default") == (
            "default" if value == "" else value in ON_SPELLINGS
        )


def test_the_torchrun_choice_is_read_by_the_same_rule(monkeypatch):
    for value, want in (("WORKER", "worker"), ("Ignore", "ignore"), ("", "auto"), ("auto", "auto")):
        monkeypatch.setenv("FLIP_LOSS_TORCHRUN", value)
        assert distributed._override() == want
    for value in (" worker", "sometimes"):
        monkeypatch.setenv("FLIP_LOSS_TORCHRUN", value)
        with pytest.raises(ValueError, match=f"FLIP_LOSS_TORCHRUN='{value}' must be one of auto, worker, ignore"):
            distributed._override()


_KERNELS = (
    "import sys, flip_loss; "
    "print('cuda' in flip_loss._ops.KERNEL_DEVICES['ldr_flip'], 'flip_loss._C_cuda' in sys.modules)"
)


@pytest.mark.slow
def test_cuda_kernels_switched_off_by_every_spelling_of_off():
    """The CUDA kernels are not loaded for any spelling of off (checked where this build has them),
    and a refused value stops the import with the variable's name."""
    code, out = _python(_KERNELS, FLIP_LOSS_CUDA_KERNELS="1")
    assert code == 0, out
    have_cuda_kernels = out.split()[-2:] == ["True", "True"]
    for value in ("False", "OFF", "No"):
        code, out = _python(_KERNELS, FLIP_LOSS_CUDA_KERNELS=value)
        assert code == 0 and out.split()[-2:] == ["False", "False"], (value, out)
    if not have_cuda_kernels:
        pytest.skip("this build or torch has no CUDA kernels to switch off (the refusals were checked)")
    for value in (" 0", "False "):
        code, out = _python(_KERNELS, FLIP_LOSS_CUDA_KERNELS=value)
        assert code != 0 and f"ValueError: flip_loss: FLIP_LOSS_CUDA_KERNELS='{value}' must be one of" in out


@pytest.mark.slow
def test_setup_py_reads_its_build_switches_by_the_same_rule():
    builds = {
        "FLIP_LOSS_EXTENSION": "on",
        "FLIP_LOSS_CUDA": "Off",
        "FLIP_LOSS_NATIVE": "NO",
        "FLIP_LOSS_PREBUILT": "false",
    }
    code, out = _python(["setup.py", "--name"], **builds)
    assert code == 0 and out.strip().splitlines()[-1] == "flip-loss", out
    for name in builds:
        code, out = _python(["setup.py", "--name"], **{**builds, name: "maybe"})
        assert code != 0, name
        assert f"flip_loss: {name}='maybe' must be one of 1, true, on, yes, 0, false, off, no" in out, out


@pytest.mark.slow
def test_the_cpu_kernels_refuse_a_capability_they_do_not_name():
    call = (
        "import torch, flip_loss; x = torch.rand(1, 3, 8, 8); "
        "print(flip_loss._C.cpu_capability(), float(torch.ops.flip.ldr_flip(x, x, 30.0, 'srgb', 0.0).sum()))"
    )
    code, out = _python(call, FLIP_LOSS_CPU_CAPABILITY="BASELINE")
    assert code == 0 and out.split()[-2:] == ["baseline", "0.0"], out
    code, out = _python(call, FLIP_LOSS_CPU_CAPABILITY="avx3")
    assert code != 0
    assert "flip_loss: FLIP_LOSS_CPU_CAPABILITY='avx3' must be one of baseline, default, avx2, avx512" in out


def test_the_cpp_reading_is_the_python_reading(tmp_path, monkeypatch):
    """csrc/flip/environment.h reads every value as flip_loss/environment.py does, with the same
    messages; its byte counts are positive decimal numbers."""
    lines = run_check_program(ROOT / "tests" / "cpp" / "environment_rules.cpp", tmp_path)
    checked = set()
    for line in lines[:-1]:
        kind, value, got = line.split("\t")
        checked.add(kind)
        monkeypatch.setenv("FLIP_LOSS_TEST_SWITCH", value)
        try:
            if kind == "switch" and value == "(unset)":
                monkeypatch.delenv("FLIP_LOSS_TEST_SWITCH")
                want = "on" if environment.switch("FLIP_LOSS_TEST_SWITCH", True) else "off"
            elif kind == "switch":
                on = environment.switch("FLIP_LOSS_TEST_SWITCH", None)
                want = "unset" if on is None else ("on" if on else "off")
            elif kind == "choice":
                want = environment.choice("FLIP_LOSS_TEST_SWITCH", ("baseline", "default", "avx2", "avx512"), "unset")
            else:
                whole = value.isdigit() and value.isascii() and 0 < int(value) < 2**63
                want = "unset" if value == "" else str(int(value)) if whole else None
                if want is None:
                    raise ValueError(
                        f"flip_loss: FLIP_LOSS_TEST_SWITCH='{value}' must be a positive whole number of bytes"
                    )
        except ValueError as exc:
            want = "error:" + str(exc)
        assert got == want, (kind, value)
    assert checked == {"switch", "choice", "bytes"}
