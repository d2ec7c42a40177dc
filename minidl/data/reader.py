"""``DataReader``: batches from a random-access data set, with an O(1) checkpointable position."""

from __future__ import annotations

import numpy as np

from .protocol import BatchReader
from .sampling import batch_count, epoch_order, rank_slice
from .state import check_shard
from ..distributed.agreement import check_same_on_all_ranks
from ..distributed.batch_samples import record_batch
from ..distributed.process_group import get_rank, get_world_size
from ..validation import check_non_negative_int


def as_batch(samples) -> tuple:
    """Normalise what ``dataset[indices]`` returned into a tuple of NumPy arrays."""
    if isinstance(samples, np.ndarray):
        return (samples,)
    return tuple(np.asarray(part) for part in samples)


class _EpochCursor:
    """Walks one global order per epoch, a global batch at a time, and keeps this rank's slice.

    The job as a whole consumes each epoch's order (a pure function of ``(seed, epoch)``) from
    the front, ``batch_size * world_size`` samples per step; rank ``r`` takes the ``r``-th
    block of ``batch_size`` samples of that global batch, so the ranks' batches side by side
    are exactly the batch one process with the global batch size would read. Progress is
    global -- ``(epoch, position)`` with ``position`` counting the samples the whole job has
    consumed in the epoch -- and so is the same on every rank: one saved state restores every
    rank, at this world size or any other (elastic resume continues the same global sample
    sequence).
    """

    def __init__(self, fetch, length, batch_size, shuffle, seed, drop_last, rank, world_size):
        self.fetch = fetch  # indices -> batch
        self.length = length
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.seed = seed
        self.rank = rank
        self.world_size = world_size
        self.drop_last = drop_last
        self.global_batch = batch_size * world_size
        self.epoch_end = self._epoch_end(0)
        self.epoch = 0
        self.position = 0
        self._order_epoch = None
        self._order = None

    def _epoch_end(self, start: int) -> int:
        """Where an epoch read from ``start`` on stops: drop_last leaves the incomplete tail
        batch unread. ``start`` is 0 except in an epoch resumed from a state saved with
        another global batch size."""
        remaining = self.length - start
        return start + min(batch_count(remaining, self.global_batch, self.drop_last)
                           * self.global_batch, remaining)

    def _current_order(self) -> np.ndarray:
        if self._order_epoch != self.epoch:
            self._order = epoch_order(self.length, self.seed, self.epoch, self.shuffle)
            self._order_epoch = self.epoch
        return self._order

    def take_indices(self) -> np.ndarray:
        """This rank's sample indices of the next batch; the cursor moves past the whole job's
        global batch."""
        stop = min(self.position + self.global_batch, self.epoch_end)
        global_batch = self._current_order()[self.position:stop]
        indices = rank_slice(global_batch, self.rank, self.world_size)
        self.position = stop
        if self.position >= self.epoch_end:
            self.epoch += 1
            self.position = 0
            self.epoch_end = self._epoch_end(0)
        return indices

    def produce(self):
        return self.fetch(self.take_indices())

    def rank_samples_from(self, position: int) -> int:
        """How many samples this rank's batch holds when the job's batch starts at
        ``position`` (the same global batch and split as :meth:`take_indices`)."""
        global_samples = min(self.global_batch, self._epoch_end(position) - position)
        return len(rank_slice(np.arange(global_samples), self.rank, self.world_size))

    def progress(self) -> dict:
        return {"epoch": self.epoch, "position": self.position}

    def seek(self, progress: dict) -> None:
        epoch = check_non_negative_int("state field 'epoch'", progress["epoch"])
        position = check_non_negative_int("state field 'position'", progress["position"])
        if position >= self.length:
            raise ValueError(
                f"state field 'position' is {position}, but an epoch of this reader has only "
                f"{self.length} samples (a saved position is always inside the epoch)")
        end = self._epoch_end(position)
        if end == position:
            # Saved with another global batch size (world size or batch size): what is left
            # of the epoch is less than one of our batches, and drop_last drops it.
            epoch, position, end = epoch + 1, 0, self._epoch_end(0)
        self.epoch, self.position, self.epoch_end = epoch, position, end


