"""Argument parsing of ``flip-loss``: NVIDIA's flags at the top level (the plain ``flip-loss -r
ref -t test`` form), the ``psychophysics`` command, the checks of option values (the API's limits,
``flip_loss.constants``) and of their combinations.

Every option is checked when the command line is parsed (:func:`parse_arguments`), before any
image is read or any rank does anything: a value by its argparse ``type``, the combinations by
:func:`check_arguments`; each problem is a :class:`UsageError` naming the option (exit code 2).
What runs afterwards may meet files, images and devices, but no bad option value: an exception
there is an internal error. Parsing imports no torch, so that ``--help``, ``--version`` and a
usage error answer at once (``_flip_loss_launcher``)."""

import argparse
import math
import os
import struct
from typing import List, Optional, Sequence, Tuple

from .._version import __version__
from ..constants import (
    ALPHA_MODES,
    BACKGROUNDS,
    CHECKERBOARD_SRGB,
    CHECKERBOARD_TILE,
    DEFAULT_PPD,
    MAX_EXPOSURE_STOPS,
    MAX_EXPOSURES,
    MAX_IMAGE_PIXELS,
    MAX_PPD,
    MIN_EXPOSURE_STOPS,
    MIN_EXPOSURES,
    MIN_PPD,
    STATISTICS,
    TONE_MAPPERS,
    display_ppd,
)
from .errors import PROG, UsageError, UsageErrorParser, exit_code_lines
from .pairs import FOLDER_EXTENSIONS

GATE_QUANTITIES = tuple(s.key for s in STATISTICS if s.gate)
# Under torchrun, the longest a rank waits for the others (seconds): one pair's evaluation on the
# slowest rank plus rank 0's writing, with a wide margin for huge HDR pairs on CPUs.
DEFAULT_DIST_TIMEOUT = 1800.0
# The largest --y-max: a bucket of the weighted histogram (a FLIP sum per megapixel) never exceeds
# 2^20, and matplotlib cannot draw a logarithmic axis up to 1e300 (an internal error at the end of a
# run, once the maps were computed).
MAX_Y_MAX = 1e9


class _EvaluatorParser(UsageErrorParser):
    def error(self, message):
        # A stray word is taken for a command: say how images are given (flip-loss ref.png test.png).
        if message.startswith("argument COMMAND: invalid choice"):
            message += "; images are given with -r/--reference and -t/--test"
        super().error(message)


class _PassThroughParser(UsageErrorParser):
    """The parser of a command whose arguments another program parses: it takes every argument
    as it is, options and ``--help`` included, into ``argv``."""

    def parse_known_args(self, args=None, namespace=None):
        namespace = argparse.Namespace() if namespace is None else namespace
        namespace.argv = list(args or ())
        return namespace, []


# The option values are held to the API's limits (flip_loss.constants, the ones flip_loss.options
# checks), so that the command line and the API accept the same values; the checks are written
# here, on the numbers alone, so that parsing imports neither torch nor the options module (a usage
# error or --help answers at once). The messages speak of the command line's text.


def path_text(text: str) -> str:
    """A file or folder name: not empty (an empty name would silently mean the current directory)
    and without a NUL character (which no file name holds); whether the file can be read or written
    is checked where it is used."""
    if not text:
        raise argparse.ArgumentTypeError("expected a file or folder name, got an empty string")
    if "\0" in text:
        raise argparse.ArgumentTypeError(f"expected a file or folder name, got {text!r} (a NUL character)")
    return text


def _number(text: str) -> float:
    """The number ``text`` gives, or NaN for text that is not one (refused by every check below)."""
    try:
        return float(text)
    except ValueError:
        return math.nan


def _ppd_in_range(ppd: float) -> bool:
    return math.isfinite(ppd) and MIN_PPD <= ppd <= MAX_PPD


