"""``flip-loss psychophysics`` / ``python -m flip_loss.psychophysics``: run the low-level-vision
suite and write a report.

``main(argv)`` returns the exit code: 0 success, 2 an error the user can act on (one line on
stderr starting with ``flip-loss psychophysics: error:``), 1 an internal error (traceback).
"""

import argparse
import os
import shlex
import sys
import time
from typing import Optional, Sequence

from ..cli.arguments import path_text as _path
from ..cli.errors import UsageError as _UsageError
from ..cli.errors import UsageErrorParser as _Parser

__all__ = ["main", "build_parser", "parse_options"]

_PROG = "flip-loss psychophysics"


def build_parser() -> argparse.ArgumentParser:
    from .metrics import METRIC_NAMES
    from .suite import PRESETS

    p = _Parser(
        prog=_PROG,
        description="Run the low-level-vision tests of Hammou et al. (arXiv:2503.16264) on FLIP and\n"
        "baseline metrics: contrast detection (CSF), contrast masking and contrast\n"
        "matching on calibrated synthetic stimuli. Writes DIR/report.md, one PNG per\n"
        "test and DIR/results.json.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="presets:\n"
        "  full    the protocol: ~2 000 evaluations per metric, most at 1920x1080 or a 1024x1024\n"
        "          crop (seconds on a GPU; about an hour for all five metrics on two CPU cores)\n"
        "  medium  the protocol's x and k grids and Gabor crop; noise on 512x512 frames, size\n"
        "          test on the 1024x1024 crop (~35 min on two CPU cores)\n"
        "  quick   crops, 7 x values x 5 k values (1-2 min on two CPU cores)\n"
        "  smoke   tiny, for tests\n"
        "On a loaded machine --threads 1 can be much faster than the default.\n"
        "exit codes: 0 success, 2 an error you can act on, 1 an internal error",
    )
    p.add_argument("--out", "-o", required=True, metavar="DIR", type=_path, help="output folder (created if missing)")
    p.add_argument(
        "--metrics",
        "-m",
        nargs="+",
        metavar="NAME",
        default=None,
        help=f"metrics to run (space- or comma-separated) from: {', '.join(METRIC_NAMES)} "
        "(default: all available; HDR-FLIP and SSIM are skipped with a note when "
        "their implementation is missing)",
    )
    p.add_argument("--quick", action="store_true", help="the quick preset (same as --preset quick)")
    p.add_argument("--preset", choices=sorted(PRESETS), default=None, help="settings preset (default: full)")
    p.add_argument(
        "--tests",
        nargs="+",
        metavar="PATTERN",
        default=None,
        help="run only the tests whose key matches one of these shell patterns (e.g. 'detection_*' matching_sf)",
    )
    p.add_argument(
        "--device",
        default="cpu",
        help="device the metrics run on (cpu, cuda, cuda:1, ...); stimuli are always generated on the CPU",
    )
    p.add_argument(
        "--threads",
        type=_positive_int,
        default=None,
        metavar="N",
        help="CPU threads for torch (default: torch's default, one per core)",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--no-plots", action="store_true", help="write the report without plots")
    return p


def _split(values):
    out = []
    for v in values or []:
        out += [s.strip() for s in v.split(",") if s.strip()]
    return out


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of at least 1, got '{text}'")
    return value


def _once_each(option: str, values, key=lambda v: v) -> None:
    seen = {}
    for v in values:
        if key(v) in seen:
            raise _UsageError(f"{option}: {v!r} is given twice (as {seen[key(v)]!r} first); give each once")
        seen[key(v)] = v


def parse_options(argv: Sequence[str]):
    """Parses and checks every option before anything runs (each problem a :class:`UsageError`
    naming its option, so that no user mistake reaches the suite, where an exception is an internal
    error): returns the parsed arguments, the preset's settings, the torch device, the metrics, the
    notes on metrics skipped and the tests."""
    import torch

    from . import metrics as metrics_mod
    from . import suite

    args = build_parser().parse_args(list(argv))
    if args.quick and args.preset not in (None, "quick"):
        raise _UsageError(f"--quick conflicts with --preset {args.preset}")
    settings = suite.PRESETS["quick" if args.quick else (args.preset or "full")]
    try:
        device = torch.device(args.device)
    except RuntimeError as e:
        raise _UsageError(f"bad --device {args.device!r}: {e}") from None
    if device.type not in ("cpu", "cuda"):
        raise _UsageError(f"--device must be cpu, cuda or cuda:N, got {args.device!r}")
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise _UsageError(f"--device {args.device}: CUDA is not available on this machine")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise _UsageError(
                f"--device {args.device}: this machine has {torch.cuda.device_count()} CUDA device(s), "
                f"cuda:0 to cuda:{torch.cuda.device_count() - 1}"
            )
    if args.metrics is not None:
        names = _split(args.metrics)
        if not names:
            raise _UsageError(f"--metrics: no metric name given; choose from {', '.join(metrics_mod.METRIC_NAMES)}")
        for name in names:
            if name.lower() not in metrics_mod.METRIC_NAMES:
                raise _UsageError(
                    f"unknown metric {name!r} in --metrics; choose from {', '.join(metrics_mod.METRIC_NAMES)}"
                )
        _once_each("--metrics", names, key=str.lower)
    else:
        names = list(metrics_mod.DEFAULT_METRICS)
    metrics, notes = metrics_mod.build_metrics(names)
    if not metrics:
        raise _UsageError("--metrics: no metric available: " + "; ".join(notes))
    if args.tests is not None:
        _once_each("--tests", args.tests)
    try:
        tests = suite.select_tests(args.tests)
    except ValueError as e:
        raise _UsageError(f"--tests: {e}") from None
    return args, settings, device, metrics, notes, tests


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    threads_before = None  # --threads changes torch's process-wide thread count for the run only
    try:
        args, settings, device, metrics, notes, tests = parse_options(argv)
        import torch

        from . import report, suite

        try:
            os.makedirs(args.out, exist_ok=True)
        except OSError as e:
            raise _UsageError(f"cannot create --out {args.out!r}: {e.strerror}") from None
        if not os.access(args.out, os.W_OK):
            raise _UsageError(f"--out {args.out!r} is not writable")
        if args.threads is not None:
            threads_before = torch.get_num_threads()
            torch.set_num_threads(args.threads)
        for note in notes:
            print(f"{_PROG}: {note}", file=sys.stderr)
        start = time.perf_counter()
        result = suite.run_suite(metrics, settings, tests, device=device, progress=not args.no_progress, notes=notes)
        command = "flip-loss psychophysics " + " ".join(shlex.quote(a) for a in argv)
        path = report.write_report(result, args.out, command=command, plots=not args.no_plots)
        print(report.score_table(result))
        print(f"\nreport: {path} ({time.perf_counter() - start:.0f} s)")
        return 0
    except _UsageError as e:
        print(f"{_PROG}: error: {e}", file=sys.stderr)
        return 2
    finally:
        if threads_before is not None:
            import torch

            torch.set_num_threads(threads_before)
