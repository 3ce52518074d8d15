"""``flip-loss`` / ``python -m flip_loss``: the command-line FLIP evaluator.

Evaluates FLIP between a reference image and one or more test images (or between two folders of
images paired by name) and prints the pooled values in the layout of NVIDIA's ``flip`` tool: LDR-FLIP
(``flip_loss.functional.ldr_flip``) for LDR images, HDR-FLIP (``flip_loss.hdr_flip``) when the
reference is an OpenEXR file, as the tool decides. Writes the error maps as magma (or grey) PNGs,
for HDR-FLIP also the exposure maps (viridis), and on request the pooled values as text files, a CSV
summary and weighted histograms (PNG, drawn with matplotlib).
``--fail-above`` turns it into a regression gate. ``flip-loss psychophysics ...`` runs the
psychophysics suite (``flip_loss.psychophysics.cli``). See ``flip-loss --help``.

The user's files come first: every input is decoded and every output location checked before
anything is written; no output may be an input or be written twice; every output is written to a
temporary file beside its destination and renamed into place once the whole run has succeeded,
so a failed or interrupted run leaves no file behind, half-written or whole. The exit codes are
``EXIT_CODES``.
"""
import argparse
import contextlib
import csv
import io
import math
import os
import secrets
import shutil
import signal
import stat
import sys
import threading
import time
import traceback
import warnings
from typing import Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple

from . import options
from .constants import MAX_EXPOSURES, MAX_PPD
from .imageio import MAX_IMAGE_PIXELS

__all__ = ["main", "example_paths", "build_parser", "EXIT_OK", "EXIT_GATE", "EXIT_USAGE", "EXIT_INTERNAL",
           "EXIT_PAIRS_FAILED", "EXIT_INTERRUPTED", "EXIT_CODES", "FOLDER_EXTENSIONS", "CSV_HEADER"]

EXIT_OK = 0
EXIT_GATE = 1
EXIT_USAGE = 2
EXIT_INTERNAL = 3
EXIT_PAIRS_FAILED = 4
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as shells report a process ended by Ctrl-C

# The one table of exit codes: --help prints it and the README repeats it.
EXIT_CODES = (
    (EXIT_OK, "success"),
    (EXIT_GATE, "the --fail-above gate failed for at least one test image"),
    (EXIT_USAGE, "an error you can act on: a bad option or option value, a missing, unreadable or "
                 "unsupported image file, mixed LDR and HDR images, HDR options for LDR images, images "
                 "of different sizes, an output that would overwrite an input or another output, an "
                 "unwritable output, an unavailable device (one line on stderr, starting with "
                 "'flip-loss: error:'); nothing was written"),
    (EXIT_INTERNAL, "an unexpected internal error (a Python traceback is printed); nothing was written"),
    (EXIT_PAIRS_FAILED, "folder mode: at least one pair could not be evaluated (one 'flip-loss: error:' "
                        "line each); the other pairs were evaluated and written, and the summary CSV "
                        "lists them (takes precedence over 1)"),
    (EXIT_INTERRUPTED, "interrupted (Ctrl-C or SIGTERM); the message says whether the outputs had been "
                       "written (they appear all together at the end of a run, or not at all)"),
)

_PROG = "flip-loss"
_DATA_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")

# Image files the folder mode pairs up (case-insensitive). Radiance .hdr and .pfm files are reported
# and skipped (not supported; OpenEXR is the HDR format).
FOLDER_EXTENSIONS = (".png", ".jpg", ".jpeg", ".bmp", ".tga", ".exr")
CSV_HEADER = ("Reference", "Test", "Mean", "Weighted median", "1st weighted quartile",
              "3rd weighted quartile", "Min", "Max", "Evaluation time")
GATE_QUANTITIES = ("mean", "weighted-median", "max")
HISTOGRAM_BINS = 100
_TONE_MAPPER_NAMES = {"aces": "ACES", "hable": "Hable", "reinhard": "Reinhard"}  # as the tool prints them
_FLOAT32_MAX = 3.4028234663852886e38


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


# The option values are checked by the API's own checks (flip_loss.options), so that the command
# line and the API accept the same values; the messages speak of the command line's text.

def _ppd_value(text: str) -> float:
    try:
        return options.pixels_per_degree(float(text))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive number of at most {MAX_PPD:g}, "
                                         f"got '{text}'") from None