def _ppd_value(text: str) -> float:
    v = _number(text)
    if not _ppd_in_range(v):
        raise argparse.ArgumentTypeError(f"expected a number from {MIN_PPD:g} to {MAX_PPD:g}, got '{text}'")
    return v


def _positive_float(text: str) -> float:
    v = _number(text)
    if not math.isfinite(v) or v <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive number, got '{text}'")
    return v


def _y_max(text: str) -> float:
    v = _number(text)
    if not (math.isfinite(v) and 0 < v <= MAX_Y_MAX):
        raise argparse.ArgumentTypeError(f"expected a positive number up to {MAX_Y_MAX:g}, got '{text}'")
    return v


def _timeout_seconds(text: str) -> float:
    v = _positive_float(text)
    if v > 1e7:  # ~115 days: beyond that the value is a mistake (and overflows a timedelta)
        raise argparse.ArgumentTypeError(f"expected a number of seconds up to 1e7, got '{text}'")
    return v


def _exposure_value(text: str) -> float:
    # The API's range of a given exposure (options.check_exposure_value): 2^c a nonzero, finite
    # float32, the precision in which the exposures are computed.
    try:
        v, kind = float(text), "a finite number"
    except ValueError:
        v, kind = math.nan, "a number"
    if not (math.isfinite(v) and MIN_EXPOSURE_STOPS <= v <= MAX_EXPOSURE_STOPS):
        raise argparse.ArgumentTypeError(
            f"expected {kind} (of stops) from {MIN_EXPOSURE_STOPS:g} to {MAX_EXPOSURE_STOPS:g} "
            f"(2^c must be a nonzero, finite float32), got '{text}'"
        )
    return v


