"""A matrix product's parts as BLAS calls made on Numba's threads: the products' fast hand-off.

:mod:`..reference.product_threads` cuts a large product into parts (rows, whole images, whole
heads), each part one BLAS call on one thread, and runs them on Python threads that sleep on a
queue between products. Waking such a thread costs what a short product takes: ~70-150 µs on a
2-core virtual machine, so only products of ~25 million multiply-adds and more gained from a
second thread. Numba's OpenMP threads, kept spinning for a moment after each parallel region
(:mod:`.process_settings`), take a region in ~3 µs; but they run compiled code only. So here a
part is described by the arguments of the BLAS call that NumPy's ``matmul`` would make on it
(``cblas_sgemm``/``cblas_dgemm``, row-major, each operand read in place or transposed through
its strides), and one ``prange`` kernel makes those calls, OpenBLAS on one thread inside each.

Same calls, same bits: a part is the exact call NumPy makes for it (checked in
``tests/backend/test_product_parts.py`` against ``np.matmul`` on every layout the products
use), so the result does not depend on which thread makes it or on whether this module or the
Python threads ran it. A matrix NumPy would not hand to ``gemm`` (a gram product ``x @ xᵀ``,
which it gives to ``syrk``; strides BLAS cannot take; a one-row or one-column matrix, which it
gives to ``gemv``) is never described here: :func:`gemm_call_table` returns None and the caller
keeps the Python threads.

Measured with ``benchmarks/bench_products.py`` on a 2-core virtual machine (float32, both
runners made to split, medians of 9 alternating rounds, load ~1.2), one thread / the Python
workers / Numba's threads: LeNet's first convolution (7.5M multiply-adds) 260 / 246 / 204 µs,
attention's scores over 128 heads (16.8M) 529 / 381 / 343 µs, 512×128 by 128×128 (8.4M) 112 /
118 / 83 µs, 2048×128 by 128×512 (134M) 1727 / 952 / 918 µs.
"""

from __future__ import annotations

import ctypes
import functools

import numpy as np
from numba import njit, prange

from ..threads import openblas_library_symbol

# CBLAS's enumerations.
ROW_MAJOR, NO_TRANS, TRANS = 101, 111, 112

# A call's columns in a call table (one row per BLAS call, all int64).
TRANS_A, TRANS_B, M, N, K, A, LDA, B, LDB, C, LDC = range(11)
CALL_FIELDS = 11


def _gemm_prototype(real):
    """``cblas_?gemm`` of an OpenBLAS built with 64-bit integers (NumPy's wheels)."""
    size, flag, address = ctypes.c_int64, ctypes.c_int, ctypes.c_void_p
    return ctypes.CFUNCTYPE(None, flag, flag, flag, size, size, size, real, address, size,
                            address, size, real, address, size)


@functools.cache
def gemm_functions():
    """{dtype: ctypes cblas_?gemm} of the OpenBLAS NumPy loaded, or {} where NumPy's BLAS is
    another one or uses 32-bit integers (then the Python threads make the calls)."""
    functions = {}
    for dtype, name, real in ((np.float32, "scipy_cblas_sgemm64_", ctypes.c_float),
                              (np.float64, "scipy_cblas_dgemm64_", ctypes.c_double)):
        symbol = openblas_library_symbol(name)
        if symbol is not None:
            functions[np.dtype(dtype)] = _gemm_prototype(real)(symbol)  # from its address
    return functions


@njit(cache=True, parallel=True, nogil=True)
def _make_calls(gemm, calls, part_starts):
    # One task per part; a part's calls one after another, each on the thread that runs it.
    for part in prange(part_starts.shape[0] - 1):
        for call in range(part_starts[part], part_starts[part + 1]):
            row = calls[call]
            gemm(ROW_MAJOR, row[TRANS_A], row[TRANS_B], row[M], row[N], row[K], 1.0, row[A],
                 row[LDA], row[B], row[LDB], 0.0, row[C], row[LDC])


def make_calls(calls: np.ndarray, part_starts, dtype) -> None:
    """Make the BLAS calls of ``calls`` (a table from :func:`gemm_call_table`), the calls
    ``part_starts[p]:part_starts[p + 1]`` as part ``p``, the parts at once on Numba's threads.
    The arrays the table points into must stay alive until this returns (the caller holds
    them)."""
    _make_calls(gemm_functions()[np.dtype(dtype)], calls, np.asarray(part_starts, np.int64))


def _operand(strides, rows: int, columns: int, itemsize: int):
    """(transposed flag, leading dimension) of a (rows, columns) matrix with these byte strides,
    as NumPy's matmul hands it to gemm, or None where it would not: rows contiguous first, then
    columns contiguous, each with a leading dimension that covers the other axis."""
    row_stride, column_stride = strides
    if column_stride == itemsize and row_stride % itemsize == 0 and \
            row_stride // itemsize >= columns:
        return NO_TRANS, row_stride // itemsize
    if row_stride == itemsize and column_stride % itemsize == 0 and \
            column_stride // itemsize >= rows:
        return TRANS, column_stride // itemsize
    return None


