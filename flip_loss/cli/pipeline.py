"""The pairs of a run in a pipeline: reading threads decode the next pairs' images while the
calling thread evaluates FLIP on a pair, and one thread pools and writes the maps of the pair
before.

Decoding a 1080p pair takes longer than evaluating it, pooling and writing its map together less,
and only the evaluation uses every core: one reading thread was the pipeline's slowest stage, so
``AHEAD`` pairs are read at once, each in a thread of its own. Each step keeps the GIL only briefly
(torch's kernels, Pillow's decoder and the deflate encoders release it), so the steps overlap.
Memory stays bounded: at most ``AHEAD`` pairs are read ahead of the one evaluated, and the
evaluation waits when ``BEHIND`` pairs are waiting to be written.

Everything a run records (the printed lines, the CSV rows, the claims of its outputs) stays in the
calling thread, in pair order: the helper threads only read and write, and :class:`Stages` stops
them, also on an error or Ctrl-C, before the run's staging removes what they wrote.
"""

import collections
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Callable, Deque, Iterable, Iterator, Tuple, TypeVar

from .errors import PROG
from .signals import interrupts_deferred

__all__ = ["AHEAD", "BEHIND", "Stages"]

# Pairs read ahead of the one evaluated (each in a reading thread of its own), and pairs evaluated
# but not yet written.
AHEAD = 2
BEHIND = 1

T = TypeVar("T")


class Stages:
    """The reading threads and the writing thread of a run (a context manager). On leaving, each
    finishes the step it is on and drops the rest; Ctrl-C meanwhile waits until they have (they
    may be writing temporary files, which the run removes afterwards)."""

    def __init__(self):
        self._reader = ThreadPoolExecutor(AHEAD, thread_name_prefix=f"{PROG} read")
        self._writer = ThreadPoolExecutor(1, thread_name_prefix=f"{PROG} write")

    def __enter__(self) -> "Stages":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        with interrupts_deferred():
            for pool in (self._reader, self._writer):
                pool.shutdown(wait=True, cancel_futures=True)

    def read_ahead(self, items: Iterable[T], read: Callable[[T], object]) -> Iterator[Tuple[T, Future]]:
        """``(item, future of read(item))`` in item order, each read started in a reading thread
        up to ``AHEAD`` items before it is yielded."""
        pending: Deque[Tuple[T, Future]] = collections.deque()
        source = iter(items)
        for item in source:
            pending.append((item, self._reader.submit(read, item)))
            if len(pending) > AHEAD:
                yield pending.popleft()
        while pending:
            yield pending.popleft()

    def write(self, write: Callable[..., object], *args) -> Future:
        """``write(*args)`` in the writing thread."""
        return self._writer.submit(write, *args)


def finished(value) -> Future:
    """A future already holding ``value`` (a step that needs no thread, kept in the queue's order)."""
    future: Future = Future()
    future.set_result(value)
    return future
