"""Samplers: which sample indices an epoch visits, with a position that can be saved.

PyTorch's samplers draw their order from a generator whose state moves on every epoch, so a run
can only be resumed mid-epoch by replaying it. Here every sampler's epoch order is a pure
function of ``(seed, epoch)`` (see :mod:`minidl.data.sampling`), so its state is three integers:

- iterating a sampler yields the indices left in its current epoch, counting ``position`` up as
  it goes; when the epoch runs out, ``epoch`` moves on and ``position`` goes back to 0 -- a second
  ``for`` loop is the next epoch, as in PyTorch, and needs no ``set_epoch``;
- ``state_dict()`` is ``{kind, seed, epoch, position}`` plus the settings that decide the order
  (compared on ``load_state_dict``, so a state never silently restores into another sampler);
- ``load_state_dict(state)`` puts the sampler back so that the next ``iter()`` yields exactly
  the indices the original would have yielded next.

:class:`~minidl.data.DataLoader` relies on this protocol to resume mid-epoch with ``sampler=`` or
``batch_sampler=``; a sampler of the user's own must follow it too (a plain iterable of indices
has no position to save, and is refused).
"""

from __future__ import annotations

import hashlib

import numpy as np

from .sampling import epoch_generator
from ..validation import check_non_negative_int

SAMPLER_STATE_VERSION = 1


def is_stateful(sampler) -> bool:
    """Whether ``sampler`` follows the state protocol (``state_dict``/``load_state_dict``)."""
    return callable(getattr(sampler, "state_dict", None)) and callable(
        getattr(sampler, "load_state_dict", None))


def _check_no_generator(name: str, generator) -> None:
    if generator is not None:
        raise ValueError(f"{name}: generator= is not supported; give seed= instead, so that the "
                         f"order of every epoch follows from (seed, epoch) and can be saved")


class Sampler:
    """Base class of the samplers: subclasses define ``epoch_order(epoch)`` and ``_settings()``.

    ``epoch_order(epoch)`` returns every index epoch ``epoch`` visits, in order, as an int64
    array; it must depend only on the settings, ``seed`` and ``epoch``.
    """

    kind = "Sampler"

    def __init__(self, data_source=None, *, seed: int = 0):
        # data_source is accepted for PyTorch's signature, where the base class takes it too.
        self.seed = check_non_negative_int("seed", seed)
        self.epoch = 0
        self.position = 0
        self._cached_epoch = None
        self._cached_order = None

    # -- what subclasses provide ---------------------------------------------------------------

    def epoch_order(self, epoch: int) -> np.ndarray:
        raise NotImplementedError(f"{type(self).__name__} must define epoch_order(epoch)")

    def _settings(self) -> dict:
        return {}

    # -- iteration -----------------------------------------------------------------------------

    def _order(self) -> np.ndarray:
        if self._cached_epoch != self.epoch:
            self._cached_order = self.epoch_order(self.epoch)
            self._cached_epoch = self.epoch
        return self._cached_order

    def __len__(self) -> int:
        """Indices per epoch (subclasses that know it without drawing an order say so)."""
        return len(self.epoch_order(0))

    def __iter__(self):
        """Yield the indices left in the current epoch; afterwards the next epoch begins."""
        order = self._order()
        while self.position < len(order):
            index = int(order[self.position])
            self.position += 1
            yield index
        self.epoch += 1
        self.position = 0

    def set_epoch(self, epoch: int) -> None:
        """Start epoch ``epoch`` from its beginning (PyTorch's ``DistributedSampler.set_epoch``;
        here epochs also advance on their own)."""
        self.epoch = check_non_negative_int("epoch", epoch)
        self.position = 0

    # -- state ---------------------------------------------------------------------------------

    def state_dict(self) -> dict:
        """``{kind, version, settings..., seed, epoch, position}``: plain msgpack-able data."""
        state = {"kind": self.kind, "version": SAMPLER_STATE_VERSION, "seed": self.seed}
        state.update(self._settings())
        state.update({"epoch": self.epoch, "position": self.position})
        return state

    def load_state_dict(self, state: dict) -> None:
        """Continue from ``state``; ``ValueError`` naming the first field that does not fit."""
        if not isinstance(state, dict):
            raise ValueError(f"{self.kind} state: expected a dict, got {type(state).__name__}")
        expected = {"kind": self.kind, "version": SAMPLER_STATE_VERSION, "seed": self.seed}
        expected.update(self._settings())
        for name, value in expected.items():
            if name not in state:
                raise ValueError(f"{self.kind} state field {name!r} is missing")
            if state[name] != value:
                raise ValueError(f"{self.kind} state field {name!r} is {state[name]!r} but this "
                                 f"sampler has {value!r}")
        epoch = check_non_negative_int(f"{self.kind} state field 'epoch'", state.get("epoch"))
        position = check_non_negative_int(f"{self.kind} state field 'position'",
                                          state.get("position"))
        if position > len(self):
            raise ValueError(f"{self.kind} state field 'position' is {position}, past the end of "
                             f"an epoch of {len(self)} indices")
        self.epoch, self.position = epoch, position


