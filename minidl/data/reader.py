"""``DataReader``: batches from a random-access data set, with an O(1) checkpointable position."""

from __future__ import annotations

import numpy as np

from minidl.data.protocol import BatchReader
from minidl.data.sampling import batch_count, epoch_order, shard
from minidl.data.state import check_index, check_shard


def as_batch(samples) -> tuple:
    """Normalise what ``dataset[indices]`` returned into a tuple of NumPy arrays."""
    if isinstance(samples, np.ndarray):
        return (samples,)
    return tuple(np.asarray(part) for part in samples)


class _EpochCursor:
    """Walks this worker's shard of each epoch's order, ``batch_size`` indices at a time.

    Progress is ``(epoch, position)``; the order itself is recomputed from ``(seed, epoch)``
    whenever the epoch changes, so it never has to be saved.
    """

    def __init__(self, fetch, length, batch_size, shuffle, seed, drop_last, rank, world_size):
        self.fetch = fetch  # indices -> batch
        self.length = length
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.seed = seed
        self.rank = rank
        self.world_size = world_size
        shard_length = len(range(rank, length, world_size))
        # Samples an epoch hands out: drop_last leaves the incomplete tail batch unread.
        self.epoch_end = batch_count(shard_length, batch_size, drop_last) * batch_size
        self.epoch_end = min(self.epoch_end, shard_length)
        self.epoch = 0
        self.position = 0
        self._order_epoch = None
        self._order = None

    def _current_order(self) -> np.ndarray:
        if self._order_epoch != self.epoch:
            full = epoch_order(self.length, self.seed, self.epoch, self.shuffle)
            self._order = shard(full, self.rank, self.world_size)
            self._order_epoch = self.epoch
        return self._order

    def take_indices(self) -> np.ndarray:
        """The sample indices of the next batch; the cursor moves past them."""
        stop = min(self.position + self.batch_size, self.epoch_end)
        indices = self._current_order()[self.position:stop]
        self.position = stop
        if self.position >= self.epoch_end:
            self.epoch += 1
            self.position = 0
        return indices

    def produce(self):
        return self.fetch(self.take_indices())

    def progress(self) -> dict:
        return {"epoch": self.epoch, "position": self.position}

    def seek(self, progress: dict) -> None:
        epoch = check_index(progress["epoch"], "state field 'epoch'")
        position = check_index(progress["position"], "state field 'position'")
        if position >= self.epoch_end:
            raise ValueError(
                f"state field 'position' is {position}, but an epoch of this reader ends at "
                f"{self.epoch_end}"
            )
        self.epoch, self.position = epoch, position


class DataReader(BatchReader):
    """Batches of a data set, optionally shuffled, whose position can be saved and restored.

    ``dataset`` is any object with ``len()`` whose ``dataset[index_array]`` returns the samples
    at those indices as an array or a tuple of arrays (``ArrayDataset``, ``NpyDataset``, ...).
    Each epoch visits the samples in the order of a permutation derived from ``(seed, epoch)``.
    With ``world_size > 1``, worker ``rank`` reads every ``world_size``-th entry of that order:
    workers see disjoint samples that together cover the epoch.

    ``position`` counts the samples of this worker's shard handed out in the current epoch.
    ``prefetch=N`` prepares up to N batches on a background thread.
    """

    kind = "DataReader"

    def __init__(self, dataset, batch_size: int, shuffle: bool = False, seed: int = 0,
                 drop_last: bool = False, *, rank: int = 0, world_size: int = 1,
                 prefetch: int = 0):
        batch_size = check_index(batch_size, "batch_size", 1)
        seed = check_index(seed, "seed", 0)
        rank, world_size = check_shard(rank, world_size)
        length = len(dataset)
        self.dataset = dataset
        self.batch_size = batch_size
        self.shuffle = bool(shuffle)
        self.seed = seed
        self.drop_last = bool(drop_last)
        self.rank = rank
        self.world_size = world_size
        cursor = _EpochCursor(self._fetch_batch, length, batch_size, self.shuffle, seed, self.drop_last,
                              rank, world_size)
        if cursor.epoch_end == 0:
            raise ValueError(
                f"batch_size: {batch_size} leaves no batch in an epoch of "
                f"{len(range(rank, length, world_size))} samples (drop_last={self.drop_last})"
            )
        super().__init__(cursor, prefetch)

    def _fetch_batch(self, indices: np.ndarray):
        """The batch made of the samples at ``indices`` (subclasses change how it is made)."""
        return as_batch(self.dataset[indices])

    def __len__(self) -> int:
        """Number of batches in a full epoch."""
        return -(-self._cursor.epoch_end // self.batch_size)

    def _settings(self) -> dict:
        return {
            "dataset_length": self._cursor.length,
            "batch_size": self.batch_size,
            "shuffle": self.shuffle,
            "seed": self.seed,
            "drop_last": self.drop_last,
            "rank": self.rank,
            "world_size": self.world_size,
        }
