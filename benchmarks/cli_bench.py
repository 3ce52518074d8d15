"""The command line end to end: flip-loss's folder mode against NVIDIA's `flip` (flip-evaluator) on
the same pairs and the same cores, on 1080p LDR renders (PNG) and HDR renders (OpenEXR), with each
tool's per-pair wall time broken down into start-up, read, evaluate, pool and write.

    .venv/bin/python benchmarks/cli_bench.py [--ldr-pairs 24] [--hdr-pairs 8] [--size 1920x1080]
                                             [--data DIR] [--skip-nvidia] [--encodings] [--json out.json]

The pairs are ray-cast scenes made here once per --data folder (default: a temporary one), the
test image the same render with Monte Carlo-like noise; LDR pairs tone mapped into 8-bit sRGB PNG,
HDR pairs half-float OpenEXR. Measured on each set: end to end, `flip-loss --reference-dir R
--test-dir T -d OUT` as a process against NVIDIA's `flip` run once per pair (it has no folder
mode), both on every core, the speed-up the ratio of the two walls; start-up (`flip-loss
--version`, the import of flip_loss, `flip --help`); per pair once started, flip-loss's "Total
time" against the forward kernel alone and NVIDIA's wall against its "Evaluation time"; each stage
of a pair one after the other in this process, whose sum against the pipelined per-pair time shows
what the pipeline overlaps; with `--encodings`, the error map encoded as PNG several ways (behind
flip_loss.imageio.save_png's choice). The machine's other load changes every figure: compare
within one run (the load average is printed before and after).
"""

import argparse
import io
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import zlib

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)


# --- the pairs ------------------------------------------------------------------------------------


def render(seed: int, width: int, height: int) -> np.ndarray:
    """H x W x 3 float32 linear radiance of the pair's scene: spheres on a checkered ground."""
    rs = np.random.default_rng(seed)
    n = 6
    centres = np.stack([rs.uniform(-3, 3, n), rs.uniform(0.4, 1.2, n), rs.uniform(4, 10, n)], axis=1)
    radii = centres[:, 1].copy()
    albedo = rs.uniform(0.1, 0.9, (n, 3))
    shininess = rs.uniform(5, 80, n)
    sun = np.array([rs.uniform(-0.6, 0.6), 0.8, -0.4])
    sun /= np.linalg.norm(sun)
    origin = np.array([0.0, 1.2 + rs.uniform(-0.2, 0.4), 0.0])
    fov = np.tan(np.radians(30))
    ys, xs = np.mgrid[0:height, 0:width].astype(np.float32)
    u = ((xs + 0.5) / width * 2 - 1) * fov * (width / height)
    v = (1 - (ys + 0.5) / height * 2) * fov
    d = np.stack([u, v - 0.12, np.ones_like(u)], axis=-1)
    d /= np.linalg.norm(d, axis=-1, keepdims=True)
    t_hit = np.full(u.shape, np.inf, np.float32)
    hit = np.full(u.shape, -1)
    for i in range(n):
        oc = origin - centres[i]
        b = d @ oc.astype(np.float32)
        disc = b * b - (oc @ oc - radii[i] ** 2)
        t = -b - np.sqrt(np.maximum(disc, 0))
        closer = (disc > 0) & (t > 1e-4) & (t < t_hit)
        t_hit = np.where(closer, t, t_hit)
        hit = np.where(closer, i, hit)
    t_ground = np.where(d[..., 1] < -1e-6, -origin[1] / np.minimum(d[..., 1], -1e-6), np.inf).astype(np.float32)
    ground = t_ground < t_hit
    t_hit = np.where(ground, t_ground, t_hit)
    p = origin + d * np.where(np.isfinite(t_hit), t_hit, 0)[..., None]
    up = d[..., 1:2]
    sky = (np.array([0.35, 0.55, 0.95]) * (1 - up) + np.array([0.9, 0.95, 1.0]) * up) * 1.2
    sky = sky + 40.0 * np.maximum(d @ sun, 0)[..., None] ** 400  # the sun's disc
    checker = ((np.floor(p[..., 0]) + np.floor(p[..., 2])) % 2)[..., None]
    texture = (
        0.25 + 0.5 * checker * np.array([0.9, 0.85, 0.7]) + 0.05 * np.sin(p[..., :1] * 17) * np.sin(p[..., 2:] * 13)
    )
    shadow = np.ones(u.shape, np.float32)
    for i in range(n):
        oc = p - centres[i]
        b = oc @ sun
        disc = b * b - (np.einsum("...k,...k", oc, oc) - radii[i] ** 2)
        soft = np.clip(1.5 - 1.5 * np.sqrt(np.maximum(disc, 0)) / radii[i], 0, 1) + (b > 0)
        shadow = np.minimum(shadow, soft)
    fog = np.exp(-0.04 * np.where(ground, t_ground, 0))[..., None]
    colour = np.where(
        ground[..., None], texture * (0.25 + 2.2 * shadow[..., None] * sun[1]) * fog + sky * (1 - fog), sky
    )
    for i in range(n):
        on = (hit == i) & ~ground
        if on.any():
            normal = (p - centres[i]) / radii[i]
            diffuse = np.maximum(normal @ sun, 0)
            mirrored = d - 2 * np.einsum("...k,...k", d, normal)[..., None] * normal
            with np.errstate(over="ignore", under="ignore"):
                specular = 8.0 * np.maximum(mirrored @ sun, 0) ** shininess[i]
            colour = np.where(
                on[..., None], albedo[i] * (0.15 + 2.0 * diffuse[..., None]) + specular[..., None], colour
            )
    return colour.astype(np.float32)


