"""The Philox4x32-10 stream on the GPU: one thread per 4-word block, no state between threads.

Philox is counter-based (see :mod:`minidl.backend.reference.random_kernels` for the rounds):
block b is a pure function of the key and b, so thread j computes block ``counter + j`` on its
own and writes the samples that block's words make. The words, their order and the conversion
to floats are those of the reference, so every draw equals the CPU's bit for bit for uniform
samples; normal samples go through float64 log/cos, which the GPU's math library may round
differently from the host's in the last bit of a float64 (almost never visible after rounding
to float32).

All word arithmetic is on uint64 holding 32-bit values: the 32 x 32-bit product fits in 64 bits,
and its high and low halves are a shift and a mask.
"""

from __future__ import annotations

import contextlib
import math
import warnings

import numpy as np
from numba import cuda

from ..primitives import random_blocks
from .device import SIMULATED, empty, launch


_M0, _M1 = np.uint64(0xD2511F53), np.uint64(0xCD9E8D57)
_W0, _W1 = np.uint64(0x9E3779B9), np.uint64(0xBB67AE85)
_LOW = np.uint64(0xFFFFFFFF)
_SHIFT32 = np.uint64(32)
_ZERO = np.uint64(0)


@contextlib.contextmanager
def _wrapping():
    """On the simulator the uint64 block numbers are NumPy scalars, which warn when the counter
    wraps past 2**64; the wrap is the stream's definition, so the warning is silenced there."""
    with warnings.catch_warnings():
        if SIMULATED:
            warnings.simplefilter("ignore", RuntimeWarning)
        yield


@cuda.jit(device=True)
def _philox_block(block, k0, k1, words):
    """The four words of stream block ``block`` (uint64) under key (k0, k1), into ``words``."""
    c0 = block & _LOW
    c1 = block >> _SHIFT32
    c2 = _ZERO
    c3 = _ZERO
    for round_ in range(10):
        if round_ > 0:
            k0 = (k0 + _W0) & _LOW
            k1 = (k1 + _W1) & _LOW
        product0 = c0 * _M0
        product1 = c2 * _M1
        hi0, lo0 = product0 >> _SHIFT32, product0 & _LOW
        hi1, lo1 = product1 >> _SHIFT32, product1 & _LOW
        c0, c1, c2, c3 = hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0
    words[0] = c0
    words[1] = c1
    words[2] = c2
    words[3] = c3


@cuda.jit(device=True)
def _uniform53(high, low):
    # 27 + 26 random bits: a float64 multiple of 2**-53 in [0, 1)
    return float((high >> np.uint64(5)) * np.uint64(1 << 26) + (low >> np.uint64(6))) \
        * 1.1102230246251565e-16


@cuda.jit
def _uniform_words(out, count, blocks, counter, k0, k1, bits):
    """Float16/32 samples: word i, top ``bits`` bits, times 2**-bits."""
    words = cuda.local.array(4, np.uint64)
    scale = 1.0 / (1 << bits)
    shift = np.uint64(32 - bits)
    for j in range(cuda.grid(1), blocks, cuda.gridsize(1)):
        _philox_block(counter + np.uint64(j), k0, k1, words)
        for w in range(4):
            i = 4 * j + w
            if i < count:
                out[i] = float(words[w] >> shift) * scale


@cuda.jit
def _uniform_pairs(out, count, blocks, counter, k0, k1):
    """Float64 samples: words 2i and 2i+1 make one 53-bit uniform."""
    words = cuda.local.array(4, np.uint64)
    for j in range(cuda.grid(1), blocks, cuda.gridsize(1)):
        _philox_block(counter + np.uint64(j), k0, k1, words)
        for w in range(2):
            i = 2 * j + w
            if i < count:
                out[i] = _uniform53(words[2 * w], words[2 * w + 1])


@cuda.jit
def _normal_box_muller(out, count, counter, k0, k1):
    """Sample i takes the four words of block i: two uniforms, one Box-Muller normal."""
    words = cuda.local.array(4, np.uint64)
    for i in range(cuda.grid(1), count, cuda.gridsize(1)):
        _philox_block(counter + np.uint64(i), k0, k1, words)
        u1 = _uniform53(words[0], words[1])
        u2 = _uniform53(words[2], words[3])
        out[i] = math.sqrt(-2.0 * math.log(1.0 - u1)) * math.cos(2.0 * math.pi * u2)


def _key(key):
    return np.uint64(int(key[0]) & 0xFFFFFFFF), np.uint64(int(key[1]) & 0xFFFFFFFF)


def random_uniform(shape, dtype, key, counter):
    dtype = np.dtype(dtype)
    out = empty(shape, dtype)
    count = out.size
    if count:
        k0, k1 = _key(key)
        blocks = random_blocks(count, dtype, "uniform")
        grid, threads = launch(blocks)
        with _wrapping():
            if dtype.itemsize == 8:
                _uniform_pairs[grid, threads](out.buffer, count, blocks, np.uint64(counter),
                                              k0, k1)
            else:
                bits = 11 if dtype.itemsize == 2 else 24  # as many bits as the significand
                _uniform_words[grid, threads](out.buffer, count, blocks, np.uint64(counter),
                                              k0, k1, bits)
    return out


def random_normal(shape, dtype, key, counter):
    dtype = np.dtype(dtype)
    out = empty(shape, dtype)
    if out.size:
        k0, k1 = _key(key)
        grid, threads = launch(out.size)
        with _wrapping():
            _normal_box_muller[grid, threads](out.buffer, out.size, np.uint64(counter), k0, k1)
    return out