def _length_of(data_source, name: str) -> int:
    try:
        return len(data_source)
    except TypeError:
        raise TypeError(f"{name}: data_source must have a length, got "
                        f"{type(data_source).__name__}") from None


class SequentialSampler(Sampler):
    """0, 1, ..., len(data_source) - 1, every epoch."""

    kind = "SequentialSampler"

    def __init__(self, data_source):
        super().__init__()
        self.length = _length_of(data_source, "SequentialSampler")

    def epoch_order(self, epoch):
        return np.arange(self.length, dtype=np.int64)

    def __len__(self):
        return self.length

    def _settings(self):
        return {"length": self.length}


class RandomSampler(Sampler):
    """A random order of the samples, new each epoch: a permutation, or with
    ``replacement=True`` ``num_samples`` independent uniform draws.

    ``num_samples`` (default: all) may exceed the data set without replacement: the epoch then
    concatenates permutations, as PyTorch does.
    """

    kind = "RandomSampler"

    def __init__(self, data_source, replacement: bool = False, num_samples: int | None = None,
                 generator=None, *, seed: int = 0):
        _check_no_generator("RandomSampler", generator)
        super().__init__(seed=seed)
        self.length = _length_of(data_source, "RandomSampler")
        self.replacement = bool(replacement)
        self.num_samples = self.length if num_samples is None else check_non_negative_int(
            "num_samples", num_samples, minimum=1)
        if self.length == 0:
            raise ValueError("RandomSampler: data_source is empty")

    def epoch_order(self, epoch):
        rng = epoch_generator(self.seed, epoch)
        if self.replacement:
            return rng.integers(0, self.length, size=self.num_samples, dtype=np.int64)
        rounds = -(-self.num_samples // self.length)
        order = np.concatenate([rng.permutation(self.length) for _ in range(rounds)])
        return order[:self.num_samples].astype(np.int64)

    def __len__(self):
        return self.num_samples

    def _settings(self):
        return {"length": self.length, "replacement": self.replacement,
                "num_samples": self.num_samples}


class SubsetRandomSampler(Sampler):
    """The given ``indices`` in a random order, new each epoch."""

    kind = "SubsetRandomSampler"

    def __init__(self, indices, generator=None, *, seed: int = 0):
        _check_no_generator("SubsetRandomSampler", generator)
        super().__init__(seed=seed)
        self.indices = np.asarray(indices, dtype=np.int64).reshape(-1)
        if self.indices.size and self.indices.min() < 0:
            raise ValueError("SubsetRandomSampler: indices must be non-negative")

    def epoch_order(self, epoch):
        return self.indices[epoch_generator(self.seed, epoch).permutation(len(self.indices))]

    def __len__(self):
        return len(self.indices)

    def _settings(self):
        return {"indices_digest": _digest(self.indices)}


class WeightedRandomSampler(Sampler):
    """``num_samples`` indices drawn with probability proportional to ``weights`` (with
    replacement by default; without, each index at most once per epoch)."""

    kind = "WeightedRandomSampler"

    def __init__(self, weights, num_samples: int, replacement: bool = True, generator=None, *,
                 seed: int = 0):
        _check_no_generator("WeightedRandomSampler", generator)
        super().__init__(seed=seed)
        weights = np.asarray(weights, dtype=np.float64).reshape(-1)
        if weights.size == 0 or not np.all(np.isfinite(weights)) or np.any(weights < 0) \
                or weights.sum() <= 0:
            raise ValueError("WeightedRandomSampler: weights must be finite, non-negative and "
                             "not all zero")
        self.weights = weights
        self.num_samples = check_non_negative_int("num_samples", num_samples, minimum=1)
        self.replacement = bool(replacement)
        if not self.replacement and self.num_samples > np.count_nonzero(weights):
            raise ValueError(f"WeightedRandomSampler: num_samples={self.num_samples} without "
                             f"replacement needs as many non-zero weights, there are "
                             f"{np.count_nonzero(weights)}")

    def epoch_order(self, epoch):
        rng = epoch_generator(self.seed, epoch)
        return rng.choice(len(self.weights), size=self.num_samples, replace=self.replacement,
                          p=self.weights / self.weights.sum()).astype(np.int64)

    def __len__(self):
        return self.num_samples

    def _settings(self):
        return {"weights_digest": _digest(self.weights), "num_samples": self.num_samples,
                "replacement": self.replacement}


class DistributedSampler(Sampler):
    """Rank ``rank``'s share of each epoch: the indices ``rank, rank + num_replicas, ...`` of
    the epoch's (shuffled) order, padded by repeating its start (or, with ``drop_last``,
    trimmed) so every rank gets the same count -- PyTorch's split.

    ``num_replicas`` and ``rank`` default to the job's world size and rank. The state holds no
    rank: every rank is at the same epoch and position, so one rank's saved state restores all
    of them (at the same ``num_replicas``, which decides the split).
    """

    kind = "DistributedSampler"

    def __init__(self, dataset, num_replicas: int | None = None, rank: int | None = None,
                 shuffle: bool = True, seed: int = 0, drop_last: bool = False):
        from .state import check_shard

        super().__init__(seed=seed)
        if num_replicas is None or rank is None:
            from .. import distributed as dist
            num_replicas = dist.get_world_size() if num_replicas is None else num_replicas
            rank = dist.get_rank() if rank is None else rank
        self.rank, self.num_replicas = check_shard(rank, num_replicas)
        self.length = _length_of(dataset, "DistributedSampler")
        self.shuffle, self.drop_last = bool(shuffle), bool(drop_last)
        if self.drop_last:
            self.num_samples = self.length // self.num_replicas
        else:
            self.num_samples = -(-self.length // self.num_replicas)
        if self.num_samples == 0:
            raise ValueError(f"DistributedSampler: {self.length} samples leave none for each of "
                             f"{self.num_replicas} replicas with drop_last=True")

    def epoch_order(self, epoch):
        if self.shuffle:
            order = epoch_generator(self.seed, epoch).permutation(self.length)
        else:
            order = np.arange(self.length)
        total = self.num_samples * self.num_replicas
        if total > len(order):
            order = np.resize(order, total)  # repeats the order from its start
        return order[:total][self.rank::self.num_replicas].astype(np.int64)

    def __len__(self):
        return self.num_samples

    def _settings(self):
        return {"length": self.length, "num_replicas": self.num_replicas,
                "shuffle": self.shuffle, "drop_last": self.drop_last}


class BatchSampler:
    """Groups the indices of ``sampler`` into lists of ``batch_size`` (the last one shorter
    unless ``drop_last``). Its state is the wrapped sampler's, so it resumes as exactly."""

    kind = "BatchSampler"

    def __init__(self, sampler, batch_size: int, drop_last: bool):
        if not is_stateful(sampler):
            raise ValueError(stateless_sampler_message("BatchSampler", "sampler", sampler))
        self.sampler = sampler
        self.batch_size = check_non_negative_int("batch_size", batch_size, minimum=1)
        self.drop_last = bool(drop_last)

    def __len__(self) -> int:
        full, rest = divmod(len(self.sampler), self.batch_size)
        return full + (rest > 0 and not self.drop_last)

    def __iter__(self):
        """Yield the batches (lists of indices) left in the wrapped sampler's epoch."""
        batch = []
        for index in self.sampler:
            batch.append(index)
            if len(batch) == self.batch_size:
                yield batch
                batch = []
        if batch and not self.drop_last:
            yield batch

    def state_dict(self) -> dict:
        """The batching settings and the wrapped sampler's state."""
        return {"kind": self.kind, "batch_size": self.batch_size, "drop_last": self.drop_last,
                "sampler": self.sampler.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        """Continue from ``state``; ``ValueError`` naming a field that does not fit."""
        if not isinstance(state, dict):
            raise ValueError(f"BatchSampler state: expected a dict, got {type(state).__name__}")
        for name, value in (("kind", self.kind), ("batch_size", self.batch_size),
                            ("drop_last", self.drop_last)):
            if state.get(name) != value:
                raise ValueError(f"BatchSampler state field {name!r} is {state.get(name)!r} but "
                                 f"this sampler has {value!r}")
        self.sampler.load_state_dict(state.get("sampler"))


def stateless_sampler_message(owner: str, argument: str, sampler) -> str:
    """Why a sampler without ``state_dict``/``load_state_dict`` is refused."""
    return (f"{owner}: {argument}={type(sampler).__name__} has no state_dict()/load_state_dict(), "
            f"so a resumed run could not continue from the same index; use one of minidl.data's "
            f"samplers or give yours those two methods (see minidl.data.Sampler)")


def _digest(array: np.ndarray) -> str:
    """A short hash standing for a large setting (weights, indices) in a state."""
    return hashlib.sha256(np.ascontiguousarray(array).tobytes()).hexdigest()[:32]

