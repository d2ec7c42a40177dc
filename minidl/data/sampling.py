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


def shard(order: np.ndarray, rank: int, world_size: int) -> np.ndarray:
    """The part of an epoch's order that worker ``rank`` of ``world_size`` reads.

    Taking every ``world_size``-th entry gives disjoint shards that together cover the epoch and
    differ in size by at most one sample.
    """
    return order[rank::world_size]


def batch_count(samples: int, batch_size: int, drop_last: bool) -> int:
    """Number of batches that ``samples`` samples make."""
    return samples // batch_size if drop_last else -(-samples // batch_size)
