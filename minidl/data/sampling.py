"""Which sample indices an epoch visits, and in what order.

The order of epoch ``e`` is a pure function of ``(seed, e)``: a fresh generator seeded by the
pair draws the permutation. A reader can therefore forget the permutation and rebuild it after a
restore from two integers, which is what keeps its saved state O(1) however large the data.
"""

from __future__ import annotations

import numpy as np


def epoch_generator(seed: int, epoch: int, *more: int) -> np.random.Generator:
    """A generator determined by ``(seed, epoch, *more)`` alone.

    ``SeedSequence`` mixes the integers so that neighbouring epochs get unrelated streams.
    """
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence([seed, epoch, *more])))


def epoch_order(length: int, seed: int, epoch: int, shuffle: bool) -> np.ndarray:
    """All ``length`` sample indices in the order epoch ``epoch`` visits them."""
    if not shuffle:
        return np.arange(length, dtype=np.int64)
    return epoch_generator(seed, epoch).permutation(length).astype(np.int64)


def rank_slice(global_batch: np.ndarray, rank: int, world_size: int) -> np.ndarray:
    """Rank ``rank``'s part of a global batch: the ``rank``-th of ``world_size`` contiguous
    blocks of (as nearly as possible) equal size.

    Full global batches split into equal blocks; a short tail batch (``drop_last=False``)
    gives the first ``len % world_size`` ranks one sample more than the others -- and, with
    fewer samples than ranks, some ranks an empty batch.
    """
    base, extra = divmod(len(global_batch), world_size)
    start = rank * base + min(rank, extra)
    return global_batch[start:start + base + (rank < extra)]


def batch_count(samples: int, batch_size: int, drop_last: bool) -> int:
    """Number of batches that ``samples`` samples make."""
    return samples // batch_size if drop_last else -(-samples // batch_size)