def noisy(radiance: np.ndarray, seed: int) -> np.ndarray:
    """The render with Monte Carlo-like noise: relative, stronger in the dark."""
    g = np.random.default_rng(seed)
    level = 0.15 * (1 + 0.5 / (0.2 + radiance.mean(axis=-1, keepdims=True)))
    return np.maximum(radiance * (1 + level * g.standard_normal(radiance.shape[:2])[..., None]), 0).astype(np.float32)


def srgb8(radiance: np.ndarray) -> np.ndarray:
    x = np.clip(1.5 * radiance / (1 + 1.5 * radiance), 0, 1)
    encoded = np.where(x <= 0.0031308, 12.92 * x, 1.055 * np.power(x, 1 / 2.4) - 0.055)
    return (encoded * 255 + 0.5).astype(np.uint8)


def _has_size(path: str, width: int, height: int) -> bool:
    if not os.path.exists(path):
        return False
    from flip_loss.imageio import load_image

    return tuple(load_image(path).shape[1:]) == (height, width)


def make_pairs(folder: str, count: int, hdr: bool, width: int, height: int) -> None:
    """``count`` pairs in folder/ref and folder/test (kept: a second run at the same size reuses them)."""
    from PIL import Image

    from flip_loss.imageio import save_exr

    ext = "exr" if hdr else "png"
    for sub in ("ref", "test"):
        os.makedirs(os.path.join(folder, sub), exist_ok=True)
    for i in range(count):
        name = f"shot{i:03d}.{ext}"
        if all(_has_size(os.path.join(folder, s, name), width, height) for s in ("ref", "test")):
            continue  # made by an earlier run at this size
        reference = render(1000 * hdr + i, width, height)
        test = noisy(reference, 7 + i)
        for sub, image in (("ref", reference), ("test", test)):
            path = os.path.join(folder, sub, name)
            if hdr:
                save_exr(path, image.transpose(2, 0, 1), half=True)
            else:
                Image.fromarray(srgb8(image)).save(path)
        print(f"  made {'HDR' if hdr else 'LDR'} pair {i + 1}/{count}", file=sys.stderr)


# --- measurements ---------------------------------------------------------------------------------


def environment():
    env = dict(os.environ)
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    return env


