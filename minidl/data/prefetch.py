"""Producing batches ahead of time on a background thread.

The thread owns a *cursor* (the object that knows how to make the next batch) and puts
``(batch, progress after that batch)`` pairs into a bounded queue. The reader hands batches out
in order and remembers the progress that came with the last one, so its saved state is always
"what the user has received" -- never "what the thread has read ahead". NumPy copies and the
Numba parsing kernels release the GIL, which is what lets the thread overlap with training.
"""

from __future__ import annotations

import queue
import threading


class Prefetcher:
    """Runs ``cursor.produce()`` on a daemon thread, at most ``depth`` batches ahead."""

    _POLL_SECONDS = 0.05

    def __init__(self, cursor, depth: int):
        self._cursor = cursor
        self._queue: queue.Queue = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._produce_forever, daemon=True,
                                        name="minidl-data-prefetch")
        self._thread.start()

    def _produce_forever(self) -> None:
        try:
            while not self._stop.is_set():
                item = (self._cursor.produce(), self._cursor.progress(), None)
                self._put(item)
        except BaseException as error:  # handed to the consumer, which re-raises it
            self._put((None, None, error))

    def _put(self, item) -> None:
        # A timed put lets close() stop a producer that is waiting for room in the queue.
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=self._POLL_SECONDS)
                return
            except queue.Full:
                continue

    def get(self):
        """The next ``(batch, progress)`` pair; re-raises an error met by the producer."""
        if self._error is not None:
            raise self._error
        batch, progress, error = self._queue.get()
        if error is not None:
            self._error = error
            raise error
        return batch, progress

    def close(self, wait: bool = True) -> None:
        """Stop the thread (and wait for it unless ``wait=False``); read-ahead is discarded."""
        self._stop.set()
        while True:
            try:
                self._queue.get_nowait()
            except queue.Empty:
                break
        if wait:
            self._thread.join()
