"""Folder mode under ``torchrun``: the pairs shared out among the ranks, the outputs written by rank 0.

``torchrun --nproc_per_node=K -m flip_loss --reference-dir R --test-dir T ...`` starts K processes
(on one machine or several) that join one gloo group over TCP: outputs travel as bytes, so no GPU
collective is needed. Input paths must name the same files on every machine; outputs are written
only on rank 0's.

1. Rank 0 checks what a single process checks before evaluating, shares the pairs out balanced by
   pixel count, and broadcasts the plan; anything wrong ends every rank.
2. In rounds, every rank evaluates its next pair on its device and renders its outputs into
   memory; rank 0 gathers them and claims and stages them as a single process would. Every rank
   takes part in every collective of every round, so none waits for one another skips. A pair
   that cannot be evaluated is reported (exit code 4); any other error on any rank (a bug, a
   device, Ctrl-C) stops every rank after that round. A rank that dies is noticed by the others'
   collectives (``--dist-timeout``). Ctrl-C or SIGTERM ends a rank promptly: the collective runs in
   a helper thread (:class:`_Group`), and an interrupted rank waits at most ``INTERRUPT_GRACE_S``.
3. Rank 0 records the pairs in file-name order, so the CSV file, the maps and the report are those
   of one process (evaluation times aside), and publishes every output at once.
"""

import datetime
import os
import shutil
import sys
import tempfile
import threading
import time
import traceback
from typing import Dict, List, NamedTuple, Optional, Sequence, Tuple

from ..distributed import LaunchedWorld
from .console import Console, flush_stdout, write_text
from .errors import EXIT_INTERNAL, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE, PROG, UsageError
from .evaluate import Result, resolve_device
from .outputs import Names, Output, Staging
from .pair_steps import PairSettings, PairWork, PreparedPair, Wanted
from .report import PairRecord
from .run import Run

__all__ = ["run_sharded", "balanced_shards"]

Pair = Tuple[str, str]


class Plan(NamedTuple):
    """What rank 0 tells every rank before the first round."""

    pairs: List[Pair]  # in file-name order; pair i has index i + 1
    shards: List[List[int]]  # per rank, the 0-based positions of its pairs, in evaluation order
    settings: PairSettings  # rank 0's, which every rank evaluates with
    refused: Dict[int, str]  # the pairs that cannot be evaluated (1-based index: why), as Run.refused


class Stop(NamedTuple):
    """Rank 0's word that every rank stops now (a failure somewhere); the run's exit code."""

    code: int


class Evaluated(NamedTuple):
    """A pair a rank evaluated: its outputs rendered, the result without its maps."""

    index: int
    reference: str
    test: str
    names: Names
    wanted: List[Wanted]  # (kind, path, what) of each output
    files: Dict[str, bytes]  # by kind
    result: Result  # error and exposure maps left out
    record: Optional[PairRecord]  # --report


class Failed(NamedTuple):
    """A pair that could not be evaluated (an unreadable image, different sizes, ...)."""

    index: int
    reference: str
    test: str
    message: str


class Broken(NamedTuple):
    """A rank that cannot go on: its exit code and what to print (the one-line message of an
    error the user can act on, or a traceback)."""

    rank: int
    code: int
    message: str


class LostRanks(Exception):
    """A collective failed: another rank has gone (or did not answer within --dist-timeout)."""


def balanced_shards(pixels: Sequence[int], ranks: int) -> List[List[int]]:
    """The positions of the pairs each rank evaluates: the largest pair first, each to the rank with
    the fewest pixels so far (the lowest rank on a tie). Every rank evaluates its pairs largest
    first, so that the pairs of one round are of similar size; for pairs of one size this is
    round-robin in file-name order."""
    order = sorted(range(len(pixels)), key=lambda i: (-pixels[i], i))
    loads = [0] * ranks
    shards: List[List[int]] = [[] for _ in range(ranks)]
    for i in order:
        rank = min(range(ranks), key=lambda r: (loads[r], r))
        shards[rank].append(i)
        loads[rank] += pixels[i]
    return shards


def _pixels(path: str) -> int:
    """The pixel count of ``path`` from its header; 0 when it cannot be read (the pair then fails
    fast wherever it goes)."""
    from ..imageio import image_size

    try:
        width, height = image_size(path)
    except (OSError, ValueError):
        return 0
    return width * height


