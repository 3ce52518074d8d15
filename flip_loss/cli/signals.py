"""Ctrl-C, SIGTERM and SIGHUP in the command line, without taking a signal from a program that owns it.

``flip_loss.cli.main`` is a program's entry point and a library function alike, so it follows one
rule: it installs its handler for a signal only in the main thread (the only one that can) and
only while the signal's handler is Python's default (SIGINT: ``signal.default_int_handler``, which
raises KeyboardInterrupt; SIGTERM and SIGHUP: ``SIG_DFL``, which kills the process), and restores
that default when it returns. A handler someone else installed (or ``SIG_IGN``) is theirs: it stays in
place, and the run reacts to that signal however the handler does.

The command line's handler raises KeyboardInterrupt, so SIGTERM (a CI timeout, ``kill``, torchrun
stopping its workers) and SIGHUP (a closed terminal or ssh session; ``nohup`` ignores it, and the
run goes on) end a run as Ctrl-C does, removing its temporary files (exit code 130).
While :func:`interrupts_deferred` holds it back (the renames that publish the outputs), the handler
only notes the signal, and KeyboardInterrupt is raised once the block has ended; no handler is
swapped for it. Both work in the main thread only: signals are delivered there, and nowhere else
can a signal interrupt the work.
"""

import contextlib
import signal
import threading
from typing import Dict, List

__all__ = ["interrupts_handled", "interrupts_deferred"]

_SIGNALS = (signal.SIGINT, signal.SIGTERM) + ((signal.SIGHUP,) if hasattr(signal, "SIGHUP") else ())
_deferring = 0  # nesting depth of interrupts_deferred (main thread only)
_received: List[int] = []  # signals held back meanwhile


def _interrupt(signum, frame):
    if _deferring:
        _received.append(signum)
        return
    raise KeyboardInterrupt


def _is_default(signum: int, handler) -> bool:
    if signum == signal.SIGINT:
        return handler is signal.default_int_handler
    return handler == signal.SIG_DFL


def _in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


@contextlib.contextmanager
def interrupts_handled():
    """While the block runs, SIGINT, SIGTERM and SIGHUP raise KeyboardInterrupt in the main thread,
    for each whose handler is the default when the block starts (see the module's rule);
    the default is restored when it ends."""
    installed: Dict[int, object] = {}
    if _in_main_thread():
        for signum in _SIGNALS:
            previous = signal.getsignal(signum)
            if _is_default(signum, previous):
                signal.signal(signum, _interrupt)
                installed[signum] = previous
    try:
        yield
    finally:
        for signum, previous in installed.items():
            if signal.getsignal(signum) is _interrupt:  # unless its new owner replaced it meanwhile
                signal.signal(signum, previous)


@contextlib.contextmanager
def interrupts_deferred():
    """Holds back the interruptions that the command line's handler receives while the block runs
    and raises KeyboardInterrupt after it. Changes no handler; outside the main thread the block
    runs as it is (no signal can interrupt it there)."""
    global _deferring
    if not _in_main_thread():
        yield
        return
    _deferring += 1
    try:
        yield
    finally:
        _deferring -= 1
        if not _deferring and _received:
            _received.clear()
            raise KeyboardInterrupt
