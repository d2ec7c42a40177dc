"""Reductions (sum, max, min, argmax, argmin) as tree reductions in shared memory.

The input is read as a matrix of ``rows`` outputs by ``length`` values each: directly when the
reduced axes are last, else through strides (sum, max, min read rows in place; argmax and argmin
move the reduced axes last with one copy). One thread block reduces one row:

1. each thread folds a strided share of the row into one value held in a register
   (thread t takes elements t, t + T, t + 2T, ...: neighbouring threads read neighbouring
   addresses, which the GPU merges into wide memory transactions);
2. the T partial values go to shared memory, the fast on-chip memory all threads of a block
   see, and are halved log2(T) times: in each round thread t < s combines its slot with slot
   t + s, and ``syncthreads`` waits for the whole round before the next one reads it.

T is a power of two fixed when the kernel is compiled (shared arrays have compile-time sizes).
Short rows skip the tree: one thread folds a whole row (see ``SERIAL_LENGTH``); a few long rows
(a full sum, a bias gradient's sum over batch and pixels for a few channels) take two levels, a
block per chunk and then a block per row (see ``FEW_ROWS``), whether the rows are read in place
or through strides.
The order of additions is fixed by the thread layout, so results repeat bit for bit from run
to run on the same device; they differ from NumPy's pairwise sums in the last bits.
"""

from __future__ import annotations

import builtins
import math

import numpy as np
from numba import cuda, from_dtype, uint32

from . import broadcast_index
from .broadcast_index import broadcast_walk, walk_offset
from .device import SIMULATED, DeviceArray, contiguous_strides, empty, launch
from .movement import astype, reshape, transpose

REDUCE_THREADS = 8 if SIMULATED else 256
_ROW_BLOCKS = 4 if SIMULATED else 65535
# Rows up to this long are folded by one thread each instead of one block each: many short
# rows (a sum over a batch axis of a few entries) would leave most of a block idle.
SERIAL_LENGTH = 16 if SIMULATED else 32
# Fewer rows than this, each longer than two chunks, are reduced in two levels: a block per
# chunk of CHUNK values, then a block per row over the chunks' results. One block per row would
# leave all but a few of the GPU's multiprocessors idle (a full sum has one row).
FEW_ROWS = 4 if SIMULATED else 128
CHUNK = 4 * REDUCE_THREADS if SIMULATED else 16 * REDUCE_THREADS
MAX_CHUNKS = 8 if SIMULATED else 1024


def _add(a, b):
    return a + b


def _larger(a, b):
    # nan wins, as in NumPy's max
    if a != a:
        return a
    if b != b:
        return b
    return a if a >= b else b


_value_kernels: dict = {}


def _value_kernel(combine, dtype):
    key = (combine, np.dtype(dtype))
    if key in _value_kernels:
        return _value_kernels[key]
    fold = cuda.jit(device=True)(combine)
    numba_type = from_dtype(np.dtype(dtype))

    @cuda.jit(device=True)
    def block_fold(partial, value):
        """The fold of every thread's ``value`` in the block (steps 1 and 2 above)."""
        t = cuda.threadIdx.x
        partial[t] = value
        cuda.syncthreads()
        step = REDUCE_THREADS // 2
        while step > 0:
            if t < step:
                partial[t] = fold(partial[t], partial[t + step])
            cuda.syncthreads()
            step //= 2
        total = partial[0]
        cuda.syncthreads()  # (the next row's first write must wait for every thread's read)
        return total

    @cuda.jit
    def kernel(x, rows, length, parts, chunk, identity, out):
        # Each row is cut into ``parts`` consecutive chunks (1 part: the whole row), one block
        # per chunk; out[row * parts + part] is the chunk's fold.
        partial = cuda.shared.array(REDUCE_THREADS, numba_type)
        t = cuda.threadIdx.x
        for piece in range(cuda.blockIdx.x, rows * parts, cuda.gridDim.x):
            row, part = piece // parts, piece % parts
            end = builtins.min(length, (part + 1) * chunk)
            value = identity
            for i in range(part * chunk + t, end, REDUCE_THREADS):
                value = fold(value, x[row * length + i])
            total = block_fold(partial, value)
            if t == 0:
                out[piece] = total

    @cuda.jit
    def serial(x, rows, length, identity, out):
        for row in range(cuda.grid(1), rows, cuda.gridsize(1)):
            value = identity
            for i in range(length):
                value = fold(value, x[row * length + i])
            out[row] = value

    # The same two, reading rows in place through strides: row r's element i is at
    # offset(r over the kept axes) + offset(i over the reduced axes), each a 32-bit walk over
    # collapsed axes (.broadcast_index), so reducing leading or middle axes (a bias gradient's
    # sum over batch and pixels) needs no transposed copy and no integer division.
    @cuda.jit
    def strided_kernel(x, rows, length, parts, chunk, identity, out, kept_sizes, kept_magics,
                       kept_shifts, kept_strides, sizes, magics, shifts, strides):
        partial = cuda.shared.array(REDUCE_THREADS, numba_type)
        t = cuda.threadIdx.x
        for piece in range(cuda.blockIdx.x, rows * parts, cuda.gridDim.x):
            row, part = piece // parts, piece % parts
            base = walk_offset(uint32(row), kept_sizes, kept_magics, kept_shifts, kept_strides)
            end = builtins.min(length, (part + 1) * chunk)
            value = identity
            for i in range(part * chunk + t, end, REDUCE_THREADS):
                value = fold(value, x[base + walk_offset(uint32(i), sizes, magics, shifts,
                                                         strides)])
            total = block_fold(partial, value)
            if t == 0:
                out[piece] = total

    @cuda.jit
    def strided_serial(x, rows, length, identity, out, kept_sizes, kept_magics, kept_shifts,
                       kept_strides, sizes, magics, shifts, strides):
        for row in range(cuda.grid(1), rows, cuda.gridsize(1)):
            base = walk_offset(uint32(row), kept_sizes, kept_magics, kept_shifts, kept_strides)
            value = identity
            for i in range(length):
                value = fold(value, x[base + walk_offset(uint32(i), sizes, magics, shifts,
                                                         strides)])
            out[row] = value

    _value_kernels[key] = (kernel, serial, strided_kernel, strided_serial)
    return _value_kernels[key]


