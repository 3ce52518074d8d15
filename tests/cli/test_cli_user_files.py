"""The user's files: no input overwritten, nothing written by a run that fails or is interrupted,
CSV rows appended by concurrent runs kept, the size limits as one-line errors."""

import math
import os
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import pytest
from PIL import Image

from flip_loss.cli import main
from flip_loss.options import pixels_per_degree
from cli_runs import HEADER_LINE, ROOT, error_line, snapshot


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


@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM", "SIGHUP"])
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
        (["-cstart", "-149", "-cstop", "127"], "would need 276 exposures (one per stop), more than 256"),
        (["-cstart", "-1000", "-cstop", "1"], "from -149 to 127 (2^c must be a nonzero, finite float32)"),
        (["-cstop", "300"], "from -149 to 127"),
        (["--start-exposure=-1e300", "-n", "3"], "from -149 to 127"),
        (["-cstop", "1e39"], "from -149 to 127"),
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