def timed(command, cwd=None):
    t0 = time.perf_counter()
    res = subprocess.run(command, cwd=cwd, env=environment(), capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if res.returncode != 0:
        raise SystemExit(f"cli_bench: {' '.join(command)} failed ({res.returncode}):\n{res.stderr[-2000:]}")
    return wall, res.stdout


def nvidia_flip():
    path = shutil.which("flip") or os.path.join(os.path.dirname(sys.executable), "flip")
    return path if os.path.exists(path) else None


def startup():
    """(flip-loss --version, import of flip_loss, NVIDIA's flip --help) walls, medians of 3."""
    version = statistics.median(timed([sys.executable, "-m", "_flip_loss_launcher", "--version"])[0] for _ in range(3))
    imported = statistics.median(
        timed([sys.executable, "-c", "import flip_loss, flip_loss.cli.run"])[0] for _ in range(3)
    )
    bare = statistics.median(timed([sys.executable, "-c", "pass"])[0] for _ in range(3))
    flip = nvidia_flip()
    theirs = statistics.median(timed([flip, "--help"])[0] for _ in range(3)) if flip else None
    return {"python": bare, "flip-loss --version": version, "import flip_loss": imported, "flip --help": theirs}


def flip_loss_folder(folder: str, out: str):
    """flip-loss's folder mode on ``folder``: (process wall, its printed Total time)."""
    shutil.rmtree(out, ignore_errors=True)
    command = [sys.executable, "-m", "_flip_loss_launcher", "--reference-dir", os.path.join(folder, "ref")]
    command += ["--test-dir", os.path.join(folder, "test"), "-d", out, "-v", "1", "--no-progress", "--device", "cpu"]
    wall, stdout = timed(command)
    total = float(re.search(r"^Total time: ([0-9.]+) seconds$", stdout, flags=re.M).group(1))
    return wall, total


def nvidia_per_pair(folder: str, out: str):
    """NVIDIA's flip once per pair: (total wall, sum of its printed evaluation times)."""
    flip = nvidia_flip()
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    wall = evaluation = 0.0
    for name in sorted(os.listdir(os.path.join(folder, "ref"))):
        ref, test = os.path.join(folder, "ref", name), os.path.join(folder, "test", name)
        w, stdout = timed([flip, "-r", ref, "-t", test, "-d", out, "-v", "2"])
        wall += w
        evaluation += float(re.search(r"Evaluation time: ([0-9.]+) seconds", stdout).group(1))
    return wall, evaluation


def stages(folder: str, out: str, limit: int = 4):
    """Each stage of flip-loss's work on a pair, run one after the other here (medians over the
    first ``limit`` pairs), and the forward kernel alone on the decoded tensors (best of 5: its own
    time, without the host's other load, against which the pipelined time per pair is compared)."""
    import torch

    from flip_loss import pooling
    from flip_loss.cli import run as cli_run
    from flip_loss.cli.arguments import parse_arguments
    from flip_loss.cli.console import Console
    from flip_loss.cli.outputs import Staging

    shutil.rmtree(out, ignore_errors=True)
    _, args = parse_arguments(
        ["--reference-dir", os.path.join(folder, "ref"), "--test-dir", os.path.join(folder, "test")]
        + ["-d", out, "-v", "0", "--device", "cpu"]
    )
    staging = Staging()
    run = cli_run.Run(args, Console(0), staging)
    work = cli_run.PairWork(run.settings, run.device, claim=run.claim, sink=staging)
    run.start_writing()
    times = {"read": [], "evaluate": [], "pool": [], "write": [], "kernel": []}
    try:
        for index, (reference, test) in enumerate(run.pairs[:limit], 1):
            t0 = time.perf_counter()
            p = work.claim(work.read(index, reference, test))
            t1 = time.perf_counter()
            maps = work.maps(p)
            t2 = time.perf_counter()
            pooling.pool(maps.error)
            t3 = time.perf_counter()
            work.render(p, maps)  # pools again, then colours, encodes and writes the maps
            t4 = time.perf_counter()
            times["read"].append(t1 - t0)
            times["evaluate"].append(t2 - t1)
            times["pool"].append(t3 - t2)
            times["write"].append(t4 - t3 - (t3 - t2))
            kernel = []
            for _ in range(5):
                k0 = time.perf_counter()
                work.maps(p)
                kernel.append(time.perf_counter() - k0)
            times["kernel"].append(min(kernel))
    finally:
        staging.discard()
    del torch
    return {k: statistics.median(v) for k, v in times.items()}


def encodings(folder: str):
    """The first LDR pair's magma map encoded as PNG in several ways: (name, MB, ms)."""
    from PIL import Image

    from flip_loss.colormaps import MAGMA, apply_colormap, colormap_indices
    from flip_loss.functional import ldr_flip
    from flip_loss.imageio import PNG_ENCODERS, load_image, png_encoder, save_png
    import torch

    name = sorted(os.listdir(os.path.join(folder, "ref")))[0]
    with torch.no_grad():
        error = ldr_flip(load_image(os.path.join(folder, "test", name)), load_image(os.path.join(folder, "ref", name)))
    error = error[0].numpy()
    rgb = apply_colormap(error, MAGMA)
    index = colormap_indices(error).astype(np.uint8)
    rows = np.concatenate([np.zeros((rgb.shape[0], 1), np.uint8), rgb.reshape(rgb.shape[0], -1)], axis=1)
    index_rows = np.concatenate([np.zeros((index.shape[0], 1), np.uint8), index], axis=1)

    encoder_name = png_encoder()[0]

    def pillow(**kw):
        buffer = io.BytesIO()
        Image.fromarray(rgb).save(buffer, format="PNG", **kw)
        return buffer.getvalue()

    def ours():
        with tempfile.NamedTemporaryFile(suffix=".png") as f:
            save_png(f.name, rgb)
            return open(f.name, "rb").read()

    ways = {
        "Pillow default (adaptive filters, zlib 6)": lambda: pillow(),
        "Pillow compress_level=1 (adaptive filters)": lambda: pillow(compress_level=1),
        f"flip-loss save_png (no filter, {encoder_name} {PNG_ENCODERS[encoder_name]})": ours,
        "no filter, zlib 1": lambda: zlib.compress(rows.tobytes(), 1),
        "no filter, zlib 3": lambda: zlib.compress(rows.tobytes(), 3),
        "no filter, zlib 6": lambda: zlib.compress(rows.tobytes(), 6),
        "palette (8-bit index), no filter, zlib 1": lambda: zlib.compress(index_rows.tobytes(), 1),
    }
    if encoder_name == "isal":
        from isal import isal_zlib

        for level in (0, 1, 3):
            ways[f"no filter, isal {level}"] = lambda level=level: isal_zlib.compress(rows.tobytes(), level)
    found = []
    for label, encode in ways.items():
        spent = []
        for _ in range(3):
            t0 = time.perf_counter()
            data = encode()
            spent.append(time.perf_counter() - t0)
        found.append((label, len(data) / 1e6, 1e3 * min(spent)))
    return found


def load():
    return os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ldr-pairs", type=int, default=24)
    p.add_argument("--hdr-pairs", type=int, default=8)
    p.add_argument("--size", default="1920x1080")
    p.add_argument("--data", help="where the pairs are made (kept for the next run); default: a temporary folder")
    p.add_argument("--skip-nvidia", action="store_true")
    p.add_argument("--encodings", action="store_true", help="also compare PNG encodings of a map")
    p.add_argument("--json", help="also write the figures here")
    a = p.parse_args()
    width, height = (int(v) for v in a.size.split("x"))
    data = a.data or tempfile.mkdtemp(prefix="flip-loss-cli-bench-")
    out = tempfile.mkdtemp(prefix="flip-loss-cli-bench-out-")
    if not a.skip_nvidia and nvidia_flip() is None:
        raise SystemExit("cli_bench: NVIDIA's flip (pip install flip-evaluator) not found; --skip-nvidia to go without")
    import torch

    print(
        f"cli_bench: {a.size}, {os.cpu_count()} logical cores, torch {torch.__version__} "
        f"({torch.get_num_threads()} threads), load average {load():.2f} before",
        file=sys.stderr,
    )
    figures = {"size": a.size, "load_before": load(), "startup": startup(), "sets": {}}
    s = figures["startup"]
    print("\n## Start-up (process wall, median of 3)\n")
    print("| python -c pass | flip-loss --version | import flip_loss (torch, ops) | NVIDIA flip --help |")
    print("| --- | --- | --- | --- |")
    theirs = f"{s['flip --help']:.3f} s" if s["flip --help"] is not None else "-"
    print(f"| {s['python']:.3f} s | {s['flip-loss --version']:.3f} s | {s['import flip_loss']:.3f} s | {theirs} |")
    for label, count, hdr in (("LDR (PNG)", a.ldr_pairs, False), ("HDR (OpenEXR)", a.hdr_pairs, True)):
        if count <= 0:
            continue
        folder = os.path.join(data, "hdr" if hdr else "ldr")
        make_pairs(folder, count, hdr, width, height)
        ours_wall, ours_total = flip_loss_folder(folder, os.path.join(out, "flip-loss"))
        per = stages(folder, os.path.join(out, "stages"))
        theirs = None if a.skip_nvidia else nvidia_per_pair(folder, os.path.join(out, "nvidia"))
        row = {
            "pairs": count,
            "flip_loss_wall": ours_wall,
            "flip_loss_total": ours_total,
            "stages": per,
            "nvidia_wall": theirs[0] if theirs else None,
            "nvidia_evaluation": theirs[1] if theirs else None,
        }
        figures["sets"][label] = row
        print(f"\n## {label}: {count} pairs of {a.size}\n")
        print("| tool | wall, all pairs | per pair | per pair once started | evaluation per pair | speed-up |")
        print("| --- | --- | --- | --- | --- | --- |")
        print(
            f"| flip-loss (folder mode) | {ours_wall:.2f} s | {ours_wall / count:.3f} s | "
            f"{ours_total / count:.3f} s ({ours_total / count / per['kernel']:.1f}x the kernel) | "
            f"{per['kernel']:.3f} s (kernel) | {theirs[0] / ours_wall:.1f}x |"
            if theirs
            else f"| flip-loss (folder mode) | {ours_wall:.2f} s | {ours_wall / count:.3f} s | "
            f"{ours_total / count:.3f} s ({ours_total / count / per['kernel']:.1f}x the kernel) | "
            f"{per['kernel']:.3f} s (kernel) | - |"
        )
        if theirs:
            print(
                f"| NVIDIA flip, one call per pair | {theirs[0]:.2f} s | {theirs[0] / count:.3f} s | - | "
                f"{theirs[1] / count:.3f} s (its printed time) | 1.0x |"
            )
        stage_sum = per["read"] + per["evaluate"] + per["pool"] + per["write"]
        print("\nflip-loss per pair, each stage alone (median over the first pairs):\n")
        print("| start-up (once) | read | evaluate | pool | write | sum | pipelined (once started) |")
        print("| --- | --- | --- | --- | --- | --- | --- |")
        print(
            f"| {s['import flip_loss']:.3f} s | {per['read']:.3f} s | {per['evaluate']:.3f} s | {per['pool']:.3f} s | "
            f"{per['write']:.3f} s | {stage_sum:.3f} s | {ours_total / count:.3f} s |"
        )
        if theirs:
            rest = theirs[0] / count - theirs[1] / count
            print(
                f"\nNVIDIA flip per pair: {theirs[0] / count:.3f} s = evaluation {theirs[1] / count:.3f} s "
                f"+ start-up, read, pool and write {rest:.3f} s (start-up alone, flip --help: {s['flip --help']:.3f} s)"
            )
    if a.encodings:
        folder = os.path.join(data, "ldr")
        make_pairs(folder, 1, False, width, height)
        figures["encodings"] = encodings(folder)
        print("\n## The error map as PNG\n")
        print("| encoding | size | time |")
        print("| --- | --- | --- |")
        for label, megabytes, ms in figures["encodings"]:
            print(f"| {label} | {megabytes:.2f} MB | {ms:.1f} ms |")
    figures["load_after"] = load()
    print(
        f"\ncli_bench: load average {figures['load_before']:.2f} before, {figures['load_after']:.2f} after",
        file=sys.stderr,
    )
    if a.json:
        with open(a.json, "w") as f:
            json.dump(figures, f, indent=1)
    shutil.rmtree(out, ignore_errors=True)
    if a.data is None:
        shutil.rmtree(data, ignore_errors=True)


if __name__ == "__main__":
    main()