class CapturedOutputs:
    """Stands in for the run's :class:`~.outputs.Staging` on a rank that evaluates pairs for rank 0:
    every writer writes into a private temporary directory, and the bytes are kept for rank 0 to
    stage as the file they belong to."""

    def __init__(self):
        self._directory = tempfile.mkdtemp(prefix="flip-loss-rank-")
        self._files: Dict[str, bytes] = {}

    def write(self, out: Output, write) -> None:
        path = os.path.join(self._directory, "output")
        try:
            write(path)
            with open(path, "rb") as f:
                self._files[out.path] = f.read()
        except OSError as exc:
            raise UsageError(f"cannot render the {out.what} '{out.path}': {exc.strerror or exc}") from None
        finally:
            if os.path.exists(path):
                os.remove(path)

    def take(self) -> Dict[str, bytes]:
        files, self._files = self._files, {}
        return files

    def close(self) -> None:
        shutil.rmtree(self._directory, ignore_errors=True)


def _unclaimed(wanted: Sequence[Wanted]) -> Dict[str, Output]:
    """A rank's provisional outputs of a pair, by kind: rank 0 claims them through its guard."""
    return {kind: Output(path, os.path.realpath(path), what) for kind, path, what in wanted}


class RankWorker:
    """A rank's share of the work: each pair prepared and evaluated by the run's
    :class:`~.pair_steps.PairWork`, with rank 0's settings, its outputs rendered into memory
    (:class:`CapturedOutputs`) instead of claimed and written; rank 0 does that."""

    def __init__(self, settings: PairSettings, device):
        self.captured = CapturedOutputs()
        try:
            self.work = PairWork(settings, device, claim=_unclaimed, sink=self.captured)
        except BaseException:
            self.captured.close()
            raise

    def pair(self, position: int, reference: str, test: str, refused: Optional[str] = None):
        """Pair ``position`` (0-based) as an :class:`Evaluated` or :class:`Failed` (``refused``: why
        the pair cannot be evaluated, known beforehand)."""
        index = position + 1
        if refused is not None:
            return Failed(index, reference, test, refused)
        try:
            p = self.work.prepare(index, reference, test, keep_test=True)
        except UsageError as exc:
            return Failed(index, reference, test, str(exc))
        result, record = self.work.evaluate(p)
        rendered = self.captured.take()
        return Evaluated(
            index,
            reference,
            test,
            p.names,
            [(kind, out.path, out.what) for kind, out in p.outputs.items()],
            {kind: rendered[out.path] for kind, out in p.outputs.items()},
            result._replace(error=None, exposure=None),
            record,
        )

    def close(self) -> None:
        self.captured.close()


def _broken(rank: int, exc: BaseException) -> Broken:
    if isinstance(exc, UsageError):
        return Broken(rank, EXIT_USAGE, str(exc))
    if isinstance(exc, KeyboardInterrupt):
        return Broken(rank, EXIT_INTERRUPTED, "")
    return Broken(rank, EXIT_INTERNAL, traceback.format_exc())


def _code_of(exc: BaseException) -> int:
    if isinstance(exc, UsageError):
        return EXIT_USAGE
    if isinstance(exc, KeyboardInterrupt):
        return EXIT_INTERRUPTED
    return EXIT_INTERNAL


def _heard(group: "_Group", exc: BaseException) -> None:
    """An error this rank caught to send to the others: an interruption must not wait for them
    long (they may be busy with a long pair, or hung)."""
    if isinstance(exc, KeyboardInterrupt):
        group.interrupted()


def _write_bytes(data: bytes):
    def write(path: str) -> None:
        with open(path, "wb") as f:
            f.write(data)

    return write


class Collector:
    """Rank 0's side of the rounds: stages what the ranks send and hands the pairs to the
    :class:`Run` in file-name order."""

    def __init__(self, run: Run):
        self.run = run
        self._waiting: Dict[int, tuple] = {}
        self._next = 1

    def take(self, payloads: Sequence[object]) -> Optional[Broken]:
        """The payloads of one round (rank order); the first :class:`Broken`, if any."""
        broken = None
        for payload in payloads:
            if payload is None:
                continue
            if isinstance(payload, Broken):
                broken = broken or payload
                continue
            if isinstance(payload, Failed):
                self._waiting[payload.index] = ("failed", payload.reference, payload.test, payload.message)
            else:
                self._stage(payload)
            self.run.console.advance()
        while self._next in self._waiting:
            self._hand_over(self._next, self._waiting.pop(self._next))
            self._next += 1
        return broken

    def _stage(self, e: Evaluated) -> None:
        try:
            outputs = self.run.claim(e.wanted)
        except UsageError as exc:  # as a single process reports an output it cannot claim
            self._waiting[e.index] = ("failed", e.reference, e.test, str(exc))
            return
        for kind, out in outputs.items():
            self.run.staging.write(out, _write_bytes(e.files[kind]))
        prepared = PreparedPair(e.index, e.reference, e.test, None, e.names, outputs)
        self._waiting[e.index] = ("evaluated", prepared, e.result, e.record)

    def _hand_over(self, index: int, item: tuple) -> None:
        if item[0] == "failed":
            _, reference, test, message = item
            self.run.record_failure(index, reference, test, message)
            return
        _, prepared, result, record = item
        self.run.record_result(prepared, result, record)


