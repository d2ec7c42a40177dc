"""Philox4x32-10 as one Numba loop over blocks.

The NumPy reference (:mod:`minidl.backend.reference.random_kernels`) runs each of the ten rounds
as a dozen whole-array operations; here a block's four words stay in registers for all ten rounds
and are written once. The words, and so the samples, are bit for bit the reference's: the same
integer arithmetic, and the same float64 formulas rounded once to the dtype. Large draws (the
dropout masks of big layers) are split over threads, with the same bits.

Compiled on first call (cached on disk), never at import.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit, prange

from ..primitives import random_blocks
from ..reference.random_kernels import (
    PHILOX_M0, PHILOX_M1, PHILOX_ROUNDS, PHILOX_W0, PHILOX_W1,
)

__all__ = ["random_uniform", "random_normal"]

PARALLEL_MIN_SAMPLES = 1 << 16
"""Samples from which a draw is split over threads: ten Philox rounds per four words make a
sample costlier than an elementwise pass, so threads pay from a smaller size (at 2**15 samples
two threads measured slower than one, at 2**16 no slower, on a loaded two-core machine)."""

SPAN = 1 << 12
"""Blocks (or samples) per task."""


@njit(cache=True, inline="always")
def _uniform53(high, low):
    return (float(high >> np.uint32(5)) * 67108864.0 + float(low >> np.uint32(6))) \
        * 1.1102230246251565e-16  # 2**26 and 2**-53


# Each block of the stream is a function of (key, counter + its number) alone, and each sample of
# its own words, so a draw splits into independent spans: the threaded loops below give the bits
# of the one-thread ones at any thread count. Below PARALLEL_MIN_SAMPLES samples the draw stays on
# the calling thread (a dropout mask of a small layer, a weight initialisation).

@njit(cache=True)
def _philox_words(k0, k1, counter, blocks, out):
    """Fill ``out`` (uint32, 4·blocks) with the stream's blocks counter .. counter+blocks-1."""
    low32 = np.uint64(0xFFFFFFFF)
    for b in range(blocks):
        block = counter + np.uint64(b)  # wraps mod 2**64, as the reference
        c0, c1 = block & low32, block >> np.uint64(32)
        c2 = c3 = np.uint64(0)
        key0, key1 = k0, k1
        for round_ in range(PHILOX_ROUNDS):
            if round_:
                key0 = (key0 + np.uint64(PHILOX_W0)) & low32
                key1 = (key1 + np.uint64(PHILOX_W1)) & low32
            product0 = c0 * np.uint64(PHILOX_M0)
            product1 = c2 * np.uint64(PHILOX_M1)
            hi0, lo0 = product0 >> np.uint64(32), product0 & low32
            hi1, lo1 = product1 >> np.uint64(32), product1 & low32
            c0, c1, c2, c3 = hi1 ^ c1 ^ key0, lo1, hi0 ^ c3 ^ key1, lo0
        out[4 * b] = c0
        out[4 * b + 1] = c1
        out[4 * b + 2] = c2
        out[4 * b + 3] = c3


@njit(cache=True)
def _uniform_kernel(words, out, wide, bits):
    scale = 2.0 ** -bits
    for i in range(out.size):
        if wide:
            out[i] = _uniform53(words[2 * i], words[2 * i + 1])
        else:
            out[i] = float(words[i] >> np.uint32(32 - bits)) * scale


@njit(cache=True)
def _normal_kernel(words, out):
    for i in range(out.size):
        u1 = _uniform53(words[4 * i], words[4 * i + 1])
        u2 = _uniform53(words[4 * i + 2], words[4 * i + 3])
        out[i] = math.sqrt(-2.0 * math.log(1.0 - u1)) * math.cos(2.0 * math.pi * u2)


# The threaded loops hand each span to the one-thread loop on slices that start at 0: Numba then
# knows the indices non-negative and LLVM vectorises the span as it does the whole (indexing from
# the span's start in place measured 2.5x slower on one thread).

@njit(cache=True, parallel=True)
def _philox_words_spans(k0, k1, counter, blocks, out):
    for span in prange((blocks + SPAN - 1) // SPAN):
        first, last = span * SPAN, min(blocks, (span + 1) * SPAN)
        _philox_words(k0, k1, counter + np.uint64(first), last - first, out[4 * first:4 * last])


@njit(cache=True, parallel=True)
def _uniform_spans(words, out, wide, bits):
    per_sample = 2 if wide else 1
    for span in prange((out.size + SPAN - 1) // SPAN):
        first, last = span * SPAN, min(out.size, (span + 1) * SPAN)
        _uniform_kernel(words[per_sample * first:per_sample * last], out[first:last], wide, bits)


@njit(cache=True, parallel=True)
def _normal_spans(words, out):
    for span in prange((out.size + SPAN - 1) // SPAN):
        first, last = span * SPAN, min(out.size, (span + 1) * SPAN)
        _normal_kernel(words[4 * first:4 * last], out[first:last])


def _computed_in(dtype: np.dtype) -> np.dtype:
    """The array the kernels write: the dtype itself for float32/float64 (each float64 sample
    rounded once on the store, as ``astype`` rounds it), float64 for float16, which Numba cannot
    store (converted by NumPy after)."""
    return dtype if dtype in (np.float32, np.float64) else np.dtype(np.float64)


def _words(key, counter, blocks, threaded):
    words = np.empty(4 * blocks, np.uint32)
    fill = _philox_words_spans if threaded else _philox_words
    fill(np.uint64(key[0]), np.uint64(key[1]), np.uint64(counter), blocks, words)
    return words


def random_uniform(shape, dtype, key, counter):
    """U[0, 1) samples; same contract and bits as the reference ``random_uniform``."""
    dtype = np.dtype(dtype)
    count = math.prod(shape)
    threaded = count >= PARALLEL_MIN_SAMPLES
    words = _words(key, counter, random_blocks(count, dtype, "uniform"), threaded)
    values = np.empty(count, _computed_in(dtype))
    convert = _uniform_spans if threaded else _uniform_kernel
    convert(words, values, dtype.itemsize == 8, 11 if dtype.itemsize == 2 else 24)
    return values.astype(dtype, copy=False).reshape(shape)


def random_normal(shape, dtype, key, counter):
    """N(0, 1) samples; same contract as the reference ``random_normal``."""
    count = math.prod(shape)
    threaded = count >= PARALLEL_MIN_SAMPLES
    words = _words(key, counter, random_blocks(count, dtype, "normal"), threaded)
    values = np.empty(count, _computed_in(np.dtype(dtype)))
    (_normal_spans if threaded else _normal_kernel)(words, values)
    return values.astype(dtype, copy=False).reshape(shape)
