"""The loader's cursor when a sampler decides the order: ``DataLoader(sampler=/batch_sampler=)``.

Without a sampler the loader's order is a pure function of ``(seed, epoch)`` and its progress is
two integers (:class:`~minidl.data.reader._EpochCursor`). With one, the order is the sampler's,
so the progress also carries the sampler's own ``state_dict()``, taken right after the indices
of each batch were drawn: restoring loads it back and asks the sampler for a fresh iterator,
which continues from exactly that index (see :mod:`minidl.data.samplers`).

The progress stays normalised as the reader protocol wants: after the last batch of an epoch
(``len(batch_sampler)`` batches) the iterator is run to its end, which moves the sampler on to
its next epoch, before the progress is read.
"""

from __future__ import annotations

import numpy as np

from .samplers import BatchSampler, is_stateful, stateless_sampler_message
from ..validation import check_non_negative_int


def loader_batch_sampler(batch_size, shuffle, drop_last, sampler, batch_sampler):
    """The batch sampler a ``DataLoader`` draws from, with PyTorch's rules on which arguments
    go together; None when the loader orders by ``shuffle`` and ``seed`` itself."""
    if batch_sampler is not None:
        if sampler is not None or shuffle or drop_last or batch_size != 1:
            raise ValueError("DataLoader: batch_sampler is mutually exclusive with batch_size, "
                             "shuffle, sampler and drop_last (it makes the batches itself)")
        if not is_stateful(batch_sampler):
            raise ValueError(stateless_sampler_message("DataLoader", "batch_sampler",
                                                       batch_sampler))
        return batch_sampler
    if sampler is None:
        return None
    if shuffle:
        raise ValueError("DataLoader: sampler is mutually exclusive with shuffle (the sampler "
                         "decides the order)")
    if not is_stateful(sampler):
        raise ValueError(stateless_sampler_message("DataLoader", "sampler", sampler))
    return BatchSampler(sampler, batch_size, drop_last)


class SamplerCursor:
    """Draws each batch's indices from ``batch_sampler`` and fetches them with ``fetch``.

    ``epoch`` and ``position`` count the loader's epochs and the batches handed out in the
    current one; ``sampler`` in the progress is the batch sampler's state.
    """

    def __init__(self, fetch, batch_sampler, length: int):
        self.fetch = fetch
        self.batch_sampler = batch_sampler
        self.length = length
        self.batches_per_epoch = len(batch_sampler)
        if self.batches_per_epoch == 0:
            raise ValueError(f"DataLoader: the {type(batch_sampler).__name__} makes no batch in "
                             f"an epoch")
        self.epoch = 0
        self.position = 0
        self._iterator = None

    def take_indices(self) -> np.ndarray:
        """The next batch's sample indices; the cursor (and the sampler) move past them."""
        if self._iterator is None:
            self._iterator = iter(self.batch_sampler)
        batch = next(self._iterator, None)
        if batch is None:
            raise ValueError(f"DataLoader: the {type(self.batch_sampler).__name__} ran out after "
                             f"{self.position} batches of an epoch, but its len() is "
                             f"{self.batches_per_epoch}")
        indices = np.asarray(batch, dtype=np.int64).reshape(-1)
        if indices.size and (indices.min() < 0 or indices.max() >= self.length):
            bad = indices[(indices < 0) | (indices >= self.length)][0]
            raise IndexError(f"DataLoader: the sampler yielded index {bad}, out of range for a "
                             f"data set of {self.length} samples")
        self.position += 1
        if self.position >= self.batches_per_epoch:
            for _ in self._iterator:  # runs the sampler to its epoch's end: it moves on
                pass
            self._iterator = None
            self.epoch += 1
            self.position = 0
        return indices

    def produce(self):
        return self.fetch(self.take_indices())

    def progress(self) -> dict:
        return {"epoch": self.epoch, "position": self.position,
                "sampler": self.batch_sampler.state_dict()}

    def seek(self, progress: dict) -> None:
        epoch = check_non_negative_int("state field 'epoch'", progress["epoch"])
        position = check_non_negative_int("state field 'position'", progress["position"])
        # The sampler checks its own settings first (the clearer message on a mismatch); a
        # position that does not fit then puts its previous state back.
        previous = self.batch_sampler.state_dict()
        self.batch_sampler.load_state_dict(progress["sampler"])
        if position >= self.batches_per_epoch:
            self.batch_sampler.load_state_dict(previous)
            raise ValueError(f"state field 'position' is {position}, but an epoch of this loader "
                             f"has {self.batches_per_epoch} batches")
        self.epoch, self.position, self._iterator = epoch, position, None
