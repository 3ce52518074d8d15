"""The outputs of a ``flip-loss`` run: their names (as NVIDIA's tool names them), the checks that
keep the user's files safe (no output is an input or written twice; every location writable)
and the writing itself, atomic: each output goes to a temporary file beside its destination and
all are renamed into place together when the run has succeeded."""

import contextlib
import csv
import errno
import io
import math
import os
import secrets
import shutil
import stat
from typing import Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple

from ..constants import STATISTICS
from .errors import UsageError
from .evaluate import Exposures, Result
from .pairs import stem
from .signals import interrupts_deferred

# The CSV layout: NVIDIA's columns (less its evaluation time, which would make two runs on the same
# inputs differ), then whether the pair was evaluated and the gate's verdict on it. --timing adds
# the evaluation time as the last column.
CSV_HEADER = ("Reference", "Test", *(s.label for s in STATISTICS), "Status", "Gate")
TIMING_COLUMN = "Evaluation time"
EVALUATED = "evaluated"


def csv_header(timing: bool) -> Tuple[str, ...]:
    """The header of a run's CSV file (``timing``: with ``--timing``)."""
    return CSV_HEADER + ((TIMING_COLUMN,) if timing else ())


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
    return f"hdr.{tone_mapper}.{_exposure_text(exposures.start)}_to_{_exposure_text(exposures.stop)}.{exposures.count}"


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
        return Names(
            map_path,
            os.path.join(parent, f"pooled_values.{map_stem}.txt"),
            os.path.join(parent, f"{log}weighted_histogram.{map_stem}.png"),
            os.path.join(parent, f"exposure_map.{map_stem}.png"),
        )
    name = f"{stem(reference)}.{stem(test)}.{round_half_up(ppd)}ppd.{range_part}"
    base = "flip." + name
    return Names(
        os.path.join(directory, base + ".png"),
        os.path.join(directory, f"pooled_values.{base}.txt"),
        os.path.join(directory, f"{log}weighted_histogram.{base}.png"),
        # as NVIDIA's tool: exposure_map.<reference>.<test>..., without "flip."
        os.path.join(directory, f"exposure_map.{name}.png"),
    )


def overlapped_histogram_name(
    args, reference: str, tests: Sequence[str], ppd: float, directory: str, range_part: str
) -> str:
    """The name of the one histogram of two test images."""
    log = "log_" if args.log else ""
    return os.path.join(
        directory,
        f"{log}weighted_histogram.flip.{stem(reference)}.{stem(tests[0])}."
        f"{stem(tests[1])}.{round_half_up(ppd)}ppd.{range_part}.png",
    )


def pooled_lines(pooled) -> List[str]:
    return [f"{s.label}: {getattr(pooled, s.field):.6f}" for s in STATISTICS]


def csv_row(result: Result, verdict: str, timing: bool) -> List[str]:
    """The evaluated pair's CSV row (:func:`csv_header`'s columns), the values formatted as NVIDIA's
    tool writes them; ``verdict``: the gate's ("pass", "fail", or "" without a gate)."""
    row = [result.reference, result.test] + [f"{v:.6f}" for v in result.pooled] + [EVALUATED, verdict]
    return row + [f"{result.seconds:.4f}"] if timing else row


def csv_skipped_row(reference: str, test: str, reason: str, verdict: str, timing: bool) -> List[str]:
    """The CSV row of a pair that was not evaluated (an empty name: the image has no partner)."""
    return [reference, test] + [""] * len(STATISTICS) + [f"not evaluated: {reason}", verdict] + ([""] if timing else [])


