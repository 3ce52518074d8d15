"""Every user mistake on every command of ``flip-loss`` is a usage error: exit code 2, one
``error:`` line naming the option, no traceback, nothing written, and for the evaluator found when
the command line is parsed, before any image is read (a value refused only when a pair needs it
would skip that pair in folder mode and let the run write the others). Each option of each command
has rows of bad values below, and a test holds the tables to the parsers, so that a new option
comes with its own rows."""

import os
import subprocess
import sys

import pytest

import flip_loss
from cli_runs import ROOT
from flip_loss.cli import example_paths, main
from flip_loss.cli.arguments import build_parser, parse_arguments
from flip_loss.cli.errors import UsageError
from flip_loss.psychophysics import cli as psychophysics_cli

REF, TEST = (str(p) for p in example_paths())

# The evaluator (no command): option dest -> argument lists, each a mistake about that option.
# "{d}" is a folder that exists. The lists come after "-r REF -t TEST -v 0" unless they give
# their own images (-r, -t, --example or a folder).
EVALUATOR = {
    "reference": [["-r", ""], ["-r", "a\0b.png"], ["-t", TEST, "-r"]],
    "test": [["-t", ""], ["-r", REF, "-t"], ["-r", REF, "-t", TEST, "nul\0.png"]],
    "reference_dir": [
        ["--reference-dir", ""],
        ["--reference-dir", "{d}"],
        ["--reference-dir", "{d}", "--test-dir", "{d}", "-r", REF],
    ],
    "test_dir": [
        ["--test-dir", ""],
        ["--test-dir", "{d}"],
        ["--reference-dir", "{d}", "--test-dir", "{d}", "-t", TEST],
    ],
    "example": [["--example=yes"], ["--example", "-r", REF]],
    "alpha": [["--alpha", "opaque"], ["--alpha", "STRAIGHTER"], ["--alpha", "ignore", "--background", "white"]],
    "background": [["--background", "grey"], ["--background", "checkerboard", "--alpha", "ignore"]],
    "ppd": [
        ["--ppd", "x"],
        ["--ppd", "-1"],
        ["--ppd", "0"],
        ["--ppd", "nan"],
        ["--ppd", "1e9"],
        ["--ppd", "60", "-vc", "1", "1", "1"],
    ],
    "viewing_conditions": [
        ["-vc", "0.7", "0.7"],
        ["-vc", "0.7", "0", "3840"],
        ["-vc", "-1", "1", "1"],
        ["-vc", "x", "1", "1"],
        ["-vc", "1e-300", "1e300", "1"],
    ],
    "directory": [["-d", ""], ["-d", "a\0b"], ["-d"]],
    "output": [
        ["-o", ""],
        ["-o", "map.jpg"],
        ["-o", "map.png", "--no-error-map"],
        ["-r", REF, "-t", TEST, TEST, "-o", "map.png"],
    ],
    "basename": [
        ["-b", ""],
        ["-b", "sub/name"],
        ["-b", ".."],
        ["-b", "x", "-o", "x.png"],
        ["-r", REF, "-t", TEST, TEST, "-b", "x"],
    ],
    "no_magma": [["--no-magma=1"]],
    "no_error_map": [["--no-error-map=1"]],
    "textfile": [["--textfile=1"]],
    "csv": [["-c", ""], ["-c", "a\0b.csv"]],
    "report": [["--report", ""], ["--report", "a\0b"]],
    "verbosity": [["-v", "3"], ["-v", "-1"], ["-v", "x"]],
    "no_progress": [["--no-progress=1"]],
    "timing": [["--timing=1"]],
    "tone_mapper": [["-tm", "filmic"], ["-tm", ""]],
    "start_exposure": [
        ["-cstart", "x"],
        ["-cstart", "nan"],
        ["-cstart", "2", "-cstop", "1"],
        ["-cstart=-1e300"],
        ["-cstart=-200"],
        ["-cstart=-149.5"],
        ["-cstart", "128"],
        ["-cstart=-149", "-cstop", "127"],  # 276 exposures, one per stop: more than 256
    ],
    "stop_exposure": [["-cstop", "inf"], ["-cstop", "1e39"], ["-cstop", "127.01"], ["-cstop=-150"]],
    "num_exposures": [["-n", "-3"], ["-n", "0"], ["-n", "1"], ["-n", "2.5"], ["-n", "257"], ["-n", "x"]],
    "no_exposure_map": [["--no-exposure-map=1"]],
    "histogram": [["--histogram=1"]],
    "log": [["--log"], ["--log=1", "-hist"]],
    "y_max": [
        ["--y-max", "2"],
        ["-hist", "--y-max", "-1"],
        ["-hist", "--y-max", "inf"],
        ["-hist", "--y-max", "x"],
        ["-hist", "--log", "--y-max", "1e300"],
    ],
    "exclude_pooled_values": [["--exclude-pooled-values"]],
    "fail_above": [
        ["--fail-above", "mean"],
        ["--fail-above", "median", "0.1"],
        ["--fail-above", "mean", "-0.1"],
        ["--fail-above", "max", "nan"],
        ["--fail-above", "mean", "0.1", "--fail-above", "MEAN", "0.2"],
    ],
    "exit_on_test": [["--exit-on-test=1"]],
    "allow_unmatched": [["--allow-unmatched"]],
    "device": [["--device", "tpu"], ["--device", ""]],
    "dist_timeout": [
        ["--dist-timeout", "-1"],
        ["--dist-timeout", "0"],
        ["--dist-timeout", "1e9"],
        ["--dist-timeout", "nan"],
    ],
    "version": [["--version=1"]],
    "command": [["bogus"], ["-v", "1", "psychophysics"]],
}
# How the error line names each option without a long form of its own.
EVALUATOR_NAMES = {"command": ("COMMAND", "--verbosity")}

