"""``flip-loss`` / ``python -m flip_loss``: the command-line FLIP evaluator.

Evaluates LDR-FLIP between a reference image and one or more test images with
``flip_loss.functional.ldr_flip`` and prints the pooled values in the layout of NVIDIA's ``flip``
tool; writes the error map as a magma (or grey) PNG. See ``flip-loss --help``.
"""
import argparse
import math
import os
import sys
import time
import warnings
from typing import Optional, Sequence, Tuple

__all__ = ["main", "example_paths", "build_parser", "EXIT_OK", "EXIT_USAGE"]

EXIT_OK = 0
EXIT_USAGE = 2

_PROG = "flip-loss"
_DATA_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")


def example_paths() -> Tuple[str, str]:
    """Absolute paths of the bundled example pair ``(reference, test)`` (PNG, 256 x 192, sRGB;
    see ``flip_loss/data/LICENSE.md`` for their origin and licence)."""
    return (os.path.join(_DATA_DIR, "example_reference.png"),
            os.path.join(_DATA_DIR, "example_test.png"))


class _UsageError(Exception):
    """An error the user can act on: printed as one line, exit code 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line on stderr, no usage dump (see main)
        raise _UsageError(f"{message} (see --help)")


def _positive_float(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive number, got '{text}'") from None
    if not math.isfinite(v) or v <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive number, got '{text}'")
    return v


_EPILOG = """\
The reference and the test images must have the same size. They are read as 8- or 16-bit
sRGB-encoded LDR images (PNG, JPEG, BMP, TGA); HDR input (.exr) is not supported yet.
The default pixels per degree, 67 (67.0206...), is a 0.7 m wide 4K display seen from 0.7 m.
Unless --no-error-map is given, the error map of each test image is written as a PNG named
flip.<reference>.<test>.<ppd>ppd.ldr.png in --directory (default: the current directory).

exit codes:
  0  success
  2  an error you can act on: a bad option or option value, a missing, unreadable or HDR
     image file, images of different sizes, an unavailable device, an unwritable output
     (one line on stderr, starting with 'flip-loss: error:')
  1  an unexpected internal error (a Python traceback is printed)
"""


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``flip-loss`` (its errors raise an internal exception that
    :func:`main` turns into one line on stderr and exit code 2)."""
    p = _Parser(
        prog=_PROG,
        description="Compute LDR-FLIP between a reference image and one or more test images,\n"
                    "print the pooled FLIP values (mean, weighted median and quartiles, min, max)\n"
                    "and save the FLIP error maps.",
        epilog=_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-r", "--reference", metavar="REFERENCE",
                   help="reference image file")
    p.add_argument("-t", "--test", metavar="TEST", nargs="+",
                   help="one or more test image files, each the size of the reference")
    view = p.add_mutually_exclusive_group()
    view.add_argument("--ppd", "--pixels-per-degree", "-ppd", dest="ppd", metavar="P",
                      type=_positive_float, default=None,
                      help="observer's pixels per degree of visual angle (default: 67.0206..., a "
                           "0.7 m wide 4K display seen from 0.7 m)")
    view.add_argument("-vc", "--viewing-conditions", dest="viewing_conditions", nargs=3,
                      metavar=("DIST_M", "WIDTH_M", "WIDTH_PX"), type=_positive_float, default=None,
                      help="viewing distance (m), display width (m) and display width (pixels), "
                           "from which the pixels per degree are computed")
    p.add_argument("-o", "--output", metavar="MAP.png", default=None,
                   help="file name of the error map (one test image only; relative names are "
                        "placed in --directory when it is given)")
    p.add_argument("-d", "--directory", metavar="DIR", default=None,
                   help="directory for the error maps (created if needed; default: the current "
                        "directory)")
    p.add_argument("-nm", "--no-magma", action="store_true",
                   help="save grey error maps instead of magma-coloured ones")
    p.add_argument("-nerm", "--no-error-map", action="store_true",
                   help="do not save the error maps")
    p.add_argument("-v", "--verbosity", type=int, choices=(0, 1, 2), default=2,
                   help="0: print nothing; 1: the mean FLIP error; 2 (default): all pooled values, "
                        "the pixels per degree and the evaluation time")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                   help="where to compute: auto (default: CUDA when available), cpu or cuda")
    p.add_argument("--example", action="store_true",
                   help="evaluate the bundled example pair (instead of --reference/--test)")
    return p


