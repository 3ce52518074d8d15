"""The examples: a smoke run of the denoiser training and the render evaluation."""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

from PIL import Image

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"


def load_example(name):
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_train_denoiser_smoke(tmp_path):
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    out = tmp_path / "out"
    res = subprocess.run(
        [
            sys.executable,
            str(EXAMPLES / "train_denoiser.py"),
            "--steps",
            "3",
            "--crop",
            "32",
            "--eval-crops",
            "2",
            "--display-size",
            "48",
            "--flip-weights",
            "0.5",
            "--out",
            str(out),
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr
    for line in ("noisy input", "L1 ", "L1 + 0.5*FLIP", "mean FLIP", "PSNR"):
        assert line in res.stdout, line
    for name in ("loss_curves.png", "error_maps.png"):
        assert Image.open(out / name).format == "PNG"
    metrics = json.loads((out / "metrics.json").read_text())
    held_out = metrics["held_out"]
    assert set(held_out) == {"noisy input", "L1", "L1 + 0.5*FLIP"}
    for r in held_out.values():
        assert 0 < r["flip"] < 1 and 5 < r["psnr"] < 60
    assert len(metrics["history"]["L1"]["l1"]) == 3


def test_evaluate_renders_demo(capsys):
    module = load_example("evaluate_renders")
    assert module.main(["--demo", "--device", "cpu"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("LDR-FLIP at 67.0 pixels per degree, 4 image(s)")
    rows = {ln.split()[0]: [float(x) for x in ln.split()[1:]] for ln in out[3:7]}
    assert set(rows) == {"example", "blurred", "noisy", "darker"}
    means = [v[0] for v in rows.values()]
    assert means == sorted(means, reverse=True)  # worst first
    assert abs(rows["example"][0] - 0.0972) < 1e-4  # the README's example mean, 0.097211
    assert out[-1].startswith("all pixels")


def test_evaluate_renders_folders(tmp_path, capsys):
    module = load_example("evaluate_renders")
    renders, refs = module.make_demo(str(tmp_path))
    Image.new("RGB", (10, 10)).save(os.path.join(renders, "orphan.png"))
    assert module.main(["--renders", renders, "--references", refs]) == 0
    captured = capsys.readouterr()
    assert "no reference for" in captured.err and "orphan.png" in captured.err