def _csv_text(header: Sequence[str], rows: Sequence[Sequence[str]], with_header: bool) -> bytes:
    """The CSV lines, every field quoted as NVIDIA's tool writes them. File names go in as the file
    system holds them: a name that is not valid UTF-8 keeps its bytes (surrogate escapes)."""
    buffer = io.StringIO()
    w = csv.writer(buffer, quoting=csv.QUOTE_ALL, lineterminator="\n")
    if with_header:
        w.writerow(header)
    w.writerows(rows)
    return buffer.getvalue().encode("utf-8", "surrogateescape")


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
        raise UsageError(f"cannot create the output directory '{directory}': '{existing}' is not a directory")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise UsageError(
            f"cannot {'write into' if existing == real else 'create'} the output directory "
            f"'{directory}': permission denied"
        )
    limit = _name_max(existing)
    for part in os.path.relpath(real, existing).split(os.sep) if existing != real else ():
        if len(os.fsencode(part)) > limit:
            raise UsageError(
                f"cannot create the output directory '{directory}': the name '{part}' is "
                f"longer than the {limit} bytes the file system allows"
            )


class Output(NamedTuple):
    """An output file of the run, checked and claimed."""

    path: str  # as the user will see it
    real: str  # where it is written: links resolved
    what: str  # "error map", "CSV file", ...


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
            raise UsageError(
                f"the {what} '{path}' and the {other.what} '{other.path}' would be the same "
                "file; choose other names (--output, --basename, --directory, --csv)"
            )
        limit = _name_max(_nearest_existing(os.path.dirname(real)))
        size = len(os.fsencode(os.path.basename(real)))
        if size > limit:
            raise UsageError(
                f"cannot write the {what} '{path}': its file name is {size} bytes long, more "
                f"than the {limit} the file system allows"
            )
        try:
            st = os.stat(real)
        except (FileNotFoundError, NotADirectoryError):  # the parent check below says why
            st = None
        except OSError as exc:
            raise UsageError(f"cannot write the {what} '{path}': {exc.strerror or exc}") from None
        if st is not None:
            source = self._inputs.get((st.st_dev, st.st_ino))
            if source is not None:
                raise UsageError(
                    f"the {what} '{path}' would overwrite the input image '{source}'; choose "
                    "another output name or directory"
                )
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
                problem = (
                    f"the directory '{shown}' does not exist"
                    if os.path.isdir(existing)
                    else f"'{existing}' is not a directory"
                )
                raise UsageError(f"cannot write the {what} '{path}': {problem}")
            if not os.access(parent, os.W_OK | os.X_OK):
                raise UsageError(f"cannot write the {what} '{path}': permission denied in '{shown}'")
        return out


