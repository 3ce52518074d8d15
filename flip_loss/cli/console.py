"""Where a ``flip-loss`` run reports: its lines on stdout and stderr, written so that any file name
comes through (one that is not valid UTF-8, or a stream that cannot encode it), and folder mode's
progress on stderr: a bar redrawn in place on a terminal, a plain line now and then in a log.

A stream its reader has closed (``flip-loss ... | head -1``) or that was closed before the run is
the reader's choice, not an error: what would go there is dropped, and the run goes on, writes its
files and exits with its own code. No signal disposition changes for it (Python ignores SIGPIPE, so
a write to a closed pipe fails with EPIPE, which is caught here); only a process entry point of the
command line points a dead stream's descriptor at os.devnull as it ends
(:func:`release_closed_streams`), so that Python's last flush does not fail."""

import errno
import os
import shutil
import sys
import time
from typing import Callable, Optional, Sequence

from .errors import PROG, UsageError

# A log (stderr not a terminal) gets at most one progress line per this many seconds.
LOG_PROGRESS_INTERVAL_S = 30.0
# A terminal's bar is redrawn at most this often.
BAR_REDRAW_INTERVAL_S = 0.1


def readable(text: str) -> str:
    """``text`` with the bytes of a file name that is not valid UTF-8 (Python's surrogate escapes)
    shown as ``\\xNN``: for the formats that must be valid Unicode (HTML, drawn text)."""
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def _closed_stream(exc: BaseException) -> bool:
    """Whether ``exc``, raised writing to a standard stream, says that no one reads it any more: its
    reader closed the pipe (EPIPE), its descriptor or the file object was closed."""
    if isinstance(exc, ValueError):  # I/O operation on a closed file
        return True
    return isinstance(exc, OSError) and exc.errno in (errno.EPIPE, errno.EBADF)


def write_text(stream, text: str) -> None:
    """Writes ``text`` to ``stream`` and flushes it; a closed stream (None, as Python sets a stream
    closed before it started, or one whose reader has gone) takes nothing and raises nothing. A
    standard output that fails otherwise (a full disk, an I/O error) stops the run as an error the
    user can act on: nothing is written."""
    if stream is None:
        return
    try:
        _write_text(stream, text)
    except (OSError, ValueError) as exc:
        if _closed_stream(exc):
            return
        if stream is sys.stdout and isinstance(exc, OSError):
            raise UsageError(f"cannot write to standard output: {exc.strerror or exc}") from None
        raise


def flush_stdout() -> None:
    """Flushes sys.stdout before a line goes to stderr (so that the two interleave in order)."""
    write_text(sys.stdout, "")


def flush_stdout_before_error() -> None:
    """``flush_stdout`` where an error is being reported already: a standard output that fails is
    left to :func:`release_closed_streams`."""
    try:
        flush_stdout()
    except UsageError:
        pass


def release_closed_streams() -> None:
    """For a process entry point of the command line, as it ends: a standard stream whose reader
    has gone (or that fails, as on a full disk) may still hold text, which Python's flush at exit
    would fail to write (exit code 120 and an 'Exception ignored' message); its descriptor is
    pointed at os.devnull instead, as Python's documentation advises. Changes nothing when the
    streams are alive (never called by ``flip_loss.cli.main``, which leaves the process's
    descriptors alone)."""
    for stream in (sys.stdout, sys.stderr):
        if stream is None:
            continue
        try:
            stream.flush()
        except (OSError, ValueError) as exc:
            if isinstance(exc, OSError):  # a reader gone, or a stream that fails (a full disk)
                devnull = os.open(os.devnull, os.O_WRONLY)
                try:
                    os.dup2(devnull, stream.fileno())
                finally:
                    os.close(devnull)


def _write_text(stream, text: str) -> None:
    """Writes ``text`` to ``stream`` and flushes it. A file name's bytes go out as they are where
    the stream's encoding cannot take them (a name that is not valid UTF-8 on a strict UTF-8
    stream), and as ``\\xNN`` / ``\\uNNNN`` escapes where no bytes can stand for them (an ASCII
    stream): a name never makes printing fail."""
    try:
        stream.write(text)
    except UnicodeEncodeError:
        encoding = getattr(stream, "encoding", None) or "utf-8"
        try:
            data = text.encode(encoding, "surrogateescape")
        except UnicodeEncodeError:
            data = readable(text).encode(encoding, "backslashreplace")
        buffer = getattr(stream, "buffer", None)
        if buffer is not None:
            stream.flush()
            buffer.write(data)
            buffer.flush()
        else:
            stream.write(data.decode(encoding, "replace"))
    stream.flush()


