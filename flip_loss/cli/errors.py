"""The exit codes of ``flip-loss`` and the one error type the user can act on."""

import argparse
import textwrap

PROG = "flip-loss"

EXIT_OK = 0
EXIT_GATE = 1
EXIT_USAGE = 2
EXIT_INTERNAL = 3
EXIT_PAIRS_FAILED = 4
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as shells report a process ended by Ctrl-C

# The one table of exit codes: --help prints it, docs/cli.md ("Exit codes") repeats it and a test compares them.
EXIT_CODES = (
    (EXIT_OK, "success"),
    (EXIT_GATE, "the --fail-above gate failed for at least one test image"),
    (
        EXIT_USAGE,
        "an error you can act on: a bad option or option value, a missing, unreadable or "
        "unsupported image file, mixed LDR and HDR images, HDR options for LDR images, images "
        "of different sizes, an output that would overwrite an input or another output, an "
        "unwritable output, an unavailable device (one line on stderr, starting with "
        "'flip-loss: error:'); nothing was written",
    ),
    (EXIT_INTERNAL, "an unexpected internal error (a Python traceback is printed); nothing was written"),
    (
        EXIT_PAIRS_FAILED,
        "folder mode: at least one pair could not be evaluated (one 'flip-loss: error:' "
        "line each); the other pairs were evaluated and written, and the summary CSV "
        "lists them (takes precedence over 1)",
    ),
    (
        EXIT_INTERRUPTED,
        "interrupted (Ctrl-C, SIGTERM or SIGHUP); the message says whether the outputs had been "
        "written (they appear all together at the end of a run, or not at all)",
    ),
)


def exit_code_lines() -> str:
    """The table as --help prints it."""
    return "".join(
        textwrap.fill(text, width=95, initial_indent=f"  {code:<2d} ", subsequent_indent=" " * 5) + "\n"
        for code, text in EXIT_CODES
    )


def interrupted_line(detail: str) -> str:
    """The line an interrupted command ends with on stderr (exit code 130); ``detail`` says what
    became of the outputs."""
    return f"{PROG}: interrupted" + (f"; {detail}" if detail else "") + "\n"


class UsageError(Exception):
    """An error the user can act on: printed as one ``<prog>: error:`` line, exit code 2."""


class UsageErrorParser(argparse.ArgumentParser):
    """An argument parser whose errors raise :class:`UsageError` (one line, no usage dump) instead
    of printing and exiting; ``--help`` still exits through SystemExit."""

    def error(self, message):
        raise UsageError(f"{message} (see --help)")
