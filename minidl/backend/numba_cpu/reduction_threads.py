"""The Numba side of :mod:`.reductions`: sums over the leading rows of a (rows, width) array,
split over threads in fixed tiles.

A bias gradient is such a sum: y = x @ Wᵀ + b adds b to every row, so dL/db = Σ_rows dL/dy. The
rows are cut into a number of blocks of whole rows that the shape fixes
(:func:`.reductions.row_blocks`) and the columns into spans of :data:`COLUMN_SPAN`; each (block,
span) tile adds its rows one after another into its own stretch of a partial row, then the
partial rows are added in block order. The tiles depend on the shape only, never on the thread
count, so the result is the same bits on any number of threads, or with the tiles run one after
another on the calling thread (:func:`sum_rows_in_one_thread`, for sums too small to wake the
pool for).

Why tiles: one task per span of columns (every row added into one output stretch) reads each row
in short strided pieces and leaves a narrow array (a 128-wide bias) with one or two tasks; one
task per block of rows (a full-width partial row each) makes a wide array (a 10k-class output
layer) with few rows per block write as many partials as it reads. A tile keeps its partial
stretch in the first-level cache while it streams its rows, and gives both shapes enough tasks.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

COLUMN_SPAN = 512
"""Columns per tile: 2 KiB of float32 partials, resident in the first-level cache."""


@njit(cache=True, inline="always")
def _add_into(total, row):
    # Indices counted from 0: Numba then knows them non-negative, skips its wraparound test and
    # lets LLVM vectorise the loop.
    for k in range(total.size):
        total[k] += row[k]


@njit(cache=True)
def _sum_tile(x, partials, tile, spans):
    # Tile (block, span): the block's rows, in order, added into its stretch of a partial row.
    rows = x.shape[0]
    blocks = partials.shape[0]
    block_rows = (rows + blocks - 1) // blocks
    block, span = tile // spans, tile % spans
    first, last = span * COLUMN_SPAN, min(x.shape[1], (span + 1) * COLUMN_SPAN)
    partial = partials[block, first:last]
    for r in range(block * block_rows, min(rows, (block + 1) * block_rows)):
        _add_into(partial, x[r, first:last])


# The partial rows are made and added up by these plain (not parallel) functions: in a
# parallel kernel Numba turns np.zeros and a slice assignment into parallel regions of their
# own, and waking the pool for each costs more than a small sum's tiles.
@njit(cache=True)
def _zero_partials(x, blocks):
    return np.zeros((blocks, x.shape[1]), x.dtype)


@njit(cache=True)
def _add_up_partials(partials, out):
    for k in range(out.size):
        out[k] = partials[0, k]
    for block in range(1, partials.shape[0]):
        _add_into(out, partials[block])


@njit(cache=True, parallel=True)
def sum_rows(x, blocks, out):
    """out[k] = Σ_r x[r, k] for a C-contiguous (rows, width) ``x``: the rows in ``blocks`` fixed
    blocks, each summed in row order, the block sums added in block order. The tiles run on
    Numba's threads; the partials (at most 1/MIN_BLOCK_ROWS of the work) are added up after."""
    spans = (x.shape[1] + COLUMN_SPAN - 1) // COLUMN_SPAN
    partials = _zero_partials(x, blocks)
    for tile in prange(blocks * spans):
        _sum_tile(x, partials, tile, spans)
    _add_up_partials(partials, out)


@njit(cache=True)
def sum_rows_in_one_thread(x, blocks, out):
    """:func:`sum_rows` with the tiles one after another on the calling thread: the same bits,
    without waking the pool (for sums too small to pay for it)."""
    spans = (x.shape[1] + COLUMN_SPAN - 1) // COLUMN_SPAN
    partials = _zero_partials(x, blocks)
    for tile in range(blocks * spans):
        _sum_tile(x, partials, tile, spans)
    _add_up_partials(partials, out)


SCATTER_SPAN = 32
"""Columns per task of :func:`add_rows_at`: 128 bytes of float32 a row, so a 128-wide embedding
table's gradient still makes four tasks."""


@njit(cache=True, parallel=True)
def add_rows_at(out, rows, values):
    """out[rows[i]] += values[i] for i in order, ``out`` (table_rows, width), ``rows`` (n,) in
    range, ``values`` (n, width): NumPy's ``np.add.at(out, rows, values)``. Each task owns a span
    of columns and walks every i in order, so each entry receives its additions in NumPy's order
    (the same bits) on any number of threads."""
    width = out.shape[1]
    for span in prange((width + SCATTER_SPAN - 1) // SCATTER_SPAN):
        first, last = span * SCATTER_SPAN, min(width, (span + 1) * SCATTER_SPAN)
        for i in range(rows.size):
            _add_into(out[rows[i], first:last], values[i, first:last])