def _is_terminal(stream) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):  # no isatty, or a closed stream
        return False


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    return (
        f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"
        if seconds >= 3600
        else f"{seconds // 60:02d}:{seconds % 60:02d}"
    )


class Progress:
    """Folder mode's progress on ``stream`` (stderr): on a terminal a bar redrawn in place, which
    :meth:`clear` removes before other lines are printed; elsewhere (a CI log, a file) no carriage
    returns, only a plain line at most every ``LOG_PROGRESS_INTERVAL_S`` seconds."""

    def __init__(
        self,
        total: int,
        stream,
        clock: Callable[[], float] = time.monotonic,
        terminal: Optional[bool] = None,
        label: str = PROG,
        unit: str = "pairs",
    ):
        self.total, self.stream, self.clock, self.label, self.unit = total, stream, clock, label, unit
        self.terminal = _is_terminal(stream) if terminal is None else terminal
        self.done = 0
        self.start = self.clock()
        self._last = self.start  # when a line or the bar was last written
        self._shown = False  # a bar is on the terminal's last line

    def advance(self, n: int = 1) -> None:
        self.done += n
        now = self.clock()
        if self.terminal:
            if now - self._last >= BAR_REDRAW_INTERVAL_S or self.done >= self.total:
                self.redraw()
        elif now - self._last >= LOG_PROGRESS_INTERVAL_S and self.done < self.total:
            self._last = now
            write_text(self.stream, f"{self.label}: {self._status(now)}\n")

    def _status(self, now: float) -> str:
        elapsed = now - self.start
        text = f"{self.done}/{self.total} {self.unit} ({100 * self.done // max(self.total, 1)}%), {_duration(elapsed)} elapsed"
        if 0 < self.done < self.total:
            text += f", about {_duration(elapsed / self.done * (self.total - self.done))} left"
        return text

    def redraw(self) -> None:
        if not self.terminal:
            return
        now = self.clock()
        self._last = now
        status = f"{self.label}: {self._status(now)}"
        width = shutil.get_terminal_size((80, 24)).columns - 1
        room = width - len(status) - 3
        if room >= 10:
            filled = room * self.done // max(self.total, 1)
            status = f"{status} [{'#' * filled}{'.' * (room - filled)}]"
        write_text(self.stream, "\r" + status[:width] + "\x1b[K")
        self._shown = True

    def clear(self) -> None:
        if self._shown:
            write_text(self.stream, "\r\x1b[K")
            self._shown = False

    def close(self) -> None:
        self.clear()


class Console:
    """Where a run reports: results on stdout; notes and warnings (once each, from verbosity 1) and
    errors as one line each on stderr; in folder mode the progress on stderr, which the lines do not
    break."""

    def __init__(self, verbosity: int):
        self.verbosity = verbosity
        self._progress: Optional[Progress] = None
        self._warned = set()

    def start_progress(self, total: int) -> None:
        self._progress = Progress(total, sys.stderr)

    def _print(self, lines: Sequence[str], stream) -> None:
        if self._progress is not None:
            self._progress.clear()
        flush_stdout()
        write_text(stream, "".join(line + "\n" for line in lines))
        if self._progress is not None:
            self._progress.redraw()

    def lines(self, lines: Sequence[str]) -> None:
        if lines:
            self._print(lines, sys.stdout)

    def note(self, message: str) -> None:
        """What the run did that the user may not expect (not a problem: no warning)."""
        if self.verbosity >= 1 and message not in self._warned:
            self._warned.add(message)
            self._print([f"{PROG}: note: {message}"], sys.stderr)

    def warning(self, message: str) -> None:
        if self.verbosity >= 1 and message not in self._warned:
            self._warned.add(message)
            self._print([f"{PROG}: warning: {message}"], sys.stderr)

    def error(self, message: str) -> None:
        self._print([f"{PROG}: error: {message}"], sys.stderr)

    def gate_failure(self, message: str) -> None:
        self._print([f"{PROG}: gate failed: {message}"], sys.stderr)

    def advance(self) -> None:
        if self._progress is not None:
            self._progress.advance()

    def close(self) -> None:
        if self._progress is not None:
            self._progress.close()
            self._progress = None