def _positive_float(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive number, got '{text}'") from None
    if not math.isfinite(v) or v <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive number, got '{text}'")
    return v


def _exposure_value(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number (of stops), got '{text}'") from None
    try:
        options.exposure("exposure", v)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a finite number (of stops), got '{text}'") from None
    # Exposures are computed in float32, as the evaluator does: a value float32 cannot hold would
    # become infinite there.
    if abs(v) > _FLOAT32_MAX:
        raise argparse.ArgumentTypeError(f"expected a finite number (of stops) within the float32 range, "
                                         f"got '{text}'")
    return v


def _exposure_count(text: str) -> int:
    try:
        return options.exposure_count(int(text))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer of at least 2 (the start and the stop "
                                         f"exposure) and at most {MAX_EXPOSURES}, got '{text}'") from None


def _exit_code_lines() -> str:
    import textwrap

    return "".join(textwrap.fill(text, width=95, initial_indent=f"  {code:<2d} ", subsequent_indent=" " * 5) + "\n"
                   for code, text in EXIT_CODES)


_EPILOG = f"""\
The reference and the test images must have the same size. LDR images (PNG, JPEG, BMP, TGA) are
read as 8- or 16-bit sRGB-encoded values and evaluated with LDR-FLIP. An OpenEXR (.exr) reference
selects HDR-FLIP, as in NVIDIA's tool: the test images must then be .exr files too (linear
values; NaN or infinite values are an error); mixing LDR and HDR images is an error. Radiance
.hdr and .pfm files are not supported (convert them to OpenEXR). Images of more than
{MAX_IMAGE_PIXELS} pixels (e.g. 16384x8192) are refused. The default pixels per degree, 67
(67.0206...), is a 0.7 m wide 4K display seen from 0.7 m; at most {MAX_PPD:g} are accepted.

HDR-FLIP is the per-pixel maximum of LDR-FLIP over exposures from --start-exposure to
--stop-exposure (--num-exposures of them, evenly spaced in stops), each image exposed, tone
mapped (--tone-mapper) and clamped. Exposures not given are computed from the reference: start
= log2(x*/max luminance), stop = log2(x*/median luminance), count = max(2, ceil(stop - start)),
where x* is the value the tone mapper maps to 0.85; at most {MAX_EXPOSURES} exposures. They are printed (4
decimals) and go into the output names. Give negative exposures as '-cstart -3.5' or
'--start-exposure=-1e-3'.

outputs (in --directory, default: the current directory):
  flip.<reference>.<test>.<ppd>ppd.ldr.png       the error map (unless --no-error-map)
  pooled_values.flip.<...>.ldr.txt               with --textfile
  [log_]weighted_histogram.flip.<...>.ldr.png    with --histogram (two test images: one
                                                 overlapped histogram, both test names in it)
  HDR: ldr becomes hdr.<tm>.<S>_to_<E>.<N>, S and E the start and stop exposures as m (minus)
  or p and the absolute value with 4 decimals, N the number of exposures, e.g.
  flip.reference.test.67ppd.hdr.aces.m12.5423_to_p0.9427.14.png, plus the exposure map (the
  winning exposure's index / (N - 1), viridis; unless --no-exposure-map):
  exposure_map.<reference>.<test>.<ppd>ppd.hdr.<tm>.<S>_to_<E>.<N>.png
  with --basename NAME: NAME.png, NAME.txt, NAME.[log_]weighted_histogram.png,
  NAME.exposure_map.png
  --csv FILE appends one row per test image (a header first when FILE is new).
Every input is read and every output checked before anything is written; an output that is an
input (also through a link) or that the run would write twice is an error. Outputs are written
to temporary files and renamed into place at the end: an interrupted or failed run writes nothing.

folder mode: --reference-dir R --test-dir T evaluates every image in T against the image of
the same name (stem; any of .png .jpg .jpeg .bmp .tga .exr) in R, warns about unmatched files,
writes the maps to --directory and a summary CSV (--csv, default <directory>/summary.csv).
For .exr pairs the exposures are computed per reference. A pair that cannot be evaluated (an
unreadable image, different sizes) is reported and skipped; the others are evaluated and
written, and the exit code is 4.

regression gate: --fail-above mean|weighted-median|max THRESHOLD exits with code 1 when any
test image's value is above THRESHOLD (in [0, 1]); every image is still evaluated.

flip-loss psychophysics ... runs the psychophysics suite (see 'flip-loss psychophysics --help').

exit codes:
""" + _exit_code_lines()


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``flip-loss`` (its errors raise an internal exception that
    :func:`main` turns into one line on stderr and exit code 2)."""
    p = _Parser(
        prog=_PROG,
        description="Compute FLIP between a reference image and one or more test images (or two\n"
                    "folders of images paired by name): LDR-FLIP for LDR images, HDR-FLIP for\n"
                    "OpenEXR (.exr) images. Print the pooled FLIP values (mean, weighted median and\n"
                    "quartiles, min, max) and save the FLIP error maps (and HDR exposure maps).",
        epilog=_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    inputs = p.add_argument_group("inputs")
    inputs.add_argument("-r", "--reference", metavar="REFERENCE",
                        help="reference image file")
    inputs.add_argument("-t", "--test", metavar="TEST", nargs="+",
                        help="one or more test image files, each the size of the reference")
    inputs.add_argument("--reference-dir", metavar="DIR", default=None,
                        help="folder mode: folder of reference images (with --test-dir)")
    inputs.add_argument("--test-dir", metavar="DIR", default=None,
                        help="folder mode: folder of test images, paired with the references by "
                             "file name without extension")
    inputs.add_argument("--example", action="store_true",
                        help="evaluate the bundled example pair (instead of --reference/--test)")

    view = p.add_argument_group("viewing conditions").add_mutually_exclusive_group()
    view.add_argument("--ppd", "--pixels-per-degree", "-ppd", dest="ppd", metavar="P",
                      type=_ppd_value, default=None,
                      help="observer's pixels per degree of visual angle, at most "
                           f"{MAX_PPD:g} (default: 67.0206..., a 0.7 m wide 4K display seen from 0.7 m)")
    view.add_argument("-vc", "--viewing-conditions", dest="viewing_conditions", nargs=3,
                      metavar=("DIST_M", "WIDTH_M", "WIDTH_PX"), type=_positive_float, default=None,
                      help="viewing distance (m), display width (m) and display width (pixels), "
                           "from which the pixels per degree are computed")

    out = p.add_argument_group("outputs")
    out.add_argument("-d", "--directory", metavar="DIR", default=None,
                     help="directory for the error maps, text files and histograms (created if "
                          "needed; default: the current directory)")
    names = out.add_mutually_exclusive_group()
    names.add_argument("-o", "--output", metavar="MAP.png", default=None,
                       help="file name of the error map (one test image only; relative names are "
                            "placed in --directory when it is given)")
    names.add_argument("-b", "--basename", metavar="NAME", default=None,
                       help="base name of every output file: NAME.png, NAME.txt, "
                            "NAME.weighted_histogram.png (one test image only)")
    out.add_argument("-nm", "--no-magma", action="store_true",
                     help="save grey error maps instead of magma-coloured ones")
    out.add_argument("-nerm", "--no-error-map", action="store_true",
                     help="do not save the error maps")
    out.add_argument("-txt", "--textfile", action="store_true",
                     help="write the pooled values of each test image to a .txt file next to "
                          "its error map")
    out.add_argument("-c", "--csv", metavar="FILE", default=None,
                     help="append one row per test image (Reference, Test, Mean, Weighted median, "
                          "1st and 3rd weighted quartile, Min, Max, Evaluation time) to FILE; the "
                          "header is written when FILE is new")
    out.add_argument("-v", "--verbosity", type=int, choices=(0, 1, 2), default=2,
                     help="0: print nothing; 1: the mean FLIP error; 2 (default): all pooled values, "
                          "the pixels per degree, the evaluation time and, for HDR-FLIP, the tone "
                          "mapper and exposures")
    out.add_argument("--no-progress", action="store_true",
                     help="folder mode: no progress bar on stderr")

    hdr = p.add_argument_group("HDR-FLIP (OpenEXR inputs only)")
    hdr.add_argument("-tm", "--tone-mapper", dest="tone_mapper", type=str.lower, choices=options.TONE_MAPPERS,
                     default=None, metavar="{aces,hable,reinhard}",
                     help="tone mapper applied at every exposure (any case; default: aces)")
    hdr.add_argument("-cstart", "--start-exposure", dest="start_exposure", metavar="C",
                     type=_exposure_value, default=None,
                     help="first exposure, in stops (default: computed from the reference)")
    hdr.add_argument("-cstop", "--stop-exposure", dest="stop_exposure", metavar="C",
                     type=_exposure_value, default=None,
                     help="last exposure, in stops (default: computed from the reference)")
    hdr.add_argument("-n", "--num-exposures", dest="num_exposures", metavar="N",
                     type=_exposure_count, default=None,
                     help=f"number of exposures, 2 to {MAX_EXPOSURES} (default: max(2, ceil(stop - start)))")
    hdr.add_argument("-nexm", "--no-exposure-map", action="store_true",
                     help="do not save the exposure maps")

    hist = p.add_argument_group("histogram")
    hist.add_argument("-hist", "--histogram", action="store_true",
                      help="draw the weighted FLIP histogram (100 buckets) as a PNG; with two test "
                           "images, one overlapped histogram of both")
    hist.add_argument("-lg", "--log", action="store_true",
                      help="logarithmic y axis for the histogram")
    hist.add_argument("--y-max", dest="y_max", metavar="Y", type=_positive_float, default=None,
                      help="upper limit of the histogram's y axis")
    hist.add_argument("-epv", "--exclude-pooled-values", action="store_true",
                      help="do not draw the pooled values into the histogram")

    gate = p.add_argument_group("regression gate")
    gate.add_argument("--fail-above", "--exit-test-parameters", "-etp", dest="fail_above", nargs=2,
                      metavar=("QUANTITY", "THRESHOLD"), default=None,
                      help="exit with code 1 if, for any test image, QUANTITY (mean, weighted-median "
                           "or max) is above THRESHOLD (a number in [0, 1])")
    gate.add_argument("-et", "--exit-on-test", action="store_true",
                      help="NVIDIA's spelling: the gate with 'mean 0.05' unless --fail-above is given")

    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                   help="where to compute: auto (default: CUDA when available), cpu or cuda")
    return p


def _round_half_up(x: float) -> int:
    """Rounds half up, like C's round() on the positive values it is used for (the tool prints
    round(ppd)); Python's round() would round 40.5 to 40."""
    return int(math.floor(x + 0.5))


def _stem(path: str) -> str:
    return os.path.splitext(os.path.basename(path))[0]


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


def _uses_hdr(pairs: Sequence[Tuple[str, str]]) -> bool:
    """True when the run is HDR-FLIP: as in NVIDIA's tool an OpenEXR reference selects HDR-FLIP.
    Every pair must be of one kind (an .exr reference with .exr test images, or LDR images only);
    Radiance .hdr and .pfm files are not supported."""
    from .imageio import UNSUPPORTED_HDR_EXTENSIONS, is_exr_path

    for path in (p for pair in pairs for p in pair):
        ext = os.path.splitext(path)[1]
        if ext.lower() in UNSUPPORTED_HDR_EXTENSIONS:
            raise _UsageError(f"'{path}': {ext} files (Radiance HDR / PFM) are not supported; convert "
                              "the image to OpenEXR (.exr), which selects HDR-FLIP")
    for ref, test in pairs:
        if is_exr_path(ref) != is_exr_path(test):
            hdr_file, ldr_file = (ref, test) if is_exr_path(ref) else (test, ref)
            raise _UsageError(f"cannot mix HDR and LDR images: '{hdr_file}' is an OpenEXR (HDR) image "
                              f"but '{ldr_file}' is not; an .exr reference (HDR-FLIP) needs .exr test "
                              "images, an LDR reference LDR test images")
    kinds = {is_exr_path(ref) for ref, _ in pairs}
    if len(kinds) > 1:
        hdr_ref = next(ref for ref, _ in pairs if is_exr_path(ref))
        ldr_ref = next(ref for ref, _ in pairs if not is_exr_path(ref))
        raise _UsageError(f"cannot mix HDR and LDR images in one run: '{hdr_ref}' is an OpenEXR (HDR) "
                          f"image but '{ldr_ref}' is not; evaluate them in separate runs (e.g. separate "
                          "folders)")
    return kinds == {True}


def _hdr_option_flags(args) -> List[str]:
    return [flag for flag, given in (("--tone-mapper/-tm", args.tone_mapper is not None),
                                     ("--start-exposure/-cstart", args.start_exposure is not None),
                                     ("--stop-exposure/-cstop", args.stop_exposure is not None),
                                     ("--num-exposures/-n", args.num_exposures is not None),
                                     ("--no-exposure-map/-nexm", args.no_exposure_map)) if given]


def _exposure_text(value: float) -> str:
    """An exposure in an output name: m (negative) or p, then the absolute value, 4 decimals."""
    return f"{'m' if value < 0 else 'p'}{abs(value):.4f}"


class _Exposures(NamedTuple):
    start: float
    stop: float
    count: int


def _dynamic_range(tone_mapper: Optional[str] = None, exposures: Optional[_Exposures] = None) -> str:
    """The dynamic-range part of the output names: 'ldr', or for HDR-FLIP
    'hdr.<tm>.<S>_to_<E>.<N>' as NVIDIA's tool names its outputs."""
    if exposures is None:
        return "ldr"
    return (f"hdr.{tone_mapper}.{_exposure_text(exposures.start)}_to_{_exposure_text(exposures.stop)}."
            f"{exposures.count}")


def _exposure_lines(e: _Exposures) -> List[str]:
    return [f"     Start exposure: {e.start:.4f}", f"     Stop exposure: {e.stop:.4f}",
            f"     Number of exposures: {e.count}"]


def _list_names(names: Sequence[str], limit: int = 5) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def _ppd_of(args) -> float:
    """The pixels per degree of the run: --ppd, or from --viewing-conditions (checked against the
    same limit as --ppd: extreme conditions give 0 or infinitely many), or the default."""
    from .constants import DEFAULT_PPD, pixels_per_degree

    if args.viewing_conditions is not None:
        ppd = pixels_per_degree(*args.viewing_conditions)
        try:
            return options.pixels_per_degree(ppd)
        except ValueError:
            given = " ".join(f"{v:g}" for v in args.viewing_conditions)
            raise _UsageError(f"--viewing-conditions {given} give {ppd:g} pixels per degree; it must be a "
                              f"positive number of at most {MAX_PPD:g}") from None
    return args.ppd if args.ppd is not None else DEFAULT_PPD


# ----------------------------------------------------------------------------------------------
# Folder mode: pairing by name
# ----------------------------------------------------------------------------------------------

def _scan_folder(directory: str, what: str) -> Tuple[Dict[str, str], List[str], List[str]]:
    """{stem: path} of the supported images in ``directory`` (not recursive; hidden files are
    ignored), plus the names of unsupported HDR files (.hdr, .pfm) and of other files that were
    skipped."""
    from .imageio import is_hdr_path

    if not os.path.exists(directory):
        raise _UsageError(f"{what} '{directory}' does not exist")
    if not os.path.isdir(directory):
        raise _UsageError(f"{what} '{directory}' is not a directory")
    try:
        entries = sorted(os.listdir(directory))
    except OSError as exc:
        raise _UsageError(f"cannot list {what} '{directory}': {exc.strerror or exc}") from None
    found: Dict[str, str] = {}
    hdr: List[str] = []
    other: List[str] = []
    for name in entries:
        path = os.path.join(directory, name)
        if name.startswith(".") or not os.path.isfile(path):
            continue
        ext = os.path.splitext(name)[1].lower()
        if ext in FOLDER_EXTENSIONS:
            stem = os.path.splitext(name)[0]
            if stem in found:
                raise _UsageError(f"{what} '{directory}' has two images named '{stem}' "
                                  f"({os.path.basename(found[stem])} and {name}); the pairing by "
                                  "name would be ambiguous: rename or remove one")
            found[stem] = path
        elif is_hdr_path(name):
            hdr.append(name)
        else:
            other.append(name)
    return found, hdr, other


def _pair_folders(reference_dir: str, test_dir: str, console: "_Console") -> List[Tuple[str, str]]:
    refs, ref_hdr, ref_other = _scan_folder(reference_dir, "reference folder")
    tests, test_hdr, test_other = _scan_folder(test_dir, "test folder")
    stems = sorted(set(refs) & set(tests))
    only_ref = sorted(os.path.basename(refs[s]) for s in set(refs) - set(tests))
    only_test = sorted(os.path.basename(tests[s]) for s in set(tests) - set(refs))
    if only_ref:
        console.warning(f"{len(only_ref)} reference image(s) without a test image of the same name in "
                        f"'{test_dir}', skipped: {_list_names(only_ref)}")
    if only_test:
        console.warning(f"{len(only_test)} test image(s) without a reference image of the same name in "
                        f"'{reference_dir}', skipped: {_list_names(only_test)}")
    hdr = ref_hdr + test_hdr
    if hdr:
        console.warning(f"{len(hdr)} Radiance HDR / PFM file(s) skipped (not supported; convert them to "
                        f"OpenEXR .exr): {_list_names(hdr)}")
    other = ref_other + test_other
    if other:
        console.warning(f"{len(other)} file(s) without a supported image extension "
                        f"({' '.join(FOLDER_EXTENSIONS)}) ignored: {_list_names(other)}")
    if not stems:
        raise _UsageError(f"no image in the test folder '{test_dir}' has a reference of the same name "
                          f"in '{reference_dir}' (pairs are matched by file name without extension; "
                          f"supported extensions: {' '.join(FOLDER_EXTENSIONS)})")
    return [(refs[s], tests[s]) for s in stems]


def _pairs_of(args, console: "_Console") -> List[Tuple[str, str]]:
    """The (reference, test) pairs the run compares, from the folders, --example or -r/-t."""
    if args.reference_dir is not None:
        return _pair_folders(args.reference_dir, args.test_dir, console)
    if args.example:
        reference, test = example_paths()
        tests = [test]
    else:
        missing = [n for n, v in (("--reference/-r", args.reference), ("--test/-t", args.test)) if v is None]
        if missing:
            raise _UsageError(f"the following arguments are required: {', '.join(missing)} "
                              "(or use --example, or --reference-dir/--test-dir)")
        reference, tests = args.reference, list(args.test)
    if args.output is not None and len(tests) != 1:
        raise _UsageError(f"--output can only be used with one test image, got {len(tests)}")
    if args.basename is not None and len(tests) != 1:
        raise _UsageError(f"--basename can only be used with one test image, got {len(tests)}")
    return [(reference, t) for t in tests]


def _check_sizes(reference: str, test: str, sizes: Dict[str, Tuple[int, int]]) -> None:
    """Both images are readable image files of one size, from their headers (``sizes`` caches the
    sizes already read)."""
    from .imageio import image_size

    try:
        for path in (reference, test):
            if path not in sizes:
                sizes[path] = image_size(path)
    except (FileNotFoundError, ValueError) as exc:
        raise _UsageError(str(exc)) from None
    if sizes[test] != sizes[reference]:
        (tw, th), (rw, rh) = sizes[test], sizes[reference]
        raise _UsageError(f"test image '{test}' is {tw}x{th} pixels but the reference '{reference}' is "
                          f"{rw}x{rh}; they must have the same size")


# ----------------------------------------------------------------------------------------------
# Evaluating one pair
# ----------------------------------------------------------------------------------------------

class _Result(NamedTuple):
    """One evaluated pair: the maps as H x W float32 arrays (exposure map None for LDR), the pooled
    values, the evaluation time and the warnings the evaluation raised."""
    reference: str
    test: str
    exposures: Optional[_Exposures]
    error: "object"
    exposure: "object"
    pooled: "object"
    seconds: float
    warnings: List[str]


class _Evaluator:
    """Loads images and evaluates pairs with the run's settings. Keeps the last reference (and its
    exposures) so that the test images of one reference share it."""

    def __init__(self, args, hdr: bool, tone_mapper: str, ppd: float, device):
        self.args, self.hdr, self.tone_mapper, self.ppd, self.device = args, hdr, tone_mapper, ppd, device
        self._reference = (None, None, None)

    def load(self, path: str):
        from .imageio import load_image

        try:
            return load_image(path).to(self.device)
        except (FileNotFoundError, ValueError) as exc:
            raise _UsageError(str(exc)) from None

    def reference(self, path: str):
        """(image, exposures) of the reference ``path``; exposures None for LDR-FLIP."""
        if self._reference[0] != path:
            image = self.load(path)
            self._reference = (path, image, self._exposures_of(path, image) if self.hdr else None)
        return self._reference[1], self._reference[2]

    def _exposures_of(self, reference: str, image) -> _Exposures:
        """The exposures HDR-FLIP uses for this reference: the given ones, the rest computed from it
        as flip_loss.hdr.exposures_for does."""
        from .hdr import exposure_range, exposures_for

        a = self.args
        start, stop = a.start_exposure, a.stop_exposure
        if (start is None) != (stop is None):  # one given: its order against the computed one
            auto = exposure_range(image, self.tone_mapper)
            if start is None:
                start = float(auto[0][0])
                if start > stop:
                    raise _UsageError(f"--stop-exposure ({stop:g}) and the start exposure ({start:.4f}) "
                                      f"computed from the reference '{reference}' are in the wrong order "
                                      "(start must not be above stop); give both exposures")
            else:
                stop = float(auto[1][0])
                if start > stop:
                    raise _UsageError(f"--start-exposure ({start:g}) and the stop exposure ({stop:.4f}) "
                                      f"computed from the reference '{reference}' are in the wrong order "
                                      "(start must not be above stop); give both exposures")
        def too_many(start: float, stop: float) -> _UsageError:
            return _UsageError(f"the exposures from {start:g} to {stop:g} stops would need more than "
                               f"{MAX_EXPOSURES} exposures (one per stop); give at most {MAX_EXPOSURES} with "
                               "--num-exposures/-n")

        if a.num_exposures is None and start is not None and stop - start > MAX_EXPOSURES:
            raise too_many(start, stop)
        try:
            _, counts, s, e = exposures_for(image, self.tone_mapper, a.start_exposure, a.stop_exposure,
                                            a.num_exposures)
        except ValueError as exc:
            raise _UsageError(f"HDR-FLIP exposures for the reference '{reference}': "
                              f"{str(exc).replace('flip_loss: ', '')}") from None
        exposures = _Exposures(float(s[0]), float(e[0]), int(counts[0]))
        if exposures.count > MAX_EXPOSURES:
            raise too_many(exposures.start, exposures.stop)
        return exposures

    def evaluate(self, reference: str, test: str, test_image=None) -> _Result:
        """Evaluates the pair (``test_image``: the test image if already loaded)."""
        import torch

        from . import pooling
        from .functional import ldr_flip
        from .hdr import hdr_flip

        ref_image, exposures = self.reference(reference)
        if test_image is None:
            test_image = self.load(test)
        exposure_np = None
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            t0 = time.perf_counter()
            with torch.no_grad():  # eps=0: the metric itself, no gradient regulariser
                if self.hdr:
                    error_map, exposure_map = hdr_flip(
                        test_image, ref_image, self.ppd, tone_mapper=self.tone_mapper,
                        start_exposure=exposures.start, stop_exposure=exposures.stop,
                        num_exposures=exposures.count, return_exposure_map=True, eps=0.0)
                    exposure_np = exposure_map[0].to("cpu", torch.float32).numpy()
                else:
                    error_map = ldr_flip(test_image, ref_image, self.ppd, eps=0.0)
            error_np = error_map[0].to("cpu", torch.float32).numpy()
            seconds = time.perf_counter() - t0
        return _Result(reference, test, exposures, error_np, exposure_np, pooling.pool(error_np), seconds,
                       [str(w.message) for w in caught])


# ----------------------------------------------------------------------------------------------
# Outputs: names, checks, atomic writing
# ----------------------------------------------------------------------------------------------

class _Names(NamedTuple):
    map: str
    text: str
    histogram: str
    exposure_map: str


def _output_names(args, reference: str, test: str, ppd: float, directory: str, dynamic_range: str) -> _Names:
    """Output file names; ``dynamic_range`` is :func:`_dynamic_range`'s name part."""
    log = "log_" if args.log else ""
    if args.basename is not None:
        b = os.path.join(directory, args.basename)
        return _Names(b + ".png", b + ".txt", f"{b}.{log}weighted_histogram.png", b + ".exposure_map.png")
    if args.output is not None:
        map_path = os.path.join(args.directory, args.output) if args.directory is not None else args.output
        parent, stem = os.path.dirname(map_path), _stem(map_path)
        return _Names(map_path, os.path.join(parent, f"pooled_values.{stem}.txt"),
                      os.path.join(parent, f"{log}weighted_histogram.{stem}.png"),
                      os.path.join(parent, f"exposure_map.{stem}.png"))
    name = f"{_stem(reference)}.{_stem(test)}.{_round_half_up(ppd)}ppd.{dynamic_range}"
    base = "flip." + name
    return _Names(os.path.join(directory, base + ".png"),
                  os.path.join(directory, f"pooled_values.{base}.txt"),
                  os.path.join(directory, f"{log}weighted_histogram.{base}.png"),
                  # as NVIDIA's tool: exposure_map.<reference>.<test>..., without "flip."
                  os.path.join(directory, f"exposure_map.{name}.png"))


def _overlapped_histogram_name(args, reference: str, tests: Sequence[str], ppd: float, directory: str,
                               dynamic_range: str) -> str:
    log = "log_" if args.log else ""
    return os.path.join(directory, f"{log}weighted_histogram.flip.{_stem(reference)}.{_stem(tests[0])}."
                                   f"{_stem(tests[1])}.{_round_half_up(ppd)}ppd.{dynamic_range}.png")


def _pooled_lines(pooled) -> List[str]:
    return [f"Mean: {pooled.mean:.6f}",
            f"Weighted median: {pooled.weighted_median:.6f}",
            f"1st weighted quartile: {pooled.weighted_quartile_1:.6f}",
            f"3rd weighted quartile: {pooled.weighted_quartile_3:.6f}",
            f"Min: {pooled.min:.6f}",
            f"Max: {pooled.max:.6f}"]


def _csv_row(result: _Result) -> List[str]:
    return [result.reference, result.test] + [f"{v:.6f}" for v in result.pooled] + [f"{result.seconds:.4f}"]


def _csv_text(rows: Sequence[Sequence[str]], header: bool) -> str:
    buffer = io.StringIO()
    w = csv.writer(buffer, quoting=csv.QUOTE_ALL, lineterminator="\n")
    if header:
        w.writerow(CSV_HEADER)
    w.writerows(rows)
    return buffer.getvalue()


def _name_max(directory: str) -> int:
    """The longest file name (in bytes) the file system of ``directory`` allows."""
    try:
        return int(os.pathconf(directory, "PC_NAME_MAX"))
    except (AttributeError, OSError, ValueError):  # no pathconf (Windows) or no answer
        return 255


def _nearest_existing(path: str) -> str:
    while not os.path.lexists(path):
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    return path


def _check_directory(directory: str) -> None:
    """``directory`` exists as a writable directory or can be created."""
    real = os.path.realpath(directory)
    existing = _nearest_existing(real)
    if existing == real:
        if not os.path.isdir(real):
            raise _UsageError(f"cannot use the output directory '{directory}': it is not a directory")
    elif not os.path.isdir(existing):
        raise _UsageError(f"cannot create the output directory '{directory}': '{existing}' is not a "
                          "directory")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise _UsageError(f"cannot {'write into' if existing == real else 'create'} the output directory "
                          f"'{directory}': permission denied")
    limit = _name_max(existing)
    for part in os.path.relpath(real, existing).split(os.sep) if existing != real else ():
        if len(os.fsencode(part)) > limit:
            raise _UsageError(f"cannot create the output directory '{directory}': the name '{part}' is "
                              f"longer than the {limit} bytes the file system allows")


class _Output(NamedTuple):
    path: str   # as the user will see it
    real: str   # where it is written: links resolved
    what: str   # "error map", "CSV file", ...


class _OutputGuard:
    """Checks every output path of a run before anything is written: it must not be an input (the
    same file, also through a symbolic or hard link), not be claimed by another output of the run,
    and its location must be writable (an existing writable directory, or --directory, which is
    created; a file name the file system allows; not a directory, a device or a read-only file)."""

    def __init__(self, inputs: Sequence[str], new_directory: Optional[str] = None):
        self._inputs: Dict[Tuple[int, int], str] = {}
        for path in inputs:
            try:
                st = os.stat(path)
            except OSError:  # missing: reported when it is read
                continue
            self._inputs.setdefault((st.st_dev, st.st_ino), path)
        self._claimed: Dict[str, _Output] = {}
        self._new_directory = os.path.realpath(new_directory) if new_directory is not None else None

    def claim(self, *candidates: Tuple[str, str]) -> List[_Output]:
        """Checks the outputs ``(path, what)`` and claims them all, or raises _UsageError and
        claims none."""
        batch: Dict[str, _Output] = {}
        for path, what in candidates:
            out = self._check(path, what, batch)
            batch[os.path.normcase(out.real)] = out
        self._claimed.update(batch)
        return list(batch.values())

    def _check(self, path: str, what: str, batch: Dict[str, _Output]) -> _Output:
        real = os.path.realpath(path)
        out = _Output(path, real, what)
        key = os.path.normcase(real)
        other = self._claimed.get(key) or batch.get(key)
        if other is not None:
            raise _UsageError(f"the {what} '{path}' and the {other.what} '{other.path}' would be the same "
                              "file; choose other names (--output, --basename, --directory, --csv)")
        limit = _name_max(_nearest_existing(os.path.dirname(real)))
        size = len(os.fsencode(os.path.basename(real)))
        if size > limit:
            raise _UsageError(f"cannot write the {what} '{path}': its file name is {size} bytes long, more "
                              f"than the {limit} the file system allows")
        try:
            st = os.stat(real)
        except (FileNotFoundError, NotADirectoryError):  # the parent check below says why
            st = None
        except OSError as exc:
            raise _UsageError(f"cannot write the {what} '{path}': {exc.strerror or exc}") from None
        if st is not None:
            source = self._inputs.get((st.st_dev, st.st_ino))
            if source is not None:
                raise _UsageError(f"the {what} '{path}' would overwrite the input image '{source}'; choose "
                                  "another output name or directory")
            if stat.S_ISDIR(st.st_mode):
                raise _UsageError(f"cannot write the {what} '{path}': it is a directory; give a file name")
            if not stat.S_ISREG(st.st_mode):
                raise _UsageError(f"cannot write the {what} '{path}': it exists and is not a regular file")
            if not os.access(real, os.W_OK):
                raise _UsageError(f"cannot write the {what} '{path}': permission denied")
        parent = os.path.dirname(real)
        if parent != self._new_directory:
            shown = os.path.dirname(path) or "."
            if not os.path.isdir(parent):
                existing = _nearest_existing(parent)
                problem = (f"the directory '{shown}' does not exist" if os.path.isdir(existing) else
                           f"'{existing}' is not a directory")
                raise _UsageError(f"cannot write the {what} '{path}': {problem}")
            if not os.access(parent, os.W_OK | os.X_OK):
                raise _UsageError(f"cannot write the {what} '{path}': permission denied in '{shown}'")
        return out


@contextlib.contextmanager
def _interrupts_deferred():
    """Holds back Ctrl-C (and SIGTERM) while the block runs and delivers it afterwards, so that the
    renames that publish a run's outputs are not cut in half. Only the main thread can do that;
    elsewhere the block runs as it is."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received = []
    handlers = {sig: signal.signal(sig, lambda s, frame: received.append(s))
                for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
        if received:
            raise KeyboardInterrupt


class _Staging:
    """The outputs of a run, written to temporary files beside their destinations and renamed into
    place together by :meth:`commit`; :meth:`discard` removes the temporary files and the
    directories the run created. A file is never visible half-written, and a run that fails or is
    interrupted before its commit leaves nothing behind. (No fsync: this protects against failed and
    interrupted runs, not against a power cut.)"""

    def __init__(self):
        self._files: List[Tuple[str, _Output]] = []   # (temporary path, destination)
        self._made_directories: List[str] = []
        self.committed = False

    def make_directory(self, directory: str) -> None:
        missing = []
        d = os.path.abspath(directory)
        while not os.path.isdir(d):
            missing.append(d)
            d = os.path.dirname(d)
        try:
            for d in reversed(missing):
                os.mkdir(d)
                self._made_directories.append(d)
        except OSError as exc:
            raise _UsageError(f"cannot create the output directory '{directory}': {exc.strerror or exc}") from None

    def _temporary(self, directory: str) -> str:
        # A short name of its own (not derived from the destination's, which may be as long as the
        # file system allows), hidden, and created exclusively so that nothing else is overwritten.
        while True:
            path = os.path.join(directory, f".flip-loss-{secrets.token_hex(6)}.tmp")
            try:
                os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
                return path
            except FileExistsError:
                continue

    def write(self, out: _Output, write: Callable[[str], None]) -> None:
        """Writes ``out`` through ``write(temporary path)``; it appears at :meth:`commit`."""
        try:
            temporary = self._temporary(os.path.dirname(out.real))
            self._files.append((temporary, out))
            write(temporary)
        except OSError as exc:
            raise _UsageError(f"cannot write the {out.what} '{out.path}': {exc.strerror or exc}") from None

    def commit(self) -> None:
        with _interrupts_deferred():
            while self._files:
                temporary, out = self._files[0]
                try:
                    if os.path.exists(out.real):  # an overwritten file keeps its permissions
                        shutil.copymode(out.real, temporary)
                    os.replace(temporary, out.real)
                except OSError as exc:
                    raise _UsageError(f"cannot write the {out.what} '{out.path}': {exc.strerror or exc}") from None
                self._files.pop(0)
            self._made_directories = []  # they hold the outputs now
            self.committed = True

    def discard(self) -> None:
        for temporary, _ in self._files:
            with contextlib.suppress(OSError):
                os.remove(temporary)
        self._files = []
        for d in reversed(self._made_directories):
            with contextlib.suppress(OSError):  # not empty: something else wrote there meanwhile
                os.rmdir(d)
        self._made_directories = []


def _write_text_file(text: str) -> Callable[[str], None]:
    def write(path: str) -> None:
        with open(path, "w", encoding="utf-8", newline="") as f:
            f.write(text)
    return write


def _write_appended_csv(destination: str, rows: Sequence[Sequence[str]]) -> Callable[[str], None]:
    """Writes the CSV file ``destination`` as it is plus ``rows`` (with the header first when it is
    new or empty): the append happens by replacing the file, so it never holds half a row."""
    def write(path: str) -> None:
        old = b""
        if os.path.exists(destination):
            with open(destination, "rb") as f:
                old = f.read()
        if old and not old.endswith(b"\n"):
            old += b"\n"
        with open(path, "wb") as f:
            f.write(old + _csv_text(rows, header=not old).encode("utf-8"))
    return write


def _write_png(image) -> Callable[[str], None]:
    from .imageio import save_png

    return lambda path: save_png(path, image)


# ----------------------------------------------------------------------------------------------
# Histograms
# ----------------------------------------------------------------------------------------------

def _import_matplotlib():
    try:
        import matplotlib  # noqa: F401
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as exc:
        raise _UsageError(f"--histogram needs matplotlib, which could not be imported ({exc}); "
                          "install it with 'pip install matplotlib'") from None
    return Figure, FigureCanvasAgg


def _draw_histogram(path: str, series, log: bool, y_max: Optional[float], include_values: bool) -> None:
    """Draws the weighted histogram(s) of ``series`` = [(label, error map, pooled values), ...]
    (one, or two overlapped) into the PNG file ``path``."""
    import numpy as np

    from .pooling import weighted_histogram

    Figure, FigureCanvasAgg = _import_matplotlib()
    fig = Figure(figsize=(25 / 2.54, 15 / 2.54), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    width = 1.0 / HISTOGRAM_BINS
    if len(series) == 1:
        styles = [dict(fill="lightblue", edge="blue", mean="red")]
    else:
        styles = [dict(fill=(118 / 255, 185 / 255, 0.0), edge="green", mean=(107 / 255, 168 / 255, 0.0)),
                  dict(fill="lightblue", edge="blue", mean=(113 / 255, 171 / 255, 189 / 255))]
    top = 0.0
    positive_min = math.inf
    for (label, error, pooled), style in zip(series, styles):
        edges, counts = weighted_histogram(error, HISTOGRAM_BINS)
        centres = 0.5 * (edges[:-1] + edges[1:])
        keep = counts > 0 if log else np.ones_like(counts, dtype=bool)
        ax.bar(centres[keep], counts[keep], width=width, color=style["fill"], edgecolor=style["edge"],
               alpha=0.6 if len(series) > 1 else 1.0,
               label=f"{label} (mean {pooled.mean:.4f})" if len(series) > 1 else None)
        if counts.size and counts.max() > 0:
            top = max(top, float(counts.max()))
            positive_min = min(positive_min, float(counts[counts > 0].min()))
        if include_values:
            ax.axvline(pooled.mean, color=style["mean"], linewidth=1.5)
            if len(series) == 1:
                ax.axvline(pooled.weighted_median, color="gray", linewidth=1.5)
                for q in (pooled.weighted_quartile_1, pooled.weighted_quartile_3):
                    ax.axvline(q, color="purple", linewidth=1.5)
                for v in (pooled.min, pooled.max):
                    ax.axvline(v, color="black", linestyle=":", linewidth=1.5)
    if include_values and len(series) == 1:
        pooled = series[0][2]
        lines = [(f"Mean: {pooled.mean:.4f}", "red"),
                 (f"Weighted median: {pooled.weighted_median:.4f}", "gray"),
                 (f"1st weighted quartile: {pooled.weighted_quartile_1:.4f}", "purple"),
                 (f"3rd weighted quartile: {pooled.weighted_quartile_3:.4f}", "purple"),
                 (f"Min: {pooled.min:.4f}", "black"), (f"Max: {pooled.max:.4f}", "black")]
        for i, (text, colour) in enumerate(lines):
            ax.text(0.99, 0.97 - 0.06 * i, text, ha="right", va="top", transform=ax.transAxes,
                    color=colour)
    if len(series) > 1:
        ax.legend(loc="upper right")
    ax.set_xlim(0.0, 1.0)
    if log:
        ax.set_yscale("log")
        lo = positive_min * 0.5 if math.isfinite(positive_min) else 1e-3
        hi = y_max if y_max is not None else (top * 2.0 if top > 0 else 1.0)
        ax.set_ylim(min(lo, hi * 0.1), hi)
    else:
        ax.set_ylim(0.0, y_max if y_max is not None else (top * 1.05 if top > 0 else 1.0))
    ax.set_title("Weighted FLIP histogram" + (f": {series[0][0]}" if len(series) == 1 else ""))
    ax.set_xlabel("FLIP error")
    ax.set_ylabel("Weighted FLIP sum per megapixel" + (" (log scale)" if log else ""))
    fig.tight_layout()
    fig.savefig(path, format="png")


# ----------------------------------------------------------------------------------------------
# The run
# ----------------------------------------------------------------------------------------------

def _parse_gate(args) -> Optional[Tuple[str, float]]:
    if args.fail_above is None:
        return ("mean", 0.05) if args.exit_on_test else None
    quantity, text = args.fail_above
    q = quantity.lower()
    if q not in GATE_QUANTITIES:
        raise _UsageError(f"--fail-above: QUANTITY must be one of {', '.join(GATE_QUANTITIES)}, "
                          f"got '{quantity}'")
    try:
        threshold = float(text)
    except ValueError:
        threshold = math.nan
    if not (0.0 <= threshold <= 1.0):
        raise _UsageError(f"--fail-above: THRESHOLD must be a number in [0, 1], got '{text}'")
    return q, threshold


def _gate_value(pooled, quantity: str) -> float:
    return {"mean": pooled.mean, "weighted-median": pooled.weighted_median, "max": pooled.max}[quantity]


def _check_options(args) -> None:
    folder = args.reference_dir is not None or args.test_dir is not None
    if folder:
        if args.reference_dir is None or args.test_dir is None:
            raise _UsageError("folder mode needs both --reference-dir and --test-dir")
        for flag, value in (("--reference/-r", args.reference), ("--test/-t", args.test),
                            ("--example", args.example or None), ("--output/-o", args.output),
                            ("--basename/-b", args.basename)):
            if value is not None:
                raise _UsageError(f"{flag} cannot be combined with --reference-dir/--test-dir")
    if args.example and (args.reference is not None or args.test is not None):
        raise _UsageError("--example cannot be combined with --reference/--test")
    if not args.histogram:
        for flag, value in (("--log", args.log), ("--y-max", args.y_max is not None),
                            ("--exclude-pooled-values", args.exclude_pooled_values)):
            if value:
                raise _UsageError(f"{flag} only applies to --histogram")
    if args.output is not None:
        if os.path.splitext(args.output)[1].lower() != ".png":
            raise _UsageError(f"--output must name a .png file, got '{args.output}'")
        if args.no_error_map:
            raise _UsageError("--output and --no-error-map contradict each other")
    if args.basename is not None:
        b = args.basename
        if not b or b in (".", "..") or "/" in b or os.sep in b or (os.altsep and os.altsep in b):
            raise _UsageError(f"--basename must be a plain file name without a directory (use "
                              f"--directory for that), got '{b}'")
    if (args.start_exposure is not None and args.stop_exposure is not None
            and args.start_exposure > args.stop_exposure):
        raise _UsageError(f"--start-exposure ({args.start_exposure:g}) must not be above --stop-exposure "
                          f"({args.stop_exposure:g})")


class _Console:
    """Where a run reports: results on stdout; warnings (once each, from verbosity 1) and errors as
    one line each on stderr; in folder mode a progress bar on stderr that the lines do not break."""

    def __init__(self, verbosity: int):
        self.verbosity = verbosity
        self._bar = None
        self._warned = set()

    def start_progress(self, total: int) -> None:
        try:
            from tqdm import tqdm
        except ImportError:  # pragma: no cover - tqdm is a runtime dependency
            return
        self._bar = tqdm(total=total, file=sys.stderr, desc=_PROG, unit="pair", leave=False, dynamic_ncols=True)

    def _print(self, lines: Sequence[str], stream) -> None:
        if self._bar is not None:
            self._bar.clear()
        sys.stdout.flush()
        for line in lines:
            print(line, file=stream)
        stream.flush()
        if self._bar is not None:
            self._bar.refresh()

    def lines(self, lines: Sequence[str]) -> None:
        if lines:
            self._print(lines, sys.stdout)

    def warning(self, message: str) -> None:
        if self.verbosity >= 1 and message not in self._warned:
            self._warned.add(message)
            self._print([f"{_PROG}: warning: {message}"], sys.stderr)

    def error(self, message: str) -> None:
        self._print([f"{_PROG}: error: {message}"], sys.stderr)

    def gate_failure(self, message: str) -> None:
        self._print([f"{_PROG}: gate failed: {message}"], sys.stderr)

    def advance(self) -> None:
        if self._bar is not None:
            self._bar.update(1)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None


class _Prepared(NamedTuple):
    """A pair whose inputs were read and whose outputs were checked and claimed."""
    reference: str
    test: str
    test_image: "object"         # the decoded test image, or None to read it again when evaluated
    names: _Names
    outputs: Dict[str, _Output]  # "map", "exposure_map", "text", "histogram": the ones written


class _Run:
    """One evaluation run: the pairs, the settings they share, and the order of the work. Every
    input is read and every output checked before the first output is written (in folder mode a
    pair that fails is reported and skipped instead); outputs go through a :class:`_Staging` and
    appear together at the end."""

    def __init__(self, args, console: _Console, staging: _Staging):
        _check_options(args)
        self.args, self.console, self.staging = args, console, staging
        self.gate = _parse_gate(args)
        self.folder_mode = args.reference_dir is not None
        self.pairs = _pairs_of(args, console)
        self.hdr = _uses_hdr(self.pairs)
        if not self.hdr:
            flags = _hdr_option_flags(args)
            if flags:
                raise _UsageError(f"{', '.join(flags)}: HDR-FLIP option(s) given for LDR images; they apply "
                                  "only to OpenEXR (.exr) inputs")
        self.tone_mapper = args.tone_mapper or "aces"
        self.ppd = _ppd_of(args)
        self.directory = args.directory if args.directory is not None else "."
        self.write_maps = not args.no_error_map
        self.write_exposure_maps = self.hdr and not args.no_exposure_map
        self.csv_path = args.csv
        if self.folder_mode and self.csv_path is None:
            self.csv_path = os.path.join(self.directory, "summary.csv")
        self.overlapped = args.histogram and not self.folder_mode and len(self.pairs) == 2
        self.failures: List[Tuple[str, str]] = []
        self._sizes: Dict[str, Tuple[int, int]] = {}
        self.guard: Optional[_OutputGuard] = None
        self.evaluator: Optional[_Evaluator] = None
        self.csv_output: Optional[_Output] = None
        self.overlapped_output: Optional[_Output] = None

    # --- before anything is written ------------------------------------------------------------

    def _directory_needed(self) -> bool:
        a = self.args
        return a.directory is not None and (self.write_maps or self.write_exposure_maps or a.textfile
                                            or a.histogram or (self.folder_mode and a.csv is None))

    def check_run_outputs(self) -> None:
        """The output directory and the CSV file, which do not depend on a pair."""
        new_directory = None
        if self._directory_needed():
            _check_directory(self.directory)
            if not os.path.isdir(self.directory):
                new_directory = self.directory
        self.guard = _OutputGuard([p for pair in self.pairs for p in pair], new_directory)
        if self.csv_path is not None:
            self.csv_output = self.guard.claim((self.csv_path, "CSV file"))[0]

    def prepare(self, reference: str, test: str, keep_test: bool) -> _Prepared:
        """Reads the pair's images (the reference's exposures computed) and checks and claims its
        outputs; raises _UsageError for anything wrong with the pair."""
        _check_sizes(reference, test, self._sizes)
        _, exposures = self.evaluator.reference(reference)
        test_image = self.evaluator.load(test)
        names = _output_names(self.args, reference, test, self.ppd, self.directory,
                              _dynamic_range(self.tone_mapper, exposures))
        wanted = (("map", names.map, "error map", self.write_maps),
                  ("exposure_map", names.exposure_map, "exposure map", self.write_exposure_maps),
                  ("text", names.text, "pooled values file", self.args.textfile),
                  ("histogram", names.histogram, "histogram", self.args.histogram and not self.overlapped))
        kinds = [kind for kind, _, _, on in wanted if on]
        claimed = self.guard.claim(*[(path, what) for _, path, what, on in wanted if on])
        outputs = dict(zip(kinds, claimed))
        return _Prepared(reference, test, test_image if keep_test else None, names, outputs)

    def prepared_pairs(self):
        """The pairs ready for evaluation. One reference: all are prepared first, and the first
        problem ends the run. Folder mode: one after the other; a pair with a problem is reported
        (one error line) and skipped."""
        if not self.folder_mode:
            for reference, test in self.pairs:  # the headers first: a wrong size is found fast
                _check_sizes(reference, test, self._sizes)
            prepared = [self.prepare(reference, test, keep_test=len(self.pairs) == 1)
                        for reference, test in self.pairs]
            if self.overlapped:  # one histogram of both test images
                reference, tests = self.pairs[0][0], [test for _, test in self.pairs]
                exposures = self.evaluator.reference(reference)[1]
                self.overlapped_output = self.guard.claim((_overlapped_histogram_name(
                    self.args, reference, tests, self.ppd, self.directory,
                    _dynamic_range(self.tone_mapper, exposures)), "histogram"))[0]
            self.staging_ready()
            self.print_header()
            yield from prepared
            return
        self.staging_ready()
        self.print_header()
        if self.console.verbosity >= 1 and not self.args.no_progress:
            self.console.start_progress(len(self.pairs))
        for reference, test in self.pairs:
            try:
                prepared = self.prepare(reference, test, keep_test=True)
            except _UsageError as exc:
                self.failures.append((reference, test))
                self.console.error(f"skipped test image <{test}>: {exc}")
                self.console.advance()
                continue
            yield prepared

    def staging_ready(self) -> None:
        if self._directory_needed():
            self.staging.make_directory(self.directory)

    def print_header(self) -> None:
        if self.console.verbosity < 2:
            return
        lines = [f"Invoking {'HDR' if self.hdr else 'LDR'}-FLIP", f"     Pixels per degree: {_round_half_up(self.ppd)}"]
        if self.hdr:
            lines.append(f"     Assumed tone mapper: {_TONE_MAPPER_NAMES[self.tone_mapper]}")
            if not self.folder_mode:  # one reference: its exposures, as the tool prints them
                lines += _exposure_lines(self.evaluator.reference(self.pairs[0][0])[1])
        self.console.lines(lines)

    # --- evaluating and writing -------------------------------------------------------------------

    def stage(self, p: _Prepared, result: _Result) -> None:
        """Writes the pair's map, exposure map, text file and histogram (to temporary files)."""
        from .colormaps import MAGMA, VIRIDIS, apply_colormap, to_grey_uint8
        import numpy as np

        a = self.args
        if "map" in p.outputs:
            if a.no_magma:
                image = np.repeat(to_grey_uint8(result.error)[..., None], 3, axis=2)
            else:
                image = apply_colormap(result.error, MAGMA)
            self.staging.write(p.outputs["map"], _write_png(image))
        if "exposure_map" in p.outputs:
            self.staging.write(p.outputs["exposure_map"], _write_png(apply_colormap(result.exposure, VIRIDIS)))
        if "text" in p.outputs:
            self.staging.write(p.outputs["text"], _write_text_file("".join(
                line + "\n" for line in _pooled_lines(result.pooled))))
        if "histogram" in p.outputs:
            series = [(_stem(result.test), result.error, result.pooled)]
            self.staging.write(p.outputs["histogram"], lambda path: _draw_histogram(
                path, series, a.log, a.y_max, not a.exclude_pooled_values))

    def result_lines(self, p: _Prepared, result: _Result, first: bool) -> List[str]:
        verbosity = self.console.verbosity
        lines = []
        if verbosity >= 1:
            if verbosity >= 2 or not first:
                lines.append("")
            lines.append(f"FLIP between reference image <{result.reference}> and test image <{result.test}>")
            lines.append(f"     Mean: {result.pooled.mean:.6f}")
        if verbosity >= 2:
            lines += ["     " + line for line in _pooled_lines(result.pooled)[1:]]
            if self.hdr and self.folder_mode:  # exposures per reference
                lines += _exposure_lines(result.exposures)
            lines.append(f"     Evaluation time: {result.seconds:.4f} seconds")
            if "map" in p.outputs:
                lines.append(f"     FLIP error map location: {p.names.map}")
            if "exposure_map" in p.outputs:
                lines.append(f"     FLIP exposure map location: {p.names.exposure_map}")
        return lines

    def execute(self, t_start: float) -> int:
        a = self.args
        if a.histogram:
            _import_matplotlib()
        self.evaluator = _Evaluator(a, self.hdr, self.tone_mapper, self.ppd, _resolve_device(a.device))
        self.check_run_outputs()
        rows, kept, gate_failures = [], [], []
        for p in self.prepared_pairs():
            result = self.evaluator.evaluate(p.reference, p.test, p.test_image)
            for message in result.warnings:
                self.console.warning(message)
            self.stage(p, result)
            rows.append(_csv_row(result))
            if self.overlapped:
                kept.append(result)
            if self.gate is not None and _gate_value(result.pooled, self.gate[0]) > self.gate[1]:
                gate_failures.append((result.test, _gate_value(result.pooled, self.gate[0])))
            self.console.lines(self.result_lines(p, result, first=len(rows) == 1))
            self.console.advance()
        self.console.close()

        if self.overlapped:
            series = [(_stem(r.test), r.error, r.pooled) for r in kept]
            self.staging.write(self.overlapped_output, lambda path: _draw_histogram(
                path, series, a.log, a.y_max, not a.exclude_pooled_values))
        if self.csv_output is not None and (rows or not os.path.exists(self.csv_output.real)):
            self.staging.write(self.csv_output, _write_appended_csv(self.csv_output.real, rows))
        self.staging.commit()

        if self.console.verbosity >= 1:
            lines = [""]
            if self.folder_mode:
                done = (f"{len(rows)} of {len(self.pairs)} pair(s), {len(self.failures)} failed (see the errors "
                        "above)" if self.failures else f"{len(rows)} pair(s)")
                lines.append(f"Evaluated {done}; summary CSV: {self.csv_path}")
            lines.append(f"Total time: {time.perf_counter() - t_start:.4f} seconds")
            self.console.lines(lines)
        if gate_failures:
            quantity, threshold = self.gate
            for test, value in gate_failures:
                self.console.gate_failure(f"the {quantity} FLIP error of test image <{test}> is {value:.6f}, "
                                          f"above the threshold {threshold:.6f}")
        if self.failures:
            return EXIT_PAIRS_FAILED
        return EXIT_GATE if gate_failures else EXIT_OK