# The psychophysics suite: "{out}" is a folder that does not exist yet, "{file}" a file.
PSYCHOPHYSICS = {
    "out": [["--out", ""], ["--out", "a\0b"], ["--out"], ["--out", "{file}"]],
    "metrics": [
        ["--metrics", "ldr-flip", "LDR-FLIP"],
        ["--metrics", "psnr,hyab,psnr"],
        ["--metrics", "lpips"],
        ["--metrics", ","],
        ["--metrics"],
    ],
    "quick": [["--quick=1"], ["--quick", "--preset", "full"]],
    "preset": [["--preset", "fastest"], ["--preset", "medium", "--quick"]],
    "tests": [["--tests", "flicker"], ["--tests", "matching_sf", "matching_sf"], ["--tests", ""], ["--tests"]],
    "device": [["--device", "meta"], ["--device", "tpu"], ["--device", "cuda:99"], ["--device", ""]],
    "threads": [["--threads", "0"], ["--threads", "-2"], ["--threads", "1.5"], ["--threads", "x"]],
    "no_progress": [["--no-progress=1"]],
    "no_plots": [["--no-plots=1"]],
}


def _dests(parser):
    return {a.dest for a in parser._actions if a.dest != "help"}


def _names(parser, dest):
    """The option strings of ``dest`` the error line may name (the long forms)."""
    (action,) = [a for a in parser._actions if a.dest == dest]
    return tuple(s for s in action.option_strings if s.startswith("--"))


def test_every_option_of_every_command_has_rows():
    assert _dests(build_parser()) == set(EVALUATOR)
    assert _dests(psychophysics_cli.build_parser()) == set(PSYCHOPHYSICS)
    assert all(EVALUATOR.values()) and all(PSYCHOPHYSICS.values())


def assert_usage_error(code, captured, prefix, names):
    assert code == 2, captured.err
    assert "Traceback" not in captured.err and captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith(prefix + ": error: ") and lines[0].count("error:") == 1, lines[0]
    assert any(name in lines[0] for name in names), (names, lines[0])


