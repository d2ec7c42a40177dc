"""``DataLoader``: PyTorch's loader over a map data set, with DataReader's exact position.

It *is* a :class:`~minidl.data.DataReader` -- the same epoch order derived from ``(seed, epoch)``,
the same ``(epoch, position)`` state, the same mid-epoch resume -- that fetches samples the way
PyTorch does (``dataset[i]`` one at a time, then ``collate_fn``) and yields Tensors.
"""

from __future__ import annotations

import numpy as np

from .collate import collate_arrays, to_tensors
from .iterable import IterableCursor, IterableDataset
from .map_dataset import batch_gatherer
from .protocol import BatchReader
from .reader import DataReader
from .sampler_cursor import SamplerCursor, loader_batch_sampler
from .samplers import BatchSampler
from ..validation import check_non_negative_int


class _Gather:
    """What a worker runs for a batch: ``dataset`` samples at some indices, collated to arrays
    with the default collation or left as a list of samples for a user ``collate_fn``.

    A module-level class (not a closure) so that it pickles when workers are spawned.
    """

    def __init__(self, dataset, default_collation: bool):
        self.dataset = dataset
        self.columns = batch_gatherer(dataset) if default_collation else None
        self.default_collation = default_collation

    def __call__(self, indices: np.ndarray):
        if self.columns is not None:
            return self.columns(indices)
        getitems = getattr(self.dataset, "__getitems__", None)
        samples = getitems(indices.tolist()) if callable(getitems) \
            else [self.dataset[int(i)] for i in indices]
        return self.collate(samples)

    def collate(self, samples: list):
        """A list of samples as a batch of arrays (default collation) or the list itself."""
        return collate_arrays(samples) if self.default_collation else samples