def _raise_broken(broken: Broken) -> None:
    """Rank 0 ends the run as the broken rank's error would end a single process."""
    where = f"rank {broken.rank}: " if broken.rank != 0 else ""
    if broken.code == EXIT_USAGE:
        raise UsageError(where + broken.message)
    if broken.code == EXIT_INTERRUPTED:
        raise KeyboardInterrupt
    raise RuntimeError(f"{where}{broken.message.rstrip()}")


# How long an interrupted rank still waits for the others to hear of it (the round in which it
# sends the interruption, and rank 0's word after it) before it leaves without them.
INTERRUPT_GRACE_S = 3.0
# How often the main thread wakes while a collective runs (a signal handler runs between slices).
_WAIT_SLICE_S = 0.1


class _Group:
    """The run's gloo group and its two collectives, failures turned into :class:`LostRanks`.

    Each collective runs in a helper thread while the main thread waits in short slices: gloo's
    wait cannot be interrupted, and a signal's Python handler runs only in the main thread, between
    bytecodes, so a rank blocked in the collective itself would ignore Ctrl-C and SIGTERM until
    ``--dist-timeout``. When the wait is interrupted the group is abandoned: the collective is left
    waiting in its daemon thread (destroying a group whose collective still waits would block until
    it ends), this rank leaves, and the others see it gone at their next collective. The process
    still exits at once: interpreter shutdown does not wait for a daemon thread, and the thread's
    frame keeps the group alive, so no destructor waits for the collective either. After
    :meth:`interrupted`, a collective waits at most ``INTERRUPT_GRACE_S`` seconds for the others,
    so an interrupted rank tells them if they answer, and leaves promptly if they do not."""

    def __init__(self, world: LaunchedWorld, timeout_s: float):
        import torch.distributed as dist

        self.dist, self.world = dist, world
        self.abandoned = False
        self._grace_until: Optional[float] = None
        timeout = datetime.timedelta(seconds=timeout_s)
        self._owns_default = not dist.is_initialized()
        try:
            if self._owns_default:
                self._wait(
                    lambda: dist.init_process_group(
                        "gloo", timeout=timeout, rank=world.rank, world_size=world.world_size
                    )
                )
                self.group = None
            else:  # inside a program that has its own group: a gloo group of the same ranks
                self.group = self._wait(lambda: dist.new_group(backend="gloo", timeout=timeout))
        except (RuntimeError, ValueError) as exc:
            raise LostRanks(
                f"rank {world.rank} of {world.world_size} could not join the other ranks "
                f"({str(exc).splitlines()[0] if str(exc) else type(exc).__name__})"
            ) from None

    def interrupted(self) -> None:
        """This rank was interrupted: the next collectives wait for the others only briefly."""
        if self._grace_until is None:
            self._grace_until = time.monotonic() + INTERRUPT_GRACE_S

    def gather(self, payload) -> Optional[List[object]]:
        received = [None] * self.world.world_size if self.world.rank == 0 else None
        self._call(lambda: self.dist.gather_object(payload, received, dst=0, group=self.group), "gathering results")
        return received

    def broadcast(self, value):
        box = [value]
        self._call(lambda: self.dist.broadcast_object_list(box, src=0, group=self.group), "waiting for rank 0")
        return box[0]

    def _wait(self, call):
        """``call()``'s result, ``call`` run in a helper thread; a KeyboardInterrupt (Ctrl-C, SIGTERM
        through the CLI's handler) or the end of the grace period abandons the group."""
        if self.abandoned:
            raise KeyboardInterrupt
        done = threading.Event()
        outcome: Dict[str, object] = {}

        def target():
            try:
                outcome["value"] = call()
            except BaseException as exc:  # noqa: BLE001 - handed to the waiting thread
                outcome["error"] = exc
            finally:
                done.set()

        helper = threading.Thread(target=target, name=f"{PROG} rank {self.world.rank} collective", daemon=True)
        try:
            helper.start()
            while not done.wait(_WAIT_SLICE_S):
                if self._grace_until is not None and time.monotonic() > self._grace_until:
                    raise KeyboardInterrupt
        except BaseException:
            if not done.is_set():
                self.abandoned = True
            raise
        if "error" in outcome:
            raise outcome["error"]
        return outcome.get("value")

    def _call(self, call, what: str) -> None:
        try:
            self._wait(call)
        except (RuntimeError, ValueError) as exc:  # gloo reports a peer that went away as RuntimeError
            if self._grace_until is not None:  # the others left first, interrupted as this rank was
                raise KeyboardInterrupt from None
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise LostRanks(
                f"rank {self.world.rank} of {self.world.world_size} lost the other ranks while {what} ({first})"
            ) from None

    def close(self) -> None:
        if self.abandoned:  # its collective still waits: destroying the group would wait for it
            return
        try:
            if self._owns_default:
                self.dist.destroy_process_group()
            elif self.group is not None:
                self.dist.destroy_process_group(self.group)
        except (RuntimeError, ValueError):  # already gone with a lost rank
            pass