def _better_factory(largest):
    def better(value, index, best, best_index):
        """Whether (value, index) beats (best, best_index): nan first, then by value, and the
        lower index on ties; index -1 marks an empty slot, which never wins."""
        if index < 0:
            return False
        if best_index < 0:
            return True
        if value != value:
            return best == best or index < best_index
        if best != best:
            return False
        if value == best:
            return index < best_index
        return value > best if largest else value < best
    return better


_index_kernels: dict = {}


def _index_kernel(largest, dtype):
    key = (largest, np.dtype(dtype))
    if key in _index_kernels:
        return _index_kernels[key]
    better = cuda.jit(device=True)(_better_factory(largest))
    numba_type = from_dtype(np.dtype(dtype))

    @cuda.jit
    def kernel(x, rows, length, out):
        values = cuda.shared.array(REDUCE_THREADS, numba_type)
        indices = cuda.shared.array(REDUCE_THREADS, np.int64)
        t = cuda.threadIdx.x
        for row in range(cuda.blockIdx.x, rows, cuda.gridDim.x):
            best_index = -1
            best = x[row * length]
            for i in range(t, length, REDUCE_THREADS):
                if better(x[row * length + i], i, best, best_index):
                    best, best_index = x[row * length + i], i
            values[t], indices[t] = best, best_index
            cuda.syncthreads()
            step = REDUCE_THREADS // 2
            while step > 0:
                if t < step and better(values[t + step], indices[t + step], values[t],
                                       indices[t]):
                    values[t], indices[t] = values[t + step], indices[t + step]
                cuda.syncthreads()
                step //= 2
            if t == 0:
                out[row] = indices[0]
            cuda.syncthreads()

    @cuda.jit
    def serial(x, rows, length, out):
        for row in range(cuda.grid(1), rows, cuda.gridsize(1)):
            best_index = -1
            best = x[row * length]
            for i in range(length):
                if better(x[row * length + i], i, best, best_index):
                    best, best_index = x[row * length + i], i
            out[row] = best_index

    _index_kernels[key] = (kernel, serial)
    return _index_kernels[key]


def _normalize_axes(axis, ndim) -> tuple:
    if axis is None:
        return tuple(range(ndim))
    axes = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
    normalized = []
    for a in axes:
        a = int(a)
        if not -ndim <= a < builtins.max(ndim, 1):
            raise ValueError(f"axis {a} is out of bounds for an array of {ndim} dimensions")
        normalized.append(a % builtins.max(ndim, 1))
    return tuple(sorted(set(normalized)))


def _rows(x: DeviceArray, axes):
    """x as (rows, length) with the reduced axes last, and the kept shape."""
    kept = [a for a in range(x.ndim) if a not in axes]
    if list(axes) != list(range(x.ndim - len(axes), x.ndim)):
        x = transpose(x, tuple(kept) + tuple(axes))
    kept_shape = tuple(x.shape[:len(kept)]) if kept else ()
    length = math.prod(x.shape[len(kept):])
    return x, math.prod(kept_shape), length, kept_shape


def _final_shape(shape, axes, keepdims, kept_shape):
    if keepdims:
        return tuple(1 if a in axes else n for a, n in enumerate(shape))
    return kept_shape


