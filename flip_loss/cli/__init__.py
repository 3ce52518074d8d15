"""``flip-loss`` / ``python -m flip_loss``: the command-line FLIP evaluator.

Evaluates FLIP between a reference and one or more test images, or two folders paired by name,
and prints the pooled values in the layout of NVIDIA's ``flip`` tool: LDR-FLIP for LDR images,
HDR-FLIP when the reference is an OpenEXR file, as the tool decides. It writes the error maps
(magma or grey PNG), HDR-FLIP's exposure maps and, on request, text files, a CSV summary,
histograms and an HTML report; ``--fail-above`` makes it a regression gate.

The user's files come first: every input is decoded and every output checked before anything is
written, and every output is written beside its destination and published only once the whole run
has succeeded (``outputs.Staging``), so a failed or interrupted run leaves every file as it was.

:func:`main` parses the options and chooses between a run in this process (``run.run_single``)
and folder mode shared among the ranks of a torchrun launch (``shard.run_sharded``); which module
does what: docs/layout.md. ``main`` is a library function too: it changes no process-wide state
beyond what ``signals`` describes, and runs as a torchrun rank only when the launch variables are
its own (``flip_loss.distributed.launch_inherited``; ``FLIP_LOSS_TORCHRUN`` decides otherwise).
"""

import os
import sys
import time
import traceback
from typing import Optional, Sequence

from .arguments import build_parser, parse_arguments
from .console import flush_stdout_before_error, write_text
from .errors import (
    EXIT_CODES,
    EXIT_GATE,
    EXIT_INTERNAL,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_PAIRS_FAILED,
    EXIT_USAGE,
    PROG,
    UsageError,
    interrupted_line,
)
from .outputs import CSV_HEADER
from .pairs import FOLDER_EXTENSIONS, example_paths
from .signals import interrupts_handled

__all__ = [
    "main",
    "example_paths",
    "build_parser",
    "EXIT_OK",
    "EXIT_GATE",
    "EXIT_USAGE",
    "EXIT_INTERNAL",
    "EXIT_PAIRS_FAILED",
    "EXIT_INTERRUPTED",
    "EXIT_CODES",
    "FOLDER_EXTENSIONS",
    "CSV_HEADER",
]


def _run_psychophysics(argv: Sequence[str]) -> int:
    """``flip-loss psychophysics ...``: hands ``argv`` to ``flip_loss.psychophysics.cli.main``."""
    import importlib

    try:
        module = importlib.import_module("flip_loss.psychophysics.cli")
    except ModuleNotFoundError as exc:
        if exc.name in ("flip_loss.psychophysics", "flip_loss.psychophysics.cli"):
            raise UsageError(
                "the psychophysics suite is not available in this installation (module "
                "flip_loss.psychophysics.cli not found); install a flip-loss version that "
                "includes it"
            ) from None
        raise
    code = module.main(list(argv))
    return 0 if code is None else int(code)


def _secondary_rank() -> bool:
    """Whether this process is a rank other than 0 of a torchrun launch: rank 0 reports the errors
    every rank meets alike (a bad option, Ctrl-C), once. (Without torchrun's variables, no torch is
    imported to find out: a usage error answers at once.)"""
    if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
        return False
    from ..distributed import launched_world

    try:
        world = launched_world()
    except ValueError:  # reported as a usage error by every rank: each has its own view of it
        return False
    return world is not None and world.rank != 0


def _inherited_launch_note() -> Optional[str]:
    """The note of a run whose torchrun variables were inherited from the process that started it
    (it runs as one process), or None."""
    from ..distributed import LAUNCH_OVERRIDE, launch_inherited

    if not launch_inherited():
        return None
    return (
        f"the torchrun variables (RANK={os.environ.get('RANK')}, WORLD_SIZE={os.environ.get('WORLD_SIZE')}) "
        "were inherited from the parent process, which torchrun launched: this run is one process of its own "
        f"(set {LAUNCH_OVERRIDE}=worker on the command line if a wrapper stands between torchrun and it)"
    )


def _evaluate(args, t_start: float) -> int:
    """Runs the evaluation of parsed ``args`` in this process or as its rank of a torchrun launch;
    returns the exit code (under torchrun, this rank's; rank 0's is the run's). Only folder mode is
    shared out: with one reference rank 0 runs alone and the other ranks return at once."""
    from ..distributed import launched_world
    from .run import run_single
    from .shard import run_sharded

    try:
        note = _inherited_launch_note()
        world = launched_world() if note is None else None
    except ValueError as exc:
        raise UsageError(f"torchrun's environment: {exc}") from None
    if world is None:
        return run_single(args, t_start, note=note)
    if args.reference_dir is None and args.test_dir is None:
        if world.rank != 0:
            return EXIT_OK
        return run_single(
            args,
            t_start,
            note=f"one reference: rank 0 evaluates every pair and the other "
            f"{world.world_size - 1} rank(s) have nothing to do (torchrun shares "
            "out folder mode only)",
        )
    return run_sharded(args, t_start, world)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Runs the command line with ``argv`` (default: ``sys.argv[1:]``) and returns the exit code
    (``EXIT_CODES``): 0 success, 1 a ``--fail-above`` gate failed, 2 an error the user can act on
    (one line on stderr), 3 an internal error (traceback on stderr), 4 pairs skipped in folder
    mode, 130 interrupted. ``flip-loss psychophysics ...`` returns the suite's exit code."""
    t_start = time.perf_counter()
    argv = sys.argv[1:] if argv is None else list(argv)
    with interrupts_handled():
        try:
            # Every option is checked here, before anything runs (on every rank of a torchrun launch).
            _, args = parse_arguments(argv)
            if args.command == "psychophysics":
                return _run_psychophysics(args.argv)
            return _evaluate(args, t_start)
        except UsageError as exc:
            flush_stdout_before_error()
            if not _secondary_rank():
                write_text(sys.stderr, f"{PROG}: error: {exc}\n")
            return EXIT_USAGE
        except SystemExit as exc:  # --help
            code = exc.code
            return code if isinstance(code, int) else (0 if code is None else EXIT_USAGE)
        except KeyboardInterrupt as exc:
            flush_stdout_before_error()
            if not _secondary_rank():
                write_text(sys.stderr, interrupted_line(str(exc)))
            return EXIT_INTERRUPTED
        except Exception:  # noqa: BLE001 - anything else is a bug: say so, with the traceback
            flush_stdout_before_error()
            write_text(
                sys.stderr,
                traceback.format_exc()
                + f"{PROG}: internal error (exit code 3); please report it with the traceback above\n",
            )
            return EXIT_INTERNAL
