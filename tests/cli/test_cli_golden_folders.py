"""Folder mode on real golden folders: PNG and OpenEXR renders side by side, each pair evaluated with
its own kind in one run (LDR-FLIP for LDR pairs, HDR-FLIP for .exr pairs, one summary, one report,
one gate), a name shared by two images of one folder being that pair's error; and the run's one
account (flip_loss.cli.run_counts), said in the same words on stdout, in the CSV file's rows and in
the HTML report, stdout ending with the gate's verdict."""

import csv
import html.parser
import itertools
import re

import numpy as np
import pytest
import torch
from PIL import Image

from cli_runs import error_line
from flip_loss.cli import main
from flip_loss.imageio import save_exr

W, H = 40, 28
_RUNS = itertools.count()


class Page(html.parser.HTMLParser):
    """The text of each element with an id, the article headings (h3) and the text of each article
    (the report is well-formed HTML: every element but the void ones is closed)."""

    VOID = {"img", "meta", "br", "input", "link", "hr", "wbr", "source"}

    def __init__(self, text):
        super().__init__()
        self.by_id, self.headings, self.articles = {}, [], []
        self._open = []  # [tag, id or None, [text]] of the open elements
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        if tag not in self.VOID:
            self._open.append([tag, dict(attrs).get("id"), []])

    def handle_endtag(self, tag):
        while self._open:
            open_tag, ident, parts = self._open.pop()
            text = "".join(parts)
            if self._open:
                self._open[-1][2].append(text)
            text = " ".join(text.split())
            if ident is not None:
                self.by_id[ident] = text
            if open_tag == "h3":
                self.headings.append(text)
            elif open_tag == "article":
                self.articles.append(text)
            if open_tag == tag:
                break

    def handle_data(self, data):
        if self._open:
            self._open[-1][2].append(data)


def _ldr_pair(refs, tests, name, noise, seed):
    rng = np.random.default_rng(seed)
    reference = rng.integers(0, 256, (H, W, 3), dtype=np.uint8)
    test = np.clip(reference.astype(int) + rng.integers(-noise, noise + 1, reference.shape), 0, 255)
    Image.fromarray(reference).save(refs / f"{name}.png")
    Image.fromarray(test.astype(np.uint8)).save(tests / f"{name}.png")


def _hdr_pair(refs, tests, name, scale, change, seed):
    g = torch.Generator().manual_seed(seed)
    reference = torch.rand(3, H, W, generator=g) ** 2 * scale
    test = reference * (1 + change * torch.rand(3, H, W, generator=g))
    save_exr(refs / f"{name}.exr", reference)
    save_exr(tests / f"{name}.exr", test)


@pytest.fixture
def golden(tmp_path):
    """A golden folder of PNG and EXR references and a folder of renders: two LDR and two HDR pairs."""
    refs, tests = tmp_path / "golden", tmp_path / "renders"
    refs.mkdir(), tests.mkdir()
    _ldr_pair(refs, tests, "a_ui", 6, 1)
    _ldr_pair(refs, tests, "b_sky", 40, 2)
    _hdr_pair(refs, tests, "c_room", 8.0, 0.05, 3)
    _hdr_pair(refs, tests, "d_sun", 60.0, 0.6, 4)
    return refs, tests


def csv_rows(path):
    with open(path, newline="") as f:
        return list(csv.reader(f))


def single_values(tmp_path, reference, test, extra=()):
    """The pooled values the single-pair command line writes for (reference, test)."""
    out = tmp_path / f"single-{next(_RUNS)}.csv"  # a new file: its one row is this run's
    argv = (
        ["-r", str(reference), "-t", str(test), "-nerm", "-nexm"]
        if test.suffix == ".exr"
        else ["-r", str(reference), "-t", str(test), "-nerm"]
    )
    assert main(argv + ["-v", "0", "-c", str(out), *extra]) == 0
    return csv_rows(out)[1][2:8]


def api_mean(reference, test, tone_mapper="aces"):
    """The mean FLIP error of the API: LDR-FLIP for PNG pairs, HDR-FLIP with the exposures computed
    from the reference for EXR pairs."""
    import flip_loss
    from flip_loss.functional import ldr_flip
    from flip_loss.hdr import exposures_for
    from flip_loss.imageio import load_image

    r, t = load_image(reference), load_image(test)
    with torch.no_grad():
        if reference.suffix == ".exr":
            _, counts, s, e = exposures_for(r, tone_mapper)
            error = flip_loss.hdr_flip(
                t,
                r,
                tone_mapper=tone_mapper,
                start_exposure=float(s[0]),
                stop_exposure=float(e[0]),
                num_exposures=int(counts[0]),
                eps=0.0,
            )
        else:
            error = ldr_flip(t, r, eps=0.0)
    return error.double().mean().item()


