"""Numba kernel for the checksum defined in ``checksum.py``.

Compiled on first use (never at import) and cached on disk.  The kernel releases the
GIL and is single-threaded; large buffers are split into blocks hashed by a few Python
threads.  Plain threads are used instead of ``prange`` on purpose: checkpoints may be
saved from a background thread while training runs other parallel kernels, and some
Numba threading layers abort when two threads launch parallel kernels at once.
"""

from __future__ import annotations

import functools
import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from .mix64 import GOLDEN, MASK_64, mix64

# Blocks this large keep thread overhead negligible while balancing the work.
BLOCK_WORDS = 1 << 20  # 8 MiB


@functools.lru_cache(maxsize=None)
def _compiled_kernel():
    import numba

    mix = numba.njit(nogil=True)(mix64)   # the reference's own lines, compiled

    @numba.njit(cache=True, nogil=True)
    def partial_sum_kernel(words, first_index):
        # All arithmetic stays in uint64 so multiplication wraps modulo 2**64,
        # exactly like the NumPy reference.
        acc = np.uint64(0)
        position = np.uint64(first_index) * GOLDEN
        for i in range(words.shape[0]):
            acc += mix(words[i] ^ position)
            position += GOLDEN
        return acc

    return partial_sum_kernel


@functools.lru_cache(maxsize=None)
def _pool() -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=min(4, os.cpu_count() or 1),
                              thread_name_prefix="minidl-checksum")


def partial_sum_kernel(words: np.ndarray, first_index: int) -> int:
    """Single-threaded compiled partial sum (same meaning as ``partial_sum_reference``)."""
    return int(_compiled_kernel()(words, np.uint64(first_index)))


def partial_sum_parallel(words: np.ndarray, first_index: int) -> int:
    """Compiled partial sum, split into blocks hashed concurrently and then added."""
    kernel = _compiled_kernel()
    n = len(words)
    if n <= 2 * BLOCK_WORDS or (os.cpu_count() or 1) == 1:
        return int(kernel(words, np.uint64(first_index)))
    starts = range(0, n, BLOCK_WORDS)
    try:
        parts = list(_pool().map(
            lambda s: int(kernel(words[s:s + BLOCK_WORDS], np.uint64(first_index + s))), starts))
    except RuntimeError:
        # The pool refuses work once the interpreter is shutting down (a background save still
        # running at exit); the sum is order-free, so one thread gives the same checksum.
        return int(kernel(words, np.uint64(first_index)))
    return sum(parts) & MASK_64
