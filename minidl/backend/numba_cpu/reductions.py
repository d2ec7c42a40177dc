"""Sums: NumPy's, or Numba's threads for a large float array summed over its leading axes, and
for an embedding table's gradient (rows scatter-added at integer indices).

The gradient of a broadcast is a sum over the axes it copied along (see
:func:`minidl.autograd.engine.sum_to_shape`): a Linear layer's bias gradient sums dL/dy over
every axis but the last, a convolution's over the batch and the pixels, (0, 2, 3). NumPy computes
these on one thread. A C-contiguous float32/float64 array of at least :data:`PARALLEL_MIN_WORK`
elements whose summed axes are its leading axes, optionally with a run of trailing axes (the
pixels), goes to :func:`.reduction_threads.sum_rows`: the leading axes become the rows of a
(rows, width) array summed in fixed tiles, the same bits at any thread count, on threads from
:data:`THREADED_MIN_WORK` elements (one NumPy pass is slower than the tiles even on one
thread). The trailing axes, if any, are then summed by NumPy over what is left (1/rows of the
data).

An embedding's gradient sums each looked-up row's gradient into the table row its index names
(:meth:`Backend.index_add` with one integer array on the first axis): NumPy's ``np.add.at`` does
it one element at a time on one thread; :func:`.reduction_threads.add_rows_at` splits the
columns over threads and gives the same bits. Everything else is the reference's NumPy call, and
Numba is not imported for it.
"""

from __future__ import annotations

import math

import numpy as np

from ..reference import array_ops
from ..threads import follow_in_this_thread, sized_for
from . import loading

PARALLEL_MIN_WORK = 1 << 18
"""Elements from which a sum is the tiled kernel's (below, NumPy's call; Numba is not loaded)."""

THREADED_MIN_WORK = 1 << 18
"""Elements from which the tiles run on Numba's threads; below, they run one after another on
the calling thread. One thread sums a (2048, 128) bias gradient's tiles in ~21 us, two ~14 us:
worth it only while the threads are awake, which they now are for a moment after each region
(measured with the other passes: see :data:`.elementwise.PARALLEL_MIN_WORK`; with threads that
slept, a wake-up's median was ~120 us on a busy machine and the floor was 2^20)."""

ROW_BLOCKS = 16
"""At most this many blocks of rows: the partial rows then cost at most 16 rows' worth of memory,
and the tiles feed 16 threads even when the array is narrow."""

MIN_BLOCK_ROWS = 64
"""Rows a block holds at least (fewer, and adding the partials up costs a noticeable share)."""

_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


def row_blocks(rows: int) -> int:
    """How many blocks :func:`.reduction_threads.sum_rows` cuts ``rows`` rows into: a function of
    the shape alone, so the sum's bits do not depend on the thread count."""
    return max(1, min(ROW_BLOCKS, rows // MIN_BLOCK_ROWS))


def _leading_and_trailing(axis, ndim: int):
    """(leading, trailing) counts when ``axis`` is the first ``leading`` axes plus the last
    ``trailing`` ones with at least one axis kept between them (or none after); else None."""
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    if not axes or any(not isinstance(a, int) or not -ndim <= a < ndim for a in axes):
        return None
    summed = {a % ndim for a in axes}
    if len(summed) != len(axes):
        return None
    leading = 0
    while leading in summed:
        leading += 1
    trailing = 0
    while ndim - 1 - trailing in summed and ndim - 1 - trailing >= leading:
        trailing += 1
    if leading == 0 or leading + trailing != len(summed) or leading == ndim:
        return None
    return leading, trailing


def sum(x, axis=None, keepdims=False):  # noqa: A001
    """:meth:`Backend.sum`: Σ over ``axis`` (leading axes of large float arrays on threads)."""
    if (getattr(x, "size", 0) < PARALLEL_MIN_WORK or axis is None or type(x) is not np.ndarray
            or x.dtype not in _FLOATS or not x.flags.c_contiguous):
        return array_ops.sum(x, axis, keepdims)
    split = _leading_and_trailing(axis, x.ndim)
    if split is None:
        return array_ops.sum(x, axis, keepdims)
    leading, trailing = split
    rows = math.prod(x.shape[:leading])
    kept_shape = x.shape[leading:]
    follow_in_this_thread()
    out = np.empty(kept_shape, x.dtype)
    kernel = "sum_rows" if x.size >= THREADED_MIN_WORK else "sum_rows_in_one_thread"
    sized_for(loading._kernel("reduction_threads", kernel), x.size)(
        x.reshape(rows, -1), row_blocks(rows), out.reshape(-1))
    if trailing:
        out = array_ops.sum(out, tuple(range(out.ndim - trailing, out.ndim)))
    if keepdims:
        out = out.reshape(tuple(1 if i < leading or i >= x.ndim - trailing else n
                                for i, n in enumerate(x.shape)))
    return out


def index_add(shape, index, values, dtype):
    """:meth:`Backend.index_add`: zeros of ``shape`` with ``values`` added at ``index``; on
    threads for a large float table indexed along its first axis by one integer array whose
    entries are all in range (anything else, negative indices included, is NumPy's)."""
    rows = index[0] if type(index) is tuple and len(index) == 1 else None
    dtype = np.dtype(dtype)
    if (type(rows) is not np.ndarray or rows.dtype.kind not in "iu" or rows.size == 0
            or math.prod(shape) < PARALLEL_MIN_WORK or dtype not in _FLOATS
            or type(values) is not np.ndarray or values.dtype != dtype
            or values.shape != rows.shape + tuple(shape[1:]) or len(shape) < 2
            or rows.min() < 0 or rows.max() >= shape[0]):
        return array_ops.index_add(shape, index, values, dtype)
    out = np.zeros(shape, dtype)
    follow_in_this_thread()
    sized_for(loading._kernel("reduction_threads", "add_rows_at"), out.size)(
        out.reshape(shape[0], -1), np.ascontiguousarray(rows, np.int64).reshape(-1),
        np.ascontiguousarray(values).reshape(rows.size, -1))
    return out