def test_a_golden_folder_of_png_and_exr_renders_is_one_run(golden, tmp_path, capsys):
    refs, tests = golden
    names = ["a_ui.png", "b_sky.png", "c_room.exr", "d_sun.exr"]
    single = {n: single_values(tmp_path, refs / n, tests / n) for n in names}
    means = {n: float(v[0]) for n, v in single.items()}
    for n in names:  # the single-pair command line is the API's value of its kind
        assert means[n] == pytest.approx(api_mean(refs / n, tests / n), abs=1e-6)
    # the gate between the smaller LDR and the larger HDR value: one pair of each kind is over it
    low = max(means["a_ui.png"], min(means["c_room.exr"], means["d_sun.exr"]))
    high = min(means["b_sky.png"], max(means["c_room.exr"], means["d_sun.exr"]))
    assert low < high
    threshold = f"{(low + high) / 2:.6f}"
    out = tmp_path / "out"
    argv = ["--reference-dir", str(refs), "--test-dir", str(tests), "-d", str(out), "--no-progress"]
    assert main(argv + ["--report", str(tmp_path / "report"), "--fail-above", "mean", threshold]) == 1
    captured = capsys.readouterr()
    assert "flip-loss: error" not in captured.err and captured.err.count("gate failed") == 2
    assert captured.out.startswith(
        "Invoking LDR-FLIP (LDR pairs) and HDR-FLIP (OpenEXR pairs)\n     Pixels per degree: 67\n"
        "     Assumed tone mapper: ACES\n"
    )
    assert captured.out.splitlines()[-1] == "gate: FAIL (4 evaluated, 2 over the gate)"
    rows = csv_rows(out / "summary.csv")
    assert [r[1] for r in rows[1:]] == [str(tests / n) for n in names]
    for row, n in zip(rows[1:], names):
        assert row[2:8] == single[n], n  # each pair's values are those of its own kind
        assert row[8:] == ["evaluated", "fail" if means[n] > float(threshold) else "pass"]
    # exposure maps for the HDR pairs only, the exposures printed in their blocks only
    assert sorted(p.name.split(".")[1] for p in out.glob("exposure_map.*")) == ["c_room", "d_sun"]
    assert captured.out.count("Start exposure") == 2
    assert captured.out.split(f"<{tests / 'b_sky.png'}>")[1].split("FLIP between")[0].count("exposure") == 0
    text = (tmp_path / "report" / "index.html").read_text()
    page = Page(text)
    assert page.by_id["gate-verdict"] == "gate: FAIL (4 evaluated, 2 over the gate)"
    assert "LDR-FLIP for the LDR pairs, HDR-FLIP (tone mapper aces) for the OpenEXR (.exr) pairs" in text
    assert len(list((tmp_path / "report" / "pairs").glob("*.exposure.png"))) == 2
    # the gate passes when no pair is over it
    assert main(argv + ["-nerm", "-v", "1", "-c", str(tmp_path / "pass.csv"), "--fail-above", "mean", "0.9"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "gate: PASS (4 evaluated, 0 over the gate)"


def test_hdr_options_apply_to_the_exr_pairs_of_a_mixed_folder(golden, tmp_path, capsys):
    refs, tests = golden
    out = tmp_path / "out"
    options = ["-tm", "hable", "-cstart", "-4", "-cstop", "2", "-n", "4", "-nexm"]
    argv = ["--reference-dir", str(refs), "--test-dir", str(tests), "-d", str(out), "-v", "0", "--no-progress"]
    assert main(argv + options) == 0
    assert capsys.readouterr().err == ""
    rows = {r[1]: r[2:8] for r in csv_rows(out / "summary.csv")[1:]}
    for n in ("c_room.exr", "d_sun.exr"):  # the HDR options apply to the EXR pairs
        assert rows[str(tests / n)] == single_values(tmp_path, refs / n, tests / n, options)
        assert rows[str(tests / n)] != single_values(tmp_path, refs / n, tests / n)
    for n in ("a_ui.png", "b_sky.png"):  # and not to the LDR pairs
        assert rows[str(tests / n)] == single_values(tmp_path, refs / n, tests / n)
    assert not list(out.glob("exposure_map.*"))  # -nexm
    # An exposure outside the API's range is the command line's error, not each EXR pair's: exit
    # 2, nothing written (not the LDR pairs' outputs, a summary and exit 4).
    for bad in ("--start-exposure=-200", "--stop-exposure=128"):
        assert main(argv[:4] + ["-d", str(tmp_path / "bad"), "-v", "0", bad]) == 2
        assert "--" + bad.split("=")[0][2:] in error_line(capsys.readouterr().err)
        assert not (tmp_path / "bad").exists()
    assert sorted(p.name for p in out.glob("flip.*")) == [
        "flip.a_ui.a_ui.67ppd.ldr.png",
        "flip.b_sky.b_sky.67ppd.ldr.png",
        "flip.c_room.c_room.67ppd.hdr.hable.m4.0000_to_p2.0000.4.png",
        "flip.d_sun.d_sun.67ppd.hdr.hable.m4.0000_to_p2.0000.4.png",
    ]
    # A folder of LDR images alone takes no HDR option: one error line, nothing written.
    ldr_refs, ldr_tests = tmp_path / "ldr_refs", tmp_path / "ldr_tests"
    ldr_refs.mkdir(), ldr_tests.mkdir()
    _ldr_pair(ldr_refs, ldr_tests, "a", 6, 1)
    (ldr_refs / "missing.png").write_bytes((ldr_refs / "a.png").read_bytes())  # an error line in a gated run
    args = ["--reference-dir", str(ldr_refs), "--test-dir", str(ldr_tests), "-d", str(tmp_path / "o2")]
    assert main(args + ["-tm", "aces", "--fail-above", "mean", "0.5"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("flip-loss: error: --tone-mapper/-tm: HDR-FLIP option(s)")
    assert not (tmp_path / "o2").exists()


@pytest.mark.parametrize("clash", ["renders", "golden", "ldr"])
def test_a_png_beside_an_exr_of_the_same_name_is_that_pairs_error(clash, golden, tmp_path, capsys):
    refs, tests = golden
    if clash == "renders":  # a stale PNG render beside the EXR one
        Image.new("RGB", (W, H)).save(tests / "c_room.png")
        folder, names = tests, "c_room.exr, c_room.png"
    elif clash == "golden":
        Image.new("RGB", (W, H)).save(refs / "c_room.png")
        folder, names = refs, "c_room.exr, c_room.png"
    else:  # two LDR images of one name alike
        Image.new("RGB", (W, H)).save(refs / "a_ui.tga")
        folder, names = refs, "a_ui.png, a_ui.tga"
    out = tmp_path / "out"
    argv = ["--reference-dir", str(refs), "--test-dir", str(tests), "-d", str(out), "-v", "1", "--no-progress"]
    assert main(argv + ["--fail-above", "mean", "0.9"]) == 4  # a pair not evaluated: exit code 4
    captured = capsys.readouterr()
    errors = [line for line in captured.err.splitlines() if line.startswith("flip-loss: error: ")]
    assert len(errors) == 1 and f"has 2 images named '{names.split('.')[0]}' ({names})" in errors[0]
    assert f"'{folder}'" in errors[0]
    rows = csv_rows(out / "summary.csv")
    assert len(rows) == 5
    refused = [r for r in rows[1:] if r[8] != "evaluated"]
    assert len(refused) == 1 and refused[0][2:8] == [""] * 6 and refused[0][9] == "fail"
    assert refused[0][8].startswith("not evaluated: ") and names in refused[0][8]
    assert captured.out.splitlines()[-1] == "gate: FAIL (3 evaluated, 0 over the gate, 1 not evaluated)"
    assert "4 pair(s) found: 3 evaluated, 1 not evaluated (1 with an error); 0 over the gate" in captured.out
    # the other pairs are evaluated, each with its own kind
    evaluated = sorted(r[1].rsplit("/", 1)[-1].split(".")[0] for r in rows[1:] if r[8] == "evaluated")
    assert sorted(p.name.split(".")[1] for p in out.glob("flip.*")) == evaluated


def test_hdr_options_with_every_exr_pair_refused_evaluate_the_others(golden, tmp_path, capsys):
    """-tm given, and both .exr pairs refused (a stale PNG render beside each): the options were
    meant for them, so the run is not a usage error; the LDR pairs are evaluated and the refused
    pairs are rows of their own (exit code 4)."""
    refs, tests = golden
    for name in ("c_room", "d_sun"):
        Image.new("RGB", (W, H)).save(tests / f"{name}.png")
    out = tmp_path / "out"
    argv = ["--reference-dir", str(refs), "--test-dir", str(tests), "-d", str(out), "-v", "0", "-tm", "hable"]
    assert main(argv) == 4
    rows = csv_rows(out / "summary.csv")
    states = sorted((r[1].rsplit("/", 1)[-1].split(".")[0], r[8].split(":")[0]) for r in rows[1:])
    assert states == [
        ("a_ui", "evaluated"),
        ("b_sky", "evaluated"),
        ("c_room", "not evaluated"),
        ("d_sun", "not evaluated"),
    ]


def test_an_exr_reference_with_a_png_render_is_that_pairs_error(golden, tmp_path, capsys):
    refs, tests = golden
    (tests / "d_sun.exr").unlink()
    Image.new("RGB", (W, H)).save(tests / "d_sun.png")
    out = tmp_path / "out"
    assert main(["--reference-dir", str(refs), "--test-dir", str(tests), "-d", str(out), "-v", "0"]) == 4
    errors = capsys.readouterr().err.strip().splitlines()
    assert len(errors) == 1 and "cannot mix HDR and LDR images" in errors[0] and "d_sun.png" in errors[0]
    rows = csv_rows(out / "summary.csv")
    assert [r[8] for r in rows[1:4]] == ["evaluated"] * 3 and rows[4][8].startswith("not evaluated: cannot mix")


def _account_words(rows, threshold):
    """The account of a run in the words of flip_loss.cli.run_counts, counted from its CSV rows."""
    evaluated = [r for r in rows if r[8] == "evaluated"]
    not_evaluated = [r for r in rows if r[8].startswith("not evaluated: ")]
    assert len(evaluated) + len(not_evaluated) == len(rows)
    unmatched = sum(1 for r in not_evaluated if not r[0] or not r[1])
    errors = len(not_evaluated) - unmatched
    over = sum(1 for r in evaluated if r[9] == "fail")
    assert over == sum(1 for r in evaluated if float(r[2]) > threshold)
    reasons = ", ".join(f"{n} {why}" for n, why in ((errors, "with an error"), (unmatched, "without a partner")) if n)
    counts = (
        f"{len(rows)} pair(s) found: {len(evaluated)} evaluated, {len(not_evaluated)} not evaluated ({reasons}); "
        f"{over} over the gate ({over} with the mean above {threshold:g})"
    )
    verdict = f"gate: FAIL ({len(evaluated)} evaluated, {over} over the gate, {len(not_evaluated)} not evaluated)"
    return counts, verdict


def test_stdout_the_csv_and_the_report_give_one_account(golden, tmp_path, capsys):
    refs, tests = golden
    Image.new("RGB", (W + 2, H)).save(tests / "e_size.png")  # another size: an error
    Image.new("RGB", (W, H)).save(refs / "e_size.png")
    Image.new("RGB", (W, H)).save(refs / "f_missing.png")  # its render is missing
    Image.new("RGB", (W, H)).save(tests / "g_new.png")  # a render without a reference
    out, report = tmp_path / "out", tmp_path / "report"
    threshold = 0.05
    argv = ["--reference-dir", str(refs), "--test-dir", str(tests), "-d", str(out), "--report", str(report)]
    assert main(argv + ["--no-progress", "-v", "1", "--fail-above", "mean", str(threshold)]) == 4
    stdout = capsys.readouterr().out.splitlines()
    rows = csv_rows(out / "summary.csv")[1:]
    counts, verdict = _account_words(rows, threshold)
    assert len(rows) == 7 and verdict.startswith("gate: FAIL (4 evaluated, ")
    assert counts.startswith("7 pair(s) found: 4 evaluated, 3 not evaluated (1 with an error, 2 without a partner)")
    # stdout: the account, then the files, and last the gate's verdict
    assert counts in stdout and stdout[-1] == verdict
    page = Page((report / "index.html").read_text(encoding="utf-8"))
    assert page.by_id["pair-counts"] == counts
    assert page.by_id["gate-verdict"] == verdict
    # "failed" is the gate's verdict only: no pair is called failed
    assert not re.search(r"\bfailed\b", " ".join(page.articles))
    # the card of the missing render is named after the file that is there
    card = next(a for a in page.articles if "f_missing.png" in a)
    assert any(h.endswith(". f_missing.png") for h in page.headings)
    assert "no test image" in card and str(refs / "f_missing.png") in card
    assert all(re.fullmatch(r"\d+\. \S+", h) for h in page.headings)  # every card has a name


def test_allowed_images_without_a_partner_pass_the_gate_in_the_same_words(golden, tmp_path, capsys):
    refs, tests = golden
    Image.new("RGB", (W, H)).save(refs / "f_missing.png")
    csv_path, report = tmp_path / "s.csv", tmp_path / "report"
    argv = ["--reference-dir", str(refs), "--test-dir", str(tests), "-nerm", "-nexm", "-c", str(csv_path)]
    argv += ["--no-progress"]
    assert main(argv + ["--report", str(report), "--fail-above", "max", "1", "--allow-unmatched"]) == 0
    stdout = capsys.readouterr().out.splitlines()
    want = "gate: PASS (4 evaluated, 0 over the gate, 1 without a partner allowed)"
    assert stdout[-1] == want
    assert "5 pair(s) found: 4 evaluated, 1 not evaluated (1 without a partner); 0 over the gate" in stdout[-5]
    page = Page((report / "index.html").read_text())
    assert page.by_id["gate-verdict"] == want and page.by_id["pair-counts"] in stdout
    assert [r[9] for r in csv_rows(csv_path)[1:]] == ["pass"] * 4 + ["skipped"]
