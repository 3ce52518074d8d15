"""The command line on OpenEXR pairs (HDR-FLIP): the maps of flip-evaluator for every tone mapper,
given exposures, its outputs and options, two tests, folder mode, its option errors."""

import os
import re

import numpy as np
import pytest
import torch
from PIL import Image

from flip_loss.cli import main
from flip_loss.colormaps import MAGMA, apply_colormap, to_grey_uint8
from flip_loss.constants import DEFAULT_PPD, TONE_MAPPER_DISPLAY_NAMES
from flip_loss.pooling import pool
from cli_runs import HDR_H, HDR_W, hdr_images, error_line, formatted, printed_values, run_module


# The tone mappers of flip-evaluator (it runs ACES for a name it does not know), each spelt in
# another case (the option takes any case); -tm's choices are the registry's (test_one_source.py).
EVALUATOR_TONE_MAPPERS = ("aces", "hable", "reinhard")
TM_ARGS = [(str.upper, str.lower, str.capitalize)[i % 3](tm) for i, tm in enumerate(EVALUATOR_TONE_MAPPERS)]


_EVALUATED = {}


def flip_evaluator_hdr(params_items=(("tonemapper", "aces"),), ppd=DEFAULT_PPD):
    """flip-evaluator's HDR map (float64) and the parameters it used, for the hdr_pair images (the
    reference is never all black: flip-evaluator would exit the process)."""
    key = (params_items, ppd)
    if key not in _EVALUATED:
        import flip_evaluator

        ref, test = hdr_images()
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
