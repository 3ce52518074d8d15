"""The command line's outputs are complete or absent, and the exit code says which: a file system
that cuts a write short (a file size limit, a full disk) or refuses a step of the commit at any
point leaves every file as it was (exit 2); names that are not valid UTF-8 or hold characters that
a format treats specially are written literally (escaped where the format needs it); every gate
given applies, and an image without a partner fails a gated folder run; the progress output
follows the terminal/log rule; two runs on the same inputs write the same files."""

import csv
import io
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image

from flip_loss.cli import CSV_HEADER, main
from flip_loss.cli import console as console_module
from flip_loss.cli import outputs

ROOT = Path(__file__).resolve().parents[2]
HEADER_LINE = ",".join(f'"{c}"' for c in CSV_HEADER)


def snapshot(directory: Path):
    """Every file under ``directory`` (hidden ones too) with its bytes."""
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


@pytest.fixture
def work(tmp_path):
    """A reference, two test images and outputs of an earlier run: one error map, one pooled
    values file and a CSV file with a row."""
    g = __import__("numpy").random.default_rng(0)
    ref = g.random((24, 32, 3))
    Image.fromarray((ref * 255).astype("uint8")).save(tmp_path / "ref.png")
    Image.fromarray((ref * 200).astype("uint8")).save(tmp_path / "test.png")
    Image.fromarray((ref[::-1] * 255).astype("uint8")).save(tmp_path / "other.png")
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "flip.ref.test.67ppd.ldr.png").write_bytes(b"the earlier map")
    (tmp_path / "out" / "pooled_values.flip.ref.test.67ppd.ldr.txt").write_text("the earlier values\n")
    (tmp_path / "r.csv").write_text(HEADER_LINE + '\n"earlier","row"\n')
    return tmp_path


def run_cli(args, cwd, fsize=None, env=None):
    """``python -m flip_loss args`` in a child process, with a file size limit of ``fsize`` bytes."""
    environment = dict(os.environ)
    environment["PYTHONPATH"] = str(ROOT) + os.pathsep + environment.get("PYTHONPATH", "")
    environment.update(env or {})

    def limit():
        if fsize is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))

    return subprocess.run(
        [sys.executable, "-m", "flip_loss", *args],
        cwd=cwd,
        env=environment,
        preexec_fn=limit,
        capture_output=True,
        timeout=300,
    )


# --- 1. complete or absent --------------------------------------------------------------------