def _exposure_count(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        v = 0
    if not MIN_EXPOSURES <= v <= MAX_EXPOSURES:
        raise argparse.ArgumentTypeError(
            f"expected an integer of at least {MIN_EXPOSURES} (the start and the stop "
            f"exposure) and at most {MAX_EXPOSURES}, got '{text}'"
        )
    return v


def _float32(x: float) -> float:
    """``x`` rounded to float32, the precision in which HDR-FLIP computes its exposures."""
    return struct.unpack("f", struct.pack("f", x))[0]


def automatic_exposure_count(start: float, stop: float) -> int:
    """The count HDR-FLIP takes for given start and stop exposures without a given count:
    max(2, ceil(stop - start)), the difference computed in float32 (flip_loss.hdr.automatic_counts)."""
    return max(MIN_EXPOSURES, math.ceil(_float32(_float32(stop) - _float32(start))))


_EPILOG = f"""\
The reference and the test images must have the same size. LDR images (PNG, JPEG, BMP, TGA) are
read as 8- or 16-bit sRGB-encoded values and evaluated with LDR-FLIP. An OpenEXR (.exr) reference
selects HDR-FLIP, as in NVIDIA's tool: its test images must then be .exr files too (linear
values; NaN or infinite values are an error). Radiance .hdr and .pfm files are not supported
(convert them to OpenEXR). Images of more than {MAX_IMAGE_PIXELS} pixels (e.g. 16384x8192) are
refused. The default pixels per degree, 67 (67.0206...), is a 0.7 m wide 4K display seen from
0.7 m; {MIN_PPD:g} to {MAX_PPD:g} are accepted.

An image with an alpha channel (RGBA or grey+alpha PNG, a PNG with a transparent colour, an EXR
with an A channel) is composited over --background (black unless given) before FLIP, in its own
encoding (sRGB values for LDR files, linear values for EXR), by its format's convention: straight
alpha for PNG and the other LDR formats, premultiplied for OpenEXR (a note says so); --alpha
straight or premultiplied overrides the convention, --alpha ignore drops the channel. An image
without alpha beside one with alpha is opaque.

HDR-FLIP is the per-pixel maximum of LDR-FLIP over exposures from --start-exposure to
--stop-exposure (--num-exposures of them, evenly spaced in stops), each image exposed, tone
mapped (--tone-mapper) and clamped. Exposures not given are computed from the reference: start
= log2(x*/max luminance), stop = log2(x*/median luminance), count = max(2, ceil(stop - start)),
where x* is the value the tone mapper maps to 0.85; at most {MAX_EXPOSURES} exposures. They are
printed (4 decimals) and go into the output names. Give negative exposures as '-cstart -3.5' or
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
  --report DIR writes DIR/index.html and its pictures in DIR/pairs/ (a directory holding an
  index.html or pairs/ of another origin is refused; an earlier report is replaced).
Every input is read and every output checked before anything is written; an output that is an
input (also through a link) or that the run would write twice is an error. Outputs are written
to temporary files and renamed into place at the end: an interrupted or failed run writes nothing.

folder mode: --reference-dir R --test-dir T evaluates every image in T against the image of
the same name (stem; any of {" ".join(FOLDER_EXTENSIONS)}) in R, warns about unmatched files,
writes the maps to --directory and a summary CSV (--csv, default <directory>/summary.csv) with
a row for every pair and every unmatched image. Each pair is evaluated with its own kind, so a
folder of PNG and EXR images is one run: LDR-FLIP for LDR pairs, HDR-FLIP for .exr pairs (the
exposures computed per reference; the HDR-FLIP options apply to the .exr pairs only). A pair that
cannot be evaluated (an unreadable image, different sizes, a name two images of one folder share,
an .exr image paired with an LDR one) is reported and skipped; the others are evaluated and
written, and the exit code is 4. The last lines count the pairs found, evaluated, not evaluated
and over the gate, as the report does.

torchrun: torchrun --nproc_per_node=K -m flip_loss --reference-dir R --test-dir T ... shares the
pairs out among K processes (on one or several machines; each on cuda:LOCAL_RANK when it has
GPUs), balanced by pixel count; rank 0 prints, shows the progress of all and writes every output,
the same files as one process. Other modes run on rank 0 alone.

regression gate: --fail-above {"|".join(GATE_QUANTITIES)} THRESHOLD exits with code 1 when any
test image's value (LDR-FLIP or HDR-FLIP) is above THRESHOLD (in [0, 1]); every image is still
evaluated. Give it once per quantity to gate on several: every one applies. The last line on
stdout is the verdict: 'gate: PASS (...)' or 'gate: FAIL (...)'. In a gated folder run an image
without a partner of the same name fails the run (exit code 4) unless --allow-unmatched.

flip-loss psychophysics ... runs the psychophysics suite (see 'flip-loss psychophysics --help').

exit codes:
""" + exit_code_lines()


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``flip-loss``: the evaluator's options (NVIDIA's flags) at the top
    level and the ``psychophysics`` command, whose arguments go to the suite unparsed. Its errors
    raise :class:`UsageError` (one line on stderr, exit code 2)."""
    p = _EvaluatorParser(
        prog=PROG,
        description="Compute FLIP between a reference image and one or more test images (or two\n"
        "folders of images paired by name): LDR-FLIP for LDR images, HDR-FLIP for\n"
        "OpenEXR (.exr) images. Print the pooled FLIP values (mean, weighted median and\n"
        "quartiles, min, max) and save the FLIP error maps (and HDR exposure maps).",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    inputs = p.add_argument_group("inputs")
    inputs.add_argument("-r", "--reference", metavar="REFERENCE", type=path_text, help="reference image file")
    inputs.add_argument(
        "-t",
        "--test",
        metavar="TEST",
        nargs="+",
        type=path_text,
        help="one or more test image files, each the size of the reference",
    )
    inputs.add_argument(
        "--reference-dir",
        metavar="DIR",
        type=path_text,
        default=None,
        help="folder mode: folder of reference images (with --test-dir)",
    )
    inputs.add_argument(
        "--test-dir",
        metavar="DIR",
        type=path_text,
        default=None,
        help="folder mode: folder of test images, paired with the references by file name without extension",
    )
    inputs.add_argument(
        "--example", action="store_true", help="evaluate the bundled example pair (instead of --reference/--test)"
    )
    inputs.add_argument(
        "--alpha",
        choices=ALPHA_MODES + ("ignore",),
        default=None,
        help="what an image's alpha channel means: straight (colour not multiplied by "
        "alpha) or premultiplied alpha, composited over --background before FLIP, or "
        "ignore (the channel is dropped); default: the file format's convention, "
        "straight for PNG and the other LDR formats, premultiplied for OpenEXR",
    )
    inputs.add_argument(
        "--background",
        choices=BACKGROUNDS,
        default=None,
        help="what an image with alpha is composited over (default: black); white is the "
        f"top of the range (linear 1.0 for EXR); checkerboard: {CHECKERBOARD_TILE}-pixel "
        "tiles of the sRGB greys "
        + " and ".join(f"{round(255 * v)}" for v in CHECKERBOARD_SRGB)
        + " (of 255), the top-left one dark",
    )

    view = p.add_argument_group("viewing conditions").add_mutually_exclusive_group()
    view.add_argument(
        "--ppd",
        "--pixels-per-degree",
        "-ppd",
        dest="ppd",
        metavar="P",
        type=_ppd_value,
        default=None,
        help="observer's pixels per degree of visual angle, at most "
        f"{MAX_PPD:g} (default: 67.0206..., a 0.7 m wide 4K display seen from 0.7 m)",
    )
    view.add_argument(
        "-vc",
        "--viewing-conditions",
        dest="viewing_conditions",
        nargs=3,
        metavar=("DIST_M", "WIDTH_M", "WIDTH_PX"),
        type=_positive_float,
        default=None,
        help="viewing distance (m), display width (m) and display width (pixels), "
        "from which the pixels per degree are computed",
    )

    out = p.add_argument_group("outputs")
    out.add_argument(
        "-d",
        "--directory",
        metavar="DIR",
        type=path_text,
        default=None,
        help="directory for the error maps, text files and histograms (created if "
        "needed; default: the current directory)",
    )
    names = out.add_mutually_exclusive_group()
    names.add_argument(
        "-o",
        "--output",
        metavar="MAP.png",
        type=path_text,
        default=None,
        help="file name of the error map (one test image only; relative names are "
        "placed in --directory when it is given)",
    )
    names.add_argument(
        "-b",
        "--basename",
        metavar="NAME",
        default=None,
        help="base name of every output file: NAME.png, NAME.txt, NAME.weighted_histogram.png (one test image only)",
    )
    out.add_argument(
        "-nm", "--no-magma", action="store_true", help="save grey error maps instead of magma-coloured ones"
    )
    out.add_argument("-nerm", "--no-error-map", action="store_true", help="do not save the error maps")
    out.add_argument(
        "-txt",
        "--textfile",
        action="store_true",
        help="write the pooled values of each test image to a .txt file next to its error map",
    )
    out.add_argument(
        "-c",
        "--csv",
        metavar="FILE",
        type=path_text,
        default=None,
        help=f"append one row per test image ({', '.join(('Reference', 'Test', *(s.label for s in STATISTICS)))}, "
        "Status, Gate; with --timing also "
        "Evaluation time) to FILE; the header is written when FILE is new, and a FILE "
        "with another header is refused",
    )
    out.add_argument(
        "--report",
        metavar="DIR",
        type=path_text,
        default=None,
        help="write an HTML report into DIR (created if needed): index.html, a page that opens "
        "from disk with no network, and its pictures in DIR/pairs/; a summary, the pairs "
        "sortable by each pooled value (worst first), per pair reference, test and error "
        "map with a flip control, the weighted histogram and, for HDR-FLIP, the exposure map",
    )
    out.add_argument(
        "-v",
        "--verbosity",
        type=int,
        choices=(0, 1, 2),
        default=2,
        help="0: print nothing; 1: the mean FLIP error; 2 (default): all pooled values, "
        "the pixels per degree, the evaluation time and, for HDR-FLIP, the tone "
        "mapper and exposures",
    )
    out.add_argument(
        "--no-progress",
        action="store_true",
        help="folder mode: no progress output on stderr (a bar on a terminal, a plain line every 30 seconds otherwise)",
    )
    out.add_argument(
        "--timing",
        action="store_true",
        help="add each pair's evaluation time to the CSV file (an 'Evaluation time' column) "
        "and the report; without it, two runs on the same inputs write the same files",
    )

    hdr = p.add_argument_group("HDR-FLIP (OpenEXR inputs only; in folder mode its .exr pairs)")
    hdr.add_argument(
        "-tm",
        "--tone-mapper",
        dest="tone_mapper",
        type=str.lower,
        choices=TONE_MAPPERS,
        default=None,
        metavar="{" + ",".join(TONE_MAPPERS) + "}",
        help="tone mapper applied at every exposure (any case; default: aces)",
    )
    hdr.add_argument(
        "-cstart",
        "--start-exposure",
        dest="start_exposure",
        metavar="C",
        type=_exposure_value,
        default=None,
        help="first exposure, in stops (default: computed from the reference)",
    )
    hdr.add_argument(
        "-cstop",
        "--stop-exposure",
        dest="stop_exposure",
        metavar="C",
        type=_exposure_value,
        default=None,
        help="last exposure, in stops (default: computed from the reference)",
    )
    hdr.add_argument(
        "-n",
        "--num-exposures",
        dest="num_exposures",
        metavar="N",
        type=_exposure_count,
        default=None,
        help=f"number of exposures, 2 to {MAX_EXPOSURES} (default: max(2, ceil(stop - start)))",
    )
    hdr.add_argument("-nexm", "--no-exposure-map", action="store_true", help="do not save the exposure maps")

    hist = p.add_argument_group("histogram")
    hist.add_argument(
        "-hist",
        "--histogram",
        action="store_true",
        help="draw the weighted FLIP histogram (100 buckets) as a PNG; with two test "
        "images, one overlapped histogram of both",
    )
    hist.add_argument("-lg", "--log", action="store_true", help="logarithmic y axis for the histogram")
    hist.add_argument(
        "--y-max",
        dest="y_max",
        metavar="Y",
        type=_y_max,
        default=None,
        help=f"upper limit of the histogram's y axis (at most {MAX_Y_MAX:g})",
    )
    hist.add_argument(
        "-epv", "--exclude-pooled-values", action="store_true", help="do not draw the pooled values into the histogram"
    )

    gate = p.add_argument_group("regression gate")
    gate.add_argument(
        "--fail-above",
        "--exit-test-parameters",
        "-etp",
        dest="fail_above",
        nargs=2,
        action="append",
        metavar=("QUANTITY", "THRESHOLD"),
        default=None,
        help=f"exit with code 1 if, for any test image, QUANTITY ({', '.join(GATE_QUANTITIES)}) "
        "is above THRESHOLD (a number in [0, 1]); give it once per quantity "
        "to gate on several (every one applies)",
    )
    gate.add_argument(
        "-et",
        "--exit-on-test",
        action="store_true",
        help="NVIDIA's spelling: the gate with 'mean 0.05' unless --fail-above is given",
    )
    gate.add_argument(
        "--allow-unmatched",
        action="store_true",
        help="folder mode with a gate: a reference without a test image of the same name, "
        "or a test image without a reference, is listed in the CSV file but does not "
        "fail the run (without this option it does: exit code 4)",
    )

    p.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    p.add_argument(
        "--device",
        choices=("auto", "cpu", "cuda"),
        default="auto",
        help="where to compute: auto (default: CUDA when available), cpu or cuda",
    )
    p.add_argument(
        "--dist-timeout",
        dest="dist_timeout",
        metavar="SECONDS",
        type=_timeout_seconds,
        default=DEFAULT_DIST_TIMEOUT,
        help="folder mode under torchrun: how long a rank waits for the others at each exchange "
        f"(default {DEFAULT_DIST_TIMEOUT:g}); it must exceed the slowest pair's evaluation",
    )

    # The commands are programs of their own: they get their arguments unparsed.
    commands = p.add_subparsers(
        dest="command",
        metavar="COMMAND",
        title="commands",
        parser_class=_PassThroughParser,
        description="without a command, flip-loss evaluates images (the options above)",
    )
    commands.add_parser(
        "psychophysics",
        add_help=False,
        help="run the psychophysics suite: 'flip-loss psychophysics --help' for its options",
    )
    return p


def parse_arguments(argv: Sequence[str]) -> Tuple[argparse.ArgumentParser, argparse.Namespace]:
    """The parser and the parsed, checked ``argv``: for the evaluator every option value and
    combination is checked here (:func:`check_arguments`), for a command only that no evaluator
    option comes before it (its own options are its own program's). Raises :class:`UsageError`."""
    parser = build_parser()
    args = parser.parse_args(list(argv))
    if command_of(parser, args) is None:
        check_arguments(args)
    return parser, args


def check_arguments(args) -> None:
    """The evaluator's checks of option combinations and of the values argparse cannot check alone
    (the gate, the pixels per degree of --viewing-conditions); sets ``args.gate``
    (:func:`parse_gate`)."""
    check_options(args)
    args.gate = parse_gate(args)
    ppd_of(args)


def command_of(parser: argparse.ArgumentParser, args: argparse.Namespace) -> Optional[str]:
    """The command of parsed ``args`` (None: evaluate images). A command takes no evaluator option
    (``flip-loss -v 1 psychophysics`` would silently drop ``-v 1`` otherwise)."""
    if args.command is None:
        return None
    given = [
        f"--{dest.replace('_', '-')}"
        for dest, value in vars(args).items()
        if dest not in ("command", "argv") and value != parser.get_default(dest)
    ]
    if given:
        raise UsageError(
            f"{', '.join(given)}: evaluator option(s) given before the command "
            f"'{args.command}'; its options go after it (see 'flip-loss {args.command} --help')"
        )
    return args.command


Gate = Tuple[Tuple[str, float], ...]


def parse_gate(args) -> Optional[Gate]:
    """The run's gate: one (quantity, threshold) per --fail-above, every one applied (a quantity
    given twice is refused), or None without a gate."""
    if not args.fail_above:
        return (("mean", 0.05),) if args.exit_on_test else None
    gate = []
    for quantity, text in args.fail_above:
        q = quantity.lower()
        if q not in GATE_QUANTITIES:
            raise UsageError(f"--fail-above: QUANTITY must be one of {', '.join(GATE_QUANTITIES)}, got '{quantity}'")
        try:
            threshold = float(text)
        except ValueError:
            threshold = math.nan
        if not (0.0 <= threshold <= 1.0):
            raise UsageError(f"--fail-above: THRESHOLD must be a number in [0, 1], got '{text}'")
        if any(q == other for other, _ in gate):
            raise UsageError(
                f"--fail-above {q} is given twice (thresholds {dict(gate)[q]:g} and {threshold:g}); "
                "give each quantity once"
            )
        gate.append((q, threshold))
    return tuple(gate)


def gate_failures(pooled, gate: Optional[Gate]) -> List[Tuple[str, float, float]]:
    """The gates ``pooled`` fails: (quantity, value, threshold) each."""
    return [(q, gate_value(pooled, q), t) for q, t in gate or () if gate_value(pooled, q) > t]


def gate_value(pooled, quantity: str) -> float:
    return {"mean": pooled.mean, "weighted-median": pooled.weighted_median, "max": pooled.max}[quantity]


def check_options(args) -> None:
    folder = args.reference_dir is not None or args.test_dir is not None
    if folder:
        if args.reference_dir is None or args.test_dir is None:
            raise UsageError("folder mode needs both --reference-dir and --test-dir")
        for flag, value in (
            ("--reference/-r", args.reference),
            ("--test/-t", args.test),
            ("--example", args.example or None),
            ("--output/-o", args.output),
            ("--basename/-b", args.basename),
        ):
            if value is not None:
                raise UsageError(f"{flag} cannot be combined with --reference-dir/--test-dir")
    elif args.allow_unmatched:
        raise UsageError("--allow-unmatched only applies to folder mode (--reference-dir/--test-dir)")
    if args.example and (args.reference is not None or args.test is not None):
        raise UsageError("--example cannot be combined with --reference/--test")
    if args.alpha == "ignore" and args.background is not None:
        raise UsageError(
            f"--background {args.background} and --alpha ignore contradict each other: a background "
            "only shows through an alpha channel that is composited"
        )
    if not args.histogram:
        for flag, value in (
            ("--log", args.log),
            ("--y-max", args.y_max is not None),
            ("--exclude-pooled-values", args.exclude_pooled_values),
        ):
            if value:
                raise UsageError(f"{flag} only applies to --histogram")
    if args.output is not None:
        if os.path.splitext(args.output)[1].lower() != ".png":
            raise UsageError(f"--output must name a .png file, got '{args.output}'")
        if args.no_error_map:
            raise UsageError("--output and --no-error-map contradict each other")
    if args.basename is not None:
        b = args.basename
        if not b or b in (".", "..") or "/" in b or os.sep in b or (os.altsep and os.altsep in b):
            raise UsageError(
                f"--basename must be a plain file name without a directory (use --directory for that), got '{b}'"
            )
    for flag, value in (("--output/-o", args.output), ("--basename/-b", args.basename)):
        if value is not None and args.test is not None and len(args.test) != 1:
            raise UsageError(f"{flag} can only be used with one test image, got {len(args.test)}")
    start, stop = args.start_exposure, args.stop_exposure
    if start is not None and stop is not None:
        if start > stop:
            raise UsageError(f"--start-exposure ({start:g}) must not be above --stop-exposure ({stop:g})")
        count = automatic_exposure_count(start, stop)
        if args.num_exposures is None and count > MAX_EXPOSURES:
            raise UsageError(
                f"--start-exposure {start:g} and --stop-exposure {stop:g} would need {count} exposures "
                f"(one per stop), more than {MAX_EXPOSURES}; give at most {MAX_EXPOSURES} with --num-exposures/-n"
            )


def ppd_of(args) -> float:
    """The pixels per degree of the run: --ppd, or from --viewing-conditions (checked against the
    same limit as --ppd: extreme conditions give 0 or infinitely many), or the default."""
    if args.viewing_conditions is not None:
        ppd = display_ppd(*args.viewing_conditions)
        if not _ppd_in_range(ppd):
            given = " ".join(f"{v:g}" for v in args.viewing_conditions)
            raise UsageError(
                f"--viewing-conditions {given} give {ppd:g} pixels per degree; it must be a "
                f"number from {MIN_PPD:g} to {MAX_PPD:g}"
            )
        return ppd
    return args.ppd if args.ppd is not None else DEFAULT_PPD


def hdr_option_flags(args) -> List[str]:
    return [
        flag
        for flag, given in (
            ("--tone-mapper/-tm", args.tone_mapper is not None),
            ("--start-exposure/-cstart", args.start_exposure is not None),
            ("--stop-exposure/-cstop", args.stop_exposure is not None),
            ("--num-exposures/-n", args.num_exposures is not None),
            ("--no-exposure-map/-nexm", args.no_exposure_map),
        )
        if given
    ]