def gemm_call_table(a, b, out, row_bounds=None, column_bounds=None):
    """The BLAS calls that compute ``out[...] = a @ b`` for arrays with the same batch shape
    (``a`` (…, m, k), ``b`` (…, k, n), ``out`` (…, m, n), any strides): one call per matrix of
    the batch, in C order, or, for 2-D arrays and ``row_bounds`` given, one per range of rows
    ``row_bounds[i]:row_bounds[i + 1]``, or, ``column_bounds`` given, for each range of columns
    in turn, one call per matrix on those columns (the calls NumPy makes for ``a @
    b[..., start:stop]``). None where NumPy would not make those gemm calls itself (see the
    module's docstring): the caller then computes the product another way."""
    if column_bounds is not None:
        return _column_block_calls(a, b, out, column_bounds)
    dtype = out.dtype
    if a.dtype != dtype or b.dtype != dtype or dtype not in gemm_functions():
        return None
    (m, k), n, itemsize = a.shape[-2:], b.shape[-1], dtype.itemsize
    if m < 2 or n < 2 or k < 2:
        return None  # NumPy gives a vector to gemv or dot
    a_layout = _operand(a.strides[-2:], m, k, itemsize)
    b_layout = _operand(b.strides[-2:], k, n, itemsize)
    if a_layout is None or b_layout is None or out.strides[-1] != itemsize or \
            out.strides[-2] % itemsize or out.strides[-2] // itemsize < n:
        return None
    a_base, b_base, out_base = (x.__array_interface__["data"][0] for x in (a, b, out))
    if row_bounds is not None:
        starts = np.asarray(row_bounds[:-1], dtype=np.int64)
        rows = np.diff(np.asarray(row_bounds, dtype=np.int64))
        if rows.min() < 2:
            return None
        a_offsets, b_offsets, out_offsets = starts * a.strides[-2], 0, starts * out.strides[-2]
        calls = np.empty((len(starts), CALL_FIELDS), dtype=np.int64)
        calls[:, M] = rows
    else:
        batch = out.shape[:-2]
        a_offsets, b_offsets, out_offsets = (_matrix_offsets(x.strides[:-2], batch)
                                             for x in (a, b, out))
        calls = np.empty((max(1, int(np.prod(batch, dtype=np.int64))), CALL_FIELDS),
                         dtype=np.int64)
        calls[:, M] = m
    calls[:, TRANS_A], calls[:, LDA] = a_layout
    calls[:, TRANS_B], calls[:, LDB] = b_layout
    calls[:, N], calls[:, K], calls[:, LDC] = n, k, out.strides[-2] // itemsize
    calls[:, A] = a_base + a_offsets
    calls[:, B] = b_base + b_offsets
    calls[:, C] = out_base + out_offsets
    if a_layout[0] != b_layout[0] and m == n and a.strides[-2:] == b.strides[-2:][::-1] and \
            np.any(calls[:, A] == calls[:, B]):
        return None  # x @ xᵀ on one buffer: NumPy calls syrk
    return calls


def _column_block_calls(a, b, out, column_bounds):
    """:func:`gemm_call_table`'s calls for each range of columns, from the whole product's
    table: a block's calls differ from the whole's only in their width and where they start
    reading b and writing out (one table made and copied, where a table per block cost ~10 µs
    of Python each)."""
    starts = np.asarray(column_bounds[:-1], dtype=np.int64)
    widths = np.diff(np.asarray(column_bounds, dtype=np.int64))
    if widths.min() < 2:
        return None  # NumPy gives a one-column block to gemv
    whole = gemm_call_table(a, b, out)
    if whole is None:
        return None
    calls = np.tile(whole, (len(starts), 1))
    per_block = len(whole)
    calls[:, N] = np.repeat(widths, per_block)
    calls[:, B] += np.repeat(starts * b.strides[-1], per_block)
    calls[:, C] += np.repeat(starts * out.strides[-1], per_block)
    return calls


def _matrix_offsets(batch_strides, batch) -> np.ndarray:
    """Byte offsets of each matrix of a batch (C order), from its batch strides."""
    offsets = np.zeros(batch, dtype=np.int64)
    for axis, (size, stride) in enumerate(zip(batch, batch_strides)):
        shape = [1] * len(batch)
        shape[axis] = size
        offsets = offsets + (np.arange(size, dtype=np.int64) * stride).reshape(shape)
    return offsets.reshape(-1)


__all__ = ["gemm_functions", "gemm_call_table", "make_calls"]
