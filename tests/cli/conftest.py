"""The fixtures of the command-line tests: an LDR pair of PNG files, an HDR pair of EXR files,
bad input files, a pair of folders, a working directory."""

import numpy as np
import pytest
from PIL import Image

from flip_loss.cli import example_paths
from cli_runs import H, W, hdr_images


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


@pytest.fixture(scope="module")
def hdr_pair(tmp_path_factory):
    """A small HDR reference (a linearised crop times an exposure ramp) and a noisy copy, as EXR."""
    from flip_loss.imageio import save_exr

    d = tmp_path_factory.mktemp("hdr")
    ref, test = hdr_images()
    save_exr(d / "reference.exr", ref.transpose(2, 0, 1))
    save_exr(d / "test.exr", test.transpose(2, 0, 1))
    return d / "reference.exr", d / "test.exr"


@pytest.fixture
def work(pair, tmp_path, monkeypatch):
    """A working directory holding ref.png and test.png (copies of the pair), made current."""
    d = tmp_path / "work"
    d.mkdir()
    for p in pair:
        (d / p.name).write_bytes(p.read_bytes())
    monkeypatch.chdir(d)
    return d