class DataLoader(DataReader):
    """Batches of a map data set (``len(ds)`` and ``ds[i]``), as Tensors, resumable exactly.

    ``batch_size``, ``shuffle``, ``drop_last``, ``collate_fn`` and ``num_workers`` mean what they
    mean in PyTorch (``batch_size=1`` and ``shuffle=False`` by default; arguments after
    ``shuffle`` are keyword-only, since PyTorch's next positional one is a sampler). The shuffle
    order of epoch ``e`` is a permutation derived from ``(seed, e)``, so ``state_dict()`` is a
    few integers
    and ``load_state_dict`` continues mid-epoch with exactly the batches the original loader
    would have yielded next -- also with ``num_workers > 0``, where worker processes gather
    batches ahead and the state still counts only the batches handed out.

    With the default collation a sample may be a Tensor, array, number, or a tuple/dict of them;
    a batch has the same structure with Tensors stacked along a new first axis. ``collate_fn``
    receives the list of samples instead. With workers, ``dataset[i]`` and ``collate_fn`` must
    be deterministic functions of ``i`` for a resumed run to see the same data (randomness inside
    them is not part of the saved state). ``prefetch_factor`` batches per worker are read ahead;
    workers live until ``close()`` (or the loader is collected), as with PyTorch's
    ``persistent_workers=True``. ``pin_memory`` is accepted and has nothing to do on the CPU.

    ``sampler=`` (one of :mod:`minidl.data.samplers`, or the user's own with
    ``state_dict()``/``load_state_dict()``) or ``batch_sampler=`` decide the order instead of
    ``shuffle``; the loader's state then carries the sampler's, so the resume stays exact. A
    sampler without state is refused with a ValueError saying why.
    An :class:`~minidl.data.IterableDataset` is read in its own order (``shuffle`` and samplers
    do not apply) and resumed through its own ``state_dict()`` -- or, lacking one, by skipping
    the samples already handed out, with a warning.
    ``worker_init_fn`` and ``generator`` are refused with a ValueError: randomness outside
    ``seed`` could not be saved exactly.
    """

    kind = "DataLoader"

    def __init__(self, dataset, batch_size: int = 1, shuffle: bool = False, *,
                 drop_last: bool = False, collate_fn=None, num_workers: int = 0, seed: int = 0,
                 prefetch_factor: int = 2, rank: int = 0, world_size: int = 1,
                 pin_memory: bool = False, persistent_workers: bool = False, sampler=None,
                 batch_sampler=None, worker_init_fn=None, generator=None):
        unsupported = {"worker_init_fn": worker_init_fn, "generator": generator}
        for name, value in unsupported.items():
            if value is not None:
                raise ValueError(f"DataLoader: {name} is not supported; the order comes from "
                                 f"shuffle and seed (or a sampler's state), so that the position "
                                 f"can be saved exactly")
        if collate_fn is not None and not callable(collate_fn):
            raise TypeError(f"collate_fn must be callable, got {type(collate_fn).__name__}")
        self.num_workers = check_non_negative_int("num_workers", num_workers)
        self.prefetch_factor = check_non_negative_int("prefetch_factor", prefetch_factor,
                                                      minimum=1)
        self.collate_fn = collate_fn
        self._gather = _Gather(dataset, default_collation=collate_fn is None)
        depth = self.num_workers * self.prefetch_factor
        if isinstance(dataset, IterableDataset):
            self._init_iterable(dataset, batch_size, shuffle, drop_last, sampler, batch_sampler,
                                seed)
            return
        ordering = loader_batch_sampler(batch_size, shuffle, drop_last, sampler, batch_sampler)
        if ordering is not None:
            self._init_sampled(dataset, ordering, batch_size, drop_last, world_size, depth)
            return
        super().__init__(dataset, batch_size, shuffle=shuffle, seed=seed, drop_last=drop_last,
                         rank=rank, world_size=world_size, prefetch=depth)

    def _init_sampled(self, dataset, batch_sampler, batch_size, drop_last, world_size, depth):
        """The order comes from ``batch_sampler``; the progress carries its state."""
        if world_size != 1:
            raise ValueError("DataLoader: rank/world_size do not combine with a sampler; give "
                             "each rank a DistributedSampler instead")
        self.dataset, self.sampler, self.batch_sampler = dataset, batch_sampler, batch_sampler
        if isinstance(batch_sampler, BatchSampler) and batch_sampler.sampler is not None:
            self.sampler = batch_sampler.sampler
        self.batch_size = getattr(batch_sampler, "batch_size", None)
        self.drop_last = bool(getattr(batch_sampler, "drop_last", drop_last))
        self.shuffle, self.seed, self.rank, self.world_size = False, None, 0, 1
        self.progress_fields = ("epoch", "position", "sampler")
        BatchReader.__init__(self, SamplerCursor(self._fetch_batch, batch_sampler,
                                                 len(dataset)), depth)

    def _init_iterable(self, dataset, batch_size, shuffle, drop_last, sampler, batch_sampler,
                       seed):
        """Batches of an iterable data set, in its own order (see :mod:`minidl.data.iterable`)."""
        for name, value in (("shuffle", shuffle), ("sampler", sampler),
                            ("batch_sampler", batch_sampler)):
            if value:
                raise ValueError(f"DataLoader: {name} does not apply to an IterableDataset, "
                                 f"which yields its samples in its own order")
        self.dataset, self.sampler, self.batch_sampler = dataset, None, None
        self.batch_size = check_non_negative_int("batch_size", batch_size, minimum=1)
        self.drop_last = bool(drop_last)
        self.shuffle, self.rank, self.world_size = False, 0, 1
        self.seed = check_non_negative_int("seed", seed)  # worker i's WorkerInfo.seed: seed + i
        if self.num_workers:
            from .iterable_workers import IterableWorkerCursor

            cursor = IterableWorkerCursor(dataset, self.batch_size, self.drop_last,
                                          self._gather.collate, self._finish, self.num_workers,
                                          self.prefetch_factor, self.seed)
            self.progress_fields = ("epoch", "position", "turn", "workers", "ended")
        else:
            cursor = IterableCursor(dataset, self.batch_size, self.drop_last,
                                    lambda samples: self._finish(self._gather.collate(samples)))
            self.progress_fields = ("epoch", "position",
                                    "dataset" if cursor.stateful else "samples")
        BatchReader.__init__(self, cursor, 0)

    def close(self) -> None:
        """Stop the worker processes, if any. The loader stays usable."""
        super().close()
        stop_workers = getattr(self._cursor, "close", None)
        if stop_workers is not None:
            stop_workers()

    def __len__(self) -> int:
        """Number of batches in an epoch (TypeError for an iterable data set, as in PyTorch)."""
        if isinstance(self.dataset, IterableDataset):
            raise TypeError("DataLoader over an IterableDataset has no length")
        if isinstance(self._cursor, SamplerCursor):
            return self._cursor.batches_per_epoch
        return super().__len__()

    def _settings(self) -> dict:
        cursor = self._cursor
        if isinstance(self.dataset, IterableDataset):
            return {"dataset_kind": type(self.dataset).__name__, "batch_size": self.batch_size,
                    "drop_last": self.drop_last, "num_workers": self.num_workers}
        if isinstance(cursor, SamplerCursor):
            return {"dataset_length": cursor.length,
                    "batch_sampler": type(self.batch_sampler).__name__}
        return super()._settings()

    def _finish(self, gathered):
        """Main-process half of a batch: wrap arrays as Tensors, or run the user's collate_fn."""
        return to_tensors(gathered) if self.collate_fn is None else self.collate_fn(gathered)

    def _fetch_batch(self, indices: np.ndarray):
        return self._finish(self._gather(indices))

    def _start_prefetch(self):
        from .worker_pool import ProcessPrefetcher

        return ProcessPrefetcher(self._cursor, self._gather, self._finish, self.num_workers,
                                 self._prefetch_depth)