def _round_half_up(x: float) -> int:
    """Rounds half up, like C's round() on the positive values it is used for (the tool prints
    round(ppd)); Python's round() would round 40.5 to 40."""
    return int(math.floor(x + 0.5))


def _stem(path: str) -> str:
    return os.path.splitext(os.path.basename(path))[0]


def _image_size(path: str) -> Tuple[int, int]:
    """(width, height) from the image header; raises FileNotFoundError / ValueError."""
    from PIL import Image, UnidentifiedImageError

    from .imageio import is_hdr_path

    if not os.path.exists(path):
        raise FileNotFoundError(f"image file '{path}' does not exist")
    if os.path.isdir(path):
        raise ValueError(f"cannot read image '{path}': it is a directory")
    if is_hdr_path(path):
        raise ValueError(f"cannot read image '{path}': HDR input is not supported yet")
    try:
        with Image.open(path) as im:
            return im.size
    except UnidentifiedImageError:
        raise ValueError(f"cannot read image '{path}': not an image format Pillow recognises "
                         "(supported: PNG, JPEG, BMP, TGA)") from None
    except OSError as exc:
        raise ValueError(f"cannot read image '{path}': {exc.strerror or exc}") from None


def _resolve_device(choice: str):
    import torch

    if choice == "cpu":
        return torch.device("cpu")
    if choice == "cuda":
        if not torch.cuda.is_available():
            raise _UsageError("--device cuda was requested, but no CUDA device is available "
                              "(use --device cpu or auto)")
        return torch.device("cuda")
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def _run(args, t_start: float) -> int:
    import numpy as np
    import torch

    from .colormaps import MAGMA, apply_colormap, to_grey_uint8
    from .constants import DEFAULT_PPD, pixels_per_degree
    from .functional import ldr_flip
    from .imageio import is_hdr_path, load_image, save_png
    from .pooling import pool

    # --- what to compare -------------------------------------------------------------------
    if args.example:
        if args.reference is not None or args.test is not None:
            raise _UsageError("--example cannot be combined with --reference/--test")
        reference, tests = example_paths()
        tests = [tests]
    else:
        missing = [n for n, v in (("--reference/-r", args.reference), ("--test/-t", args.test))
                   if v is None]
        if missing:
            raise _UsageError(f"the following arguments are required: {', '.join(missing)} "
                              "(or use --example) (see --help)")
        reference, tests = args.reference, list(args.test)
    if args.output is not None:
        if len(tests) != 1:
            raise _UsageError(f"--output can only be used with one test image, got {len(tests)}")
        if os.path.splitext(args.output)[1].lower() != ".png":
            raise _UsageError(f"--output must name a .png file, got '{args.output}'")
        if args.no_error_map:
            raise _UsageError("--output and --no-error-map contradict each other")

    for path in [reference] + tests:
        if is_hdr_path(path):
            raise _UsageError(f"HDR input is not supported yet: '{path}' "
                              f"({os.path.splitext(path)[1]}); only LDR images (PNG, JPEG, BMP, "
                              "TGA) can be evaluated for now")

    if args.viewing_conditions is not None:
        dist_m, width_m, width_px = args.viewing_conditions
        ppd = pixels_per_degree(dist_m, width_m, width_px)
    elif args.ppd is not None:
        ppd = args.ppd
    else:
        ppd = DEFAULT_PPD

    # --- check every input before computing anything ---------------------------------------
    try:
        ref_size = _image_size(reference)
        for path in tests:
            size = _image_size(path)
            if size != ref_size:
                raise _UsageError(f"test image '{path}' is {size[0]}x{size[1]} pixels but the "
                                  f"reference '{reference}' is {ref_size[0]}x{ref_size[1]}; they "
                                  "must have the same size")
    except (FileNotFoundError, ValueError) as exc:
        raise _UsageError(str(exc)) from None

    device = _resolve_device(args.device)

    directory = args.directory if args.directory is not None else "."
    write_maps = not args.no_error_map
    if write_maps and args.directory is not None:
        try:
            os.makedirs(directory, exist_ok=True)
        except OSError as exc:
            raise _UsageError(f"cannot create the output directory '{directory}': "
                              f"{exc.strerror or exc}") from None

    def load(path):
        try:
            return load_image(path)
        except (FileNotFoundError, ValueError) as exc:
            raise _UsageError(str(exc)) from None

    ref_t = load(reference).to(device)
    verbosity = args.verbosity
    out = sys.stdout
    if verbosity >= 2:
        print("Invoking LDR-FLIP", file=out)
        print(f"     Pixels per degree: {_round_half_up(ppd)}", file=out)

    seen_warnings = set()
    for k, test in enumerate(tests):
        test_t = load(test).to(device)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            t0 = time.perf_counter()
            with torch.no_grad():
                error_map = ldr_flip(test_t, ref_t, ppd, eps=0.0)  # the metric itself: no gradient regulariser
            error_np = error_map[0].to("cpu", torch.float32).numpy()
            t_eval = time.perf_counter() - t0
        for w in caught:
            msg = str(w.message)
            if verbosity >= 1 and msg not in seen_warnings:
                seen_warnings.add(msg)
                print(f"{_PROG}: warning: {msg}", file=sys.stderr)
        pooled = pool(error_np)

        map_path = None
        if write_maps:
            if args.output is not None:
                map_path = (os.path.join(args.directory, args.output) if args.directory is not None
                            else args.output)
            else:
                name = f"flip.{_stem(reference)}.{_stem(test)}.{_round_half_up(ppd)}ppd.ldr.png"
                map_path = os.path.join(directory, name)
            if args.no_magma:
                image = np.repeat(to_grey_uint8(error_np)[..., None], 3, axis=2)
            else:
                image = apply_colormap(error_np, MAGMA)
            try:
                save_png(map_path, image)
            except OSError as exc:
                raise _UsageError(f"cannot write the error map '{map_path}': "
                                  f"{exc.strerror or exc}") from None

        if verbosity >= 1:
            if verbosity >= 2 or k > 0:
                print("", file=out)
            print(f"FLIP between reference image <{reference}> and test image <{test}>", file=out)
            print(f"     Mean: {pooled.mean:.6f}", file=out)
        if verbosity >= 2:
            print(f"     Weighted median: {pooled.weighted_median:.6f}", file=out)
            print(f"     1st weighted quartile: {pooled.weighted_quartile_1:.6f}", file=out)
            print(f"     3rd weighted quartile: {pooled.weighted_quartile_3:.6f}", file=out)
            print(f"     Min: {pooled.min:.6f}", file=out)
            print(f"     Max: {pooled.max:.6f}", file=out)
            print(f"     Evaluation time: {t_eval:.4f} seconds", file=out)
            if map_path is not None:
                print(f"     FLIP error map location: {map_path}", file=out)
        out.flush()

    if verbosity >= 1:
        print("", file=out)
        print(f"Total time: {time.perf_counter() - t_start:.4f} seconds", file=out)
        out.flush()
    return EXIT_OK


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Runs the command-line evaluator with ``argv`` (default: ``sys.argv[1:]``) and returns the
    exit code: 0 on success, 2 for an error the user can act on (one line on stderr)."""
    t_start = time.perf_counter()
    parser = build_parser()
    try:
        args = parser.parse_args(None if argv is None else list(argv))
        return _run(args, t_start)
    except _UsageError as exc:
        sys.stdout.flush()
        print(f"{_PROG}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except SystemExit as exc:  # --help
        code = exc.code
        return code if isinstance(code, int) else (0 if code is None else EXIT_USAGE)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
