"""The HTML report of ``flip-loss --report DIR``: the files it writes, that they are safe and
self-contained, what the page says, and the page in a real browser (headless Chromium driven
through the DevTools protocol over a pipe; those tests skip where Chromium is not installed)."""

import html.parser
import json
import os
import re
import select
import shutil
import subprocess
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from PIL import Image, ImageFilter

import flip_loss
from flip_loss.cli import example_paths, main
from flip_loss.colormaps import MAGMA, apply_colormap
from flip_loss.constants import DEFAULT_PPD
from flip_loss.functional import ldr_flip
from flip_loss.imageio import load_image
from flip_loss.pooling import pool, weighted_histogram

W, H = 400, 300  # the test images: shrunk by 2 into 200 x 150 thumbnails
THUMB_W, THUMB_H = 200, 150
SORT_COLUMNS = ("mean", "weighted-median", "weighted-quartile-1", "weighted-quartile-3", "max")
FIELDS = dict(zip(SORT_COLUMNS, ("mean", "weighted_median", "weighted_quartile_1", "weighted_quartile_3", "max")))


def expected_map(ref_path, test_path):
    with torch.no_grad():  # the command line evaluates with eps=0
        return ldr_flip(load_image(test_path), load_image(ref_path), DEFAULT_PPD, eps=0.0)[0].float().numpy()


def snapshot(*directories):
    """{path: bytes or 'directory'} of everything under ``directories``."""
    return {p: ("directory" if p.is_dir() else p.read_bytes()) for d in directories for p in sorted(Path(d).rglob("*"))}


class Tags(html.parser.HTMLParser):
    """The start tags of a page, in order, as (tag, attributes), and its text."""

    def __init__(self, text):
        super().__init__()
        self.tags, self.text = [], []
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def handle_startendtag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data):
        self.text.append(data)

    def rows(self):
        return [a for t, a in self.tags if t == "tr" and "data-index" in a]