@pytest.mark.parametrize(
    "dest, argv", [(dest, argv) for dest, rows in EVALUATOR.items() for argv in rows], ids=lambda v: repr(v)[:60]
)
def test_evaluator_option_mistakes_are_usage_errors(dest, argv, tmp_path, monkeypatch, capsys):
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    argv = [a.format(d=tmp_path) for a in argv]
    own_images = any(a in argv for a in ("-r", "-t", "--example", "--reference-dir", "--test-dir", "bogus"))
    base = [] if own_images or dest == "command" else ["-r", REF, "-t", TEST]
    argv = base + argv + (["-v", "0"] if dest not in ("verbosity", "command") else [])
    with pytest.raises(UsageError):
        parse_arguments(argv)
    code = main(argv)
    names = EVALUATOR_NAMES.get(dest) or _names(build_parser(), dest)
    assert_usage_error(code, capsys.readouterr(), "flip-loss", names)
    assert os.listdir(work) == []


@pytest.mark.parametrize("entry", ["flip-loss psychophysics", "python -m flip_loss.psychophysics"])
@pytest.mark.parametrize(
    "dest, argv", [(dest, argv) for dest, rows in PSYCHOPHYSICS.items() for argv in rows], ids=lambda v: repr(v)[:60]
)
def test_psychophysics_option_mistakes_are_usage_errors(entry, dest, argv, tmp_path, capsys):
    out, file = tmp_path / "out", tmp_path / "file"
    file.write_text("not a folder")
    argv = [a.format(out=out, file=file) for a in argv]
    # A small run, should a mistake slip through: every row below overrides what it is about.
    base = ["--out", str(out), "--preset", "smoke", "--tests", "matching_sf", "--metrics", "psnr"]
    base += ["--no-progress", "--no-plots"]
    args = base + argv
    if entry == "flip-loss psychophysics":
        code = main(["psychophysics", *args])
    else:
        code = psychophysics_cli.main(args)
    assert_usage_error(
        code, capsys.readouterr(), "flip-loss psychophysics", _names(psychophysics_cli.build_parser(), dest)
    )
    assert not out.exists() and file.read_text() == "not a folder"


def test_psychophysics_checks_every_option_before_the_suite_runs(monkeypatch, capsys):
    """The options are checked when they are parsed: a run that passes them reaches the suite with
    unique, known metrics and tests (a duplicate used to reach it and end as an internal error)."""
    args, settings, device, metrics, notes, tests = psychophysics_cli.parse_options(
        ["--out", "x", "--metrics", "ldr-flip,PSNR", "hyab", "--tests", "matching_*", "--threads", "2", "--quick"]
    )
    assert [m.name for m in metrics] == ["LDR-FLIP", "PSNR", "HyAB"]
    assert [t.key for t in tests] == ["matching_sf", "matching_colour"]
    assert str(device) == "cpu" and args.threads == 2 and settings is psychophysics_cli_presets()["quick"]


def psychophysics_cli_presets():
    from flip_loss.psychophysics.suite import PRESETS

    return PRESETS