class Staging:
    """The outputs of a run, written to temporary files beside their destinations and published
    together by :meth:`commit`; :meth:`discard` removes the temporary files and the directories the
    run created. A file is never visible half-written, and a run that fails or is interrupted
    before or during its commit leaves the files as they were. (No fsync: this protects against
    failed and interrupted runs, not against a power cut.)"""

    def __init__(self):
        self._files: List[Tuple[str, Output]] = []  # (temporary path, destination)
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

    def write(self, out: Output, write: Callable[[str], None]) -> None:
        """Writes ``out`` through ``write(temporary path)``; it appears at :meth:`commit` (an
        :class:`AppendedCsv` is appended there instead)."""
        try:
            temporary = _new_hidden_file(os.path.dirname(out.real), "tmp")
            self._files.append((temporary, out))
            if isinstance(write, AppendedCsv):
                self._appends[temporary] = write
            write(temporary)
        except OSError as exc:
            raise UsageError(f"cannot write the {out.what} '{out.path}': {exc.strerror or exc}") from None

    def commit(self) -> None:
        """Publishes every written output, all or none (Ctrl-C waits until it is done).

        The order makes every failure undoable: first each appended CSV file is locked and checked,
        and every file an output replaces gets a hidden hard link (or copy) to return to; then the
        CSV rows are appended, the only write into an existing file; then the temporary files are
        renamed into place. A failure at any step (a full disk, a quota, a file size limit, a
        rename refused) truncates the CSV files back to their old length and puts the replaced
        files back, and the run reports that nothing was written."""
        # A signal meanwhile is noted by the command line's handler and raised after the block, so
        # the renames are never cut in half; a signal the command line does not own is its owner's.
        with interrupts_deferred():
            appends = [
                (a, out) for temporary, out in self._files for a in [self._appends.get(temporary)] if a is not None
            ]
            renames = [(temporary, out) for temporary, out in self._files if temporary not in self._appends]
            opened: List[Tuple["_OpenCsv", Output]] = []
            backups: Dict[str, str] = {}  # destination -> hidden link to the file it replaces
            published: List[Output] = []
            step: Optional[Output] = None
            try:
                for a, out in appends:
                    step = out
                    opened.append((a.open(), out))
                for _, out in renames:
                    step = out
                    if os.path.lexists(out.real):
                        backups[out.real] = _keep_a_way_back(out.real)
                for handle, out in opened:
                    step = out
                    handle.append()
                for temporary, out in renames:
                    step = out
                    if out.real in backups:  # an overwritten file keeps its permissions
                        shutil.copymode(out.real, temporary)
                    os.replace(temporary, out.real)
                    published.append(out)
            except BaseException as exc:
                for out in reversed(published):
                    with contextlib.suppress(OSError):
                        if out.real in backups:
                            os.replace(backups.pop(out.real), out.real)
                        else:
                            os.remove(out.real)
                for handle, _ in opened:
                    handle.undo()
                if isinstance(exc, OSError):
                    raise UsageError(
                        f"cannot write the {step.what} '{step.path}': {exc.strerror or exc}; no output was changed"
                    ) from None
                raise
            finally:
                for handle, _ in opened:
                    handle.close()
                for backup in backups.values():
                    with contextlib.suppress(OSError):
                        os.remove(backup)
                for temporary in self._appends:
                    with contextlib.suppress(OSError):
                        os.remove(temporary)
            self._files, self._appends = [], {}
            self._made_directories = []  # they hold the outputs now
            self.committed = True

    def discard(self) -> None:
        """Removes what has not been committed: the temporary files, the created directories (a
        second Ctrl-C waits until they are gone)."""
        with interrupts_deferred():
            self._discard()

    def _discard(self) -> None:
        for temporary, _ in self._files:
            with contextlib.suppress(OSError):
                os.remove(temporary)
        self._files = []
        self._appends = {}
        for d in reversed(self._made_directories):
            with contextlib.suppress(OSError):  # not empty: something else wrote there meanwhile
                os.rmdir(d)
        self._made_directories = []


def _claim_hidden_name(directory: str, suffix: str, create: Callable[[str], None]) -> str:
    """A short hidden name of its own in ``directory`` (not derived from a destination's, which may
    be as long as the file system allows), on which ``create(path)`` makes a file; a name already
    taken (FileExistsError) is skipped, so nothing else is overwritten."""
    while True:
        path = os.path.join(directory, f".flip-loss-{secrets.token_hex(6)}.{suffix}")
        try:
            create(path)
            return path
        except FileExistsError:
            continue


def _new_hidden_file(directory: str, suffix: str) -> str:
    """A new empty hidden file in ``directory``, created exclusively."""
    return _claim_hidden_name(
        directory, suffix, lambda path: os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
    )


def _keep_a_way_back(path: str) -> str:
    """A hidden second name (a hard link; a copy where the file system has none) for the file
    ``path``, so that a commit that fails after replacing it can put it back."""
    directory = os.path.dirname(path)
    try:
        return _claim_hidden_name(directory, "old", lambda backup: os.link(path, backup, follow_symlinks=False))
    except OSError:  # no hard links here (e.g. some network or FAT file systems)
        backup = _new_hidden_file(directory, "old")
        try:
            shutil.copy2(path, backup, follow_symlinks=False)
        except BaseException:
            with contextlib.suppress(OSError):
                os.remove(backup)
            raise
        return backup


def write_text_file(text: str) -> Callable[[str], None]:
    """A writer (for :meth:`Staging.write`) of the text ``text``, in UTF-8; file names in it that
    are not valid UTF-8 keep their bytes."""

    def write(path: str) -> None:
        with open(path, "w", encoding="utf-8", errors="surrogateescape", newline="") as f:
            f.write(text)

    return write


def _write_all(fd: int, data: bytes) -> None:
    """``os.write`` until every byte is written: a write the file system cuts short (a full disk,
    a quota, a file size limit) is continued, and fails with the file system's error."""
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        if n <= 0:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        view = view[n:]


