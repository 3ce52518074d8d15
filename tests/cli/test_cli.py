"""The command-line evaluator (flip_loss.cli, python -m flip_loss) and image loading."""

import ast
import math
import os
import re
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from flip_loss.cli import CSV_HEADER, example_paths, main
from flip_loss.colormaps import MAGMA, apply_colormap, to_grey_uint8
from flip_loss.constants import DEFAULT_PPD, TONE_MAPPER_DISPLAY_NAMES, TONE_MAPPERS
from flip_loss.options import pixels_per_degree
from flip_loss.functional import ldr_flip
from flip_loss.imageio import load_image, save_png
from flip_loss.pooling import pool
from png_files import write_png16

ROOT = Path(__file__).resolve().parents[2]
# The header line of the CSV files flip-loss writes (an existing file must have it to be appended to).
HEADER_LINE = ",".join(f'"{c}"' for c in CSV_HEADER)
W, H = 40, 28
VALUE_LINES = ("Mean", "Weighted median", "1st weighted quartile", "3rd weighted quartile", "Min", "Max")


def run_module(args, cwd):
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run(
        [sys.executable, "-m", "flip_loss", *map(str, args)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    """A small reference crop of the bundled example and a distorted copy, as PNG files."""
    d = tmp_path_factory.mktemp("pair")
    ref = Image.open(example_paths()[0]).convert("RGB").crop((100, 60, 100 + W, 60 + H))
    a = np.asarray(ref).astype(np.float64)
    a = a + np.random.default_rng(1).normal(0, 12, a.shape)
    a[:, W // 2 :, 2] *= 0.8
    ref.save(d / "ref.png")
    Image.fromarray(np.clip(np.round(a), 0, 255).astype(np.uint8)).save(d / "test.png")
    return d / "ref.png", d / "test.png"


def expected_map(ref_path, test_path, ppd=DEFAULT_PPD):
    with torch.no_grad():
        return ldr_flip(load_image(test_path), load_image(ref_path), ppd)[0].float().numpy()


def printed_values(stdout):
    vals = {}
    for name in VALUE_LINES:
        found = re.findall(rf"^     {re.escape(name)}: (\d+\.\d{{6}})$", stdout, flags=re.M)
        if found:
            vals[name] = found
    return vals


def formatted(p):
    return dict(zip(VALUE_LINES, [f"{x:.6f}" for x in p]))


def error_line(stderr):
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("flip-loss: error: ")
    return lines[0]


def snapshot(*directories):
    """{path: bytes} of every file under ``directories`` (hidden and temporary files included;
    symbolic links as the text they point to, directories as "directory")."""
    files = {}
    for d in directories:
        for p in sorted(Path(d).rglob("*")):
            if p.is_symlink():
                files[p] = ("link", os.readlink(p))
            elif p.is_dir():
                files[p] = "directory"
            else:
                files[p] = p.read_bytes()
    return files


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


# ----------------------------------------------------------------------------------------------
# Errors: one line on stderr, exit code 2
# ----------------------------------------------------------------------------------------------


@pytest.fixture
def bad_files(tmp_path, pair):
    Image.new("RGB", (W + 1, H)).save(tmp_path / "wider.png")
    (tmp_path / "garbage.png").write_bytes(b"this is not a PNG file at all")
    full = tmp_path / "trunc.png"
    data = pair[1].read_bytes()
    full.write_bytes(data[: len(data) // 2])
    (tmp_path / "image.exr").write_bytes(b"v/1\x01" + b"\0" * 100)
    (tmp_path / "garbage.exr").write_bytes(b"this is not an EXR file")
    (tmp_path / "image.hdr").write_bytes(b"#?RADIANCE\n")
    (tmp_path / "image.pfm").write_bytes(b"PF\n")
    return tmp_path


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


# ----------------------------------------------------------------------------------------------
# The bundled example and image I/O
# ----------------------------------------------------------------------------------------------


def test_example_files():
    ref, test = example_paths()
    assert os.path.isabs(ref) and os.path.isfile(ref) and os.path.isfile(test)
    assert os.path.getsize(ref) + os.path.getsize(test) < 200 * 1024
    a, b = Image.open(ref), Image.open(test)
    assert a.size == b.size and 200 <= a.size[0] <= 320 and 150 <= a.size[1] <= 320
    assert a.mode == b.mode == "RGB"
    licence = (Path(ref).parent / "LICENSE.md").read_text()
    assert "BSD-3-Clause" in licence and "NVIDIA" in licence
    d = np.abs(np.asarray(a).astype(int) - np.asarray(b).astype(int))
    assert 0 < d.mean() < 10  # a mild, visible distortion


@pytest.mark.parametrize("colour_type,channels", [(0, 1), (2, 3), (4, 2), (6, 4)])
@pytest.mark.parametrize("filter_type", [0, 1, 4])
def test_load_16_bit_png(tmp_path, colour_type, channels, filter_type):
    s = np.random.default_rng(colour_type).integers(0, 65536, (6, 9, channels)).astype(np.uint16)
    s[0, 0] = 0
    s[0, 1] = 65535
    path = tmp_path / "x16.png"
    write_png16(path, s if channels > 1 else s[..., 0], colour_type, filter_type)
    t = load_image(path)
    assert t.shape == (3, 6, 9) and t.dtype == torch.float32
    want = s[..., :3] if channels >= 3 else np.repeat(s[..., :1], 3, axis=2)
    np.testing.assert_array_equal(np.round(t.numpy().transpose(1, 2, 0) * 65535).astype(int), want)


@pytest.mark.parametrize(
    "fmt,mode",
    [
        ("PNG", "RGB"),
        ("PNG", "RGBA"),
        ("PNG", "L"),
        ("PNG", "LA"),
        ("PNG", "P"),
        ("BMP", "RGB"),
        ("TGA", "RGB"),
        ("JPEG", "RGB"),
        ("JPEG", "L"),
    ],
)
def test_load_8_bit_formats(tmp_path, fmt, mode):
    rng = np.random.default_rng(0)
    rgb = rng.integers(0, 256, (5, 7, 3)).astype(np.uint8)
    im = Image.fromarray(rgb)
    if mode == "RGBA":
        im = Image.fromarray(np.dstack([rgb, np.full((5, 7), 10, np.uint8)]))
    elif mode in ("L", "LA"):
        im = Image.fromarray(rgb[..., 0]).convert(mode)
    elif mode == "P":
        im = im.quantize(16)
    path = tmp_path / f"x.{fmt.lower()}"
    im.save(path, format=fmt)
    t = load_image(path)
    assert t.shape == (3, 5, 7) and t.dtype == torch.float32
    want = np.asarray(Image.open(path).convert("RGB")).astype(np.float32) / 255
    np.testing.assert_array_equal(t.numpy().transpose(1, 2, 0), want)
    if fmt != "JPEG":
        expect = np.asarray(im.convert("RGB"))
        np.testing.assert_array_equal(np.round(t.numpy().transpose(1, 2, 0) * 255), expect)


def test_load_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_image(tmp_path / "missing.png")
    (tmp_path / "bad.png").write_bytes(b"nope")
    with pytest.raises(ValueError, match="cannot read image"):
        load_image(tmp_path / "bad.png")
    (tmp_path / "x.exr").write_bytes(b"nope")
    with pytest.raises(ValueError, match="x.exr': not an OpenEXR file"):
        load_image(tmp_path / "x.exr")
    (tmp_path / "x.hdr").write_bytes(b"#?RADIANCE\n")
    with pytest.raises(ValueError, match=r"\.hdr files \(Radiance HDR / PFM\) are not supported"):
        load_image(tmp_path / "x.hdr")
    with pytest.raises(ValueError, match="directory"):
        load_image(tmp_path)


def test_save_png_round_trip(tmp_path):
    a = np.random.default_rng(0).integers(0, 256, (4, 6, 3)).astype(np.uint8)
    save_png(tmp_path / "a.png", a)
    np.testing.assert_array_equal(np.asarray(Image.open(tmp_path / "a.png")), a)
    save_png(tmp_path / "g.png", torch.from_numpy(a[..., 0]))
    assert Image.open(tmp_path / "g.png").mode == "L"
    with pytest.raises(TypeError):
        save_png(tmp_path / "f.png", a.astype(np.float32))
    with pytest.raises(ValueError):
        save_png(tmp_path / "f.png", a[..., :2])


def test_fallback_warning_is_one_stderr_line(pair, capsys, monkeypatch):
    from flip_loss import _ops

    monkeypatch.setattr(_ops, "HAS_EXTENSION", False)
    monkeypatch.setattr(_ops, "_warned", set())
    assert main(["-r", str(pair[0]), "-t", str(pair[1]), str(pair[1]), "-nerm"]) == 0
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("flip-loss: warning: ")
    assert "pure-PyTorch oracle" in lines[0]
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


# ----------------------------------------------------------------------------------------------
# Folder mode
# ----------------------------------------------------------------------------------------------


@pytest.fixture
def folders(tmp_path, pair):
    refs, tests = tmp_path / "refs", tmp_path / "tests"
    refs.mkdir(), tests.mkdir()
    ref_img = Image.open(pair[0])
    test_img = Image.open(pair[1])
    ref_img.save(refs / "a.png")
    test_img.save(tests / "a.png")
    ref_img.save(refs / "b.png")
    test_img.save(tests / "b.jpg", quality=80)  # same stem, another extension
    ref_img.save(refs / "only_ref.png")  # unmatched
    test_img.save(tests / "only_test.bmp")  # unmatched
    (tests / "notes.txt").write_text("not an image")
    (tests / "render.exr").write_bytes(b"v/1\x01")  # unmatched (an .exr pair would be HDR-FLIP)
    (tests / "render.hdr").write_bytes(b"#?RADIANCE\n")  # not supported: skipped
    return refs, tests


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


# ----------------------------------------------------------------------------------------------
# HDR-FLIP: OpenEXR inputs
# ----------------------------------------------------------------------------------------------

HDR_H, HDR_W = 32, 48
# Every registered tone mapper, each spelt in another case (the option takes any case).
TM_ARGS = [(str.upper, str.lower, str.capitalize)[i % 3](tm) for i, tm in enumerate(TONE_MAPPERS)]


def _hdr_images():
    from hdr_cases import lifted

    ref = lifted("blocks", -2, 6, crop=(HDR_H, HDR_W))  # linear, an exposure ramp across the width
    rng = np.random.default_rng(3)
    test = np.clip(ref * (1 + 0.1 * rng.standard_normal(ref.shape)), 0, None).astype(np.float32)
    return ref, test


@pytest.fixture(scope="module")
def hdr_pair(tmp_path_factory):
    """A small HDR reference (a linearised crop times an exposure ramp) and a noisy copy, as EXR."""
    from flip_loss.imageio import save_exr

    d = tmp_path_factory.mktemp("hdr")
    ref, test = _hdr_images()
    save_exr(d / "reference.exr", ref.transpose(2, 0, 1))
    save_exr(d / "test.exr", test.transpose(2, 0, 1))
    return d / "reference.exr", d / "test.exr"


_EVALUATED = {}


def flip_evaluator_hdr(params_items=(("tonemapper", "aces"),), ppd=DEFAULT_PPD):
    """flip-evaluator's HDR map (float64) and the parameters it used, for the hdr_pair images (the
    reference is never all black: flip-evaluator would exit the process)."""
    key = (params_items, ppd)
    if key not in _EVALUATED:
        import flip_evaluator

        ref, test = _hdr_images()
        params = dict(params_items)
        params["ppd"] = ppd
        err, _, used = flip_evaluator.evaluate(
            np.ascontiguousarray(ref).copy(),
            np.ascontiguousarray(test).copy(),
            "HDR",
            applyMagma=False,
            parameters=params,
        )
        _EVALUATED[key] = (err[..., 0].astype(np.float64), used)
    return _EVALUATED[key]


def hdr_name(tm, start, stop, count, ppd=67):
    def e(v):
        return ("m" if v < 0 else "p") + f"{abs(v):.4f}"

    return f"reference.test.{ppd}ppd.hdr.{tm}.{e(start)}_to_{e(stop)}.{count}"


def hdr_expected(ref_path, test_path, tm="aces", start=None, stop=None, num=None, ppd=DEFAULT_PPD):
    import flip_loss
    from flip_loss.hdr import exposures_for
    from flip_loss.imageio import load_exr

    ref, test = load_exr(ref_path), load_exr(test_path)
    _, counts, s, e = exposures_for(ref, tm, start, stop, num)
    with torch.no_grad():
        err, emap = flip_loss.hdr_flip(
            test,
            ref,
            ppd,
            tone_mapper=tm,
            start_exposure=float(s[0]),
            stop_exposure=float(e[0]),
            num_exposures=int(counts[0]),
            return_exposure_map=True,
            eps=0.0,
        )
    return err[0].numpy(), emap[0].numpy(), (float(s[0]), float(e[0]), int(counts[0]))


@pytest.mark.parametrize("tm_arg", TM_ARGS)
def test_hdr_matches_flip_evaluator(hdr_pair, tmp_path, capsys, tm_arg):
    from flip_loss.colormaps import VIRIDIS

    ref, test = hdr_pair
    tm = tm_arg.lower()
    theirs, used = flip_evaluator_hdr((("tonemapper", tm),))
    args = ["-r", str(ref), "-t", str(test), "-d", str(tmp_path)]
    if tm != "aces":
        args += ["-tm", tm_arg]
    assert main(args) == 0
    lines = capsys.readouterr().out.splitlines()
    start, stop, count = f"{used['startExposure']:.4f}", f"{used['stopExposure']:.4f}", used["numExposures"]
    assert lines[:8] == [
        "Invoking HDR-FLIP",
        "     Pixels per degree: 67",
        f"     Assumed tone mapper: {TONE_MAPPER_DISPLAY_NAMES[tm]}",
        f"     Start exposure: {start}",
        f"     Stop exposure: {stop}",
        f"     Number of exposures: {count}",
        "",
        f"FLIP between reference image <{ref}> and test image <{test}>",
    ]
    mean = float(lines[8].split("Mean: ")[1])
    assert abs(mean - theirs.mean()) <= 5e-5
    name = hdr_name(tm, used["startExposure"], used["stopExposure"], count)
    assert lines[15] == f"     FLIP error map location: {os.path.join(str(tmp_path), 'flip.' + name + '.png')}"
    assert lines[16] == (
        f"     FLIP exposure map location: {os.path.join(str(tmp_path), 'exposure_map.' + name + '.png')}"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"exposure_map.{name}.png", f"flip.{name}.png"]
    ours, emap, _ = hdr_expected(ref, test, tm)
    assert np.abs(ours - theirs).max() < 1e-3
    assert printed_values("\n".join(lines))["Mean"] == [f"{pool(ours).mean:.6f}"]
    png = np.asarray(Image.open(tmp_path / f"flip.{name}.png"))
    np.testing.assert_array_equal(png, apply_colormap(ours, MAGMA))
    exposure_png = Image.open(tmp_path / f"exposure_map.{name}.png")
    assert exposure_png.size == (HDR_W, HDR_H) and exposure_png.mode == "RGB"
    np.testing.assert_array_equal(np.asarray(exposure_png), apply_colormap(emap, VIRIDIS))
    assert len(np.unique(emap)) > 2  # several exposures win somewhere


@pytest.mark.parametrize(
    "given",
    [
        (("startExposure", -1.5), ("stopExposure", 2.0), ("numExposures", 4)),
        (("startExposure", -1.0),),
        (("stopExposure", 1.25), ("numExposures", 3)),
    ],
)
def test_hdr_given_exposures(hdr_pair, tmp_path, capsys, given):
    ref, test = hdr_pair
    flags = {"startExposure": "-cstart", "stopExposure": "--stop-exposure", "numExposures": "-n"}
    args = ["-r", str(ref), "-t", str(test), "-d", str(tmp_path), "-ppd", "40"]
    for key, value in given:
        args += [flags[key], str(value)]
    assert main(args) == 0
    out = capsys.readouterr().out
    theirs, used = flip_evaluator_hdr((("tonemapper", "aces"),) + given, ppd=40.0)
    for key, value in given:
        assert used[key] == value
    assert (
        f"     Start exposure: {used['startExposure']:.4f}\n     Stop exposure: {used['stopExposure']:.4f}\n"
        f"     Number of exposures: {used['numExposures']}\n"
    ) in out
    assert abs(float(printed_values(out)["Mean"][0]) - theirs.mean()) <= 5e-5
    name = hdr_name("aces", used["startExposure"], used["stopExposure"], used["numExposures"], ppd=40)
    assert (tmp_path / f"flip.{name}.png").exists() and (tmp_path / f"exposure_map.{name}.png").exists()


def test_hdr_outputs_and_options(hdr_pair, tmp_path, capsys):
    import csv

    ref, test = hdr_pair
    ours, _, (start, stop, count) = hdr_expected(ref, test)
    name = hdr_name("aces", start, stop, count)
    want = formatted(pool(ours))
    # --textfile, --csv, --histogram, --no-magma; the gate.
    out = tmp_path / "a"
    csv_path = tmp_path / "r.csv"
    assert (
        main(
            [
                "-r",
                str(ref),
                "-t",
                str(test),
                "-d",
                str(out),
                "-txt",
                "-c",
                str(csv_path),
                "-hist",
                "-nm",
                "-v",
                "0",
                "--fail-above",
                "mean",
                f"{pool(ours).mean - 1e-4:.6f}",
            ]
        )
        == 1
    )
    assert sorted(p.name for p in out.iterdir()) == sorted(
        [
            f"exposure_map.{name}.png",
            f"flip.{name}.png",
            f"pooled_values.flip.{name}.txt",
            f"weighted_histogram.flip.{name}.png",
        ]
    )
    assert (out / f"pooled_values.flip.{name}.txt").read_text() == "".join(f"{k}: {v}\n" for k, v in want.items())
    rows = list(csv.reader(csv_path.read_text().splitlines()))
    assert rows[1][:2] == [str(ref), str(test)] and rows[1][2:8] == list(want.values())
    grey = np.asarray(Image.open(out / f"flip.{name}.png"))
    np.testing.assert_array_equal(grey[..., 1], to_grey_uint8(ours))
    assert "gate failed" in capsys.readouterr().err
    # --basename; --no-exposure-map; --no-error-map; --output.
    assert main(["-r", str(ref), "-t", str(test), "-d", str(tmp_path / "b"), "-b", "run", "-txt"]) == 0
    assert sorted(p.name for p in (tmp_path / "b").iterdir()) == ["run.exposure_map.png", "run.png", "run.txt"]
    assert (
        "FLIP exposure map location: " + os.path.join(str(tmp_path / "b"), "run.exposure_map.png")
        in capsys.readouterr().out
    )
    assert main(["-r", str(ref), "-t", str(test), "-d", str(tmp_path / "c"), "-nexm", "--device", "cpu"]) == 0
    assert [p.name for p in (tmp_path / "c").iterdir()] == [f"flip.{name}.png"]
    assert "exposure map" not in capsys.readouterr().out
    assert main(["-r", str(ref), "-t", str(test), "-d", str(tmp_path / "d"), "-nerm", "-v", "1"]) == 0
    assert [p.name for p in (tmp_path / "d").iterdir()] == [f"exposure_map.{name}.png"]
    assert main(["-r", str(ref), "-t", str(test), "-d", str(tmp_path / "e"), "-o", "m.png"]) == 0
    assert sorted(p.name for p in (tmp_path / "e").iterdir()) == ["exposure_map.m.png", "m.png"]


def test_hdr_two_tests_and_identical_images(hdr_pair, tmp_path, capsys):
    from flip_loss.colormaps import VIRIDIS

    ref, test = hdr_pair
    _, _, (start, stop, count) = hdr_expected(ref, test)
    assert main(["-r", str(ref), "-t", str(test), str(ref), "-d", str(tmp_path), "-hist"]) == 0
    out = capsys.readouterr().out
    assert out.count("Start exposure: ") == 1 and out.count("FLIP between") == 2
    vals = printed_values(out)
    assert vals["Mean"][1] == "0.000000" and vals["Max"][1] == "0.000000"
    e = hdr_name("aces", start, stop, count).split("67ppd.")[1]
    assert (tmp_path / f"weighted_histogram.flip.reference.test.reference.67ppd.{e}.png").exists()
    emap = np.asarray(Image.open(tmp_path / f"exposure_map.reference.reference.67ppd.{e}.png"))
    assert (emap == apply_colormap(np.zeros((1, 1), np.float32), VIRIDIS)[0, 0]).all()  # no exposure wins


@pytest.mark.parametrize(
    "argv,needle",
    [
        (["-n", "1"], "at least 2"),
        (["--num-exposures", "2.5"], "at least 2"),
        (["-cstart", "2", "-cstop", "1"], "must not be above --stop-exposure"),
        (["-cstart", "nan"], "finite number"),
        (["-cstop", "abc"], "expected a number"),
        (["-tm", "filmic"], "invalid choice"),
        (["-cstart", "5"], "wrong order"),  # above the computed stop exposure
        (["-cstop", "-9"], "wrong order"),  # below the computed start exposure
    ],
)
def test_hdr_option_errors(argv, needle, hdr_pair, tmp_path, capsys):
    ref, test = hdr_pair
    assert main(["-r", str(ref), "-t", str(test), "-d", str(tmp_path / "out")] + argv) == 2
    captured = capsys.readouterr()
    assert needle in error_line(captured.err) and captured.out == ""
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("argv", [["-tm", "aces"], ["-cstart", "-2"], ["--stop-exposure", "1"], ["-n", "3"], ["-nexm"]])
def test_hdr_options_for_ldr_images(argv, pair, capsys):
    assert main(["-r", str(pair[0]), "-t", str(pair[1]), "-nerm"] + argv) == 2
    line = error_line(capsys.readouterr().err)
    assert "HDR-FLIP option(s) given for LDR images" in line and argv[0] in line
    assert main(["--example", "-nerm"] + argv) == 2
    capsys.readouterr()


def test_hdr_folder_mode(hdr_pair, tmp_path, capsys):
    from flip_loss.imageio import load_exr, save_exr

    refs, tests = tmp_path / "refs", tmp_path / "tests"
    refs.mkdir(), tests.mkdir()
    ref = load_exr(hdr_pair[0])
    test = load_exr(hdr_pair[1])
    save_exr(refs / "a.exr", ref)
    save_exr(tests / "a.exr", test)
    save_exr(refs / "b.exr", ref * 8)  # another reference: another exposure range
    save_exr(tests / "b.exr", test * 8)
    out = tmp_path / "out"
    assert (
        main(["--reference-dir", str(refs), "--test-dir", str(tests), "-d", str(out), "--no-progress", "-tm", "hable"])
        == 0
    )
    stdout = capsys.readouterr().out
    assert stdout.startswith("Invoking HDR-FLIP\n     Pixels per degree: 67\n     Assumed tone mapper: Hable\n\n")
    expected_files = ["summary.csv"]
    for stem in ("a", "b"):
        ours, _, (start, stop, count) = hdr_expected(refs / f"{stem}.exr", tests / f"{stem}.exr", "hable")
        block = stdout.split(f"<{refs / (stem + '.exr')}>")[1]
        assert (
            f"     Start exposure: {start:.4f}\n     Stop exposure: {stop:.4f}\n"
            f"     Number of exposures: {count}\n" in block
        )
        assert f"     Mean: {pool(ours).mean:.6f}\n" in block
        name = hdr_name("hable", start, stop, count).replace("reference.test", f"{stem}.{stem}")
        expected_files += [f"flip.{name}.png", f"exposure_map.{name}.png"]
    assert (
        f"{hdr_expected(refs / 'a.exr', tests / 'a.exr', 'hable')[2][0] - 3:.4f}"
        == f"{hdr_expected(refs / 'b.exr', tests / 'b.exr', 'hable')[2][0]:.4f}"
    )  # 8x brighter: 3 stops
    assert sorted(p.name for p in out.iterdir()) == sorted(expected_files)
    assert len((out / "summary.csv").read_text().splitlines()) == 3
    # A pair of an .exr reference and an LDR test image is that pair's error (exit code 4; the
    # others are evaluated); a run of HDR and LDR pairs evaluates each with its own kind.
    Image.new("RGB", (HDR_W, HDR_H)).save(tests / "c.png")
    save_exr(refs / "c.exr", ref)
    assert main(["--reference-dir", str(refs), "--test-dir", str(tests), "-d", str(out), "-v", "0"]) == 4
    line = error_line(capsys.readouterr().err)
    assert "cannot mix HDR and LDR images" in line and str(tests / "c.png") in line
    (refs / "c.exr").unlink()
    Image.new("RGB", (HDR_W, HDR_H)).save(refs / "c.png")
    assert main(["--reference-dir", str(refs), "--test-dir", str(tests), "-d", str(out), "-v", "0"]) == 0
    assert capsys.readouterr().err == ""


def test_hdr_module_output_and_quiet_exr_errors(hdr_pair, tmp_path):
    ref, test = hdr_pair
    res = run_module(["-r", ref, "-t", test], cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert res.stderr == ""
    lines = res.stdout.splitlines()
    assert lines[0] == "Invoking HDR-FLIP" and lines[6] == "" and len(lines) == 19
    assert re.fullmatch(r"     Evaluation time: \d+\.\d{4} seconds", lines[14])
    assert lines[15].startswith("     FLIP error map location: ./flip.reference.test.67ppd.hdr.aces.m")
    assert lines[16].startswith("     FLIP exposure map location: ./exposure_map.reference.test.67ppd.hdr.aces.m")
    assert lines[17] == "" and re.fullmatch(r"Total time: \d+\.\d{4} seconds", lines[18])
    # A truncated EXR: one error line, none of OpenEXR's own diagnostics.
    data = test.read_bytes()
    (tmp_path / "trunc.exr").write_bytes(data[: len(data) - 300])
    res = run_module(["-r", ref, "-t", tmp_path / "trunc.exr", "-nerm"], cwd=tmp_path)
    assert res.returncode == 2
    assert "trunc.exr': the OpenEXR file is damaged, truncated" in error_line(res.stderr)


# ----------------------------------------------------------------------------------------------
# The user's files: no input overwritten, nothing written by a run that fails, clear limits
# ----------------------------------------------------------------------------------------------


@pytest.fixture
def work(pair, tmp_path, monkeypatch):
    """A working directory holding ref.png and test.png (copies of the pair), made current."""
    d = tmp_path / "work"
    d.mkdir()
    for p in pair:
        (d / p.name).write_bytes(p.read_bytes())
    monkeypatch.chdir(d)
    return d


def refused(argv, directory, capsys, needle, code=2):
    """Runs main(argv) and checks that it exits with ``code`` and one error line holding ``needle``
    and that no file under ``directory`` was created, changed or removed."""
    before = snapshot(directory)
    assert main(argv) == code
    captured = capsys.readouterr()
    assert needle in error_line(captured.err), captured.err
    assert snapshot(directory) == before
    return captured


@pytest.mark.parametrize(
    "argv",
    [
        ["-o", "test.png"],
        ["-o", "ref.png"],
        ["-o", "./sub/../test.png"],
        ["-b", "test"],
        ["-c", "ref.png", "-nerm"],
        ["-c", "test.png"],
        ["-t", "test.png", "flip.ref.test.67ppd.ldr.png"],  # the second test image is the first's map
        ["-txt", "-nerm", "-t", "test.png", "pooled_values.flip.ref.test.67ppd.ldr.txt"],
        ["-hist", "-nerm", "-b", "x", "-t", "x.weighted_histogram.png"],
        ["-o", "link.png"],  # a symbolic link to test.png
        ["-o", "hard.png"],  # a hard link of ref.png
        ["-d", "linked", "-b", "ref"],  # a symbolic link to the directory
    ],
)
def test_output_that_is_an_input_is_refused(work, capsys, argv):
    (work / "sub").mkdir()
    (work / "flip.ref.test.67ppd.ldr.png").write_bytes((work / "test.png").read_bytes())
    # An image file, whatever its extension says (Pillow reads the content).
    (work / "pooled_values.flip.ref.test.67ppd.ldr.txt").write_bytes((work / "test.png").read_bytes())
    (work / "x.weighted_histogram.png").write_bytes((work / "test.png").read_bytes())
    os.symlink("test.png", work / "link.png")
    os.link(work / "ref.png", work / "hard.png")
    os.symlink(str(work), work / "linked")
    if "-t" not in argv:
        argv = ["-t", "test.png"] + argv
    refused(["-r", "ref.png"] + argv, work, capsys, "would overwrite the input image")


def test_hdr_exposure_map_that_is_an_input_is_refused(hdr_pair, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for p in hdr_pair:
        (tmp_path / p.name).write_bytes(p.read_bytes())
    os.symlink("test.exr", tmp_path / "exposure_map.m.png")
    line = error_line(
        refused(
            ["-r", "reference.exr", "-t", "test.exr", "-o", "m.png"],
            tmp_path,
            capsys,
            "would overwrite the input image",
        ).err
    )
    assert "exposure map 'exposure_map.m.png'" in line and "'test.exr'" in line


@pytest.mark.parametrize(
    "argv,needle",
    [
        (["-t", "a/test.png", "b/test.png"], "error map"),  # the same default name twice
        (["-t", "a/test.png", "b/test.png", "-nerm", "-txt"], "pooled values file"),
        (["-t", "test.png", "-c", "flip.ref.test.67ppd.ldr.png"], "CSV file"),  # the CSV is the map
        (["-t", "test.png", "-o", "m.png", "-c", "m.png"], "CSV file"),
        (["-t", "test.png", "-o", "m.txt.png", "-txt", "-c", "pooled_values.m.txt.txt"], "CSV file"),
    ],
)
def test_outputs_written_twice_are_refused(work, capsys, argv, needle):
    for d in ("a", "b"):
        (work / d).mkdir()
        (work / d / "test.png").write_bytes((work / "test.png").read_bytes())
    line = error_line(refused(["-r", "ref.png"] + argv, work, capsys, "would be the same file").err)
    assert needle in line


def test_folder_mode_outputs_that_are_inputs(folders, tmp_path, capsys):
    refs, tests = folders
    # The summary CSV may not be an input; a pair whose map would be an input of another pair is
    # skipped (exit 4) and the others are evaluated.
    refused(
        ["--reference-dir", str(refs), "--test-dir", str(tests), "-c", str(tests / "a.png"), "-nerm", "-v", "0"],
        tmp_path,
        capsys,
        "would overwrite the input image",
    )
    Image.open(refs / "a.png").save(refs / "flip.a.a.67ppd.ldr.png")
    Image.open(tests / "a.png").save(tests / "flip.a.a.67ppd.ldr.png")
    inputs = snapshot(refs, tests)
    assert main(["--reference-dir", str(refs), "--test-dir", str(tests), "-d", str(tests), "-v", "0"]) == 4
    line = error_line(capsys.readouterr().err)
    assert f"skipped test image <{tests / 'a.png'}>" in line and "would overwrite the input image" in line
    after = snapshot(refs, tests)
    assert {p: after[p] for p in inputs} == inputs
    assert sorted(p.name for p in set(after) - set(inputs)) == [
        "flip.b.b.67ppd.ldr.png",
        "flip.flip.a.a.67ppd.ldr.flip.a.a.67ppd.ldr.67ppd.ldr.png",
        "summary.csv",
    ]


def test_bad_second_test_image_writes_nothing(work, bad_files, capsys):
    (work / "old.csv").write_text(HEADER_LINE + "\n")
    refused(
        ["-r", "ref.png", "-t", "test.png", str(bad_files / "trunc.png"), "-txt", "-c", "old.csv", "-hist"],
        work,
        capsys,
        "trunc.png': the file is damaged or truncated",
    )
    refused(
        ["-r", "ref.png", "-t", "test.png", str(bad_files / "garbage.png"), "-c", "new.csv", "-d", "out"],
        work,
        capsys,
        "garbage.png",
    )
    assert not (work / "out").exists()  # the directory is not created either


@pytest.mark.parametrize(
    "argv,needle",
    [
        (["-c", "test.png/x.csv"], "'{work}/test.png' is not a directory"),
        (["-c", "nodir/x.csv"], "the directory 'nodir' does not exist"),
        (["-c", "sub"], "is a directory"),
        (["-o", "sub" + ".png"], "is a directory"),
        (["-o", "nodir/m.png", "-d", "out"], "the directory 'out/nodir' does not exist"),
        (["-d", "test.png"], "it is not a directory"),
        (["-d", "test.png/out"], "is not a directory"),
        (["-b", "x" * 300], "'./" + "x" * 300 + ".png': its file name is 304 bytes long, more than the 255"),
        (["-hist", "-b", "x" * 251], "histogram './" + "x" * 251 + ".weighted_histogram.png': its file name is 274"),
        (["-d", "y" * 300], "longer than the"),
        (["-c", "z" * 300 + ".csv"], "304 bytes long"),
        (["-c", "/dev/null"], "not a regular file"),
    ],
)
def test_unwritable_output_writes_nothing(work, capsys, argv, needle):
    (work / "sub").mkdir()
    (work / "sub.png").mkdir()
    refused(["-r", "ref.png", "-t", "test.png"] + argv, work, capsys, needle.format(work=work))


def test_long_default_name_of_a_later_pair_writes_nothing(work, capsys):
    long_test = work / ("t" * 240 + ".png")
    long_test.write_bytes((work / "test.png").read_bytes())
    refused(
        ["-r", "ref.png", "-t", "test.png", str(long_test.name), "-c", "out.csv"],
        work,
        capsys,
        "bytes long, more than the",
    )


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() == 0, reason="root may write anywhere")
def test_read_only_locations_write_nothing(work, capsys):
    locked = work / "locked"
    locked.mkdir()
    (work / "ro.csv").write_text("")
    os.chmod(work / "ro.csv", 0o444)
    os.chmod(locked, 0o555)
    try:
        refused(["-r", "ref.png", "-t", "test.png", "-c", "locked/x.csv"], work, capsys, "permission denied")
        refused(["-r", "ref.png", "-t", "test.png", "-d", "locked"], work, capsys, "permission denied")
        refused(["-r", "ref.png", "-t", "test.png", "-c", "ro.csv"], work, capsys, "permission denied")
    finally:
        os.chmod(locked, 0o755)


def test_csv_is_appended_by_replacing_it(work, capsys):
    csv_file = work / "r.csv"
    csv_file.write_bytes(HEADER_LINE.encode() + b'\n"a","b"')  # no newline after the last row
    os.chmod(csv_file, 0o640)
    assert main(["-r", "ref.png", "-t", "test.png", "-c", "r.csv", "-nerm", "-v", "0"]) == 0
    lines = csv_file.read_text().split("\n")
    assert lines[:2] == [HEADER_LINE, '"a","b"'] and lines[2].startswith('"ref.png","test.png",')
    assert lines[3:] == [""]
    assert stat_mode(csv_file) == 0o640  # the replaced file keeps its permissions
    assert sorted(p.name for p in work.iterdir()) == ["r.csv", "ref.png", "test.png"]


def stat_mode(path):
    return os.stat(path).st_mode & 0o777


def test_failed_write_leaves_nothing(work, capsys, monkeypatch):
    import errno

    import flip_loss.imageio

    real = flip_loss.imageio.save_png
    calls = []

    def disk_full_on_second_map(path, image):
        calls.append(path)
        if len(calls) == 2:
            with open(path, "wb") as f:
                f.write(b"\x89PNG half")
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real(path, image)

    monkeypatch.setattr(flip_loss.imageio, "save_png", disk_full_on_second_map)
    (work / "other.png").write_bytes((work / "test.png").read_bytes())
    line = error_line(
        refused(
            ["-r", "ref.png", "-t", "test.png", "other.png", "-d", "new/dir", "-txt", "-c", "r.csv"],
            work,
            capsys,
            "cannot write the error map",
        ).err
    )
    assert "new/dir/flip.ref.other.67ppd.ldr.png': No space left on device" in line
    assert not (work / "new").exists()  # the directories the run created are removed too


INTERRUPT_SCRIPT = """
import os, signal, sys
import flip_loss.pooling as pooling
real, calls = pooling.pool, []
def pool(error_map):  # the signal arrives while the second pair is evaluated
    calls.append(1)
    if len(calls) == 2:
        os.kill(os.getpid(), getattr(signal, sys.argv[1]))
    return real(error_map)
pooling.pool = pool
from flip_loss.cli import main
sys.exit(main(sys.argv[2:]))
"""


@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM"])
def test_interrupted_run_leaves_nothing(work, sig):
    (work / "other.png").write_bytes((work / "test.png").read_bytes())
    (work / "r.csv").write_text(HEADER_LINE + "\n")
    before = snapshot(work)
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    res = subprocess.run(
        [
            sys.executable,
            "-c",
            INTERRUPT_SCRIPT,
            sig,
            "-r",
            "ref.png",
            "-t",
            "test.png",
            "other.png",
            "-txt",
            "-c",
            "r.csv",
            "-d",
            "out",
        ],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 130, res.stderr
    assert res.stderr.strip().splitlines()[-1] == "flip-loss: interrupted; no output file was written"
    assert "Traceback" not in res.stderr
    assert snapshot(work) == before


def test_interrupt_while_publishing_finishes_the_renames(work, capsys, monkeypatch):
    import signal

    real_replace = os.replace
    calls = []

    def replace(src, dst):
        calls.append(dst)
        if len(calls) == 1:
            os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C between two renames
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    assert main(["-r", "ref.png", "-t", "test.png", "-txt", "-c", "r.csv", "-v", "0"]) == 130
    assert capsys.readouterr().err == "flip-loss: interrupted; the outputs had been written\n"
    assert len(calls) == 2  # the map and the text file are renamed into place; the CSV row is appended
    assert len((work / "r.csv").read_text().splitlines()) == 2
    assert sorted(p.name for p in work.iterdir()) == [
        "flip.ref.test.67ppd.ldr.png",
        "pooled_values.flip.ref.test.67ppd.ldr.txt",
        "r.csv",
        "ref.png",
        "test.png",
    ]


def _png_header(path, width, height):
    def chunk(tag, data):
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data))

    Path(path).write_bytes(
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
        + chunk(b"IDAT", zlib.compress(b""))
        + chunk(b"IEND", b"")
    )


@pytest.mark.parametrize(
    "argv,needle",
    [
        (["-t", "bomb.png"], "its header gives more than the limit of 134217728 pixels"),
        (["-t", "big.png"], "its header gives 12000x12000 pixels, more than the limit of 134217728 pixels"),
        (["-t", "test.png", "--ppd", "1e9"], "expected a number from 0.001 to 10000, got '1e9'"),
        (["-t", "test.png", "--ppd", "10000.5"], "from 0.001 to 10000"),
        (["-t", "test.png", "--ppd", "inf"], "from 0.001 to 10000"),
        (["-t", "test.png", "--ppd", "0.0005"], "expected a number from 0.001 to 10000, got '0.0005'"),
        (["-t", "test.png", "-vc", "1e300", "1e-300", "1e300"], "give inf pixels per degree"),
        (["-t", "test.png", "-vc", "1e-300", "1e300", "1"], "give 0 pixels per degree"),
        (["-t", "test.png", "-vc", "100", "0.01", "3840"], "number from 0.001 to 10000"),
        (
            ["-t", "test.png", "-vc", "0.001", "1", "10"],
            "give 0.000174533 pixels per degree; it must be a number from 0.001",
        ),
    ],
)
def test_limits_are_one_line_errors(work, capsys, argv, needle):
    _png_header(work / "bomb.png", 30000, 30000)  # Pillow itself refuses this one
    _png_header(work / "big.png", 12000, 12000)  # Pillow only warns about this one
    captured = refused(["-r", "ref.png"] + argv, work, capsys, needle)
    assert captured.out == ""
    _png_header(work / "bomb.png", 30000, 30000)
    refused(["-r", "bomb.png", "-t", "test.png"], work, capsys, "more than the limit")


def test_limits_are_the_api_limits(work, capsys):
    from flip_loss.constants import MAX_PPD, MIN_PPD

    for ppd in (MIN_PPD, MAX_PPD):
        assert main(["-r", "ref.png", "-t", "test.png", "--ppd", repr(ppd), "-nerm", "-v", "1"]) == 0
    for ppd in (MIN_PPD * (1 - 1e-12), MAX_PPD * (1 + 1e-12)):
        assert main(["-r", "ref.png", "-t", "test.png", "--ppd", repr(ppd), "-nerm"]) == 2
        assert f"from {MIN_PPD:g} to {MAX_PPD:g}" in error_line(capsys.readouterr().err)
    # -vc is held to the same limit.
    vc = (1.0, 1.0, math.floor(MAX_PPD * 180 / math.pi))
    assert MAX_PPD - 0.1 < pixels_per_degree(*vc) <= MAX_PPD
    assert main(["-r", "ref.png", "-t", "test.png", "-vc", *map(repr, vc), "-nerm", "-v", "0"]) == 0


def test_exr_header_above_the_pixel_limit(hdr_pair, tmp_path, capsys):
    from flip_loss.imageio import exr_size, load_exr

    data = bytearray(hdr_pair[1].read_bytes())
    at = data.index(b"dataWindow\0box2i\0") + len(b"dataWindow\0box2i\0") + 4
    data[at + 8 : at + 16] = struct.pack("<ii", 29999, 29999)  # xMax, yMax
    big = tmp_path / "big.exr"
    big.write_bytes(bytes(data))
    for read in (exr_size, load_exr):
        with pytest.raises(ValueError, match="30000x30000 pixels, more than the limit"):
            read(big)
    refused(["-r", str(hdr_pair[0]), "-t", str(big)], tmp_path, capsys, "more than the limit")


@pytest.mark.parametrize(
    "argv,needle",
    [
        (["-n", "1e11"], "at least 2 (the start and the stop exposure) and at most 256, got '1e11'"),
        (["-n", "100000000000"], "at most 256"),
        (["-n", "257"], "at most 256"),
        (["-cstart", "-1000", "-cstop", "1"], "would need more than 256 exposures"),
        (["-cstop", "300"], "would need more than 256 exposures"),
        (["--start-exposure=-1e300", "-n", "3"], "within the float32 range"),
        (["-cstop", "1e39"], "within the float32 range"),
    ],
)
def test_hdr_limits_are_one_line_errors(hdr_pair, tmp_path, capsys, argv, needle):
    refused(["-r", str(hdr_pair[0]), "-t", str(hdr_pair[1]), "-d", str(tmp_path)] + argv, tmp_path, capsys, needle)


def test_hdr_exposure_count_limit_is_accepted(hdr_pair, tmp_path, capsys):
    from flip_loss.constants import MAX_EXPOSURES

    assert (
        main(
            [
                "-r",
                str(hdr_pair[0]),
                "-t",
                str(hdr_pair[1]),
                "-nerm",
                "-nexm",
                "-n",
                str(MAX_EXPOSURES),
                "-cstart",
                "-8",
                "-cstop",
                "8",
            ]
        )
        == 0
    )
    assert f"     Number of exposures: {MAX_EXPOSURES}\n" in capsys.readouterr().out


def test_concurrent_runs_appending_to_one_csv_keep_every_row(pair, tmp_path):
    """Two processes appending to the same -c CSV at the same time: every row of both survives
    (the append is one write under a lock, not a read-modify-replace that could drop rows)."""
    ref, test = pair
    csv_path = tmp_path / "shared.csv"
    loop = (
        "import sys; from flip_loss.cli import main\n"
        "for _ in range(int(sys.argv[3])):\n"
        "    assert main(['-r', sys.argv[1], '-t', sys.argv[2], '-nerm', '-v', '0', '-c', sys.argv[4]]) == 0\n"
    )
    runs = 15
    procs = [
        subprocess.Popen([sys.executable, "-c", loop, ref, test, str(runs), str(csv_path)], cwd=tmp_path)
        for _ in range(2)
    ]
    assert all(p.wait(timeout=600) == 0 for p in procs)
    lines = csv_path.read_text().splitlines()
    assert lines[0].startswith('"Reference"') and sum(line.startswith('"Reference"') for line in lines) == 1
    assert len(lines) == 1 + 2 * runs


def test_rows_appended_by_another_run_between_staging_and_commit_survive(pair, tmp_path):
    """The interleaving behind lost rows, made deterministic: this run stages its CSV row, another
    run appends its own, then this run commits."""
    from flip_loss.cli.outputs import Output, Staging, write_appended_csv

    ref, test = pair
    csv_path = tmp_path / "shared.csv"
    assert main(["-r", str(ref), "-t", str(test), "-nerm", "-v", "0", "-c", str(csv_path)]) == 0
    staging = Staging()
    staging.write(
        Output(str(csv_path), str(csv_path), "CSV file"),
        write_appended_csv(str(csv_path), [["a", "b", "1", "2", "3", "4", "5", "6", "7"]]),
    )
    assert main(["-r", str(ref), "-t", str(test), "-nerm", "-v", "0", "-c", str(csv_path)]) == 0
    staging.commit()
    lines = csv_path.read_text().splitlines()
    assert len(lines) == 4 and lines[-1].startswith('"a","b"')
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".flip-loss-")]


def test_an_absurd_dist_timeout_is_a_usage_error(pair, tmp_path, capsys):
    ref, test = pair
    assert main(["-r", str(ref), "-t", str(test), "--dist-timeout", "1e300"]) == 2
    assert "dist-timeout" in capsys.readouterr().err


# ----------------------------------------------------------------------------------------------
# flip_loss.cli's modules: how they import each other
# ----------------------------------------------------------------------------------------------

CLI_PACKAGE = ("flip_loss", "cli")
CLI_DIR = ROOT.joinpath(*CLI_PACKAGE)
CLI_MODULES = sorted(p.stem for p in CLI_DIR.glob("*.py"))


def cli_imports(module):
    """The imports of flip_loss.cli's ``module`` ("__init__" is the package) from its siblings:
    [(sibling, names imported from it, whether the import is inside a function)]."""
    tree = ast.parse((CLI_DIR / f"{module}.py").read_text(), f"{module}.py")
    found = []

    def sibling_of(parts):
        if tuple(parts[:2]) != CLI_PACKAGE:
            return None
        return parts[2] if len(parts) > 2 else "__init__"

    def visit(node, in_function):
        for child in ast.iter_child_nodes(node):
            nested = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if isinstance(child, ast.Import):
                for alias in child.names:
                    sibling = sibling_of(alias.name.split("."))
                    if sibling is not None:
                        found.append((sibling, [], in_function))
            elif isinstance(child, ast.ImportFrom):
                base = list(CLI_PACKAGE[: len(CLI_PACKAGE) - child.level + 1]) if child.level else []
                parts = base + (child.module.split(".") if child.module else [])
                sibling = sibling_of(parts)
                if sibling == "__init__":  # from . import x: x a submodule, or a name of the package
                    for alias in child.names:
                        if alias.name in CLI_MODULES:
                            found.append((alias.name, [], in_function))
                        else:
                            found.append(("__init__", [alias.name], in_function))
                elif sibling is not None:
                    found.append((sibling, [alias.name for alias in child.names], in_function))
            visit(child, nested)

    visit(tree, False)
    return found


def test_cli_modules_import_each_other_without_a_cycle():
    """The import graph of flip_loss.cli's modules is acyclic, every sibling import is at a
    module's top level (none in a function, where it would hide a cycle), and no module imports
    another one's underscore-private name."""
    graph = {}
    for module in CLI_MODULES:
        imports = cli_imports(module)
        assert [s for s, _, lazy in imports if lazy] == [], f"{module}: sibling imports inside a function"
        private = [(s, n) for s, names, _ in imports for n in names if n.startswith("_")]
        assert private == [], f"{module} imports private names of its siblings: {private}"
        graph[module] = {s for s, _, _ in imports if s != module}
    assert set().union(*graph.values()) <= set(CLI_MODULES)
    state = {}  # module: "visiting" or "done"

    def walk(module, path):
        if state.get(module) == "done":
            return
        assert state.get(module) != "visiting", f"import cycle: {' -> '.join(path + [module])}"
        state[module] = "visiting"
        for sibling in sorted(graph[module]):
            walk(sibling, path + [module])
        state[module] = "done"

    for module in CLI_MODULES:
        walk(module, [])
    # The choice between one process and a torchrun launch is the package's: neither run knows the other.
    assert "shard" not in graph["run"] and {"run", "shard"} <= graph["__init__"]
