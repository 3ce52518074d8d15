"""Evaluates a folder of renders against a folder of references with the flip_loss Python API.

Pairs files by name (same file name without extension; .png .jpg .jpeg .bmp .tga), computes the
LDR-FLIP error map of each pair, and prints a table of the pooled values per image, sorted by mean
FLIP (worst first), followed by the values pooled over all pixels of all images
(``flip_loss.FLIPMetric``).

    python examples/evaluate_renders.py --renders renders/ --references references/ [--ppd 67]
    python examples/evaluate_renders.py --demo     # makes a small demo folder from the bundled example

The command-line evaluator does the same with error maps, CSV and histograms:
``flip-loss --reference-dir references/ --test-dir renders/``.
"""

import argparse
import os
import sys
import tempfile

import numpy as np
import torch

import flip_loss
from flip_loss.imageio import load_image

EXTENSIONS = (".png", ".jpg", ".jpeg", ".bmp", ".tga")


def images_by_stem(directory):
    out = {}
    for name in sorted(os.listdir(directory)):
        stem, ext = os.path.splitext(name)
        if ext.lower() in EXTENSIONS and os.path.isfile(os.path.join(directory, name)):
            out[stem] = os.path.join(directory, name)
    return out


def make_demo(directory):
    """references/ and renders/ with the bundled example pair and three distortions of it."""
    from PIL import Image, ImageFilter

    from flip_loss.cli import example_paths

    ref_path, test_path = example_paths()
    ref = Image.open(ref_path).convert("RGB")
    refs, renders = os.path.join(directory, "references"), os.path.join(directory, "renders")
    os.makedirs(refs, exist_ok=True)
    os.makedirs(renders, exist_ok=True)
    rng = np.random.default_rng(0)
    a = np.asarray(ref).astype(np.float64)
    variants = {
        "example": Image.open(test_path).convert("RGB"),
        "blurred": ref.filter(ImageFilter.GaussianBlur(1.5)),
        "noisy": Image.fromarray(np.clip(a + rng.normal(0, 10, a.shape), 0, 255).astype(np.uint8)),
        "darker": Image.fromarray(np.clip(a * 0.9, 0, 255).astype(np.uint8)),
    }
    for name, img in variants.items():
        ref.save(os.path.join(refs, name + ".png"))
        img.save(os.path.join(renders, name + ".png"))
    return renders, refs


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--renders", help="folder of rendered (test) images")
    p.add_argument("--references", help="folder of reference images")
    p.add_argument("--ppd", type=float, default=flip_loss.DEFAULT_PPD, help="pixels per degree (default 67)")
    p.add_argument("--demo", action="store_true", help="evaluate a demo folder made from the bundled example")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    args = p.parse_args(argv)

    tmp = None
    if args.demo:
        tmp = tempfile.TemporaryDirectory()
        args.renders, args.references = make_demo(tmp.name)
    elif not args.renders or not args.references:
        p.error("give --renders and --references (or --demo)")
    device = torch.device(
        "cuda" if args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available()) else "cpu"
    )

    renders, references = images_by_stem(args.renders), images_by_stem(args.references)
    names = sorted(set(renders) & set(references))
    for missing in sorted(set(renders) - set(references)):
        print(f"warning: no reference for {renders[missing]}", file=sys.stderr)
    if not names:
        print("no render has a reference of the same name", file=sys.stderr)
        return 2

    metric = flip_loss.FLIPMetric(pixels_per_degree=args.ppd)
    rows = []
    for name in names:
        test = load_image(renders[name]).to(device)  # 3 x H x W, sRGB in [0, 1]
        reference = load_image(references[name]).to(device)
        if test.shape != reference.shape:
            print(
                f"warning: {name}: size {tuple(test.shape[1:])} differs from the reference's "
                f"{tuple(reference.shape[1:])}, skipped",
                file=sys.stderr,
            )
            continue
        with torch.no_grad():
            error_map = flip_loss.ldr_flip(test, reference, args.ppd, eps=0.0)  # eps=0: the metric itself
        metric.update_error_map(error_map)
        rows.append((name, flip_loss.pool(error_map)))

    rows.sort(key=lambda r: r[1].mean, reverse=True)
    width = max([len("all pixels")] + [len(n) for n, _ in rows])
    header = f"{'image':<{width}}  {'mean':>8}  {'w.median':>8}  {'w.q1':>8}  {'w.q3':>8}  {'min':>8}  {'max':>8}"
    print(f"LDR-FLIP at {args.ppd:.1f} pixels per degree, {len(rows)} image(s), worst first")
    print(header)
    print("-" * len(header))
    for name, v in rows:
        print(
            f"{name:<{width}}  {v.mean:8.4f}  {v.weighted_median:8.4f}  {v.weighted_quartile_1:8.4f}  "
            f"{v.weighted_quartile_3:8.4f}  {v.min:8.4f}  {v.max:8.4f}"
        )
    if rows:
        total = metric.compute().pooled
        print("-" * len(header))
        print(
            f"{'all pixels':<{width}}  {total.mean:8.4f}  {total.weighted_median:8.4f}  "
            f"{total.weighted_quartile_1:8.4f}  {total.weighted_quartile_3:8.4f}  {total.min:8.4f}  "
            f"{total.max:8.4f}"
        )
    if tmp is not None:
        tmp.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