def run_python(program: str, cwd, **variables):
    """``program`` in a fresh Python that imports this checkout (the launcher is a top-level module
    beside the package); ``variables`` set (None: unset) in its environment."""
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    for name, value in variables.items():
        env.pop(name, None)
        if value is not None:
            env[name] = value
    res = subprocess.run([sys.executable, "-c", program], cwd=cwd, env=env, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    return res


def test_the_command_answers_help_version_and_usage_errors_without_torch(tmp_path):
    """The flip-loss command (its console script, _flip_loss_launcher) answers --help, --version
    and a usage error without importing torch or numpy, leaving nothing of flip_loss imported; a
    command that evaluates then imports the package whole (the ops registered)."""
    program = (
        "import sys, _flip_loss_launcher as launcher\n"
        "heavy = lambda: sorted(m for m in ('torch', 'numpy', 'flip_loss') if m in sys.modules)\n"
        "codes = [launcher.main(a) for a in (['--help'], ['--version'], ['-r', 'a.png', '-t', 'b.png', '-cstop', '128'])]\n"
        "before = heavy()\n"
        "codes.append(launcher.main(['--example', '-nerm', '-v', '0']))\n"
        "import flip_loss\n"
        "print('RESULT', codes, before, heavy(), flip_loss.HAS_EXTENSION, flip_loss.__version__)\n"
    )
    res = run_python(program, tmp_path)
    assert res.stdout.startswith("usage: flip-loss ") and f"\nflip-loss {flip_loss.__version__}\n" in res.stdout
    assert res.stderr.splitlines() == [
        "flip-loss: error: argument -cstop/--stop-exposure: expected a finite number (of stops) from -149 to 127 "
        "(2^c must be a nonzero, finite float32), got '128' (see --help)"
    ]
    result = res.stdout.splitlines()[-1]
    assert result == f"RESULT [0, 0, 2, 0] [] ['flip_loss', 'numpy', 'torch'] True {flip_loss.__version__}"
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("given", [None, "ACTIVE"])
def test_the_command_lets_idle_compute_threads_sleep_unless_told_otherwise(tmp_path, given):
    """The flip-loss command has torch load OpenMP with OMP_WAIT_POLICY=PASSIVE (idle threads
    sleep), unless the user set a policy, and leaves the environment as it found it."""
    program = (
        "import builtins, os, sys\n"
        "seen, real = [], builtins.__import__\n"
        "def spy(name, *args, **kwargs):\n"
        "    if name == 'torch' and 'torch' not in sys.modules and not seen:\n"
        "        seen.append(os.environ.get('OMP_WAIT_POLICY'))\n"
        "    return real(name, *args, **kwargs)\n"
        "builtins.__import__ = spy\n"
        "import _flip_loss_launcher as launcher\n"
        "code = launcher.main(['--example', '-nerm', '-v', '0'])\n"
        "print('RESULT', code, seen, os.environ.get('OMP_WAIT_POLICY'))\n"
    )
    res = run_python(program, tmp_path, OMP_WAIT_POLICY=given)
    assert res.stdout.splitlines()[-1] == f"RESULT 0 [{(given or 'PASSIVE')!r}] {given}"


def test_the_console_script_leaves_its_objects_to_the_exit(tmp_path):
    """The console script's entry point (pyproject.toml) runs the command with the garbage collector
    on and what was imported frozen (gc.freeze), returns its exit code and then freezes the objects
    alive (the interpreter's last collection skips them); launcher.main, which other Python code
    may call, freezes nothing and leaves the collector as it was."""
    import tomllib

    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["flip-loss"] == "_flip_loss_launcher:console_main"
    program = (
        "import gc, sys, _flip_loss_launcher as launcher\n"
        "first = launcher.main(['--example', '-nerm', '-v', '0'])\n"
        "after_main = (gc.get_freeze_count(), gc.isenabled())\n"
        "import flip_loss.cli\n"
        "real, seen = flip_loss.cli.main, []\n"
        "def spy(argv):\n"
        "    seen.append((gc.isenabled(), gc.get_freeze_count() > 0))\n"
        "    return real(argv)\n"
        "flip_loss.cli.main = spy\n"
        "sys.argv = ['flip-loss', '--example', '-nerm', '-v', '0']\n"
        "code = launcher.console_main()\n"
        "print('RESULT', first, after_main, code, seen, gc.isenabled())\n"
    )
    res = run_python(program, tmp_path)
    assert res.stdout.splitlines()[-1] == "RESULT 0 (0, True) 0 [(True, True)] True"


@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM", "SIGHUP"])
def test_the_command_interrupted_while_torch_loads_says_so(tmp_path, sig):
    """Ctrl-C, SIGTERM or SIGHUP during the seconds the flip-loss command spends importing torch
    end it as they end a run: one line, exit code 130, no traceback, nothing written, and the
    signals' handlers as they were."""
    program = (
        "import builtins, os, signal, sys\n"
        "real = builtins.__import__\n"
        "def spy(name, *args, **kwargs):\n"
        "    if name == 'torch' and 'torch' not in sys.modules:\n"
        f"        os.kill(os.getpid(), signal.{sig})\n"
        "    return real(name, *args, **kwargs)\n"
        "builtins.__import__ = spy\n"
        "import _flip_loss_launcher as launcher\n"
        "before = [signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)]\n"
        "code = launcher.main(['--example', '-d', 'out'])\n"
        "after = [signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)]\n"
        "print('RESULT', code, before == after, 'torch' in sys.modules)\n"
    )
    res = run_python(program, tmp_path)
    assert res.stdout.splitlines()[-1] == "RESULT 130 True False"
    assert res.stderr == "flip-loss: interrupted; no output file was written\n"
    assert os.listdir(tmp_path) == []