def run_sharded(args, t_start: float, world: LaunchedWorld) -> int:
    """Runs the folder-mode evaluation of parsed ``args`` as rank ``world.rank`` of a torchrun
    launch; returns this rank's exit code (rank 0's is the run's)."""
    group = None
    try:
        try:
            group = _Group(world, args.dist_timeout)
        except KeyboardInterrupt:  # while waiting for the others to join
            raise KeyboardInterrupt("no output file was written") from None
        return _run_rounds(args, t_start, world, group)
    except LostRanks as exc:  # printed on every rank: it is this rank's own view
        flush_stdout()
        write_text(sys.stderr, f"{PROG}: error: {exc}; no output file was written\n")
        return EXIT_INTERNAL
    finally:
        if group is not None:
            group.close()


def _plan(run: Run, world_size: int) -> Plan:
    # A refused pair costs nothing to evaluate: it weighs nothing in the balance.
    pixels = [0 if i in run.refused else _pixels(test) for i, (_, test) in enumerate(run.pairs, 1)]
    return Plan(list(run.pairs), balanced_shards(pixels, world_size), run.settings, dict(run.refused))


def _run_rounds(args, t_start: float, world: LaunchedWorld, group: _Group) -> int:
    rank = world.rank
    console = Console(args.verbosity if rank == 0 else 0)
    staging = Staging()
    run: Optional[Run] = None
    worker: Optional[RankWorker] = None  # None once this rank has stopped evaluating
    workers: List[RankWorker] = []  # to close at the end
    failure: Optional[BaseException] = None  # rank 0's own, re-raised once every rank knows
    try:
        # 1. The plan.
        plan = None
        if rank == 0:
            try:
                run = Run(args, console, staging, device=resolve_device(args.device, world.local_rank))
                plan = _plan(run, world.world_size)
                run.start_writing()
                if console.verbosity >= 1 and not args.no_progress:
                    console.start_progress(len(plan.pairs))
            except BaseException as exc:  # noqa: BLE001 - every rank must hear of it
                failure, plan = exc, Stop(_code_of(exc))
                _heard(group, exc)
        plan = group.broadcast(plan)
        if isinstance(plan, Stop):
            if failure is not None:
                raise failure
            return EXIT_OK

        # 2. The rounds.
        mine = plan.shards[rank]
        rounds = max(len(shard) for shard in plan.shards)
        collector = Collector(run) if rank == 0 else None
        own_code = EXIT_OK
        pending: Optional[Broken] = None
        try:
            worker = RankWorker(plan.settings, resolve_device(args.device, world.local_rank))
            workers.append(worker)
        except BaseException as exc:  # noqa: BLE001 - sent in the first round
            pending = _broken(rank, exc)
            _heard(group, exc)
        for r in range(rounds):
            payload = pending
            if payload is None and worker is not None and r < len(mine):
                position = mine[r]
                try:
                    payload = worker.pair(position, *plan.pairs[position], plan.refused.get(position + 1))
                except BaseException as exc:  # noqa: BLE001 - sent to rank 0
                    payload = _broken(rank, exc)
                    _heard(group, exc)
            if isinstance(payload, Broken):
                own_code, pending = payload.code, None
                worker = None  # this rank evaluates nothing more
            received = group.gather(payload)
            decision = None
            if rank == 0:
                try:
                    broken = collector.take(received)
                    if broken is not None:
                        decision = Stop(broken.code)
                        _raise_broken(broken)
                except BaseException as exc:  # noqa: BLE001 - every rank must hear of it
                    failure, decision = exc, Stop(_code_of(exc))
                    _heard(group, exc)
            decision = group.broadcast(decision)
            if isinstance(decision, Stop):
                if failure is not None:
                    raise failure
                return own_code
        if rank != 0:
            return own_code

        # 3. Rank 0 writes everything.
        return run.finish(t_start)
    except KeyboardInterrupt:
        raise KeyboardInterrupt(
            "the outputs had been written" if staging.committed else "no output file was written"
        ) from None
    finally:
        for w in workers:
            w.close()
        console.close()
        staging.discard()
