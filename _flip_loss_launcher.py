"""The ``flip-loss`` command (its console script): ``flip_loss.cli.main`` with ``--help``,
``--version`` and usage errors answered before torch is imported.

Any ``import flip_loss.<module>`` first runs ``flip_loss/__init__.py``, which imports torch and
registers the ops: seconds, where parsing the command line takes milliseconds. So this module,
outside the package, puts the package into ``sys.modules`` from its spec without running its
``__init__``, parses the command line with ``flip_loss.cli.arguments`` (which imports no torch),
and answers there when the command ends at parsing. Otherwise it runs the package's ``__init__``
in that module object, as ``import flip_loss`` would have, and hands the command to
``flip_loss.cli.main``; if that import fails, the package is taken out of ``sys.modules`` again,
as a failed import is. Ctrl-C, SIGTERM and SIGHUP during that import end the command as they end a
run (``flip_loss.cli.signals``'s rule: exit code 130, one line). From Python, call
``flip_loss.cli.main`` (this module is for the console script; ``python -m flip_loss`` imports the
package first).

While torch is imported, the command also asks OpenMP, through ``OMP_WAIT_POLICY``, to let its
idle compute threads sleep (unless the variable is set): by default they spin between torch's
parallel regions, taking the cores that folder mode's reading and writing threads need; 24 pairs of
1080p PNGs took about 8 % longer so on 2 cores. The process's end is ``console_main``'s.
"""

import gc
import importlib.util
import os
import sys
from typing import Optional, Sequence

__all__ = ["main"]


def _answered_without_torch(argv: Sequence[str]) -> Optional[int]:
    """The exit code of a command that ends at parsing (help, version, a usage error), printed as
    ``flip_loss.cli.main`` prints it; None when the command goes on, the package then imported."""
    spec = importlib.util.find_spec("flip_loss")
    if spec is None or spec.loader is None:
        return None  # let the ordinary import say what is missing
    package = importlib.util.module_from_spec(spec)
    before = set(sys.modules)
    sys.modules["flip_loss"] = package
    imported = False
    try:
        from flip_loss.cli import main as cli_main
        from flip_loss.cli.arguments import parse_arguments
        from flip_loss.cli.console import release_closed_streams, write_text
        from flip_loss.cli.errors import EXIT_INTERRUPTED, UsageError, interrupted_line
        from flip_loss.cli.signals import interrupts_handled

        try:
            parse_arguments(argv)
        except (UsageError, SystemExit):
            code = cli_main(argv)  # parses again and prints the help, the version or the error
            release_closed_streams()
            return code
        try:
            # Seconds of importing torch: Ctrl-C, SIGTERM and SIGHUP end the command as they end a
            # run, before it has written anything.
            with interrupts_handled():
                spec.loader.exec_module(package)  # the package as `import flip_loss` makes it
        except KeyboardInterrupt:
            write_text(sys.stderr, interrupted_line("no output file was written"))
            release_closed_streams()
            return EXIT_INTERRUPTED
        imported = True
        return None
    finally:
        if not imported:  # the process as it was: nothing of flip_loss imported
            for name in set(sys.modules) - before:
                if name == "flip_loss" or name.startswith("flip_loss."):
                    del sys.modules[name]


def _idle_threads_sleep() -> bool:
    """OMP_WAIT_POLICY=PASSIVE for the OpenMP runtime torch loads, unless set or already loaded;
    whether it was set here."""
    if "torch" in sys.modules or os.environ.get("OMP_WAIT_POLICY"):
        return False
    os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
    return True


def _imported(argv: Sequence[str]) -> Optional[int]:
    """Imports the package for ``argv``; the exit code of a command that ends at parsing, else None."""
    policy_set = _idle_threads_sleep()
    try:
        if "flip_loss" not in sys.modules:
            return _answered_without_torch(argv)
        return None
    finally:
        # The runtime reads the variable once, as torch loads it: nothing else (a program that
        # called this function, its child processes) sees it.
        if policy_set:
            os.environ.pop("OMP_WAIT_POLICY", None)


def _run(argv: Sequence[str]) -> int:
    from flip_loss.cli import main as cli_main
    from flip_loss.cli.console import release_closed_streams

    code = cli_main(argv)
    release_closed_streams()
    return code


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Runs ``flip-loss`` with ``argv`` (default: ``sys.argv[1:]``) and returns its exit code. As the
    process's entry point, it points a standard stream whose reader has gone at os.devnull at the
    end (``flip_loss.cli.console.release_closed_streams``), so that Python's last flush succeeds."""
    argv = list(sys.argv[1:] if argv is None else argv)
    code = _imported(argv)
    return code if code is not None else _run(argv)


def console_main() -> int:
    """The console script: :func:`main` for this process's arguments, with the process's garbage
    collector set for a run. Importing torch makes millions of objects and next to no garbage: the
    collector is off meanwhile (the collections it made took about a tenth of the import), and
    what the import made is frozen (``gc.freeze``) before the command runs, so that the run's
    collections do not walk it. As the process ends, the objects still alive are frozen too, so that
    Python's last collection does not walk those either: about 0.4 s of every command that
    evaluates."""
    argv = sys.argv[1:]
    gc.disable()
    try:
        code = _imported(argv)
    finally:
        gc.enable()
    if code is None:
        gc.freeze()
        code = _run(argv)
    gc.freeze()
    return code


if __name__ == "__main__":
    sys.exit(console_main())
