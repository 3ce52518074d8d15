"""What the command-line tests share (tests/cli, tests/api/test_imageio.py): running flip-loss
as a subprocess, the expected map of a pair, reading its printed values and error line,
snapshots of directories, the HDR pair's images and flip-evaluator's maps of them."""

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import torch

from flip_loss.cli import CSV_HEADER
from flip_loss.constants import DEFAULT_PPD
from flip_loss.functional import ldr_flip
from flip_loss.imageio import load_image


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


HDR_H, HDR_W = 32, 48


def hdr_images():
    from hdr_cases import lifted

    ref = lifted("blocks", -2, 6, crop=(HDR_H, HDR_W))  # linear, an exposure ramp across the width
    rng = np.random.default_rng(3)
    test = np.clip(ref * (1 + 0.1 * rng.standard_normal(ref.shape)), 0, None).astype(np.float32)
    return ref, test