def read_csv_header(path: str) -> Optional[bytes]:
    """The first line of the existing file ``path`` (without its line end), or None when it does
    not exist or is empty."""
    try:
        with open(path, "rb") as f:
            line = f.readline(1 << 16)
    except FileNotFoundError:
        return None
    return line.rstrip(b"\r\n") or None


def check_csv_header(path: str, shown: str, header: Sequence[str]) -> None:
    """An existing CSV file must have this run's header, so that its rows mean what its header
    says: appending to a file of another layout (another tool's, or a run with and one without
    --timing) is refused before anything is evaluated."""
    try:
        found = read_csv_header(path)
    except OSError as exc:
        raise UsageError(f"cannot read the CSV file '{shown}': {exc.strerror or exc}") from None
    want = _csv_text(header, [], True).rstrip(b"\n")
    if found is not None and found != want:
        raise UsageError(
            f"the CSV file '{shown}' has another header ({found.decode('utf-8', 'replace')[:200]}); "
            f"flip-loss appends only to a file of its own layout ({want.decode()}"
            "; --timing adds the evaluation time): give a new file name"
        )


class _OpenCsv:
    """An appended CSV file during a commit: open, locked and checked, its old length kept so that
    :meth:`undo` can take back what :meth:`append` wrote (and remove the file if it was new)."""

    def __init__(self, csv_file: "AppendedCsv"):
        import fcntl

        self.csv_file = csv_file
        destination = csv_file.destination
        self.existed = os.path.lexists(destination)
        while True:
            fd = os.open(destination, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o666)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                st = os.fstat(fd)
                try:
                    now = os.stat(destination)
                except FileNotFoundError:
                    now = None
                if now is None or (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino):
                    # Another run removed the file it had created (its commit failed) while this
                    # one waited for the lock: append to the file that is there now.
                    os.close(fd)
                    continue
                self.size = st.st_size
                check_csv_header(destination, destination, csv_file.header)
            except BaseException:
                os.close(fd)
                raise
            self.fd = fd
            break
        self.written = False

    def append(self) -> None:
        text = _csv_text(self.csv_file.header, self.csv_file.rows, with_header=self.size == 0)
        if self.size and os.pread(self.fd, 1, self.size - 1) != b"\n":
            text = b"\n" + text
        self.written = True
        _write_all(self.fd, text)

    def undo(self) -> None:
        """Takes the appended rows back (still under the lock)."""
        with contextlib.suppress(OSError):
            if not self.existed and self.size == 0:
                os.remove(self.csv_file.destination)
            elif self.written:
                os.ftruncate(self.fd, self.size)

    def close(self) -> None:
        os.close(self.fd)  # releases the lock


class AppendedCsv:
    """A writer (for :meth:`Staging.write`) that appends ``rows`` to the CSV file ``destination``
    (with ``header`` first when it is new or empty). The staged temporary file holds the whole text
    (which proves the location writable); at :meth:`Staging.commit` the rows are appended under an
    exclusive lock of the file, so runs appending to the same CSV at the same time keep every row,
    and a failed append is truncated away again."""

    def __init__(self, destination: str, rows: Sequence[Sequence[str]], header: Sequence[str] = CSV_HEADER):
        self.destination = destination
        self.rows = [list(r) for r in rows]
        self.header = tuple(header)

    def __call__(self, path: str) -> None:
        with open(path, "wb") as f:
            f.write(_csv_text(self.header, self.rows, with_header=True))

    def open(self) -> _OpenCsv:
        return _OpenCsv(self)


def write_appended_csv(
    destination: str, rows: Sequence[Sequence[str]], header: Sequence[str] = CSV_HEADER
) -> AppendedCsv:
    return AppendedCsv(destination, rows, header)


def write_png(image) -> Callable[[str], None]:
    """A writer (for :meth:`Staging.write`) of the 8-bit image ``image`` as PNG."""
    from ..imageio import save_png

    return lambda path: save_png(path, image)
