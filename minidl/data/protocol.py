"""The reader protocol shared by every reader: batches, epochs, and an exact saved position.

A reader is split in two:

- a *cursor* does the work -- ``produce()`` returns the next batch, ``progress()`` describes
  where it stands as a small dict (always containing ``epoch`` and ``position``; ``epoch`` is
  also an attribute), and ``seek(progress)`` goes back there;
- :class:`BatchReader` (this module) is what users hold: iteration, ``next_batch``,
  ``state_dict`` and optional prefetching, written once for all readers.

Cursors keep their progress *normalised*: after the last batch of an epoch they already point at
the start of the next epoch. So "is the epoch over?" is just "did ``epoch`` change?", which is
also what a prefetching reader can answer from the progress that travels with each batch.
"""

from __future__ import annotations

from .prefetch import Prefetcher
from .state import STATE_VERSION, check_state
from ..validation import check_non_negative_int


class BatchReader:
    """Base class of the readers: the user-facing half of the protocol.

    Subclasses set ``kind`` and ``progress_fields``, build a cursor, and implement
    ``_settings()`` -- the values that must match for a saved state to be restorable.
    """

    kind = "BatchReader"
    progress_fields: tuple[str, ...] = ("epoch", "position")

    def __init__(self, cursor, prefetch: int = 0):
        self._cursor = cursor
        self._prefetch_depth = check_non_negative_int("prefetch", prefetch)
        self._prefetcher: Prefetcher | None = None
        self._handed_progress: dict | None = None

    # -- what subclasses provide ---------------------------------------------------------------

    def _settings(self) -> dict:
        raise NotImplementedError

    # -- handing out batches -------------------------------------------------------------------

    def next_batch(self) -> tuple:
        """Return the next batch (a tuple of NumPy arrays), rolling over into the next epoch."""
        if self._prefetch_depth == 0:
            return self._cursor.produce()
        if self._prefetcher is None:
            self._handed_progress = self._cursor.progress()
            self._prefetcher = self._start_prefetch()
        batch, self._handed_progress = self._prefetcher.get()
        return batch

    def __iter__(self):
        """Yield the batches left in the current epoch; afterwards ``epoch`` has advanced by one."""
        start_epoch = self.epoch
        while True:
            batch = self.next_batch()
            yield batch
            if self.epoch != start_epoch:
                return

    # -- where the reader stands ---------------------------------------------------------------

    def _progress(self) -> dict:
        if self._prefetcher is not None:
            return self._handed_progress
        return self._cursor.progress()

    @property
    def epoch(self) -> int:
        """Index of the current epoch, counting from 0."""
        if self._prefetcher is not None:
            return self._handed_progress["epoch"]
        return self._cursor.epoch  # cheaper than a full progress() on every loop step

    @property
    def position(self) -> int:
        """Where the next batch starts within the current epoch (the unit depends on the reader)."""
        return self._progress()["position"]

    def state_dict(self) -> dict:
        """A small msgpack-able dict from which ``load_state_dict`` restores the position exactly.

        It reflects the batches handed out so far, including inside a ``for`` loop over the
        reader, and never batches a prefetch thread has only read ahead.
        """
        state = {"kind": self.kind, "version": STATE_VERSION}
        state.update(self._settings())
        state.update(self._progress())
        return state

    def load_state_dict(self, state: dict) -> None:
        """Continue exactly from ``state``; raise ``ValueError`` naming a field that does not fit."""
        check_state(state, self.kind, self._settings(), self.progress_fields)
        self._stop_prefetch()
        self._cursor.seek({name: state[name] for name in self.progress_fields})

    # -- background prefetch -------------------------------------------------------------------

    def _start_prefetch(self):
        """The object that reads ahead: ``get()`` gives ``(batch, progress)``, ``close()``."""
        return Prefetcher(self._cursor, self._prefetch_depth)

    def _stop_prefetch(self) -> None:
        if self._prefetcher is None:
            return
        self._prefetcher.close()
        self._prefetcher = None
        # The thread ran ahead of the user; rewind the cursor to what was handed out.
        self._cursor.seek(self._handed_progress)

    def close(self) -> None:
        """Stop the prefetch thread, if any. The reader stays usable."""
        self._stop_prefetch()

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()

    def __del__(self):
        # Garbage collection can run this on any thread -- even inside a thread's start-up,
        # while another thread waits for that start -- so it must never block on a join:
        # the workers are told to stop and left to exit on their own.
        prefetcher = getattr(self, "_prefetcher", None)
        if prefetcher is not None:
            prefetcher.close(wait=False)
