"""The command line on one pair of LDR images: as a subprocess (python -m flip_loss) and in process,
its outputs (maps, text files, CSV, histograms), its one-line errors, the regression gate and the
exit codes."""

import os
import re
import sys

import numpy as np
import pytest
import torch
from PIL import Image

from flip_loss.cli import example_paths, main
from flip_loss.colormaps import MAGMA, apply_colormap, to_grey_uint8
from flip_loss.options import pixels_per_degree
from flip_loss.pooling import pool
from cli_runs import H, VALUE_LINES, W, error_line, expected_map, formatted, printed_values, run_module


# ----------------------------------------------------------------------------------------------
# As a subprocess
# ----------------------------------------------------------------------------------------------


def test_module_prints_pooled_values_and_writes_magma_map(pair, tmp_path):
    ref, test = pair
    res = run_module(["-r", ref, "-t", test], cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert lines[0] == "Invoking LDR-FLIP"
    assert lines[1] == "     Pixels per degree: 67"
    assert lines[2] == ""
    assert lines[3] == f"FLIP between reference image <{ref}> and test image <{test}>"
    assert lines[4].startswith("     Mean: ")  # line 5, as in NVIDIA's tool
    assert [ln.split(":")[0].strip() for ln in lines[4:10]] == list(VALUE_LINES)
    assert re.fullmatch(r"     Evaluation time: \d+\.\d{4} seconds", lines[10])
    name = "flip.ref.test.67ppd.ldr.png"
    assert lines[11] == f"     FLIP error map location: {os.path.join('.', name)}"
    assert lines[12] == "" and re.fullmatch(r"Total time: \d+\.\d{4} seconds", lines[13])
    assert len(lines) == 14

    emap = expected_map(ref, test)
    want = formatted(pool(emap))
    got = printed_values(res.stdout)
    assert {k: v[0] for k, v in got.items()} == want
    assert float(want["Mean"]) > 0.01

    png = Image.open(tmp_path / name)
    assert png.size == (W, H) and png.mode == "RGB"
    np.testing.assert_array_equal(np.asarray(png), apply_colormap(emap, MAGMA))


def test_module_example(tmp_path):
    res = run_module(["--example"], cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    ref, test = example_paths()
    emap = expected_map(ref, test)
    assert printed_values(res.stdout)["Mean"] == [f"{pool(emap).mean:.6f}"]
    out = tmp_path / "flip.example_reference.example_test.67ppd.ldr.png"
    assert Image.open(out).size == Image.open(ref).size


def test_module_error_exit_code(tmp_path, pair):
    res = run_module(["-r", tmp_path / "nope.png", "-t", pair[1]], cwd=tmp_path)
    assert res.returncode == 2
    assert "nope.png" in error_line(res.stderr) and "does not exist" in res.stderr
    assert res.stdout == ""


def test_module_help_documents_exit_codes(tmp_path):
    res = run_module(["--help"], cwd=tmp_path)
    assert res.returncode == 0
    assert "exit codes:" in res.stdout and "--viewing-conditions" in res.stdout
    for needle in (
        "0  success",
        "1  the --fail-above gate failed",
        "2  an error you can act on",
        "3  an unexpected internal error",
        "--reference-dir",
        "--fail-above",
        "--histogram",
        "--textfile",
        "--csv",
        "--basename",
        "psychophysics",
    ):
        assert needle in res.stdout, needle


def test_module_gate_exit_codes(pair, tmp_path):
    ref, test = pair
    failed = run_module(["-r", ref, "-t", test, "-nerm", "-v", "0", "--fail-above", "mean", "0.01"], cwd=tmp_path)
    assert failed.returncode == 1, failed.stderr
    assert failed.stdout == ""
    assert failed.stderr.startswith("flip-loss: gate failed: the mean FLIP error of test image <")
    passed = run_module(["-r", ref, "-t", test, "-nerm", "-v", "0", "--fail-above", "MAX", "1"], cwd=tmp_path)
    assert passed.returncode == 0 and passed.stderr == ""


def test_module_folder_mode(pair, tmp_path):
    refs, tests = tmp_path / "refs", tmp_path / "tests"
    refs.mkdir(), tests.mkdir()
    (refs / "a.png").write_bytes(pair[0].read_bytes())
    (tests / "a.png").write_bytes(pair[1].read_bytes())
    (tests / "extra.png").write_bytes(pair[1].read_bytes())
    res = run_module(["--reference-dir", refs, "--test-dir", tests, "-d", "out", "-v", "1"], cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert "extra.png" in res.stderr and "warning" in res.stderr
    assert (
        "2 pair(s) found: 1 evaluated, 1 not evaluated (1 without a partner)\nSummary CSV: "
        + os.path.join("out", "summary.csv")
        in res.stdout
    )
    assert (tmp_path / "out" / "summary.csv").read_text().count("\n") == 3  # the pair and the unmatched image
    assert (tmp_path / "out" / "flip.a.a.67ppd.ldr.png").exists()


# ----------------------------------------------------------------------------------------------
# In process
# ----------------------------------------------------------------------------------------------


def test_grey_map_and_directory(pair, tmp_path, capsys):
    ref, test = pair
    out_dir = tmp_path / "maps" / "sub"
    assert main(["-r", str(ref), "-t", str(test), "--no-magma", "-d", str(out_dir)]) == 0
    name = "flip.ref.test.67ppd.ldr.png"
    stdout = capsys.readouterr().out
    assert f"     FLIP error map location: {os.path.join(str(out_dir), name)}" in stdout
    png = np.asarray(Image.open(out_dir / name))
    assert png.shape == (H, W, 3)
    grey = to_grey_uint8(expected_map(ref, test))
    for c in range(3):
        np.testing.assert_array_equal(png[..., c], grey)


def test_output_option(pair, tmp_path, capsys, monkeypatch):
    ref, test = pair
    monkeypatch.chdir(tmp_path)
    assert main(["-r", str(ref), "-t", str(test), "-o", "custom.png"]) == 0
    assert "     FLIP error map location: custom.png" in capsys.readouterr().out
    assert Image.open(tmp_path / "custom.png").size == (W, H)
    assert main(["-r", str(ref), "-t", str(test), "-o", "c2.png", "-d", "outdir"]) == 0
    assert (tmp_path / "outdir" / "c2.png").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["custom.png", "outdir"]


def test_no_error_map_and_several_tests(pair, tmp_path, capsys, monkeypatch):
    ref, test = pair
    monkeypatch.chdir(tmp_path)
    assert main(["-r", str(ref), "-t", str(test), str(ref), "--no-error-map"]) == 0
    assert list(tmp_path.iterdir()) == []
    stdout = capsys.readouterr().out
    assert stdout.count("FLIP between reference image") == 2
    assert f"and test image <{ref}>" in stdout
    vals = printed_values(stdout)
    assert vals["Mean"][1] == "0.000000" and vals["Max"][1] == "0.000000"  # identical images
    assert vals["Mean"][0] == formatted(pool(expected_map(ref, test)))["Mean"]
    assert "FLIP error map location" not in stdout


def test_verbosity(pair, tmp_path, capsys, monkeypatch):
    ref, test = pair
    monkeypatch.chdir(tmp_path)
    assert main(["-r", str(ref), "-t", str(test), "-v", "0"]) == 0
    assert capsys.readouterr().out == ""
    assert (tmp_path / "flip.ref.test.67ppd.ldr.png").exists()
    assert main(["-r", str(ref), "-t", str(test), "--verbosity", "1", "-nerm"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert (
        len(lines) == 4
        and lines[0].startswith("FLIP between")
        and lines[1].startswith("     Mean: ")
        and lines[2] == ""
        and lines[3].startswith("Total time: ")
    )


def test_viewing_conditions_give_the_same_ppd(pair, tmp_path, capsys, monkeypatch):
    ref, test = pair
    monkeypatch.chdir(tmp_path)
    vc = (0.5, 0.6, 2000)
    ppd = pixels_per_degree(*vc)
    assert main(["-r", str(ref), "-t", str(test), "-vc", *map(str, vc)]) == 0
    out_vc = capsys.readouterr().out
    assert main(["-r", str(ref), "-t", str(test), "--pixels-per-degree", repr(ppd), "-nerm"]) == 0
    out_ppd = capsys.readouterr().out
    assert f"     Pixels per degree: {int(ppd + 0.5)}" in out_vc  # 29
    assert printed_values(out_vc) == printed_values(out_ppd)
    assert printed_values(out_vc)["Mean"] == [f"{pool(expected_map(ref, test, ppd)).mean:.6f}"]
    assert printed_values(out_vc) != printed_values(main_values(ref, test, capsys))
    assert (tmp_path / f"flip.ref.test.{int(ppd + 0.5)}ppd.ldr.png").exists()


def main_values(ref, test, capsys):
    assert main(["-r", str(ref), "-t", str(test), "-nerm"]) == 0
    return capsys.readouterr().out


def test_ppd_is_printed_rounded_half_up(pair, tmp_path, capsys, monkeypatch):
    ref, test = pair
    monkeypatch.chdir(tmp_path)
    assert main(["-r", str(ref), "-t", str(test), "-ppd", "40.5"]) == 0  # round(40.5) would be 40
    assert "     Pixels per degree: 41\n" in capsys.readouterr().out
    assert (tmp_path / "flip.ref.test.41ppd.ldr.png").exists()


def test_example_in_process(tmp_path, capsys):
    assert main(["--example", "-d", str(tmp_path), "-v", "1"]) == 0
    assert "     Mean: " in capsys.readouterr().out
    assert (tmp_path / "flip.example_reference.example_test.67ppd.ldr.png").exists()


@pytest.mark.parametrize(
    "argv,needle",
    [
        (["-r", "{ref}", "-t", "{d}/missing.png"], "does not exist"),
        (["-r", "{d}/missing.png", "-t", "{test}"], "does not exist"),
        (["-r", "{ref}", "-t", "{d}/wider.png"], "same size"),
        (["-r", "{ref}", "-t", "{test}", "{d}/wider.png"], "41x28"),
        (["-r", "{ref}", "-t", "{d}/garbage.png"], "cannot read image"),
        (["-r", "{ref}", "-t", "{d}"], "directory"),
        (["-r", "{d}/image.exr", "-t", "{test}"], "cannot mix HDR and LDR images"),
        (["-r", "{ref}", "-t", "{d}/image.exr"], "cannot mix HDR and LDR images"),
        (["-r", "{ref}", "-t", "{test}", "{d}/image.exr"], "cannot mix HDR and LDR images"),
        (["-r", "{d}/image.exr", "-t", "{d}/image.exr"], "the OpenEXR file is damaged, truncated"),
        (["-r", "{d}/garbage.png", "-t", "{d}/garbage.exr"], "cannot mix HDR and LDR images"),
        (["-r", "{d}/garbage.exr", "-t", "{d}/garbage.exr"], "not an OpenEXR file"),
        (["-r", "{d}/image.hdr", "-t", "{d}/image.hdr"], "are not supported; convert"),
        (["-r", "{ref}", "-t", "{d}/image.pfm"], "are not supported; convert"),
        (["-r", "{ref}", "-t", "{test}", "--ppd", "abc"], "a number from 0.001 to 10000"),
        (["-r", "{ref}", "-t", "{test}", "--ppd", "-3"], "a number from 0.001 to 10000"),
        (["-r", "{ref}", "-t", "{test}", "--ppd", "0"], "a number from 0.001 to 10000"),
        (["-r", "{ref}", "-t", "{test}", "--ppd", "nan"], "a number from 0.001 to 10000"),
        (["-r", "{ref}", "-t", "{test}", "-vc", "0.7", "0", "3840"], "positive number"),
        (["-r", "{ref}", "-t", "{test}", "-vc", "0.7", "0.7"], "expected 3 arguments"),
        (["-r", "{ref}", "-t", "{test}", "--ppd", "60", "-vc", "0.7", "0.7", "3840"], "not allowed"),
        (["-r", "{ref}", "-t", "{test}", "-v", "3"], "invalid choice"),
        (["-r", "{ref}", "-t", "{test}", "--device", "tpu"], "invalid choice"),
        (["-r", "{ref}", "-t", "{test}", "{test}", "-o", "{d}/x.png"], "one test image"),
        (["-r", "{ref}", "-t", "{test}", "-o", "{d}/x.jpg"], ".png"),
        (["-r", "{ref}"], "required"),
        ([], "required"),
        (["--example", "-r", "{ref}"], "cannot be combined"),
        (["-r", "{ref}", "-t", "{test}", "--bogus"], "unrecognized arguments"),
    ],
)
def test_user_errors(argv, needle, pair, bad_files, capsys):
    ref, test = pair
    args = [a.format(ref=ref, test=test, d=bad_files) for a in argv]
    assert main(args) == 2
    captured = capsys.readouterr()
    assert needle in error_line(captured.err)
    assert not (bad_files / "x.png").exists()


def test_truncated_file(pair, bad_files, capsys):
    # the header reads fine, the pixel data does not
    assert main(["-r", str(pair[0]), "-t", str(bad_files / "trunc.png"), "-nerm"]) == 2
    assert "trunc.png" in error_line(capsys.readouterr().err)


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is available")
def test_cuda_requested_without_cuda(pair, capsys):
    assert main(["-r", str(pair[0]), "-t", str(pair[1]), "--device", "cuda", "-nerm"]) == 2
    assert "no CUDA device" in error_line(capsys.readouterr().err)


def test_device_cpu(pair, capsys):
    assert main(["-r", str(pair[0]), "-t", str(pair[1]), "--device", "cpu", "-nerm"]) == 0
    assert printed_values(capsys.readouterr().out)["Mean"] == [f"{pool(expected_map(*pair)).mean:.6f}"]


def test_fallback_warning_is_one_stderr_line(pair, capsys, monkeypatch):
    from flip_loss import _ops

    monkeypatch.setattr(_ops, "HAS_EXTENSION", False)
    monkeypatch.setattr(_ops, "_warned", set())
    assert main(["-r", str(pair[0]), "-t", str(pair[1]), str(pair[1]), "-nerm"]) == 0
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("flip-loss: warning: ")
    assert "portable pure-PyTorch path" in lines[0]
    assert printed_values(captured.out)["Mean"] == [f"{pool(expected_map(*pair)).mean:.6f}"] * 2
    monkeypatch.setattr(_ops, "_warned", set())
    assert main(["-r", str(pair[0]), "-t", str(pair[1]), "-nerm", "-v", "0"]) == 0
    assert capsys.readouterr() == ("", "")


# ----------------------------------------------------------------------------------------------
# Text files, CSV, base names, histograms
# ----------------------------------------------------------------------------------------------


def test_textfile(pair, tmp_path, capsys):
    ref, test = pair
    assert main(["-r", str(ref), "-t", str(test), "-txt", "-d", str(tmp_path), "-v", "0"]) == 0
    txt = tmp_path / "pooled_values.flip.ref.test.67ppd.ldr.txt"
    want = formatted(pool(expected_map(ref, test)))
    assert txt.read_text() == "".join(f"{k}: {v}\n" for k, v in want.items())
    # Without an error map the text file is still written.
    out = tmp_path / "nomap"
    assert main(["-r", str(ref), "-t", str(test), "--textfile", "-nerm", "-d", str(out), "-v", "0"]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["pooled_values.flip.ref.test.67ppd.ldr.txt"]
    # With --output the text file is named after the map, next to it.
    assert main(["-r", str(ref), "-t", str(test), "-txt", "-o", "m.png", "-d", str(out), "-v", "0"]) == 0
    assert (out / "m.png").exists() and (out / "pooled_values.m.txt").exists()
    assert capsys.readouterr().out == ""


def test_csv_appends_rows_with_one_header(pair, tmp_path, capsys):
    import csv

    ref, test = pair
    path = tmp_path / "results.csv"
    assert main(["-r", str(ref), "-t", str(test), str(ref), "-c", str(path), "-nerm", "-v", "0"]) == 0
    assert main(["-r", str(ref), "-t", str(test), "--csv", str(path), "-nerm", "-v", "0"]) == 0
    text = path.read_text()
    assert text.splitlines()[0] == (
        '"Reference","Test","Mean","Weighted median","1st weighted quartile",'
        '"3rd weighted quartile","Min","Max","Status","Gate"'
    )
    rows = list(csv.reader(text.splitlines()))
    assert len(rows) == 4 and all(len(r) == 10 for r in rows)
    want = formatted(pool(expected_map(ref, test)))
    assert rows[1][:2] == [str(ref), str(test)] and rows[1][2:8] == list(want.values())
    assert rows[1][8:] == ["evaluated", ""]  # no gate: no verdict
    assert rows[2][1] == str(ref) and rows[2][2] == "0.000000"
    assert rows[3][2:8] == rows[1][2:8]
    # --timing: the evaluation time as an eleventh column, in a file of that layout only.
    timed = tmp_path / "timed.csv"
    assert main(["-r", str(ref), "-t", str(test), "-c", str(timed), "-nerm", "-v", "0", "--timing"]) == 0
    timed_rows = list(csv.reader(timed.read_text().splitlines()))
    assert timed_rows[0][-1] == "Evaluation time" and re.fullmatch(r"\d+\.\d{4}", timed_rows[1][10])
    assert main(["-r", str(ref), "-t", str(test), "-c", str(timed), "-nerm", "-v", "0"]) == 2
    assert main(["-r", str(ref), "-t", str(test), "-c", str(path), "-nerm", "-v", "0", "--timing"]) == 2
    assert len(timed.read_text().splitlines()) == 2 and len(path.read_text().splitlines()) == 4
    # An empty existing file gets the header too.
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    assert main(["-r", str(ref), "-t", str(test), "-c", str(empty), "-nerm", "-v", "0"]) == 0
    assert empty.read_text().startswith('"Reference"')


def test_basename(pair, tmp_path, capsys):
    ref, test = pair
    assert main(["-r", str(ref), "-t", str(test), "-b", "run1", "-txt", "-hist", "-d", str(tmp_path)]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run1.png", "run1.txt", "run1.weighted_histogram.png"]
    assert f"FLIP error map location: {os.path.join(str(tmp_path), 'run1.png')}" in capsys.readouterr().out
    assert (
        main(
            [
                "-r",
                str(ref),
                "-t",
                str(test),
                "--basename",
                "run2",
                "-hist",
                "--log",
                "-nerm",
                "-d",
                str(tmp_path),
                "-v",
                "0",
            ]
        )
        == 0
    )
    assert (tmp_path / "run2.log_weighted_histogram.png").exists()


def test_histogram_single_and_overlapped(pair, tmp_path, capsys):
    ref, test = pair
    assert main(["-r", str(ref), "-t", str(test), "-hist", "-nerm", "-d", str(tmp_path), "-v", "0"]) == 0
    single = tmp_path / "weighted_histogram.flip.ref.test.67ppd.ldr.png"
    im = Image.open(single)
    assert im.format == "PNG" and im.size[0] > 400 and im.size[1] > 200
    # Two test images: one overlapped histogram, no per-image ones.
    out = tmp_path / "two"
    assert (
        main(
            [
                "-r",
                str(ref),
                "-t",
                str(test),
                str(ref),
                "--histogram",
                "-lg",
                "--y-max",
                "1e6",
                "-epv",
                "-nerm",
                "-d",
                str(out),
                "-v",
                "0",
            ]
        )
        == 0
    )
    assert [p.name for p in out.iterdir()] == ["log_weighted_histogram.flip.ref.test.ref.67ppd.ldr.png"]
    # Three test images: one histogram each.
    out3 = tmp_path / "three"
    other = tmp_path / "other" / "test2.png"
    other.parent.mkdir()
    other.write_bytes(test.read_bytes())
    assert (
        main(["-r", str(ref), "-t", str(test), str(ref), str(other), "-hist", "-nerm", "-d", str(out3), "-v", "0"]) == 0
    )
    assert sorted(p.name for p in out3.iterdir()) == [
        "weighted_histogram.flip.ref.ref.67ppd.ldr.png",
        "weighted_histogram.flip.ref.test.67ppd.ldr.png",
        "weighted_histogram.flip.ref.test2.67ppd.ldr.png",
    ]
    assert capsys.readouterr().out == ""


def test_histogram_without_matplotlib(pair, tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    assert main(["-r", str(pair[0]), "-t", str(pair[1]), "-hist", "-d", str(tmp_path)]) == 2
    assert "needs matplotlib" in error_line(capsys.readouterr().err)
    assert list(tmp_path.iterdir()) == []  # nothing computed or written


# ----------------------------------------------------------------------------------------------
# The regression gate and the exit codes
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("quantity,index", [("mean", 0), ("weighted-median", 1), ("max", 5)])
def test_gate_per_quantity(pair, capsys, quantity, index):
    ref, test = pair
    value = pool(expected_map(ref, test))[index]
    assert (
        main(["-r", str(ref), "-t", str(test), "-nerm", "-v", "0", "--fail-above", quantity, f"{value + 1e-4:.6f}"])
        == 0
    )
    assert capsys.readouterr() == ("", "")
    assert (
        main(
            [
                "-r",
                str(ref),
                "-t",
                str(test),
                str(ref),
                "-nerm",
                "-v",
                "1",
                "--fail-above",
                quantity.upper(),
                f"{value - 1e-4:.6f}",
            ]
        )
        == 1
    )
    captured = capsys.readouterr()
    assert captured.out.count("FLIP between") == 2  # every image is still evaluated and printed
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and f"the {quantity} FLIP error of test image <{test}>" in lines[0]
    assert f"{value:.6f}, above the threshold {value - 1e-4:.6f}" in lines[0]


def test_exit_on_test_default_threshold(pair, capsys):
    ref, test = pair
    mean = pool(expected_map(ref, test)).mean
    assert main(["-r", str(ref), "-t", str(test), "-nerm", "-v", "0", "-et"]) == (1 if mean > 0.05 else 0)
    assert main(["-r", str(ref), "-t", str(ref), "-nerm", "-v", "0", "-et"]) == 0
    # -etp (NVIDIA's spelling) is --fail-above.
    assert main(["-r", str(ref), "-t", str(test), "-nerm", "-v", "0", "-etp", "max", "0"]) == 1


def test_internal_error_exit_code_3(pair, capsys, monkeypatch):
    import flip_loss.pooling

    def broken(_):
        raise RuntimeError("simulated bug")

    monkeypatch.setattr(flip_loss.pooling, "pool", broken)
    assert main(["-r", str(pair[0]), "-t", str(pair[1]), "-nerm"]) == 3
    err = capsys.readouterr().err
    assert "Traceback" in err and "simulated bug" in err and "internal error" in err.splitlines()[-1]


def test_psychophysics_dispatch(monkeypatch, capsys):
    import types

    calls = []
    fake = types.ModuleType("flip_loss.psychophysics.cli")
    fake.main = lambda argv: calls.append(argv) or 7
    monkeypatch.setitem(sys.modules, "flip_loss.psychophysics.cli", fake)
    assert main(["psychophysics", "run", "--fast"]) == 7
    # Every argument after the command goes to the suite as it is: options first, --help, -r.
    assert main(["psychophysics", "--help"]) == 7
    assert main(["psychophysics", "--out", "x", "-r", "y", "--", "z"]) == 7
    assert calls == [["run", "--fast"], ["--help"], ["--out", "x", "-r", "y", "--", "z"]]
    fake.main = lambda argv: None
    assert main(["psychophysics"]) == 0
    # The evaluator's options do not apply to the command.
    assert main(["-v", "1", "--ppd", "30", "psychophysics", "run"]) == 2
    line = error_line(capsys.readouterr().err)
    assert "--ppd, --verbosity: evaluator option(s) given before the command 'psychophysics'" in line
    monkeypatch.setitem(sys.modules, "flip_loss.psychophysics.cli", None)  # as if missing
    assert main(["psychophysics", "run"]) == 2
    assert "psychophysics suite is not available" in error_line(capsys.readouterr().err)


def test_images_without_flags_are_a_usage_error(pair, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main([str(pair[0]), str(pair[1])]) == 2
    line = error_line(capsys.readouterr().err)
    assert f"'{pair[0]}'" in line and "images are given with -r/--reference and -t/--test" in line
    assert list(tmp_path.iterdir()) == []


def test_help_prints_every_exit_code(capsys):
    from flip_loss.cli import EXIT_CODES

    assert main(["--help"]) == 0
    text = capsys.readouterr().out
    listed = re.findall(r"^  (\d+) +\S", text.split("exit codes:\n")[1], flags=re.M)
    assert [int(code) for code in listed] == [code for code, _ in EXIT_CODES]
    assert [code for code, _ in EXIT_CODES] == [0, 1, 2, 3, 4, 130]
