"""Where a broadcast operand's elements live: 32-bit offsets, no integer division on the device.

An elementwise kernel walks its output in C order by a flat index ``i`` and reads each operand
at ``Σ_k index_k(i) · stride_k``, where ``index_k(i) = (i // inner_k) % n_k``. Done naively that
is a division and a remainder per axis per operand per element, and integer division is the
slowest arithmetic a GPU has (no divide unit: ~20 instructions in 32 bits, ~70 in 64). So the
host prepares the walk once per launch:

1. **Collapse axes.** Adjacent axes that every operand steps through as one run (stride of the
   outer = size · stride of the inner, or both 0) merge into one, and size-1 axes go: adding a
   (1, C, 1, 1) bias to (N, C, H, W) walks (N, C, H·W); a (C,) bias on (N, C) stays 2-D. Most
   broadcasts end with one to three axes, and the outermost axis needs no division at all.
2. **Divide by multiplying.** Each axis size n becomes a magic number m and a shift s
   (Granlund & Montgomery, "Division by invariant integers using multiplication", 1994):
   ``i // n = (umulhi(i, m) + i) >> s`` for every ``0 <= i < 2**31``, where ``umulhi`` is the
   high 32 bits of the 64-bit product. The remainder is then ``i - (i // n) · n``.
3. **32-bit integers.** Sizes, strides and offsets are ``uint32``, so the compiler emits 32-bit
   multiplies and adds; an output or operand of 2**31 elements or more does not fit, and the
   caller falls back to a path with 64-bit indices.

:func:`quotient_on_host` is the same division in Python, for the tests that hold the magic
numbers to ``//``.
"""

from __future__ import annotations

import math

import numpy as np
from numba import cuda, uint32, uint64

LIMIT_32 = 2 ** 31
"""Flat indices and offsets must stay below this for the 32-bit walk (the magic division is
exact up to here)."""


def collapse_axes(shape, *operand_strides) -> tuple:
    """``(shape, strides, ...)`` with size-1 axes dropped and adjacent axes merged where every
    operand walks them as one run; the walk in C order reads the same elements."""
    kept = [(n, [s[k] for s in operand_strides]) for k, n in enumerate(shape) if n != 1]
    merged: list = []
    for n, strides in kept:
        if merged:
            outer_n, outer_strides = merged[-1]
            if all(outer == n * inner for outer, inner in zip(outer_strides, strides)):
                merged[-1] = (outer_n * n, strides)
                continue
        merged.append((n, strides))
    if not merged:  # a single element
        merged = [(1, [0] * len(operand_strides))]
    sizes = tuple(n for n, _ in merged)
    return (sizes,) + tuple(tuple(strides[i] for _, strides in merged)
                            for i in range(len(operand_strides)))


def magic_divisor(n: int) -> tuple:
    """``(magic, shift)`` with ``i // n == (umulhi(i, magic) + i) >> shift`` for all
    ``0 <= i < 2**31`` (``1 <= n < 2**31``). shift = ceil(log2 n) and
    magic = floor(2**32 · (2**shift - n) / n) + 1 < 2**32: the rounding error of the fixed-point
    reciprocal stays below one step for dividends of 31 bits."""
    if not 1 <= n < LIMIT_32:
        raise ValueError(f"magic_divisor: divisor {n} outside [1, 2**31)")
    shift = (n - 1).bit_length()
    magic = ((1 << 32) * ((1 << shift) - n)) // n + 1
    return magic, shift


def quotient_on_host(i: int, magic: int, shift: int) -> int:
    """The device's :func:`quotient`, in Python integers."""
    return (((i * magic) >> 32) + i) >> shift


def broadcast_walk(shape, *operand_strides, offsets=None):
    """The launch arguments of a 32-bit broadcast walk over ``shape``: ``(sizes, magics, shifts,
    strides, ...)``, tuples of ``uint32`` after :func:`collapse_axes`; ``None`` when the output
    or an operand (from its start in ``offsets``, 0 by default) reaches 2**31 elements, or
    walks backwards (the caller then indexes in 64 bits)."""
    if math.prod(shape) >= LIMIT_32:
        return None
    sizes, *strides = collapse_axes(shape, *operand_strides)
    starts = offsets or (0,) * len(strides)
    if any(min(own) < 0 or start + sum((n - 1) * s for n, s in zip(sizes, own)) >= LIMIT_32
           for start, own in zip(starts, strides)):
        return None
    magics, shifts = zip(*(magic_divisor(n) for n in sizes))

    def as_uint32(values):
        return tuple(np.uint32(v) for v in values)
    return (as_uint32(sizes), as_uint32(magics), as_uint32(shifts)) + tuple(
        as_uint32(own) for own in strides)


@cuda.jit(device=True)
def quotient(i, magic, shift):
    """``i // n`` for the n whose :func:`magic_divisor` is (magic, shift); i < 2**31."""
    high = uint32((uint64(i) * uint64(magic)) >> uint64(32))
    return uint32((high + i) >> shift)


@cuda.jit(device=True)
def walk_offset(i, sizes, magics, shifts, strides):
    """Offset of element ``i`` (C order over the collapsed ``sizes``) of an operand with these
    ``strides``: one magic division per axis but the outermost, whose index is what is left."""
    offset = uint32(0)
    for axis in range(len(sizes) - 1, 0, -1):
        outer = quotient(i, magics[axis], shifts[axis])
        offset = uint32(offset + uint32(i - outer * sizes[axis]) * strides[axis])
        i = outer
    return uint32(offset + i * strides[0])
