"""Gathering batches in worker processes, handed out in order with an exact position.

The main process keeps the cursor: it decides which indices each batch holds (a pure function
of ``(seed, epoch, position)``), and sends only those indices to a pool of processes that run
the data set's ``__getitem__`` and the collation. Results come back in submission order, each
with the progress *after* its batch, so the loader's saved state is "what the user has
received" exactly as with the thread prefetcher -- how many workers ran ahead never shows.

Workers receive the gathering function once, when they start (with the ``fork`` start method it
is inherited, not pickled), and after that only index arrays travel.
"""

from __future__ import annotations

import collections
import multiprocessing
from concurrent.futures import ProcessPoolExecutor

_worker_gather = None  # set in each worker process by _start_worker


def _start_worker(gather) -> None:
    global _worker_gather
    _worker_gather = gather


def _gather_in_worker(indices):
    return _worker_gather(indices)


def _start_method() -> str:
    # fork shares the data set with the workers for free; where it does not exist (Windows,
    # macOS default) spawn pickles it once per worker.
    return "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"


class ProcessPrefetcher:
    """Runs ``gather(indices)`` for the next ``depth`` batches on ``workers`` processes.

    ``finish`` turns what a worker returned into the batch handed to the user (in the main
    process: wrapping arrays as Tensors, or a user ``collate_fn``).
    """

    def __init__(self, cursor, gather, finish, workers: int, depth: int):
        self._cursor = cursor
        self._finish = finish
        self._depth = depth
        self._pending: collections.deque = collections.deque()
        self._pool = ProcessPoolExecutor(
            max_workers=workers, mp_context=multiprocessing.get_context(_start_method()),
            initializer=_start_worker, initargs=(gather,))

    def _fill(self) -> None:
        while len(self._pending) < self._depth:
            indices = self._cursor.take_indices()
            future = self._pool.submit(_gather_in_worker, indices)
            self._pending.append((future, self._cursor.progress()))

    def get(self):
        """The next ``(batch, progress)`` pair; re-raises an error met in a worker."""
        self._fill()
        future, progress = self._pending.popleft()
        return self._finish(future.result()), progress

    def close(self, wait: bool = True) -> None:
        """Stop the workers (waiting for them unless ``wait=False``); read-ahead is discarded."""
        for future, _ in self._pending:
            future.cancel()
        self._pending.clear()
        try:
            self._pool.shutdown(wait=wait, cancel_futures=True)
        except RuntimeError:
            # Garbage collection of a loader nobody closed can run this on the pool's own
            # manager thread, which cannot join itself: the workers still exit, unwaited.
            self._pool.shutdown(wait=False, cancel_futures=True)
