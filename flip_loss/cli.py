"""``flip-loss`` / ``python -m flip_loss``: the command-line FLIP evaluator.

Evaluates FLIP between a reference image and one or more test images (or between two folders of
images paired by name) and prints the pooled values in the layout of NVIDIA's ``flip`` tool: LDR-FLIP
(``flip_loss.functional.ldr_flip``) for LDR images, HDR-FLIP (``flip_loss.hdr_flip``) when the
reference is an OpenEXR file, as the tool decides. Writes the error maps as magma (or grey) PNGs,
for HDR-FLIP also the exposure maps (viridis), and on request the pooled values as text files, a CSV
summary and weighted histograms (PNG, drawn with matplotlib).
``--fail-above`` turns it into a regression gate. ``flip-loss psychophysics ...`` runs the
psychophysics suite (``flip_loss.psychophysics.cli``). See ``flip-loss --help``.

Exit codes: 0 success, 1 a ``--fail-above`` gate failed, 2 an error the user can act on (one
``flip-loss: error:`` line on stderr), 3 an internal error (a traceback on stderr).
"""
import argparse
import csv
import math
import os
import sys
import time
import traceback
import warnings
from typing import Dict, List, NamedTuple, Optional, Sequence, Tuple

__all__ = ["main", "example_paths", "build_parser", "EXIT_OK", "EXIT_GATE", "EXIT_USAGE", "EXIT_INTERNAL",
           "FOLDER_EXTENSIONS", "CSV_HEADER"]

EXIT_OK = 0
EXIT_GATE = 1
EXIT_USAGE = 2
EXIT_INTERNAL = 3

_PROG = "flip-loss"
_DATA_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")

# Image files the folder mode pairs up (case-insensitive). Radiance .hdr and .pfm files are reported
# and skipped (not supported; OpenEXR is the HDR format).
FOLDER_EXTENSIONS = (".png", ".jpg", ".jpeg", ".bmp", ".tga", ".exr")
CSV_HEADER = ("Reference", "Test", "Mean", "Weighted median", "1st weighted quartile",
              "3rd weighted quartile", "Min", "Max", "Evaluation time")
GATE_QUANTITIES = ("mean", "weighted-median", "max")
HISTOGRAM_BINS = 100
TONE_MAPPERS = ("aces", "hable", "reinhard")
_TONE_MAPPER_NAMES = {"aces": "ACES", "hable": "Hable", "reinhard": "Reinhard"}  # as the tool prints them


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