class DataReader(BatchReader):
    """Batches of a data set, optionally shuffled, whose position can be saved and restored.

    ``dataset`` is any object with ``len()`` whose ``dataset[index_array]`` returns the samples
    at those indices as an array or a tuple of arrays (``ArrayDataset``, ``NpyDataset``, ...).
    Each epoch visits the samples in the order of a permutation derived from ``(seed, epoch)``.
    With ``world_size > 1`` (data-parallel training), ``batch_size`` is per rank: each step the
    job reads the next ``batch_size * world_size`` samples of that order and rank ``rank``
    takes its block of them, so ranks see disjoint samples that together cover the epoch.

    ``position`` counts the samples the whole job has consumed in the current epoch. The
    state is global -- the same on every rank -- and does not depend on the world size or the
    batch size: a state saved by one rank restores every rank, and a job saved at one world
    size resumes at another on the same global sample sequence.
    ``prefetch=N`` prepares up to N batches on a background thread.

    Built with the process group's world size (every rank builds it, as in the usual script),
    it checks that every rank gave the same data set length, batch size, shuffle, seed and
    ``drop_last`` and its own rank, and raises ``DistributedError`` on every rank otherwise.
    """

    kind = "DataReader"

    def __init__(self, dataset, batch_size: int, shuffle: bool = False, seed: int = 0,
                 drop_last: bool = False, *, rank: int = 0, world_size: int = 1,
                 prefetch: int = 0):
        batch_size = check_non_negative_int("batch_size", batch_size, minimum=1)
        seed = check_non_negative_int("seed", seed)
        rank, world_size = check_shard(rank, world_size)
        length = len(dataset)
        self.dataset = dataset
        self.batch_size = batch_size
        self.shuffle = bool(shuffle)
        self.seed = seed
        self.drop_last = bool(drop_last)
        self.rank = rank
        self.world_size = world_size
        cursor = _EpochCursor(self._fetch_batch, length, batch_size, self.shuffle, seed,
                              self.drop_last, rank, world_size)
        if cursor.epoch_end == 0:
            raise ValueError(
                f"batch_size: {batch_size} x world_size {world_size} leaves no batch in an "
                f"epoch of {length} samples (drop_last={self.drop_last})")
        super().__init__(cursor, prefetch)
        if world_size > 1 and world_size == get_world_size():
            # Ranks that disagree on the length or the batch size run out of batches at
            # different steps and hang at a collective; better to fail here, side by side.
            check_same_on_all_ranks(type(self).__name__, dict(
                self._settings(), batch_size=batch_size, world_size=world_size,
                rank_is_process_rank=rank == get_rank()))

    def _fetch_batch(self, indices: np.ndarray):
        """The batch made of the samples at ``indices`` (subclasses change how it is made)."""
        return as_batch(self.dataset[indices])

    def next_batch(self) -> tuple:
        """Return the next batch (a tuple of NumPy arrays), rolling over into the next epoch.

        In a data-parallel job it also records how many samples this rank's batch holds, from
        which ``DistributedDataParallel`` weights this rank's gradient (the last batch of an
        epoch splits unevenly; see :mod:`minidl.distributed.batch_samples`)."""
        start = self._progress()["position"]
        batch = super().next_batch()
        if self.world_size > 1:
            record_batch(self._cursor.rank_samples_from(start), self.batch_size)
        return batch

    def __len__(self) -> int:
        """Number of batches (steps) in a full epoch."""
        return -(-self._cursor.epoch_end // self._cursor.global_batch)

    def _settings(self) -> dict:
        # Only what decides the global sample sequence must match; batch_size and world_size
        # only group it into steps (elastic resume changes them), so they are not compared.
        return {
            "dataset_length": self._cursor.length,
            "shuffle": self.shuffle,
            "seed": self.seed,
            "drop_last": self.drop_last,
        }
