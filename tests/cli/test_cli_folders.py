"""The command line's folder mode: pairs matched by name, unmatched and failed pairs reported, the
others finished, its option errors."""

import pytest
from PIL import Image

from flip_loss.cli import main
from flip_loss.pooling import pool
from cli_runs import H, HEADER_LINE, W, error_line, expected_map, formatted, printed_values, snapshot


def test_folder_mode(folders, tmp_path, capsys):
    refs, tests = folders
    out = tmp_path / "out"
    assert main(["--reference-dir", str(refs), "--test-dir", str(tests), "-d", str(out), "-txt"]) == 0
    captured = capsys.readouterr()
    warnings_ = [ln for ln in captured.err.splitlines() if ln.startswith("flip-loss: warning: ")]
    assert any("only_ref.png" in w for w in warnings_) and any("only_test.bmp" in w for w in warnings_)
    assert any("render.exr" in w and "without a reference" in w for w in warnings_)
    assert any("render.hdr" in w and "Radiance HDR" in w and "OpenEXR" in w for w in warnings_)
    assert any("notes.txt" in w for w in warnings_)
    assert "\r" not in captured.err  # stderr is not a terminal: no bar redrawn in place
    vals = printed_values(captured.out)
    assert len(vals["Mean"]) == 2
    assert vals["Mean"][0] == formatted(pool(expected_map(refs / "a.png", tests / "a.png")))["Mean"]
    assert f"Summary CSV: {out / 'summary.csv'}" in captured.out
    assert sorted(p.name for p in out.iterdir()) == [
        "flip.a.a.67ppd.ldr.png",
        "flip.b.b.67ppd.ldr.png",
        "pooled_values.flip.a.a.67ppd.ldr.txt",
        "pooled_values.flip.b.b.67ppd.ldr.txt",
        "summary.csv",
    ]
    rows = (out / "summary.csv").read_text().splitlines()
    assert len(rows) == 6 and rows[1].startswith(f'"{refs / "a.png"}","{tests / "a.png"}",')
    assert rows[2].startswith(f'"{refs / "b.png"}","{tests / "b.jpg"}",')
    # the images without a partner, by name, with the reason
    assert (
        rows[3] == f'"{refs / "only_ref.png"}","","","","","","","","not evaluated: no test image of the same '
        f'name in \'{tests}\'",""'
    )
    assert rows[4].startswith(f'"","{tests / "only_test.bmp"}",') and rows[5].startswith(
        f'"","{tests / "render.exr"}",'
    )
    # --csv elsewhere, no maps, no bar, gate: the unmatched images fail it (exit code 4) unless
    # --allow-unmatched, and every row says its verdict.
    for allow, code, verdict in ((False, 4, "fail"), (True, 1, "skipped")):
        csv_path = tmp_path / f"all-{allow}.csv"
        assert (
            main(
                [
                    "--reference-dir",
                    str(refs),
                    "--test-dir",
                    str(tests),
                    "-c",
                    str(csv_path),
                    "-nerm",
                    "--no-progress",
                    "-v",
                    "1",
                    "--fail-above",
                    "mean",
                    "0.001",
                ]
                + (["--allow-unmatched"] if allow else [])
            )
            == code
        )
        captured = capsys.readouterr()
        assert captured.err.count("gate failed") == 2
        errors = [ln for ln in captured.err.splitlines() if ln.startswith("flip-loss: error: ")]
        assert len(errors) == (0 if allow else 2)
        rows = [ln.split('","') for ln in csv_path.read_text().splitlines()]
        assert [r[-1] for r in rows[1:]] == ['fail"', 'fail"', f'{verdict}"', f'{verdict}"', f'{verdict}"']
    assert not (tmp_path / "summary.csv").exists()


