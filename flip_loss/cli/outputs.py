"""The outputs of a ``flip-loss`` run: their names (as NVIDIA's tool names them), the checks that
keep the user's files safe (no output is an input or written twice; every location writable)
and the writing itself, atomic: each output goes to a temporary file beside its destination and
all are renamed into place together when the run has succeeded."""
import contextlib
import csv
import io
import math
import os
import secrets
import shutil
import signal
import stat
import threading
from typing import Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple

from .errors import UsageError
from .evaluate import Exposures, Result
from .pairs import stem

CSV_HEADER = ("Reference", "Test", "Mean", "Weighted median", "1st weighted quartile",
              "3rd weighted quartile", "Min", "Max", "Evaluation time")


def round_half_up(x: float) -> int:
    """Rounds half up, like C's round() on the positive values it is used for (the tool prints
    round(ppd)); Python's round() would round 40.5 to 40."""
    return int(math.floor(x + 0.5))


def _exposure_text(value: float) -> str:
    """An exposure in an output name: m (negative) or p, then the absolute value, 4 decimals."""
    return f"{'m' if value < 0 else 'p'}{abs(value):.4f}"


def dynamic_range(tone_mapper: Optional[str] = None, exposures: Optional[Exposures] = None) -> str:
    """The dynamic-range part of the output names: 'ldr', or for HDR-FLIP
    'hdr.<tm>.<S>_to_<E>.<N>' as NVIDIA's tool names its outputs."""
    if exposures is None:
        return "ldr"
    return (f"hdr.{tone_mapper}.{_exposure_text(exposures.start)}_to_{_exposure_text(exposures.stop)}."
            f"{exposures.count}")


class Names(NamedTuple):
    map: str
    text: str
    histogram: str
    exposure_map: str


def output_names(args, reference: str, test: str, ppd: float, directory: str, range_part: str) -> Names:
    """The output file names of a pair (``range_part``: :func:`dynamic_range`'s part)."""
    log = "log_" if args.log else ""
    if args.basename is not None:
        b = os.path.join(directory, args.basename)
        return Names(b + ".png", b + ".txt", f"{b}.{log}weighted_histogram.png", b + ".exposure_map.png")
    if args.output is not None:
        map_path = os.path.join(args.directory, args.output) if args.directory is not None else args.output
        parent, map_stem = os.path.dirname(map_path), stem(map_path)
        return Names(map_path, os.path.join(parent, f"pooled_values.{map_stem}.txt"),
                     os.path.join(parent, f"{log}weighted_histogram.{map_stem}.png"),
                     os.path.join(parent, f"exposure_map.{map_stem}.png"))
    name = f"{stem(reference)}.{stem(test)}.{round_half_up(ppd)}ppd.{range_part}"
    base = "flip." + name
    return Names(os.path.join(directory, base + ".png"),
                 os.path.join(directory, f"pooled_values.{base}.txt"),
                 os.path.join(directory, f"{log}weighted_histogram.{base}.png"),
                 # as NVIDIA's tool: exposure_map.<reference>.<test>..., without "flip."
                 os.path.join(directory, f"exposure_map.{name}.png"))


def overlapped_histogram_name(args, reference: str, tests: Sequence[str], ppd: float, directory: str,
                              range_part: str) -> str:
    """The name of the one histogram of two test images."""
    log = "log_" if args.log else ""
    return os.path.join(directory, f"{log}weighted_histogram.flip.{stem(reference)}.{stem(tests[0])}."
                                   f"{stem(tests[1])}.{round_half_up(ppd)}ppd.{range_part}.png")


def pooled_lines(pooled) -> List[str]:
    return [f"Mean: {pooled.mean:.6f}",
            f"Weighted median: {pooled.weighted_median:.6f}",
            f"1st weighted quartile: {pooled.weighted_quartile_1:.6f}",
            f"3rd weighted quartile: {pooled.weighted_quartile_3:.6f}",
            f"Min: {pooled.min:.6f}",
            f"Max: {pooled.max:.6f}"]


def csv_row(result: Result) -> List[str]:
    """The pair's CSV row (CSV_HEADER's columns), formatted as NVIDIA's tool writes it."""
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