def _finite_float(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number (of stops), got '{text}'") from None
    if not math.isfinite(v):
        raise argparse.ArgumentTypeError(f"expected a finite number (of stops), got '{text}'")
    return v


def _exposure_count(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer of at least 2, got '{text}'") from None
    if v < 2:
        raise argparse.ArgumentTypeError(f"expected an integer of at least 2, got '{text}' (HDR-FLIP "
                                         "needs the start and the stop exposure)")
    return v


_EPILOG = """\
The reference and the test images must have the same size. LDR images (PNG, JPEG, BMP, TGA) are
read as 8- or 16-bit sRGB-encoded values and evaluated with LDR-FLIP. An OpenEXR (.exr) reference
selects HDR-FLIP, as in NVIDIA's tool: the test images must then be .exr files too (linear
values; NaN or infinite values are an error); mixing LDR and HDR images is an error. Radiance
.hdr and .pfm files are not supported (convert them to OpenEXR).
The default pixels per degree, 67 (67.0206...), is a 0.7 m wide 4K display seen from 0.7 m.

HDR-FLIP is the per-pixel maximum of LDR-FLIP over exposures from --start-exposure to
--stop-exposure (--num-exposures of them, evenly spaced in stops), each image exposed, tone
mapped (--tone-mapper) and clamped. Exposures not given are computed from the reference: start
= log2(x*/max luminance), stop = log2(x*/median luminance), count = max(2, ceil(stop - start)),
where x* is the value the tone mapper maps to 0.85. They are printed (4 decimals) and go into
the output names. Give negative exposures as '-cstart -3.5' or '--start-exposure=-1e-3'.

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

folder mode: --reference-dir R --test-dir T evaluates every image in T against the image of
the same name (stem; any of .png .jpg .jpeg .bmp .tga .exr) in R, warns about unmatched files,
writes the maps to --directory and a summary CSV (--csv, default <directory>/summary.csv).
For .exr pairs the exposures are computed per reference.

regression gate: --fail-above mean|weighted-median|max THRESHOLD exits with code 1 when any
test image's value is above THRESHOLD (in [0, 1]); every image is still evaluated.

flip-loss psychophysics ... runs the psychophysics suite (see 'flip-loss psychophysics --help').

exit codes:
  0  success
  1  the --fail-above gate failed for at least one test image
  2  an error you can act on: a bad option or option value, a missing, unreadable or
     unsupported image file, mixed LDR and HDR images, HDR options for LDR images, images of
     different sizes, an unavailable device, an unwritable output (one line on stderr,
     starting with 'flip-loss: error:')
  3  an unexpected internal error (a Python traceback is printed)
"""


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
                      type=_positive_float, default=None,
                      help="observer's pixels per degree of visual angle (default: 67.0206..., a "
                           "0.7 m wide 4K display seen from 0.7 m)")
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
    hdr.add_argument("-tm", "--tone-mapper", dest="tone_mapper", type=str.lower, choices=TONE_MAPPERS,
                     default=None, metavar="{aces,hable,reinhard}",
                     help="tone mapper applied at every exposure (any case; default: aces)")
    hdr.add_argument("-cstart", "--start-exposure", dest="start_exposure", metavar="C",
                     type=_finite_float, default=None,
                     help="first exposure, in stops (default: computed from the reference)")
    hdr.add_argument("-cstop", "--stop-exposure", dest="stop_exposure", metavar="C",
                     type=_finite_float, default=None,
                     help="last exposure, in stops (default: computed from the reference)")
    hdr.add_argument("-n", "--num-exposures", dest="num_exposures", metavar="N",
                     type=_exposure_count, default=None,
                     help="number of exposures, at least 2 (default: max(2, ceil(stop - start)))")
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


def _image_size(path: str) -> Tuple[int, int]:
    """(width, height) from the image header; raises FileNotFoundError / ValueError."""
    from PIL import Image, UnidentifiedImageError

    from .imageio import _unsupported_hdr_message, check_file, exr_size, is_exr_path, is_hdr_path

    check_file(path)
    if is_exr_path(path):
        return exr_size(path)
    if is_hdr_path(path):
        raise ValueError(_unsupported_hdr_message(path))
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


def _warn(message: str) -> None:
    sys.stdout.flush()
    print(f"{_PROG}: warning: {message}", file=sys.stderr)
    sys.stderr.flush()


def _list_names(names: Sequence[str], limit: int = 5) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


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


def _pair_folders(reference_dir: str, test_dir: str, verbose: bool) -> List[Tuple[str, str]]:
    refs, ref_hdr, ref_other = _scan_folder(reference_dir, "reference folder")
    tests, test_hdr, test_other = _scan_folder(test_dir, "test folder")
    stems = sorted(set(refs) & set(tests))
    if verbose:
        only_ref = sorted(os.path.basename(refs[s]) for s in set(refs) - set(tests))
        only_test = sorted(os.path.basename(tests[s]) for s in set(tests) - set(refs))
        if only_ref:
            _warn(f"{len(only_ref)} reference image(s) without a test image of the same name in "
                  f"'{test_dir}', skipped: {_list_names(only_ref)}")
        if only_test:
            _warn(f"{len(only_test)} test image(s) without a reference image of the same name in "
                  f"'{reference_dir}', skipped: {_list_names(only_test)}")
        hdr = ref_hdr + test_hdr
        if hdr:
            _warn(f"{len(hdr)} Radiance HDR / PFM file(s) skipped (not supported; convert them to OpenEXR "
                  f".exr): {_list_names(hdr)}")
        other = ref_other + test_other
        if other:
            _warn(f"{len(other)} file(s) without a supported image extension "
                  f"({' '.join(FOLDER_EXTENSIONS)}) ignored: {_list_names(other)}")
    if not stems:
        raise _UsageError(f"no image in the test folder '{test_dir}' has a reference of the same name "
                          f"in '{reference_dir}' (pairs are matched by file name without extension; "
                          f"supported extensions: {' '.join(FOLDER_EXTENSIONS)})")
    return [(refs[s], tests[s]) for s in stems]


# ----------------------------------------------------------------------------------------------
# Outputs
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


def _pooled_lines(pooled) -> List[str]:
    return [f"Mean: {pooled.mean:.6f}",
            f"Weighted median: {pooled.weighted_median:.6f}",
            f"1st weighted quartile: {pooled.weighted_quartile_1:.6f}",
            f"3rd weighted quartile: {pooled.weighted_quartile_3:.6f}",
            f"Min: {pooled.min:.6f}",
            f"Max: {pooled.max:.6f}"]


def _write_text(path: str, text: str, what: str) -> None:
    try:
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
    except OSError as exc:
        raise _UsageError(f"cannot write the {what} '{path}': {exc.strerror or exc}") from None


def _append_csv(path: str, reference: str, test: str, pooled, seconds: float) -> None:
    try:
        new = not os.path.exists(path) or os.path.getsize(path) == 0
        with open(path, "a", newline="", encoding="utf-8") as f:
            w = csv.writer(f, quoting=csv.QUOTE_ALL, lineterminator="\n")
            if new:
                w.writerow(CSV_HEADER)
            w.writerow([reference, test] + [f"{v:.6f}" for v in pooled] + [f"{seconds:.4f}"])
    except OSError as exc:
        raise _UsageError(f"cannot write the CSV file '{path}': {exc.strerror or exc}") from None


def _import_matplotlib():
    try:
        import matplotlib  # noqa: F401
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as exc:
        raise _UsageError(f"--histogram needs matplotlib, which could not be imported ({exc}); "
                          "install it with 'pip install matplotlib'") from None
    return Figure, FigureCanvasAgg


def _save_histogram(path: str, series, log: bool, y_max: Optional[float], include_values: bool) -> None:
    """Draws the weighted histogram(s) of ``series`` = [(label, error map, pooled values), ...]
    (one, or two overlapped) into the PNG ``path``."""
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
    try:
        fig.savefig(path, format="png")
    except OSError as exc:
        raise _UsageError(f"cannot write the histogram '{path}': {exc.strerror or exc}") from None


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
    if args.csv is not None:
        if os.path.isdir(args.csv):
            raise _UsageError(f"--csv '{args.csv}' is a directory; give a file name")
        parent = os.path.dirname(args.csv) or "."
        if not os.path.isdir(parent):
            raise _UsageError(f"cannot write the CSV file '{args.csv}': the directory '{parent}' "
                              "does not exist")


def _run(args, t_start: float) -> int:
    import numpy as np
    import torch

    from .colormaps import MAGMA, VIRIDIS, apply_colormap, to_grey_uint8
    from .constants import DEFAULT_PPD, pixels_per_degree
    from .functional import ldr_flip
    from .hdr import exposures_for, hdr_flip
    from .imageio import load_image, save_png
    from .pooling import pool

    _check_options(args)
    gate = _parse_gate(args)
    folder_mode = args.reference_dir is not None
    verbosity = args.verbosity

    # --- what to compare -------------------------------------------------------------------
    if folder_mode:
        pairs = _pair_folders(args.reference_dir, args.test_dir, verbose=verbosity >= 1)
    else:
        if args.example:
            reference, test = example_paths()
            tests = [test]
        else:
            missing = [n for n, v in (("--reference/-r", args.reference), ("--test/-t", args.test))
                       if v is None]
            if missing:
                raise _UsageError(f"the following arguments are required: {', '.join(missing)} "
                                  "(or use --example, or --reference-dir/--test-dir)")
            reference, tests = args.reference, list(args.test)
        if args.output is not None and len(tests) != 1:
            raise _UsageError(f"--output can only be used with one test image, got {len(tests)}")
        if args.basename is not None and len(tests) != 1:
            raise _UsageError(f"--basename can only be used with one test image, got {len(tests)}")
        pairs = [(reference, t) for t in tests]

    hdr = _uses_hdr(pairs)
    if not hdr:
        flags = _hdr_option_flags(args)
        if flags:
            raise _UsageError(f"{', '.join(flags)}: HDR-FLIP option(s) given for LDR images; they apply "
                              "only to OpenEXR (.exr) inputs")
    tone_mapper = args.tone_mapper or "aces"

    if args.viewing_conditions is not None:
        dist_m, width_m, width_px = args.viewing_conditions
        ppd = pixels_per_degree(dist_m, width_m, width_px)
    elif args.ppd is not None:
        ppd = args.ppd
    else:
        ppd = DEFAULT_PPD

    # --- check every input before computing anything ---------------------------------------
    try:
        sizes: Dict[str, Tuple[int, int]] = {}
        for ref, test in pairs:
            if ref not in sizes:
                sizes[ref] = _image_size(ref)
            size = _image_size(test)
            if size != sizes[ref]:
                raise _UsageError(f"test image '{test}' is {size[0]}x{size[1]} pixels but the "
                                  f"reference '{ref}' is {sizes[ref][0]}x{sizes[ref][1]}; they "
                                  "must have the same size")
    except (FileNotFoundError, ValueError) as exc:
        raise _UsageError(str(exc)) from None

    if args.histogram:
        _import_matplotlib()
    device = _resolve_device(args.device)

    def load(path):
        try:
            return load_image(path)
        except (FileNotFoundError, ValueError) as exc:
            raise _UsageError(str(exc)) from None

    def exposures_of(reference: str, ref_t) -> _Exposures:
        """The exposures HDR-FLIP uses for this reference: the given ones, the rest computed from it
        (once per reference) as flip_loss.hdr.exposures_for does."""
        try:
            _, counts, start, stop = exposures_for(ref_t, tone_mapper, args.start_exposure,
                                                   args.stop_exposure, args.num_exposures)
        except ValueError:
            auto = exposures_for(ref_t, tone_mapper)
            given, computed = ((f"--start-exposure ({args.start_exposure:g})", f"the stop exposure "
                                f"({float(auto[3][0]):.4f})") if args.start_exposure is not None else
                               (f"--stop-exposure ({args.stop_exposure:g})", f"the start exposure "
                                f"({float(auto[2][0]):.4f})"))
            raise _UsageError(f"{given} and {computed} computed from the reference '{reference}' are in "
                              "the wrong order (start must not be above stop); give both exposures") from None
        return _Exposures(float(start[0]), float(stop[0]), int(counts[0]))

    def exposure_lines(e: _Exposures) -> List[str]:
        return [f"     Start exposure: {e.start:.4f}", f"     Stop exposure: {e.stop:.4f}",
                f"     Number of exposures: {e.count}"]

    loaded_ref: Tuple[Optional[str], Optional[torch.Tensor], Optional[_Exposures]] = (None, None, None)

    def reference_data(reference: str):
        nonlocal loaded_ref
        if loaded_ref[0] != reference:
            ref_t = load(reference).to(device)
            loaded_ref = (reference, ref_t, exposures_of(reference, ref_t) if hdr else None)
        return loaded_ref[1], loaded_ref[2]

    if hdr and not folder_mode:
        reference_data(pairs[0][0])  # one reference: its exposures are checked before anything is written

    directory = args.directory if args.directory is not None else "."
    write_maps = not args.no_error_map
    write_exposure_maps = hdr and not args.no_exposure_map
    csv_path = args.csv
    if folder_mode and csv_path is None:
        csv_path = os.path.join(directory, "summary.csv")
    creates_files = (write_maps or write_exposure_maps or args.textfile or args.histogram
                     or (folder_mode and args.csv is None))
    if creates_files and directory != ".":
        try:
            os.makedirs(directory, exist_ok=True)
        except OSError as exc:
            raise _UsageError(f"cannot create the output directory '{directory}': "
                              f"{exc.strerror or exc}") from None

    out = sys.stdout
    bar = None
    if folder_mode and verbosity >= 1 and not args.no_progress:
        try:
            from tqdm import tqdm
        except ImportError:  # pragma: no cover - tqdm is a runtime dependency
            tqdm = None
        if tqdm is not None:
            bar = tqdm(total=len(pairs), file=sys.stderr, desc=_PROG, unit="pair", leave=False,
                       dynamic_ncols=True)

    def emit(lines: List[str]) -> None:
        if bar is not None:
            bar.clear()
        for line in lines:
            print(line, file=out)
        out.flush()
        if bar is not None:
            bar.refresh()

    if verbosity >= 2:
        lines = [f"Invoking {'HDR' if hdr else 'LDR'}-FLIP", f"     Pixels per degree: {_round_half_up(ppd)}"]
        if hdr:
            lines.append(f"     Assumed tone mapper: {_TONE_MAPPER_NAMES[tone_mapper]}")
            if not folder_mode:  # one reference: its exposures, as the tool prints them
                lines += exposure_lines(reference_data(pairs[0][0])[1])
        emit(lines)

    overlapped = args.histogram and not folder_mode and len(pairs) == 2
    kept_for_histogram = []
    gate_failures = []
    seen_warnings = set()
    overlapped_range = None
    try:
        for k, (reference, test) in enumerate(pairs):
            ref_t, exposures = reference_data(reference)
            test_t = load(test).to(device)
            dynamic_range = _dynamic_range(tone_mapper, exposures)
            exposure_np = None
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                t0 = time.perf_counter()
                with torch.no_grad():  # eps=0: the metric itself, no gradient regulariser
                    if hdr:
                        error_map, exposure_map = hdr_flip(
                            test_t, ref_t, ppd, tone_mapper=tone_mapper, start_exposure=exposures.start,
                            stop_exposure=exposures.stop, num_exposures=exposures.count,
                            return_exposure_map=True, eps=0.0)
                        exposure_np = exposure_map[0].to("cpu", torch.float32).numpy()
                    else:
                        error_map = ldr_flip(test_t, ref_t, ppd, eps=0.0)
                error_np = error_map[0].to("cpu", torch.float32).numpy()
                t_eval = time.perf_counter() - t0
            for w in caught:
                msg = str(w.message)
                if verbosity >= 1 and msg not in seen_warnings:
                    seen_warnings.add(msg)
                    if bar is not None:
                        bar.clear()
                    _warn(msg)
            pooled = pool(error_np)
            names = _output_names(args, reference, test, ppd, directory, dynamic_range)

            if write_maps:
                if args.no_magma:
                    image = np.repeat(to_grey_uint8(error_np)[..., None], 3, axis=2)
                else:
                    image = apply_colormap(error_np, MAGMA)
                try:
                    save_png(names.map, image)
                except OSError as exc:
                    raise _UsageError(f"cannot write the error map '{names.map}': "
                                      f"{exc.strerror or exc}") from None
            if write_exposure_maps:
                try:
                    save_png(names.exposure_map, apply_colormap(exposure_np, VIRIDIS))
                except OSError as exc:
                    raise _UsageError(f"cannot write the exposure map '{names.exposure_map}': "
                                      f"{exc.strerror or exc}") from None
            if args.textfile:
                _write_text(names.text, "".join(line + "\n" for line in _pooled_lines(pooled)),
                            "pooled values file")
            if csv_path is not None:
                _append_csv(csv_path, reference, test, pooled, t_eval)
            if args.histogram:
                if overlapped:
                    kept_for_histogram.append((_stem(test), error_np, pooled))
                    overlapped_range = dynamic_range
                else:
                    _save_histogram(names.histogram, [(_stem(test), error_np, pooled)], args.log,
                                    args.y_max, not args.exclude_pooled_values)
            if gate is not None and _gate_value(pooled, gate[0]) > gate[1]:
                gate_failures.append((test, _gate_value(pooled, gate[0])))

            lines = []
            if verbosity >= 1:
                if verbosity >= 2 or k > 0:
                    lines.append("")
                lines.append(f"FLIP between reference image <{reference}> and test image <{test}>")
                lines.append(f"     Mean: {pooled.mean:.6f}")
            if verbosity >= 2:
                lines += ["     " + line for line in _pooled_lines(pooled)[1:]]
                if hdr and folder_mode:  # exposures per reference
                    lines += exposure_lines(exposures)
                lines.append(f"     Evaluation time: {t_eval:.4f} seconds")
                if write_maps:
                    lines.append(f"     FLIP error map location: {names.map}")
                if write_exposure_maps:
                    lines.append(f"     FLIP exposure map location: {names.exposure_map}")
            if lines:
                emit(lines)
            if bar is not None:
                bar.update(1)
    finally:
        if bar is not None:
            bar.close()

    if overlapped:
        ref_stem = _stem(pairs[0][0])
        log = "log_" if args.log else ""
        name = (f"{log}weighted_histogram.flip.{ref_stem}.{kept_for_histogram[0][0]}."
                f"{kept_for_histogram[1][0]}.{_round_half_up(ppd)}ppd.{overlapped_range}.png")
        _save_histogram(os.path.join(directory, name), kept_for_histogram, args.log, args.y_max,
                        not args.exclude_pooled_values)

    if verbosity >= 1:
        lines = [""]
        if folder_mode:
            lines.append(f"Evaluated {len(pairs)} pair(s); summary CSV: {csv_path}")
        lines.append(f"Total time: {time.perf_counter() - t_start:.4f} seconds")
        emit(lines)

    if gate_failures:
        quantity, threshold = gate
        sys.stdout.flush()
        for test, value in gate_failures:
            print(f"{_PROG}: gate failed: the {quantity} FLIP error of test image <{test}> is "
                  f"{value:.6f}, above the threshold {threshold:.6f}", file=sys.stderr)
        sys.stderr.flush()
        return EXIT_GATE
    return EXIT_OK


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


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Runs the command-line evaluator with ``argv`` (default: ``sys.argv[1:]``) and returns the
    exit code: 0 success, 1 a ``--fail-above`` gate failed, 2 an error the user can act on (one line
    on stderr), 3 an internal error (traceback on stderr). ``argv[0] == "psychophysics"`` runs the
    psychophysics suite instead."""
    t_start = time.perf_counter()
    argv = sys.argv[1:] if argv is None else list(argv)
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
    except KeyboardInterrupt:
        sys.stdout.flush()
        print(f"{_PROG}: interrupted", file=sys.stderr)
        return 130
    except Exception:  # noqa: BLE001 - anything else is a bug: say so, with the traceback
        sys.stdout.flush()
        traceback.print_exc(file=sys.stderr)
        print(f"{_PROG}: internal error (exit code 3); please report it with the traceback above",
              file=sys.stderr)
        return EXIT_INTERNAL


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
