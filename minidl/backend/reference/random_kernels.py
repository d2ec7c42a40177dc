"""Random numbers from Philox4x32-10, a counter-based generator, in plain NumPy.

A counter-based generator is a keyed bijection: block b of the stream is ``philox(key, b)``, four
32-bit words that depend on nothing but the key and the block number. So there is no hidden
state to carry from draw to draw: a generator is its key and the number of the next unused block
(both plain integers, saved in checkpoints as they are), any device computes block b without
computing blocks 0..b-1, and a GPU computes all blocks of a draw in parallel.

Philox (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC 2011) mixes a 128-bit
counter (c0, c1, c2, c3) with a 64-bit key (k0, k1) in ten rounds of::

    hi0, lo0 = the 64-bit product M0 · c0 split into its halves    (M0 = 0xD2511F53)
    hi1, lo1 = the 64-bit product M1 · c2 split into its halves    (M1 = 0xCD9E8D57)
    (c0, c1, c2, c3) = (hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0)

with the key bumped by the Weyl constants (0x9E3779B9, 0xBB67AE85) between rounds. minidl's
block b has counter (b mod 2**32, b div 2**32, 0, 0).
"""

from __future__ import annotations

import math

import numpy as np

from ..primitives import random_blocks

__all__ = ["random_uniform", "random_normal"]

PHILOX_M0, PHILOX_M1 = 0xD2511F53, 0xCD9E8D57
PHILOX_W0, PHILOX_W1 = 0x9E3779B9, 0xBB67AE85
PHILOX_ROUNDS = 10
_LOW32 = np.uint64(0xFFFFFFFF)


def philox4x32(counter_words, key):
    """Philox4x32-10 of the counters given as four uint64 arrays of 32-bit words (c0, c1, c2,
    c3) under ``key`` (k0, k1): the four output words, as uint64 arrays."""
    c0, c1, c2, c3 = counter_words
    k0, k1 = int(key[0]), int(key[1])
    for round_ in range(PHILOX_ROUNDS):
        if round_:
            k0, k1 = (k0 + PHILOX_W0) & 0xFFFFFFFF, (k1 + PHILOX_W1) & 0xFFFFFFFF
        product0 = c0 * np.uint64(PHILOX_M0)  # < 2**64: both factors are below 2**32
        product1 = c2 * np.uint64(PHILOX_M1)
        hi0, lo0 = product0 >> np.uint64(32), product0 & _LOW32
        hi1, lo1 = product1 >> np.uint64(32), product1 & _LOW32
        c0, c1, c2, c3 = hi1 ^ c1 ^ np.uint64(k0), lo1, hi0 ^ c3 ^ np.uint64(k1), lo0
    return c0, c1, c2, c3


def philox_blocks(key, counter: int, count: int) -> np.ndarray:
    """Blocks ``counter .. counter+count-1`` of the stream at ``key``, as uint32 (count, 4)."""
    blocks = np.arange(count, dtype=np.uint64) + np.uint64(counter)  # wraps mod 2**64
    zeros = np.zeros(count, np.uint64)
    words = philox4x32((blocks & _LOW32, blocks >> np.uint64(32), zeros, zeros), key)
    return np.stack(words, axis=1).astype(np.uint32)


def _words(count: int, key, counter: int, blocks: int) -> np.ndarray:
    return philox_blocks(key, counter, blocks).reshape(-1)[:count].astype(np.uint64)


def _uniform53(high, low) -> np.ndarray:
    # 27 + 26 random bits make a 53-bit integer; scaled by 2**-53 it is a float64 in [0, 1)
    # with every representable multiple of 2**-53 equally likely.
    return ((high >> np.uint64(5)) * np.uint64(1 << 26) + (low >> np.uint64(6))) * 2.0 ** -53


def random_uniform(shape, dtype, key, counter):
    """U[0, 1) samples from the Philox stream (see :mod:`minidl.backend.primitives`)."""
    dtype = np.dtype(dtype)
    count = math.prod(shape)
    if dtype.itemsize == 8:
        words = _words(2 * count, key, counter, random_blocks(count, dtype, "uniform"))
        values = _uniform53(words[0::2], words[1::2])
    else:
        # As many top bits as the dtype's significand holds (24, or 11 for float16), so that no
        # sample rounds up to 1.0.
        bits = 11 if dtype.itemsize == 2 else 24
        words = _words(count, key, counter, random_blocks(count, dtype, "uniform"))
        values = (words >> np.uint64(32 - bits)).astype(np.float64) * 2.0 ** -bits
    return values.astype(dtype).reshape(shape)


def random_normal(shape, dtype, key, counter):
    """N(0, 1) samples by Box-Muller from two 53-bit uniforms per sample."""
    count = math.prod(shape)
    words = _words(4 * count, key, counter, random_blocks(count, dtype, "normal"))
    u1 = _uniform53(words[0::4], words[1::4])
    u2 = _uniform53(words[2::4], words[3::4])
    # 1 - u1 is in (0, 1], so the log is finite.
    values = np.sqrt(-2.0 * np.log(1.0 - u1)) * np.cos(2.0 * math.pi * u2)
    return values.astype(np.dtype(dtype)).reshape(shape)