def test_a_csv_append_cut_short_by_the_file_size_limit_changes_nothing(work):
    # The CSV file just below the limit: its new row does not fit.
    with open(work / "r.csv", "ab") as f:
        f.write(b'"filler"\n' * ((65536 - 40 - (work / "r.csv").stat().st_size) // 9))
    before = snapshot(work)
    res = run_cli(["-r", "ref.png", "-t", "test.png", "-c", "r.csv", "-nerm", "-v", "0"], work, fsize=65536)
    assert res.returncode == 2, res.stderr
    assert b"cannot write the CSV file 'r.csv'" in res.stderr and b"no output was changed" in res.stderr
    assert snapshot(work) == before
    # Without the limit the same run appends one whole row.
    assert run_cli(["-r", "ref.png", "-t", "test.png", "-c", "r.csv", "-nerm", "-v", "0"], work).returncode == 0
    assert (work / "r.csv").read_bytes().startswith(before["r.csv"])
    rows = list(csv.reader(io.StringIO((work / "r.csv").read_text())))
    assert rows[-1][:2] == ["ref.png", "test.png"] and len(rows[-1]) == len(CSV_HEADER)


def test_maps_larger_than_the_file_size_limit_write_nothing(work):
    before = snapshot(work)
    res = run_cli(
        ["-r", "ref.png", "-t", "test.png", "other.png", "-txt", "-c", "r.csv", "-d", "out", "-v", "0"], work, fsize=512
    )
    assert res.returncode == 2, res.stderr
    assert snapshot(work) == before


class Refusal(Exception):
    pass


def failing_at(monkeypatch, k: int, error, links: bool):
    """Makes the k-th step of a commit (0-based; a hard link or a copy of a replaced file, a copy of
    permissions, a write, a rename) raise ``error``; returns the list of steps seen. ``links``:
    whether the file system has hard links (without, the replaced files are copied)."""
    seen = []

    def wrap(name, real):
        def step(*args, **kwargs):
            seen.append(name)
            if len(seen) - 1 == k:
                raise error
            return real(*args, **kwargs)

        return step

    def no_link(*args, **kwargs):
        raise OSError(1, "Operation not permitted")

    monkeypatch.setattr(outputs.os, "link", wrap("link", os.link) if links else no_link)
    monkeypatch.setattr(outputs.shutil, "copy2", wrap("copy", outputs.shutil.copy2))
    monkeypatch.setattr(outputs.os, "replace", wrap("replace", os.replace))
    monkeypatch.setattr(outputs.shutil, "copymode", wrap("copymode", outputs.shutil.copymode))
    monkeypatch.setattr(outputs, "_write_all", wrap("write", outputs._write_all))
    return seen


@pytest.mark.parametrize("links", [True, False], ids=["hard-links", "no-hard-links"])
@pytest.mark.parametrize("csv_name", ["r.csv", "new.csv"])
@pytest.mark.parametrize(
    "error", [OSError(28, "No space left on device"), KeyboardInterrupt()], ids=["full-disk", "interrupt"]
)
def test_a_commit_refused_at_any_step_leaves_every_file_as_it_was(work, monkeypatch, capsys, csv_name, error, links):
    args = ["-r", "ref.png", "-t", "test.png", "other.png", "-txt", "-c", csv_name, "-d", "out", "-v", "0"]
    monkeypatch.chdir(work)
    before = snapshot(work)
    k = 0
    while True:
        with monkeypatch.context() as m:
            seen = failing_at(m, k, error, links)
            code = main(args)
        if k >= len(seen):  # every step ran: the run succeeded
            break
        if seen[k] == "link" and isinstance(error, OSError):  # a refused link is replaced by a copy
            assert code == 0
            monkeypatch.chdir(work)
            for name, data in before.items():
                (work / name).write_bytes(data)
            for name in set(snapshot(work)) - set(before):
                (work / name).unlink()
            capsys.readouterr()
            k += 1
            continue
        expected = 130 if isinstance(error, KeyboardInterrupt) else 2
        assert code == expected, (k, seen, capsys.readouterr().err)
        assert snapshot(work) == before, (k, seen[k])
        capsys.readouterr()
        k += 1
    assert code == 0
    # Every kind of step was tried: the old files' links or copies, the CSV rows, the renames.
    assert {"link" if links else "copy", "write", "replace", "copymode"} <= set(seen)
    after = snapshot(work)
    assert after["out/flip.ref.test.67ppd.ldr.png"].startswith(b"\x89PNG")
    assert after[csv_name].count(b"\n") == (3 if csv_name == "new.csv" else 4)
    assert not [name for name in after if ".flip-loss-" in name]


# --- 2. any file name -------------------------------------------------------------------------


@pytest.fixture
def odd_names(tmp_path):
    """Folders with pairs named with a dollar sign, bytes that are not UTF-8, a quote and a comma."""
    refs, tests = tmp_path / "refs", tmp_path / "tests"
    refs.mkdir(), tests.mkdir()
    g = __import__("numpy").random.default_rng(1)
    names = [b"price $5 $x$", b"bad\xff\xfe", b'say "hi", ok']
    for i, name in enumerate(names):
        image = g.random((16, 16, 3))
        Image.fromarray((image * 255).astype("uint8")).save(os.fsdecode(bytes(refs) + b"/" + name + b".png"))
        Image.fromarray((image * 230 + 10 * i).astype("uint8")).save(os.fsdecode(bytes(tests) + b"/" + name + b".png"))
    return refs, tests, names


def test_odd_file_names_are_inputs_in_every_output(odd_names, tmp_path):
    refs, tests, names = odd_names
    out = tmp_path / "out"
    res = run_cli(
        [
            "--reference-dir",
            str(refs),
            "--test-dir",
            str(tests),
            "-d",
            str(out),
            "--histogram",
            "--report",
            str(tmp_path / "report"),
            "-txt",
            "-v",
            "2",
        ],
        tmp_path,
        env={"PYTHONIOENCODING": "utf-8:strict"},
    )
    assert res.returncode == 0, res.stderr
    # Printed: the names' bytes as they are.
    for name in names:
        assert b"<" + bytes(tests) + b"/" + name + b".png>" in res.stdout
    # The CSV file: the names' bytes, quoted as CSV quotes them.
    rows = list(csv.reader(io.StringIO((out / "summary.csv").read_bytes().decode("utf-8", "surrogateescape"))))
    assert sorted(os.fsencode(r[1]) for r in rows[1:]) == sorted(bytes(tests) + b"/" + n + b".png" for n in names)
    assert all(r[8] == "evaluated" for r in rows[1:])
    # A map, a text file and a histogram for each pair.
    written = os.listdir(bytes(out))
    for name in names:
        for kind in (b"flip.", b"pooled_values.flip.", b"weighted_histogram.flip."):
            assert any(f.startswith(kind + name + b".") for f in written), (kind, name)
    # The report: valid UTF-8, the undecodable bytes as \xNN, the others HTML-escaped.
    page = (tmp_path / "report" / "index.html").read_bytes().decode("utf-8")
    assert "bad\\xff\\xfe" in page and "price $5 $x$" in page and "say &quot;hi&quot;, ok" in page


def test_a_dollar_in_a_name_is_drawn_literally(tmp_path):
    import numpy as np

    from flip_loss.cli.histogram import draw_histogram
    from flip_loss.pooling import pool

    error = np.random.default_rng(2).random((16, 16)).astype(np.float32)
    title = []
    import matplotlib.axes

    real_set_title = matplotlib.axes.Axes.set_title

    def set_title(self, label, *args, **kwargs):
        text = real_set_title(self, label, *args, **kwargs)
        title.append((text.get_text(), text.get_parse_math()))
        return text

    matplotlib.axes.Axes.set_title = set_title
    try:
        draw_histogram(str(tmp_path / "h.png"), [("a $x^2$ b\udcff", error, pool(error))], False, None, True)
        draw_histogram(
            str(tmp_path / "h2.png"), [("$a", error, pool(error)), ("b$", error, pool(error))], False, None, True
        )
    finally:
        matplotlib.axes.Axes.set_title = real_set_title
    assert title[0] == ("Weighted FLIP histogram: a $x^2$ b\\xff", False)
    assert (tmp_path / "h.png").read_bytes().startswith(b"\x89PNG") and (tmp_path / "h2.png").exists()


@pytest.mark.parametrize("encoding", ["utf-8:strict", "ascii:strict"])
def test_printing_an_undecodable_name_to_a_strict_stream(tmp_path, encoding):
    g = __import__("numpy").random.default_rng(3)
    image = (g.random((16, 16, 3)) * 255).astype("uint8")
    name = os.fsdecode(b"caf\xc3\xa9 bad\xff.png")
    Image.fromarray(image).save(tmp_path / "ref.png")
    Image.fromarray(image[::-1]).save(tmp_path / name)
    res = run_cli(["-r", "ref.png", "-t", name, "-nerm", "-v", "1"], tmp_path, env={"PYTHONIOENCODING": encoding})
    assert res.returncode == 0, res.stderr
    # the bytes of the name where the stream's encoding allows them, escapes where it does not
    want = b"caf\xc3\xa9 bad\xff.png" if encoding.startswith("utf-8") else b"caf\\xe9 bad\\xff.png"
    assert b"test image <" + want + b">" in res.stdout


def test_write_text_falls_back_without_a_byte_buffer():
    class Strict(io.StringIO):
        encoding = "ascii"

        def write(self, text):
            text.encode("ascii")
            return super().write(text)

    stream = Strict()
    console_module.write_text(stream, "caf\u00e9 bad\udcff\n")
    assert stream.getvalue() == "caf\\xe9 bad\\xff\n"


# --- 5. gates that cannot pass by accident ------------------------------------------------------


def test_every_gate_given_applies(work, capsys):
    os.chdir(work)
    base = ["-r", "ref.png", "-t", "test.png", "-nerm", "-v", "0"]
    assert main(base + ["--fail-above", "mean", "0.99"]) == 0
    assert main(base + ["--fail-above", "max", "0.01"]) == 1
    capsys.readouterr()
    # The first gate failing and the last passing, and the other way round: both fail.
    assert main(base + ["--fail-above", "max", "0.01", "--fail-above", "mean", "0.99"]) == 1
    assert "the max FLIP error" in capsys.readouterr().err
    assert main(base + ["--fail-above", "mean", "0.99", "--fail-above", "max", "0.01"]) == 1
    assert main(base + ["-etp", "mean", "0.99", "--fail-above", "weighted-median", "0.99"]) == 0
    capsys.readouterr()
    assert main(base + ["--fail-above", "mean", "0.5", "--fail-above", "MEAN", "0.6"]) == 2
    assert "--fail-above mean is given twice" in capsys.readouterr().err


def test_the_csv_says_each_pairs_gate_verdict(work):
    os.chdir(work)
    assert (
        main(
            [
                "-r",
                "ref.png",
                "-t",
                "test.png",
                "ref.png",
                "-nerm",
                "-v",
                "0",
                "-c",
                "g.csv",
                "--fail-above",
                "max",
                "0.01",
            ]
        )
        == 1
    )
    rows = list(csv.reader(open("g.csv")))
    assert [r[-2:] for r in rows[1:]] == [["evaluated", "fail"], ["evaluated", "pass"]]


def test_a_gated_folder_run_with_a_missing_render_fails(tmp_path, capsys):
    refs, tests = tmp_path / "refs", tmp_path / "tests"
    refs.mkdir(), tests.mkdir()
    image = Image.new("RGB", (16, 16), (90, 120, 200))
    for name in ("a", "b", "c"):
        image.save(refs / f"{name}.png")
    image.save(tests / "a.png")
    image.save(tests / "c.png")  # b's render is missing
    args = [
        "--reference-dir",
        str(refs),
        "--test-dir",
        str(tests),
        "-d",
        str(tmp_path / "out"),
        "-nerm",
        "--no-progress",
        "-v",
        "1",
    ]
    # no gate: a warning, exit 0; a gate: an error, exit 4; --allow-unmatched: the gate's own verdict
    assert main(args) == 0
    assert "warning: 1 reference image(s) without a test image" in capsys.readouterr().err
    assert main(args + ["--fail-above", "mean", "0.5"]) == 4
    err = capsys.readouterr().err
    assert "error: 1 reference image(s) without a test image" in err and "b.png" in err
    rows = list(csv.reader(open(tmp_path / "out" / "summary.csv")))
    assert rows[-1][:2] == [str(refs / "b.png"), ""] and rows[-1][-2:] == [
        f"not evaluated: no test image of the same name in '{tests}'",
        "fail",
    ]
    assert main(args + ["--fail-above", "mean", "0.5", "--allow-unmatched"]) == 0
    assert main(["-r", str(refs / "a.png"), "-t", str(tests / "a.png"), "--allow-unmatched"]) == 2


def test_the_report_gate_verdict_counts_every_gate_and_the_missing_pairs(tmp_path):
    from flip_loss.cli.report import PairRecord, ReportSettings
    from flip_loss.cli.report import _summary as render_page

    def settings(gate, unmatched_fail=True):
        return ReportSettings(
            67.0, False, "aces", gate, (), 3, "0", "2026-01-01T00:00:00+00:00", unmatched_fail=unmatched_fail
        )

    pooled = (0.1, 0.2, 0.05, 0.3, 0.0, 0.9)
    records = [PairRecord(1, "r/a.png", "t/a.png", pooled=pooled), PairRecord(2, "r/b.png", "", failure="missing")]
    page = render_page(records, settings((("mean", 0.5), ("max", 0.95))))
    assert 'data-verdict="failed"' in page and "1 not evaluated" in page
    page = render_page(records, settings((("mean", 0.5), ("max", 0.95)), unmatched_fail=False))
    assert 'data-verdict="passed"' in page
    page = render_page(records[:1], settings((("mean", 0.5), ("max", 0.5))))
    assert 'data-verdict="failed"' in page and "--fail-above mean 0.5 --fail-above max 0.5" in page


# --- progress: a bar on a terminal, plain lines now and then in a log ---------------------------


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_progress_in_a_log_is_an_occasional_plain_line():
    stream, clock = io.StringIO(), Clock()
    progress = console_module.Progress(100, stream, clock=clock, terminal=False)
    for _ in range(100):
        clock.now += 1.0
        progress.advance()
    progress.close()
    lines = stream.getvalue().splitlines()
    assert "\r" not in stream.getvalue() and "\x1b" not in stream.getvalue()
    assert len(lines) == 3  # at 30, 60 and 90 seconds
    assert lines[0].startswith("flip-loss: 30/100 pairs (30%), 00:30 elapsed, about 01:10 left")


def test_progress_on_a_terminal_is_a_bar_redrawn_in_place():
    stream, clock = io.StringIO(), Clock()
    progress = console_module.Progress(4, stream, clock=clock, terminal=True)
    for _ in range(4):
        clock.now += 1.0
        progress.advance()
    progress.clear()
    text = stream.getvalue()
    assert "\n" not in text and text.count("\r") == 5 and "4/4 pairs (100%)" in text and text.endswith("\r\x1b[K")


# --- comparable outputs -------------------------------------------------------------------------


def test_two_runs_on_the_same_inputs_write_the_same_files(tmp_path):
    refs, tests = tmp_path / "refs", tmp_path / "tests"
    refs.mkdir(), tests.mkdir()
    g = __import__("numpy").random.default_rng(4)
    for name in ("a", "b"):
        image = g.random((20, 20, 3))
        Image.fromarray((image * 255).astype("uint8")).save(refs / f"{name}.png")
        Image.fromarray((image * 240).astype("uint8")).save(tests / f"{name}.png")
    trees = []
    for run in ("one", "two"):
        res = run_cli(
            [
                "--reference-dir",
                str(refs),
                "--test-dir",
                str(tests),
                "-d",
                run,
                "-txt",
                "--histogram",
                "--report",
                f"{run}-report",
                "-v",
                "0",
            ],
            tmp_path,
            env={"SOURCE_DATE_EPOCH": "1700000000"},
        )
        assert res.returncode == 0, res.stderr
        trees.append({**snapshot(tmp_path / run), **snapshot(tmp_path / f"{run}-report")})
    assert trees[0] == trees[1] and len(trees[0]) > 8
    assert b"2023-11-14T22:13:20+00:00" in trees[0]["index.html"]