def check_directory(directory: str) -> None:
    """``directory`` exists as a writable directory or can be created."""
    real = os.path.realpath(directory)
    existing = _nearest_existing(real)
    if existing == real:
        if not os.path.isdir(real):
            raise UsageError(f"cannot use the output directory '{directory}': it is not a directory")
    elif not os.path.isdir(existing):
        raise UsageError(f"cannot create the output directory '{directory}': '{existing}' is not a "
                         "directory")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise UsageError(f"cannot {'write into' if existing == real else 'create'} the output directory "
                         f"'{directory}': permission denied")
    limit = _name_max(existing)
    for part in os.path.relpath(real, existing).split(os.sep) if existing != real else ():
        if len(os.fsencode(part)) > limit:
            raise UsageError(f"cannot create the output directory '{directory}': the name '{part}' is "
                             f"longer than the {limit} bytes the file system allows")


class Output(NamedTuple):
    """An output file of the run, checked and claimed."""
    path: str   # as the user will see it
    real: str   # where it is written: links resolved
    what: str   # "error map", "CSV file", ...


class OutputGuard:
    """Checks every output path of a run before anything is written: it must not be an input (the
    same file, also through a symbolic or hard link), not be claimed by another output of the run,
    and its location must be writable (an existing writable directory, or --directory, which is
    created, and the --report directories; a file name the file system allows; not a directory, a
    device or a read-only file). ``new_directories``: the directories the run will create, each
    checked with :func:`check_directory`."""

    def __init__(self, inputs: Sequence[str], new_directories: Sequence[str] = ()):
        self._inputs: Dict[Tuple[int, int], str] = {}
        for path in inputs:
            try:
                st = os.stat(path)
            except OSError:  # missing: reported when it is read
                continue
            self._inputs.setdefault((st.st_dev, st.st_ino), path)
        self._claimed: Dict[str, Output] = {}
        self._new_directories = {os.path.realpath(d) for d in new_directories}

    def claim(self, *candidates: Tuple[str, str]) -> List[Output]:
        """Checks the outputs ``(path, what)`` and claims them all, or raises UsageError and
        claims none."""
        batch: Dict[str, Output] = {}
        for path, what in candidates:
            out = self._check(path, what, batch)
            batch[os.path.normcase(out.real)] = out
        self._claimed.update(batch)
        return list(batch.values())

    def _check(self, path: str, what: str, batch: Dict[str, Output]) -> Output:
        real = os.path.realpath(path)
        out = Output(path, real, what)
        key = os.path.normcase(real)
        other = self._claimed.get(key) or batch.get(key)
        if other is not None:
            raise UsageError(f"the {what} '{path}' and the {other.what} '{other.path}' would be the same "
                             "file; choose other names (--output, --basename, --directory, --csv)")
        limit = _name_max(_nearest_existing(os.path.dirname(real)))
        size = len(os.fsencode(os.path.basename(real)))
        if size > limit:
            raise UsageError(f"cannot write the {what} '{path}': its file name is {size} bytes long, more "
                             f"than the {limit} the file system allows")
        try:
            st = os.stat(real)
        except (FileNotFoundError, NotADirectoryError):  # the parent check below says why
            st = None
        except OSError as exc:
            raise UsageError(f"cannot write the {what} '{path}': {exc.strerror or exc}") from None
        if st is not None:
            source = self._inputs.get((st.st_dev, st.st_ino))
            if source is not None:
                raise UsageError(f"the {what} '{path}' would overwrite the input image '{source}'; choose "
                                 "another output name or directory")
            if stat.S_ISDIR(st.st_mode):
                raise UsageError(f"cannot write the {what} '{path}': it is a directory; give a file name")
            if not stat.S_ISREG(st.st_mode):
                raise UsageError(f"cannot write the {what} '{path}': it exists and is not a regular file")
            if not os.access(real, os.W_OK):
                raise UsageError(f"cannot write the {what} '{path}': permission denied")
        parent = os.path.dirname(real)
        if parent not in self._new_directories:
            shown = os.path.dirname(path) or "."
            if not os.path.isdir(parent):
                existing = _nearest_existing(parent)
                problem = (f"the directory '{shown}' does not exist" if os.path.isdir(existing) else
                           f"'{existing}' is not a directory")
                raise UsageError(f"cannot write the {what} '{path}': {problem}")
            if not os.access(parent, os.W_OK | os.X_OK):
                raise UsageError(f"cannot write the {what} '{path}': permission denied in '{shown}'")
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