# ----------------------------------------------------------------------------------------------
# A folder-mode run with a report: four pairs that differ in different ways, and one that fails
# ----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    d = tmp_path_factory.mktemp("report")
    refs, tests = d / "refs", d / "tests"
    refs.mkdir(), tests.mkdir()
    base = Image.open(example_paths()[0]).convert("RGB").resize((W, H), Image.BICUBIC)
    a = np.asarray(base).astype(np.float64)
    rng = np.random.default_rng(5)
    speck = a.copy()
    speck[100:103, 250:253] = 255.0  # tiny, strong: low mean, high max
    shifted = a.copy()
    shifted[..., 0] *= 0.6  # large everywhere
    distorted = {
        "blur": np.asarray(base.filter(ImageFilter.GaussianBlur(1.0))).astype(np.float64),
        "noise": a + rng.normal(0, 10, a.shape),
        "shift": shifted,
        "speck": speck,
    }
    for name, image in distorted.items():
        base.save(refs / f"{name}.png")
        Image.fromarray(np.clip(np.round(image), 0, 255).astype(np.uint8)).save(tests / f"{name}.png")
    base.save(refs / "resized.png")
    base.resize((W // 2, H // 2)).save(tests / "resized.png")  # another size: this pair fails
    maps = {name: expected_map(refs / f"{name}.png", tests / f"{name}.png") for name in distorted}
    pooled = {name: pool(m) for name, m in maps.items()}
    means = sorted(p.mean for p in pooled.values())
    threshold = round(0.5 * (means[1] + means[2]), 6)  # two pairs above, two below
    inputs = snapshot(refs, tests)
    out, report = d / "out", d / "report"
    code = main(
        [
            "--reference-dir",
            str(refs),
            "--test-dir",
            str(tests),
            "-d",
            str(out),
            "--report",
            str(report),
            "--no-progress",
            "--fail-above",
            "mean",
            str(threshold),
        ]
    )
    page = report / "index.html"
    text = page.read_text(encoding="utf-8")
    # the pairs are numbered in the folder's (sorted) order
    numbers = {n: i for i, n in enumerate(sorted([*distorted, "resized"]), 1)}
    return SimpleNamespace(
        refs=refs,
        tests=tests,
        out=out,
        report=report,
        page=page,
        code=code,
        maps=maps,
        pooled=pooled,
        threshold=threshold,
        inputs=inputs,
        names=sorted(distorted),
        index=numbers,
        html=text,
        parsed=Tags(text),
    )


def expected_order(run, column="mean"):
    """Pair numbers worst first: the failed pair, then by ``column`` descending."""
    by_value = sorted(run.names, key=lambda n: -getattr(run.pooled[n], FIELDS[column]))
    return [run.index["resized"]] + [run.index[n] for n in by_value]


def test_report_files_and_exit_code(run, capsys):
    assert run.code == 4  # a failed pair outranks the gate, as without --report
    assert run.page.is_file()
    names = sorted(p.name for p in (run.report / "pairs").iterdir())
    want = sorted(
        f"{run.index[n]:04d}-{n}.{kind}{thumb}.png"
        for n in run.names
        for kind in ("reference", "test", "error")
        for thumb in ("", ".thumbnail")
    )
    assert names == want  # nothing for the failed pair, no temporary file
    assert sorted(p.name for p in run.report.iterdir()) == ["index.html", "pairs"]
    for n in run.names:
        stem = run.report / "pairs" / f"{run.index[n]:04d}-{n}"
        for kind in ("reference", "test", "error"):
            assert Image.open(f"{stem}.{kind}.png").size == (W, H)
            assert Image.open(f"{stem}.{kind}.thumbnail.png").size == (THUMB_W, THUMB_H)


def test_inputs_untouched(run):
    assert snapshot(run.refs, run.tests) == run.inputs


def test_page_needs_no_network_and_every_link_is_a_file_of_the_report(run):
    lowered = run.html.lower()
    for needle in ("http://", "https://", "<link", "@import", "url(", "<iframe", "fetch(", "xmlhttprequest"):
        assert needle not in lowered, needle
    for tag, attrs in run.parsed.tags:
        assert "src" not in attrs or tag == "img"  # no external script, frame or media
    references = [
        v
        for tag, attrs in run.parsed.tags
        if tag in ("img", "a")
        for k, v in attrs.items()
        if k in ("src", "href") or k.startswith("data-") and k.endswith(("thumbnail", "full"))
    ]
    files = [v for v in references if not v.startswith("#")]
    assert len(files) >= 4 * 3 * 2
    for v in files:
        assert "//" not in v and not v.startswith("/") and ".." not in v.split("/"), v
        assert (run.report / v).is_file(), v
    for v in references:
        if v.startswith("#"):
            assert any(attrs.get("id") == v[1:] for _, attrs in run.parsed.tags), v


def test_table_worst_first_with_the_gate_marked_and_the_failed_pair(run):
    rows = run.parsed.rows()
    assert [int(r["data-index"]) for r in rows] == expected_order(run)
    for r in rows:
        name = r["data-test"][:-4]
        if name == "resized":
            assert r["data-state"] == "failed" and "mean" not in r
            continue
        for column in SORT_COLUMNS:  # the sort keys hold the pooled values themselves
            assert float(r[f"data-{column}"]) == pytest.approx(
                getattr(run.pooled[name], FIELDS[column]), rel=1e-5, abs=1e-7
            )
        assert r["data-state"] == ("over" if run.pooled[name].mean > run.threshold else "ok")
    assert sum(r["data-state"] == "over" for r in rows) == 2
    text = " ".join("".join(run.parsed.text).split())
    # the run's account in the words the terminal prints (flip_loss.cli.run_counts): "failed" is only
    # the gate's verdict, a pair that could not be evaluated is "not evaluated"
    assert "gate: FAIL (4 evaluated, 2 over the gate, 1 not evaluated)" in text
    assert f"2 over the gate (2 with the mean above {run.threshold:g})" in text
    assert "5 pair(s) found: 4 evaluated, 1 not evaluated (1 with an error)" in text
    assert f"{W // 2}x{H // 2}" in text and "same size" in text  # why the pair failed
    assert "67.0206 pixels per degree" in text and f"flip-loss {flip_loss.__version__}" in text


def test_pictures_show_the_images_and_the_map_at_one_scale(run):
    for n in run.names:
        stem = run.report / "pairs" / f"{run.index[n]:04d}-{n}"
        reference = np.asarray(Image.open(run.refs / f"{n}.png").convert("RGB"))
        test = np.asarray(Image.open(run.tests / f"{n}.png").convert("RGB"))
        assert np.array_equal(np.asarray(Image.open(f"{stem}.reference.png")), reference)
        assert np.array_equal(np.asarray(Image.open(f"{stem}.test.png")), test)
        # the full-size map is the magma map the run writes in --directory
        written = np.asarray(Image.open(run.out / f"flip.{n}.{n}.67ppd.ldr.png"))
        assert np.array_equal(np.asarray(Image.open(f"{stem}.error.png")), written)
        # thumbnails: 2 x 2 blocks; the images averaged, the map showing each block's largest error
        blocks = reference.astype(np.float64).reshape(THUMB_H, 2, THUMB_W, 2, 3)
        mean = np.round(blocks.mean(axis=(1, 3)))
        assert np.abs(np.asarray(Image.open(f"{stem}.reference.thumbnail.png")).astype(np.float64) - mean).max() <= 1
        largest = run.maps[n].reshape(THUMB_H, 2, THUMB_W, 2).max(axis=(1, 3))
        assert np.array_equal(np.asarray(Image.open(f"{stem}.error.thumbnail.png")), apply_colormap(largest, MAGMA))
    # the 3x3 speck still shows in the thumbnail of its map: its brightest colour is there
    speck = np.asarray(Image.open(run.report / "pairs" / f"{run.index['speck']:04d}-speck.error.thumbnail.png"))
    assert speck[50:52, 125:127].astype(int).sum(axis=2).max() == speck.astype(int).sum(axis=2).max()


def test_histogram_is_drawn_from_the_weighted_histogram(run):
    for n in run.names:
        _, counts = weighted_histogram(run.maps[n], 100)
        start = next(i for i, (t, a) in enumerate(run.parsed.tags) if a.get("id") == f"pair-{run.index[n]}")
        svg = next(i for i in range(start, len(run.parsed.tags)) if run.parsed.tags[i][0] == "svg")
        bars = []
        for tag, attrs in run.parsed.tags[svg + 1 :]:
            if tag == "svg" or tag == "article":
                break
            if tag == "rect":
                bars.append((int(attrs["data-bin"]), float(attrs["height"])))
        assert [b for b, _ in bars] == list(np.flatnonzero(counts > 0))
        heights = np.array([h for _, h in bars])
        assert heights / heights.max() == pytest.approx(counts[counts > 0] / counts.max(), abs=0.02)


def test_multi_test_mode_and_an_earlier_report_is_replaced(run, tmp_path, capsys):
    report = tmp_path / "report"
    tests = [run.tests / f"{n}.png" for n in ("speck", "shift", "blur")]
    assert (
        main(
            [
                "-r",
                str(run.refs / "blur.png"),
                "-t",
                *map(str, tests),
                "-d",
                str(tmp_path / "maps"),
                "--report",
                str(report),
                "-v",
                "1",
                "--fail-above",
                "weighted-median",
                "1",
            ]
        )
        == 0
    )
    assert f"HTML report: {report / 'index.html'}" in capsys.readouterr().out
    medians = [pool(expected_map(run.refs / "blur.png", t)).weighted_median for t in tests]
    page = Tags((report / "index.html").read_text())
    rows = page.rows()
    # worst first by the gate's quantity
    assert [int(r["data-index"]) for r in rows] == [i + 1 for i in np.argsort(medians)[::-1]]
    assert [a["data-sort-key"] for t, a in page.tags if t == "th" and a.get("aria-sort")] == ["weighted-median"]
    assert all(r["data-state"] == "ok" for r in rows)
    assert "gate: PASS (3 evaluated, 0 over the gate)" in " ".join("".join(page.text).split())
    assert "0 over the gate (0 with the weighted median above 1)" in " ".join("".join(page.text).split())
    # an earlier report is replaced; the user's other files there stay
    (report / "notes.txt").write_text("mine")
    first = (report / "index.html").read_text()
    assert (
        main(["-r", str(run.refs / "blur.png"), "-t", str(tests[0]), "--report", str(report), "-nerm", "-v", "0"]) == 0
    )
    second = (report / "index.html").read_text()
    assert second != first and len(Tags(second).rows()) == 1
    assert (report / "notes.txt").read_text() == "mine"


def test_file_names_are_escaped_in_the_page_and_plain_in_the_pictures(run, tmp_path):
    odd = tmp_path / "shot \"<b>&'#1?.png"
    shutil.copy(run.tests / "noise.png", odd)
    report = tmp_path / "report"
    assert main(["-r", str(run.refs / "noise.png"), "-t", str(odd), "--report", str(report), "-nerm", "-v", "0"]) == 0
    page = Tags((report / "index.html").read_text())
    assert [r["data-test"] for r in page.rows()] == [odd.name]
    assert not any(tag == "b" for tag, _ in page.tags)  # the name's <b> is text, not markup
    names = [p.name for p in (report / "pairs").iterdir()]
    assert len(names) == 6 and all(re.fullmatch(r"0001-shot_b_1\.[a-z.]+\.png", n) for n in names), names


@pytest.mark.parametrize("case", ["foreign page", "foreign pairs folder", "a file", "missing test image", "unwritable"])
def test_nothing_is_written_on_error(run, tmp_path, capsys, case):
    report = tmp_path / "report"
    argv = [
        "-r",
        str(run.refs / "blur.png"),
        "-t",
        str(run.tests / "noise.png"),
        "-d",
        str(tmp_path / "maps"),
        "--report",
        str(report),
    ]
    needle = {
        "foreign page": "not from an earlier flip-loss report",
        "foreign pairs folder": "'pairs'",
        "a file": "not a directory",
        "missing test image": "does not exist",
        "unwritable": "permission denied",
    }[case]
    if case == "foreign page":
        report.mkdir()
        (report / "index.html").write_text("<html>my own page</html>")
    elif case == "foreign pairs folder":
        (report / "pairs").mkdir(parents=True)
        (report / "pairs" / "0001-noise.error.png").write_bytes(b"mine")
    elif case == "a file":
        report.write_text("a file")
    elif case == "missing test image":
        argv[3] = str(tmp_path / "missing.png")
    else:
        if os.geteuid() == 0:
            pytest.skip("root may write anywhere")
        (tmp_path / "locked").mkdir(mode=0o555)
        argv[-1] = str(tmp_path / "locked" / "report")
    before = snapshot(tmp_path)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("flip-loss: error: ") and needle in err and err.count("\n") == 1, err
    assert snapshot(tmp_path) == before
    assert snapshot(run.refs, run.tests) == run.inputs


def test_hdr_report_shows_the_exposure_map_and_exposures(tmp_path, capsys):
    pytest.importorskip("OpenEXR")
    from flip_loss.imageio import save_exr
    from hdr_cases import lifted

    ref = lifted("blocks", -2, 6)
    test = np.clip(ref * (1 + 0.1 * np.random.default_rng(3).standard_normal(ref.shape)), 0, None)
    save_exr(tmp_path / "reference.exr", ref.transpose(2, 0, 1))
    save_exr(tmp_path / "test.exr", test.astype(np.float32).transpose(2, 0, 1))
    report = tmp_path / "report"
    assert (
        main(
            [
                "-r",
                str(tmp_path / "reference.exr"),
                "-t",
                str(tmp_path / "test.exr"),
                "-d",
                str(tmp_path),
                "--report",
                str(report),
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    start = float(out.split("Start exposure: ")[1].split()[0])
    stop = float(out.split("Stop exposure: ")[1].split()[0])
    count = int(out.split("Number of exposures: ")[1].split()[0])
    page = (report / "index.html").read_text()
    assert f"exposures {start:.4f} to {stop:.4f} stops, {count} of them" in page
    shown_at = float(re.search(r"tone mapped \(aces\) at (-?\d+\.\d+) stops", page).group(1))
    assert shown_at == pytest.approx(0.5 * (start + stop), abs=1.5e-4)  # the middle of the range
    assert "HDR-FLIP, tone mapper aces" in page
    exposure_map = next(tmp_path.glob("exposure_map.*.png"))
    assert np.array_equal(
        np.asarray(Image.open(report / "pairs" / "0001-test.exposure.png")), np.asarray(Image.open(exposure_map))
    )
    shown = np.asarray(Image.open(report / "pairs" / "0001-test.reference.png"))
    assert shown.shape == (120, 160, 3) and 20 < shown.mean() < 235  # exposed: neither black nor white
    assert 'alt="exposure map of test.exr"' in page


# ----------------------------------------------------------------------------------------------
# In a real browser: headless Chromium through the DevTools protocol (over a pipe: no network port)
# ----------------------------------------------------------------------------------------------


def chromium_executable():
    for name in (os.environ.get("FLIP_LOSS_CHROMIUM"), "chromium", "chromium-browser", "google-chrome"):
        if name and shutil.which(name):
            return shutil.which(name)
    return None


class DevTools:
    """A headless Chromium and one page, driven with the DevTools protocol over
    --remote-debugging-pipe (JSON messages ended by NUL on file descriptors 3 and 4)."""

    def __init__(self, executable, profile: Path, timeout=60.0):
        self.timeout, self.events, self._buffer, self._id = timeout, [], b"", 0
        to_browser_r, self._to_browser = os.pipe()
        self._from_browser, from_browser_w = os.pipe()

        def descriptors():
            os.dup2(to_browser_r, 3)
            os.dup2(from_browser_w, 4)

        self.process = subprocess.Popen(
            [
                executable,
                "--headless",
                "--no-sandbox",
                "--remote-debugging-pipe",
                f"--user-data-dir={profile}",
                "--disable-gpu",
                "--no-first-run",
                "--no-default-browser-check",
                "--disable-extensions",
                "--disable-background-networking",
                "--force-color-profile=srgb",
                "--hide-scrollbars",
                "about:blank",
            ],
            pass_fds=(3, 4),
            preexec_fn=descriptors,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        os.close(to_browser_r)
        os.close(from_browser_w)
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        for domain in ("Page", "Network", "Runtime"):
            self.call(f"{domain}.enable", session=True)
        self.call(
            "Emulation.setDeviceMetricsOverride",
            session=True,
            width=1280,
            height=900,
            deviceScaleFactor=1,
            mobile=False,
        )

    def _message(self, deadline):
        while b"\0" not in self._buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not select.select([self._from_browser], [], [], remaining)[0]:
                raise TimeoutError("Chromium did not answer")
            chunk = os.read(self._from_browser, 1 << 16)
            if not chunk:
                raise RuntimeError("Chromium closed the DevTools pipe")
            self._buffer += chunk
        text, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(text)

    def call(self, method, session=False, **params):
        self._id += 1
        message = {"id": self._id, "method": method, "params": params}
        if session:
            message["sessionId"] = self.session
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + self.timeout
        while True:
            m = self._message(deadline)
            if m.get("id") == self._id:
                if "error" in m:
                    raise RuntimeError(f"{method}: {m['error']}")
                return m["result"]
            self.events.append(m)

    def wait_event(self, method):
        deadline = time.monotonic() + self.timeout
        while True:
            for i, m in enumerate(self.events):
                if m.get("method") == method:
                    return self.events.pop(i)
            self.events.append(self._message(deadline))

    def open(self, path: Path):
        self.events.clear()
        self.call("Page.navigate", session=True, url=path.as_uri())
        self.wait_event("Page.loadEventFired")

    def js(self, expression, wait=False):
        r = self.call("Runtime.evaluate", session=True, expression=expression, returnByValue=True, awaitPromise=wait)
        if "exceptionDetails" in r:
            raise RuntimeError(f"{expression}: {r['exceptionDetails']}")
        return r["result"].get("value")

    _KEYS = {"Tab": ("Tab", 9, None), "Enter": ("Enter", 13, "\r"), " ": ("Space", 32, " "), "f": ("KeyF", 70, "f")}

    def press(self, key):
        code, vk, text = self._KEYS[key]
        down = dict(type="keyDown", key=key, code=code, windowsVirtualKeyCode=vk)
        if text is not None:
            down["text"] = text
        self.call("Input.dispatchKeyEvent", session=True, **down)
        self.call("Input.dispatchKeyEvent", session=True, type="keyUp", key=key, code=code, windowsVirtualKeyCode=vk)

    def screenshot(self, clip=None, full_page=False):
        import base64
        import io

        params = {"format": "png", "captureBeyondViewport": full_page}
        if clip is not None:
            params["clip"] = dict(clip, scale=1)
        data = base64.b64decode(self.call("Page.captureScreenshot", session=True, **params)["data"])
        return Image.open(io.BytesIO(data)).convert("RGB"), data

    def close(self):
        try:
            self.call("Browser.close")
            self.process.wait(10)
        except Exception:  # noqa: BLE001 - whatever state it is in: make sure it ends
            self.process.kill()
            self.process.wait(10)
        finally:
            os.close(self._to_browser)
            os.close(self._from_browser)


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    executable = chromium_executable()
    if executable is None:
        pytest.skip(
            "Chromium is not installed (Debian: apt-get install chromium; scripts/test.sh installs it), "
            "so the HTML report is not checked in a browser"
        )
    b = DevTools(executable, tmp_path_factory.mktemp("chromium-profile"))
    yield b
    b.close()


_LOAD_IMAGES = """(async () => {
  const images = Array.from(document.querySelectorAll("img"));
  for (const img of images) {  // lazy images load once they come near the viewport
    img.scrollIntoView();
    if (!img.complete) {
      await new Promise(done => { img.addEventListener("load", done, {once: true});
                                  img.addEventListener("error", done, {once: true}); });
    }
  }
  window.scrollTo(0, 0);
  return images.map(img => [img.getAttribute("src"), img.naturalWidth, img.naturalHeight]);
})()"""

_ROWS = "Array.from(document.querySelectorAll('#pairs-table tbody tr')).map(r => +r.dataset.index)"
_CARDS = "Array.from(document.querySelectorAll('#pair-cards .pair')).map(c => +c.id.slice(5))"


def test_browser_renders_rows_worst_first_with_every_image_loaded(run, browser, tmp_path_factory):
    browser.open(run.page)
    assert browser.js(_ROWS) == expected_order(run)
    assert browser.js(_CARDS) == expected_order(run)
    assert browser.js("document.querySelectorAll('#pairs-table tbody tr.failed').length") == 1
    images = browser.js(_LOAD_IMAGES, wait=True)
    assert len(images) == 4 * 3
    for src, width, height in images:
        assert (width, height) == Image.open(run.report / src).size, src
    requested = [
        m["params"]["request"]["url"] for m in browser.events if m.get("method") == "Network.requestWillBeSent"
    ]
    assert requested and all(url.startswith("file://") for url in requested), requested
    shot, data = browser.screenshot(full_page=True)
    path = tmp_path_factory.getbasetemp() / "report_screenshot.png"
    path.write_bytes(data)
    print(f"\nscreenshot of the report: {path}")
    assert shot.size[0] == 1280 and shot.size[1] > 900


def test_browser_keyboard_tab_order_and_sorting(run, browser):
    browser.open(run.page)
    focus = (
        "(() => { const e = document.activeElement; return e.tagName + ':' + e.textContent.trim().split('\\n')[0]; })()"
    )
    visited = []
    for _ in range(7 + 5):
        browser.press("Tab")
        visited.append(browser.js(focus))
    assert visited[0] == "A:Skip to the pairs table"
    assert visited[1:7] == [
        "BUTTON:Test",
        "BUTTON:Mean",
        "BUTTON:Weighted median",
        "BUTTON:1st weighted quartile",
        "BUTTON:3rd weighted quartile",
        "BUTTON:Max",
    ]
    by_number = {i: n for n, i in run.index.items()}
    assert visited[7:] == [f"A:{by_number[i]}.png" for i in expected_order(run)]
    # back to the Max heading (shift-free: focus it as Tab did) and sort with the keyboard
    browser.js("document.querySelector('th[data-sort-key=\"max\"] button').focus()")
    browser.press("Enter")
    assert browser.js(_ROWS) == expected_order(run, "max")
    assert browser.js(_CARDS) == expected_order(run, "max")  # the pictures follow the table
    assert browser.js("document.querySelector('th[data-sort-key=\"max\"]').getAttribute('aria-sort')") == "descending"
    assert browser.js("document.getElementById('sort-status').textContent") == "Max, largest first"
    assert expected_order(run, "max") != expected_order(run)  # the speck: small mean, large max
    browser.press("Enter")  # again: smallest first, the failed pair (worst) last
    assert browser.js(_ROWS) == expected_order(run, "max")[::-1]
    for column in ("weighted-quartile-1", "weighted-median"):
        browser.js(f"document.querySelector('th[data-sort-key=\"{column}\"] button').click()")
        assert browser.js(_ROWS) == expected_order(run, column)


def _region(browser, selector):
    rect = browser.js(
        f"(() => {{ const r = document.querySelector({json.dumps(selector)}).getBoundingClientRect(); "
        "return {x: r.left + scrollX, y: r.top + scrollY, width: r.width, height: r.height}; })()"
    )
    return np.asarray(browser.screenshot(clip=rect, full_page=True)[0]).astype(np.int16)


def test_browser_flip_control_switches_the_image_in_place(run, browser):
    browser.open(run.page)
    browser.js(_LOAD_IMAGES, wait=True)
    n = "shift"
    card = f"#pair-{run.index[n]}"
    view = f"{card} .flip-view img"
    stem = run.report / "pairs" / f"{run.index[n]:04d}-{n}"
    reference = np.asarray(Image.open(f"{stem}.reference.thumbnail.png")).astype(np.int16)
    test = np.asarray(Image.open(f"{stem}.test.thumbnail.png")).astype(np.int16)

    def shown():
        pixels = _region(browser, view)
        assert pixels.shape == reference.shape
        return np.abs(pixels - reference).mean(), np.abs(pixels - test).mean()

    to_ref, to_test = shown()
    assert to_ref < 1.0 < to_test
    browser.js(f"document.querySelector('{card} button.flip').focus()")
    browser.press(" ")  # the button, by keyboard
    assert browser.js(f"document.querySelector('{view}').getAttribute('src')").endswith(".test.thumbnail.png")
    assert browser.js(f"document.querySelector('{card} button.flip').getAttribute('aria-pressed')") == "true"
    assert browser.js(f"document.querySelector('{card} .flip-caption').textContent") == "Test"
    browser.js("new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))", wait=True)
    to_ref, to_test = shown()
    assert to_test < 1.0 < to_ref
    browser.press("f")  # the key F flips back the pair that has the focus
    assert browser.js(f"document.querySelector('{view}').getAttribute('src')").endswith(".reference.thumbnail.png")
    assert browser.js(f"document.querySelector('{view}').alt") == f"reference {n}.png"
    # full size in place: the full-size pictures replace the thumbnails, and the flip still works
    browser.js(f"document.querySelector('{card} button.full-size').click()")
    sizes = browser.js(
        f"""(async () => {{
      const imgs = Array.from(document.querySelectorAll('{card} img'));
      await Promise.all(imgs.map(i => i.complete ? null
                                 : new Promise(r => i.addEventListener('load', r, {{once: true}}))));
      return imgs.map(i => [i.naturalWidth, Math.round(i.getBoundingClientRect().width)]); }})()""",
        wait=True,
    )
    assert sizes == [[W, W]] * 3
    browser.press("f")
    assert browser.js(f"document.querySelector('{view}').getAttribute('src')").endswith(f"{n}.test.png")
