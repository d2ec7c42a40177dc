"""Row gathers and value-dependent selections: take (embedding lookup), one_hot, nonzero.

take and one_hot must reject an index outside their range, naming it. The kernels record the
position of the first bad index with an atomic minimum (so "first" means first in C order, not
first to be seen by some thread) in a slot of :mod:`.deferred_checks`; the host reads the slots
at the next synchronisation and, only when one names a bad index, reads the index itself to put
in the message. A lookup therefore never stops the host.
"""

from __future__ import annotations

import math

import numpy as np
from numba import cuda

from .allocator import allocate
from .deferred_checks import report_bad_value, take_slot
from .device import DeviceArray, empty, launch, read_flag
from .movement import astype, zeros


# The range checks are done by the kernels that read the indices and reported at the next
# synchronisation (deferred_checks): an embedding lookup in a training step waits for nothing.
# A bad index's output row is 0 until then.

@cuda.jit
def _take_rows(count, out, table, row_size, rows, indices, first_bad, slot):
    for i in range(cuda.grid(1), count, cuda.gridsize(1)):
        position = i // row_size
        row = indices[position]
        if row < 0 or row >= rows:
            cuda.atomic.min(first_bad, slot, position)
            out[i] = 0
        else:
            out[i] = table[row * row_size + i % row_size]


@cuda.jit
def _one_hot(count, out, classes, indices, first_bad, slot):
    for position in range(cuda.grid(1), count, cuda.gridsize(1)):
        value = indices[position]
        if value < 0 or value >= classes:
            cuda.atomic.min(first_bad, slot, position)
        else:
            out[position * classes + value] = 1


@cuda.jit
def _check_range(count, indices, limit, first_bad, slot):
    for position in range(cuda.grid(1), count, cuda.gridsize(1)):
        if indices[position] < 0 or indices[position] >= limit:
            cuda.atomic.min(first_bad, slot, position)


def _checked_later(op, indices: DeviceArray, limit, what) -> tuple:
    """(slot buffer, slot) for a kernel to record the first index outside [0, limit) in."""
    return take_slot(report_bad_value(
        indices, IndexError, lambda value: f"{op}: index {value} is out of range for {limit} "
                                           f"{what}"))


def take(table, indices):
    """The contract's primitive; an index out of range raises its ``IndexError`` at the next
    synchronisation."""
    indices = astype(indices, np.int64)
    row_size = math.prod(table.shape[1:])
    out = empty(indices.shape + table.shape[1:], table.dtype)
    count = out.size
    if indices.size:
        flag, slot = _checked_later("take", indices, table.shape[0], "rows")
        if count:
            blocks, threads = launch(count)
            _take_rows[blocks, threads](count, out.buffer, table.buffer, row_size,
                                        table.shape[0], indices.buffer, flag, slot)
        else:  # rows of size 0: nothing to copy, but the indices must still be in range
            blocks, threads = launch(indices.size)
            _check_range[blocks, threads](indices.size, indices.buffer, table.shape[0], flag,
                                          slot)
    return out


def one_hot(indices, num_classes, dtype):
    """The contract's primitive; a value out of range raises its ``IndexError`` at the next
    synchronisation."""
    indices = astype(indices, np.int64)
    out = zeros(indices.shape + (int(num_classes),), dtype)
    if indices.size:
        flag, slot = _checked_later("one_hot", indices, num_classes, "classes")
        blocks, threads = launch(indices.size)
        _one_hot[blocks, threads](indices.size, out.buffer, int(num_classes), indices.buffer,
                                  flag, slot)
    return out


# -- nonzero: count, scan, write -------------------------------------------------------------------
#
# Positions must come out in C order, so each thread owns one contiguous chunk of the mask:
# it counts its chunk, one thread turns the counts into starting offsets (an exclusive scan over
# a few thousand chunks), and each thread writes its chunk's positions from its offset on.

_CHUNK = 256


@cuda.jit
def _count_chunks(mask, size, chunk, counts):
    for c in range(cuda.grid(1), counts.size, cuda.gridsize(1)):
        total = 0
        for i in range(c * chunk, min(size, (c + 1) * chunk)):
            if mask[i]:
                total += 1
        counts[c] = total


@cuda.jit
def _exclusive_scan(counts, total):
    if cuda.grid(1) == 0:
        running = 0
        for c in range(counts.size):
            here = counts[c]
            counts[c] = running
            running += here
        total[0] = running


@cuda.jit
def _write_positions(mask, size, chunk, starts, out, shape, ndim, found):
    for c in range(cuda.grid(1), starts.size, cuda.gridsize(1)):
        slot = starts[c]
        for i in range(c * chunk, min(size, (c + 1) * chunk)):
            if mask[i]:
                flat = i
                for axis in range(ndim - 1, -1, -1):
                    out[axis * found + slot] = flat % shape[axis]
                    flat //= shape[axis]
                slot += 1


def nonzero(mask):
    ndim = max(mask.ndim, 1)
    chunks = max(1, -(-mask.size // _CHUNK))
    counts = allocate(chunks, np.int64)
    total = allocate(1, np.int64)
    blocks, threads = launch(chunks)
    _count_chunks[blocks, threads](mask.buffer, mask.size, _CHUNK, counts)
    _exclusive_scan[1, 1](counts, total)
    found = read_flag(total)  # the output's shape depends on it: the one wait the contract allows
    out = empty((ndim, found), np.int64)
    if found:
        shape = tuple(mask.shape) or (1,)
        _write_positions[blocks, threads](mask.buffer, mask.size, _CHUNK, counts, out.buffer,
                                          tuple(shape), ndim, found)
    from .movement import getitem
    return tuple(getitem(out, axis) for axis in range(mask.ndim))