class Staging:
    """The outputs of a run, written to temporary files beside their destinations and renamed into
    place together by :meth:`commit`; :meth:`discard` removes the temporary files and the
    directories the run created. A file is never visible half-written, and a run that fails or is
    interrupted before its commit leaves nothing behind. (No fsync: this protects against failed and
    interrupted runs, not against a power cut.)"""

    def __init__(self):
        self._files: List[Tuple[str, Output]] = []   # (temporary path, destination)
        self._appends: Dict[str, "AppendedCsv"] = {}  # temporary path -> rows to append at commit
        self._made_directories: List[str] = []
        self.committed = False

    def make_directory(self, directory: str) -> None:
        """Creates ``directory`` and its missing parents, to be removed again by :meth:`discard`."""
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
            raise UsageError(f"cannot create the output directory '{directory}': {exc.strerror or exc}") from None

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

    def write(self, out: Output, write: Callable[[str], None]) -> None:
        """Writes ``out`` through ``write(temporary path)``; it appears at :meth:`commit` (an
        :class:`AppendedCsv` is appended there instead)."""
        try:
            temporary = self._temporary(os.path.dirname(out.real))
            self._files.append((temporary, out))
            if isinstance(write, AppendedCsv):
                self._appends[temporary] = write
            write(temporary)
        except OSError as exc:
            raise UsageError(f"cannot write the {out.what} '{out.path}': {exc.strerror or exc}") from None

    def commit(self) -> None:
        """Renames every written output into place (Ctrl-C waits until all are)."""
        with _interrupts_deferred():
            while self._files:
                temporary, out = self._files[0]
                try:
                    if temporary in self._appends:
                        self._appends.pop(temporary).append()
                        os.remove(temporary)
                    else:
                        if os.path.exists(out.real):  # an overwritten file keeps its permissions
                            shutil.copymode(out.real, temporary)
                        os.replace(temporary, out.real)
                except OSError as exc:
                    raise UsageError(f"cannot write the {out.what} '{out.path}': {exc.strerror or exc}") from None
                self._files.pop(0)
            self._made_directories = []  # they hold the outputs now
            self.committed = True

    def discard(self) -> None:
        """Removes what has not been committed: the temporary files, the created directories."""
        for temporary, _ in self._files:
            with contextlib.suppress(OSError):
                os.remove(temporary)
        self._files = []
        self._appends = {}
        for d in reversed(self._made_directories):
            with contextlib.suppress(OSError):  # not empty: something else wrote there meanwhile
                os.rmdir(d)
        self._made_directories = []


def write_text_file(text: str) -> Callable[[str], None]:
    """A writer (for :meth:`Staging.write`) of the UTF-8 text ``text``."""
    def write(path: str) -> None:
        with open(path, "w", encoding="utf-8", newline="") as f:
            f.write(text)
    return write


class AppendedCsv:
    """A writer (for :meth:`Staging.write`) that appends ``rows`` to the CSV file ``destination``
    (with the header first when it is new or empty). The staged temporary file only proves the
    location writable; at :meth:`Staging.commit` the rows are appended in one ``write`` under an
    exclusive lock of the file, so runs appending to the same CSV at the same time keep every row,
    and no reader ever sees half a row."""

    def __init__(self, destination: str, rows: Sequence[Sequence[str]]):
        self.destination = destination
        self.rows = [list(r) for r in rows]

    def __call__(self, path: str) -> None:
        with open(path, "wb") as f:
            f.write(_csv_text(self.rows, header=True).encode("utf-8"))

    def append(self) -> None:
        import fcntl

        fd = os.open(self.destination, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            size = os.fstat(fd).st_size
            text = _csv_text(self.rows, header=size == 0).encode("utf-8")
            if size and os.pread(fd, 1, size - 1) != b"\n":
                text = b"\n" + text
            os.write(fd, text)
        finally:
            os.close(fd)  # releases the lock


def write_appended_csv(destination: str, rows: Sequence[Sequence[str]]) -> AppendedCsv:
    return AppendedCsv(destination, rows)


def write_png(image) -> Callable[[str], None]:
    """A writer (for :meth:`Staging.write`) of the 8-bit image ``image`` as PNG."""
    from ..imageio import save_png

    return lambda path: save_png(path, image)