def _strided_rows(x: DeviceArray, axes):
    """The strided kernels' walks (kept axes, then reduced axes: sizes, magics, shifts,
    strides each): x read as rows over its kept axes, each a run over its reduced axes, with no
    copy; ``None`` for an array of 2**31 elements or more."""
    strides = contiguous_strides(x.shape)
    kept = [a for a in range(x.ndim) if a not in axes]
    if x.size >= broadcast_index.LIMIT_32:
        return None
    return (broadcast_walk([x.shape[a] for a in kept], [strides[a] for a in kept])
            + broadcast_walk([x.shape[a] for a in axes], [strides[a] for a in axes]))


def _reduce_values(name, combine, identity_of, x, axis, keepdims, out_dtype):
    axes = _normalize_axes(axis, x.ndim)
    source = astype(x, out_dtype)
    in_place = list(axes) == list(range(x.ndim - len(axes), x.ndim))
    layout = () if in_place else _strided_rows(source, axes)
    if layout is None:  # too large for 32-bit walks: move the reduced axes last, then in place
        kept_axes = tuple(a for a in range(x.ndim) if a not in axes)
        source, in_place, layout = transpose(source, kept_axes + axes), True, ()
    kept_shape = tuple(x.shape[a] for a in range(x.ndim) if a not in axes)
    rows, length = math.prod(kept_shape), math.prod(x.shape[a] for a in axes)
    if length == 0 and name != "sum":
        raise ValueError(f"zero-size array to reduction operation {name} which has no identity")
    out = empty((rows,), out_dtype)
    if rows:
        identity = identity_of(np.dtype(out_dtype))
        tree, serial, strided_tree, strided_serial = _value_kernel(combine, out_dtype)
        # Reduced axes last: rows are contiguous runs. Otherwise the strided kernels.
        if length <= SERIAL_LENGTH:
            blocks, threads = launch(rows)
            (serial if in_place else strided_serial)[blocks, threads](
                source.buffer, rows, length, identity, out.buffer, *layout)
        elif rows < FEW_ROWS and length > 2 * CHUNK:
            # Two levels: many blocks fold a chunk each (rows read in place or through
            # strides), then one block per row folds the chunks' results, which are contiguous
            # (in a fixed order, so the bits repeat from run to run).
            parts = builtins.min(-(-length // CHUNK), MAX_CHUNKS)
            chunk = -(-length // parts)
            partials = empty((rows * parts,), out_dtype)
            (tree if in_place else strided_tree)[
                builtins.min(rows * parts, _ROW_BLOCKS), REDUCE_THREADS](
                source.buffer, rows, length, parts, chunk, identity, partials.buffer, *layout)
            tree[builtins.min(rows, _ROW_BLOCKS), REDUCE_THREADS](
                partials.buffer, rows, parts, 1, parts, identity, out.buffer)
        else:
            (tree if in_place else strided_tree)[builtins.min(rows, _ROW_BLOCKS), REDUCE_THREADS](
                source.buffer, rows, length, 1, length, identity, out.buffer, *layout)
    return reshape(out, _final_shape(x.shape, axes, keepdims, kept_shape))


def _lowest(dtype):
    if dtype.kind == "f":
        return dtype.type(-np.inf)
    if dtype.kind == "b":
        return dtype.type(False)
    return dtype.type(np.iinfo(dtype).min)


def sum(x, axis=None, keepdims=False):  # noqa: A001
    dtype = x.dtype if x.dtype.kind in "fc" else np.dtype(np.int64) \
        if x.dtype.kind in "bi" else np.dtype(np.uint64)
    return _reduce_values("sum", _add, lambda d: d.type(0), x, axis, keepdims, dtype)


def max(x, axis=None, keepdims=False):  # noqa: A001
    return _reduce_values("maximum", _larger, _lowest, x, axis, keepdims, x.dtype)


def _arg(name, largest, x, axis, keepdims):
    if axis is None:
        flat = reshape(x, (x.size,))
        result = _arg(name, largest, flat, 0, False)
        return reshape(result, (1,) * x.ndim) if keepdims else result
    axes = _normalize_axes(axis, x.ndim)
    rows_view, rows, length, kept_shape = _rows(x, axes)
    if length == 0:
        raise ValueError(f"attempt to get {name} of an empty sequence")
    out = empty((rows,), np.int64)
    if rows:
        tree, serial = _index_kernel(largest, x.dtype)
        if length <= SERIAL_LENGTH:
            blocks, threads = launch(rows)
            serial[blocks, threads](rows_view.buffer, rows, length, out.buffer)
        else:
            tree[builtins.min(rows, _ROW_BLOCKS), REDUCE_THREADS](rows_view.buffer, rows, length,
                                                                  out.buffer)
    return reshape(out, _final_shape(x.shape, axes, keepdims, kept_shape))


def argmax(x, axis=None, keepdims=False):
    return _arg("argmax", True, x, axis, keepdims)

