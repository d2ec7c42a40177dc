"""Iterable data sets (``IterableDataset``, ``ChainDataset``) and how a loader resumes them.

An iterable data set has no indices: it yields samples, and only it knows where it stands. So
resuming one exactly is its own business, through the same protocol as everything else here:

- a data set with ``state_dict()``/``load_state_dict()`` describes where its *next* ``iter()``
  continues (and, once an iteration has run out, that the next one starts a new pass). The
  loader saves that state at each batch boundary and loads it back on resume: exact, at any
  cost of reaching the position;
- a data set without them can only be resumed by starting it again and discarding the samples
  already handed out. That is exact only if its iteration is deterministic, and costs a re-read,
  so the loader does it with a warning that says so.

:class:`IterableCursor` is the loader's cursor over such a data set. To know that an epoch has
ended *with* its last batch (the reader protocol keeps its progress normalised), it reads up to
one batch ahead; the saved state is taken before that look-ahead, so the samples read ahead are
read again after a restore.
"""

from __future__ import annotations

import copy
import warnings

from .samplers import is_stateful
from ..validation import check_non_negative_int

_END = object()


class IterableDataset:
    """Base class of data sets that yield their samples: subclasses define ``__iter__``.

    Define ``state_dict()``/``load_state_dict()`` as well for an exact resume (see the module
    docstring). ``ds_a + ds_b`` chains two of them, as in PyTorch.
    """

    def __iter__(self):
        raise NotImplementedError(f"{type(self).__name__} must define __iter__")

    def __add__(self, other: "IterableDataset") -> "ChainDataset":
        return ChainDataset([self, other])


def has_state(dataset) -> bool:
    """Whether ``dataset`` can save and restore where its iteration stands."""
    resumable = getattr(dataset, "resumable", None)
    return bool(resumable) if resumable is not None else is_stateful(dataset)


class ChainDataset(IterableDataset):
    """Several iterable data sets one after the other.

    It has a state (which part it is in, and every part's state) when all parts have one.
    """

    def __init__(self, datasets):
        self.datasets = list(datasets)
        if not self.datasets:
            raise ValueError("datasets: ChainDataset needs at least one data set")
        self.part = 0

    @property
    def resumable(self) -> bool:
        """Whether every part can save its position (and so the chain can)."""
        return all(has_state(d) for d in self.datasets)

    def __iter__(self):
        while self.part < len(self.datasets):
            yield from self.datasets[self.part]
            self.part += 1
        self.part = 0

    def state_dict(self) -> dict:
        """The part being read and each part's own state."""
        if not self.resumable:
            stateless = [type(d).__name__ for d in self.datasets if not has_state(d)]
            raise TypeError(f"ChainDataset: parts {stateless} have no state_dict()")
        return {"kind": "ChainDataset", "part": self.part,
                "states": [d.state_dict() for d in self.datasets]}

    def load_state_dict(self, state: dict) -> None:
        """Continue from ``state``; ``ValueError`` naming a field that does not fit."""
        if not isinstance(state, dict) or state.get("kind") != "ChainDataset":
            raise ValueError("ChainDataset state field 'kind' is not 'ChainDataset'")
        states = state.get("states")
        if not isinstance(states, list) or len(states) != len(self.datasets):
            raise ValueError(f"ChainDataset state field 'states' must list "
                             f"{len(self.datasets)} part states")
        part = check_non_negative_int("ChainDataset state field 'part'", state.get("part"))
        if part >= len(self.datasets):
            raise ValueError(f"ChainDataset state field 'part' is {part}, the chain has "
                             f"{len(self.datasets)} parts")
        for dataset, part_state in zip(self.datasets, states):
            dataset.load_state_dict(part_state)
        self.part = part


class WorkerInfo:
    """What a data set sees from inside a loader's worker process (PyTorch's fields)."""

    def __init__(self, id: int, num_workers: int, seed: int, dataset):
        self.id, self.num_workers, self.seed, self.dataset = id, num_workers, seed, dataset

    def __repr__(self):
        return f"WorkerInfo(id={self.id}, num_workers={self.num_workers}, seed={self.seed})"


_worker_info: WorkerInfo | None = None