def _run(args, t_start: float) -> int:
    console = _Console(args.verbosity)
    staging = _Staging()
    try:
        return _Run(args, console, staging).execute(t_start)
    except KeyboardInterrupt:
        raise KeyboardInterrupt("the outputs had been written" if staging.committed
                                else "no output file was written") from None
    finally:
        console.close()
        staging.discard()


def _run_psychophysics(argv: Sequence[str]) -> int:
    """``flip-loss psychophysics ...``: hands ``argv`` to ``flip_loss.psychophysics.cli.main``."""
    import importlib

    try:
        module = importlib.import_module("flip_loss.psychophysics.cli")
    except ModuleNotFoundError as exc:
        if exc.name in ("flip_loss.psychophysics", "flip_loss.psychophysics.cli"):
            sys.stdout.flush()
            print(f"{_PROG}: error: the psychophysics suite is not available in this installation "
                  "(module flip_loss.psychophysics.cli not found); install a flip-loss version "
                  "that includes it", file=sys.stderr)
            return EXIT_USAGE
        raise
    code = module.main(list(argv))
    return 0 if code is None else int(code)


@contextlib.contextmanager
def _sigterm_interrupts():
    """SIGTERM (a CI timeout, ``kill``) ends the run as Ctrl-C does: through KeyboardInterrupt, so
    that the temporary files are removed. Only the main thread can install the handler."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Runs the command-line evaluator with ``argv`` (default: ``sys.argv[1:]``) and returns the
    exit code (``EXIT_CODES``): 0 success, 1 a ``--fail-above`` gate failed, 2 an error the user
    can act on (one line on stderr), 3 an internal error (traceback on stderr), 4 pairs skipped in
    folder mode, 130 interrupted. ``argv[0] == "psychophysics"`` runs the psychophysics suite
    instead."""
    t_start = time.perf_counter()
    argv = sys.argv[1:] if argv is None else list(argv)
    with _sigterm_interrupts():
        try:
            if argv and argv[0] == "psychophysics":
                return _run_psychophysics(argv[1:])
            parser = build_parser()
            args = parser.parse_args(argv)
            return _run(args, t_start)
        except _UsageError as exc:
            sys.stdout.flush()
            print(f"{_PROG}: error: {exc}", file=sys.stderr)
            return EXIT_USAGE
        except SystemExit as exc:  # --help
            code = exc.code
            return code if isinstance(code, int) else (0 if code is None else EXIT_USAGE)
        except KeyboardInterrupt as exc:
            sys.stdout.flush()
            print(f"{_PROG}: interrupted" + (f"; {exc}" if str(exc) else ""), file=sys.stderr)
            return EXIT_INTERRUPTED
        except Exception:  # noqa: BLE001 - anything else is a bug: say so, with the traceback
            sys.stdout.flush()
            traceback.print_exc(file=sys.stderr)
            print(f"{_PROG}: internal error (exit code 3); please report it with the traceback above",
                  file=sys.stderr)
            return EXIT_INTERNAL


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