def test_folder_mode_reports_failed_pairs_and_finishes_the_others(folders, tmp_path, capsys):
    refs, tests = folders
    Image.new("RGB", (W + 3, H)).save(tests / "b.jpg")  # another size
    data = (refs / "a.png").read_bytes()
    Image.open(refs / "a.png").save(refs / "c.png")
    (tests / "c.png").write_bytes(data[: len(data) // 2])  # a truncated test image
    Image.open(refs / "a.png").save(refs / "d.png")
    Image.open(tests / "a.png").save(tests / "d.png")
    out = tmp_path / "out"
    out.mkdir()
    (out / "summary.csv").write_text(HEADER_LINE + '\n"old","row"\n')
    inputs = snapshot(refs, tests)
    assert main(["--reference-dir", str(refs), "--test-dir", str(tests), "-d", str(out), "-txt", "--no-progress"]) == 4
    captured = capsys.readouterr()
    errors = [ln for ln in captured.err.splitlines() if ln.startswith("flip-loss: error: ")]
    assert len(errors) == 2
    assert str(tests / "b.jpg") in errors[0] and f"{W + 3}x{H}" in errors[0] and "same size" in errors[0]
    assert str(tests / "c.png") in errors[1] and "damaged or truncated" in errors[1]
    assert (
        f"7 pair(s) found: 2 evaluated, 5 not evaluated (2 with an error, 3 without a partner)\nSummary "
        f"CSV: {out / 'summary.csv'}" in captured.out
    )
    assert snapshot(refs, tests) == inputs
    assert sorted(p.name for p in out.iterdir()) == [
        "flip.a.a.67ppd.ldr.png",
        "flip.d.d.67ppd.ldr.png",
        "pooled_values.flip.a.a.67ppd.ldr.txt",
        "pooled_values.flip.d.d.67ppd.ldr.txt",
        "summary.csv",
    ]  # nothing of b and c, no temporary file
    rows = (out / "summary.csv").read_text().splitlines()
    assert rows[:2] == [HEADER_LINE, '"old","row"'] and len(rows) == 2 + 4 + 3  # a, b, c, d, 3 unmatched
    assert rows[2].startswith(f'"{refs / "a.png"}","{tests / "a.png"}",')
    # the failed pairs in their place, with the reason and no values
    assert rows[3].startswith(f'"{refs / "b.png"}","{tests / "b.jpg"}","","","","","","","not evaluated: ')
    assert "same size" in rows[3] and "damaged or truncated" in rows[4]
    assert rows[5].startswith(f'"{refs / "d.png"}","{tests / "d.png"}",')
    want = formatted(pool(expected_map(refs / "d.png", tests / "d.png")))
    assert rows[5].split(",")[2:8] == [f'"{v}"' for v in want.values()]
    # A failed pair outranks the gate (exit 1), which still reports its failures.
    assert (
        main(
            [
                "--reference-dir",
                str(refs),
                "--test-dir",
                str(tests),
                "-nerm",
                "-c",
                str(tmp_path / "g.csv"),
                "-v",
                "0",
                "--fail-above",
                "mean",
                "0.001",
                "--allow-unmatched",
            ]
        )
        == 4
    )
    err = capsys.readouterr().err
    assert err.count("flip-loss: error: ") == 2 and err.count("flip-loss: gate failed: ") == 2


@pytest.mark.parametrize(
    "argv,needle",
    [
        (["--reference-dir", "{refs}"], "both --reference-dir and --test-dir"),
        (["--test-dir", "{tests}"], "both --reference-dir and --test-dir"),
        (["--reference-dir", "{refs}", "--test-dir", "{d}/nope"], "does not exist"),
        (["--reference-dir", "{refs}", "--test-dir", "{refs}/a.png"], "not a directory"),
        (["--reference-dir", "{refs}", "--test-dir", "{tests}", "-r", "{refs}/a.png"], "cannot be combined"),
        (["--reference-dir", "{refs}", "--test-dir", "{tests}", "-b", "x"], "cannot be combined"),
        (["--reference-dir", "{refs}", "--test-dir", "{tests}", "--example"], "cannot be combined"),
        (["--reference-dir", "{refs}", "--test-dir", "{d}/empty"], "no image in the test folder"),
    ],
)
def test_folder_mode_errors(argv, needle, folders, tmp_path, capsys):
    refs, tests = folders
    (tmp_path / "empty").mkdir()
    args = [a.format(refs=refs, tests=tests, d=tmp_path) for a in argv]
    assert main(args + ["-v", "0"]) == 2
    assert needle in error_line(capsys.readouterr().err)


@pytest.mark.parametrize(
    "argv,needle",
    [
        (["-b", "x", "-t", "{test}", "{test}"], "one test image"),
        (["-b", "sub/x"], "plain file name"),
        (["-b", "x", "-o", "{d}/x.png"], "not allowed with"),
        (["--log"], "only applies to --histogram"),
        (["--y-max", "10"], "only applies to --histogram"),
        (["-epv"], "only applies to --histogram"),
        (["-hist", "--y-max", "0"], "positive number"),
        (["--fail-above", "mean"], "expected 2 arguments"),
        (["--fail-above", "median", "0.1"], "mean, weighted-median, max"),
        (["--fail-above", "mean", "-0.1"], "[0, 1]"),
        (["--fail-above", "max", "nan"], "[0, 1]"),
        (["--fail-above", "max", "abc"], "[0, 1]"),
        (["-c", "{d}"], "is a directory"),
        (["-c", "{d}/no/such/dir/x.csv"], "does not exist"),
        (["-r", "{d}/notes.txt"], "cannot read image"),
    ],
)
def test_new_option_errors(argv, needle, pair, tmp_path, capsys):
    ref, test = pair
    (tmp_path / "notes.txt").write_text("not an image")
    args = [a.format(test=test, d=tmp_path) for a in argv]
    base = ["-r", str(ref), "-t", str(test)]
    if "-r" in args:
        base = ["-t", str(test)]
    if "-t" in args:
        base = ["-r", str(ref)]
    assert main(base + args + ["-nerm"] * ("-o" not in args)) == 2
    assert needle in error_line(capsys.readouterr().err)


def test_folder_mode_reads_ahead_and_writes_behind_in_bounded_steps(pair, tmp_path, monkeypatch, capsys):
    """The next pairs are read while a pair's maps are written (its writing waits here until a
    later pair's reading has begun, which a run one pair after the other never reaches), yet no
    pair is read more than AHEAD + BEHIND + 1 pairs before the last one recorded, and the pairs
    are recorded in order, each once."""
    import threading

    from flip_loss.cli import pair_steps, pipeline, run

    refs, tests = tmp_path / "refs", tmp_path / "tests"
    refs.mkdir(), tests.mkdir()
    for i in range(7):
        (refs / f"p{i}.png").write_bytes(pair[0].read_bytes())
        (tests / f"p{i}.png").write_bytes(pair[1].read_bytes())
    events, lock, later_read = [], threading.Lock(), threading.Event()
    read, render, record = pair_steps.PairWork.read, pair_steps.PairWork.render, run.Run.record_result

    def reading(self, index, reference, test):
        with lock:
            events.append(("read", index, sum(kind == "recorded" for kind, _, _ in events)))
        if index == 2:
            later_read.set()
        return read(self, index, reference, test)

    def rendering(self, p, maps):
        if p.index == 1:
            events.append(("overlapped", 1, later_read.wait(timeout=60)))
        return render(self, p, maps)

    def recording(self, p, result, report_record):
        with lock:
            events.append(("recorded", p.index, None))
        return record(self, p, result, report_record)

    monkeypatch.setattr(pair_steps.PairWork, "read", reading)
    monkeypatch.setattr(pair_steps.PairWork, "render", rendering)
    monkeypatch.setattr(run.Run, "record_result", recording)
    argv = ["--reference-dir", str(refs), "--test-dir", str(tests), "-d", str(tmp_path / "out"), "-v", "0"]
    assert main(argv) == 0
    assert ("overlapped", 1, True) in events
    assert [i for kind, i, _ in events if kind == "recorded"] == list(range(1, 8))
    window = pipeline.AHEAD + pipeline.BEHIND + 1
    assert all(index - recorded <= window for kind, index, recorded in events if kind == "read")