def get_worker_info() -> WorkerInfo | None:
    """Inside a loader's worker process, that worker's :class:`WorkerInfo`; None elsewhere.

    An iterable data set reads its share of the data by it (e.g. every ``num_workers``-th
    record starting at ``id``), as in PyTorch.
    """
    return _worker_info


def set_worker_info(info: WorkerInfo | None) -> None:
    """Set by a worker process when it starts (and by nobody else)."""
    global _worker_info
    _worker_info = info


class IterableCursor:
    """Turns an iterable data set into batches of ``batch_size`` samples, epoch by epoch.

    ``finish(samples)`` makes the batch. ``position`` counts the batches handed out in the
    epoch; the progress adds the data set's state (``dataset``) or, for a data set without one,
    the number of samples handed out (``samples``), which a restore skips.
    """

    def __init__(self, dataset, batch_size: int, drop_last: bool, finish):
        self.dataset = dataset
        self.batch_size = batch_size
        self.drop_last = drop_last
        self.finish = finish
        self.stateful = has_state(dataset)
        self.epoch = 0
        self._start_epoch(0)

    def _start_epoch(self, epoch: int) -> None:
        self.epoch = epoch
        self.position = 0
        self.samples = 0            # samples handed out this epoch
        self._iterator = None
        self._ahead: list = []      # samples read past the last batch handed out
        self._exhausted = False
        self._boundary_state = None  # the data set's state at the last batch boundary
        self._skip = 0

    def _pull(self):
        if self._iterator is None:
            self._iterator = iter(self.dataset)
            for _ in range(self._skip):
                if next(self._iterator, _END) is _END:
                    raise ValueError(f"DataLoader: resuming {type(self.dataset).__name__} by "
                                     f"skipping {self._skip} samples, but it now yields fewer; "
                                     f"its iteration is not deterministic")
            self._skip = 0
        return next(self._iterator, _END)

    def _read_ahead(self, count: int) -> None:
        while len(self._ahead) < count and not self._exhausted:
            sample = self._pull()
            if sample is _END:
                self._exhausted = True
            else:
                self._ahead.append(sample)

    def produce(self):
        # The look-ahead that tells whether another batch follows: one sample, or with
        # drop_last a whole batch (a short tail would be dropped, ending the epoch now).
        follow = self.batch_size if self.drop_last else 1
        self._read_ahead(self.batch_size)
        samples, self._ahead = self._ahead[:self.batch_size], self._ahead[self.batch_size:]
        if not samples or (self.drop_last and len(samples) < self.batch_size):
            if self.position == 0:
                raise ValueError(f"DataLoader: {type(self.dataset).__name__} yielded no "
                                 f"{'full ' if self.drop_last else ''}batch of "
                                 f"{self.batch_size} samples in an epoch")
            self._start_epoch(self.epoch + 1)
            return self.produce()
        self.samples += len(samples)
        self.position += 1
        # A copy: a data set may hand out (and then change) its own live dict.
        self._boundary_state = copy.deepcopy(self.dataset.state_dict()) if self.stateful \
            else None
        self._read_ahead(follow)
        if len(self._ahead) < follow:
            self._start_epoch(self.epoch + 1)
        return self.finish(samples)

    def progress(self) -> dict:
        progress = {"epoch": self.epoch, "position": self.position}
        if self.stateful:
            state = self._boundary_state
            progress["dataset"] = self.dataset.state_dict() if state is None else state
        else:
            progress["samples"] = self.samples
        return progress

    def seek(self, progress: dict) -> None:
        epoch = check_non_negative_int("state field 'epoch'", progress["epoch"])
        position = check_non_negative_int("state field 'position'", progress["position"])
        if self.stateful:
            if "dataset" not in progress:
                raise ValueError("state field 'dataset' is missing (the state was saved from a "
                                 "data set without state_dict())")
            self.dataset.load_state_dict(progress["dataset"])
            self._start_epoch(epoch)
        else:
            samples = check_non_negative_int("state field 'samples'", progress.get("samples"))
            self._start_epoch(epoch)
            if samples:
                warnings.warn(
                    f"{type(self.dataset).__name__} has no state_dict()/load_state_dict(): "
                    f"resuming by reading and discarding the {samples} samples already handed "
                    f"out in this epoch, which is exact only if its iteration is deterministic",
                    stacklevel=3)
            self._skip, self.samples = samples, samples
        self.position = position
