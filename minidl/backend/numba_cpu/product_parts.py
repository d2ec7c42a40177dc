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
from typing import NamedTuple

import numpy as np
from numba import njit, prange

from ..threads import openblas_library_symbol

# CBLAS's enumerations.
ROW_MAJOR, NO_TRANS, TRANS = 101, 111, 112

# A call's columns in a call table (one row per BLAS call, all int64; A, B and C are byte
# offsets from where the operands and the result start: see GemmCalls).
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
def _make_calls(gemm, calls, part_starts, a_start, b_start, out_start):
    # One task per part; a part's calls one after another, each on the thread that runs it.
    for part in prange(part_starts.shape[0] - 1):
        for call in range(part_starts[part], part_starts[part + 1]):
            row = calls[call]
            gemm(ROW_MAJOR, row[TRANS_A], row[TRANS_B], row[M], row[N], row[K], 1.0,
                 a_start + row[A], row[LDA], b_start + row[B], row[LDB], 0.0,
                 out_start + row[C], row[LDC])


class GemmCalls(NamedTuple):
    """The BLAS calls of one product: ``offsets``, a read-only table with one row per call
    (the fields named at the top of this module), whose A, B and C columns are byte offsets
    from ``starts``, the addresses where a, b and out begin. Its length is its call count."""

    offsets: np.ndarray
    starts: tuple

    def __len__(self) -> int:
        return len(self.offsets)


def make_calls(calls: GemmCalls, part_starts, dtype) -> None:
    """Make the BLAS calls of ``calls`` (from :func:`gemm_call_table`), the calls
    ``part_starts[p]:part_starts[p + 1]`` as part ``p``, the parts at once on Numba's threads.
    The arrays the calls point into must stay alive until this returns (the caller holds
    them)."""
    _make_calls(gemm_functions()[np.dtype(dtype)], calls.offsets,
                np.asarray(part_starts, np.int64), *calls.starts)


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
    module's docstring): the caller then computes the product another way.

    The calls are a layout plus where the three arrays start. The layout (every call's sizes,
    flags and byte offsets) depends only on shapes, strides, dtypes and cuts, which a training
    step repeats, so it is worked out once per layout (:func:`_layout_table`: ~20-40 µs of NumPy
    calls alone, 60-130 µs inside a training step, where their code and data have left the
    caches), and the kernel adds the addresses as it makes each call."""
    layout = _layout_table(a.shape, a.strides, a.dtype, b.shape, b.strides, b.dtype, out.shape,
                           out.strides, out.dtype,
                           None if row_bounds is None else tuple(row_bounds),
                           None if column_bounds is None else tuple(column_bounds))
    if layout is None:
        return None
    offsets, gram_gaps = layout
    starts = tuple(x.__array_interface__["data"][0] for x in (a, b, out))
    if gram_gaps is not None and starts[1] - starts[0] in gram_gaps:
        return None  # x @ xᵀ on one buffer: NumPy calls syrk
    return GemmCalls(offsets, starts)


@functools.lru_cache(maxsize=256)
def _layout_table(a_shape, a_strides, a_dtype, b_shape, b_strides, b_dtype, out_shape,
                  out_strides, dtype, row_bounds, column_bounds):
    """(a read-only call table whose A, B and C columns are byte offsets from where ``a``,
    ``b`` and ``out`` start, ``gram_gaps``), or None where NumPy would make no such gemm calls.
    Arguments: the arrays' shapes, strides and dtypes and the cuts, as :func:`gemm_call_table`
    takes them.

    NumPy hands x @ xᵀ to syrk: a call whose one operand is read as the other's transpose, from
    one address. For operands laid out so that can happen, ``gram_gaps`` holds the distances
    b's start - a's start at which some call would read both from one address (its A offset -
    its B offset); None where it cannot happen."""
    if a_dtype != dtype or b_dtype != dtype or dtype not in gemm_functions():
        return None
    if column_bounds is not None:
        offsets = _column_block_offsets(a_shape, a_strides, b_shape, b_strides, out_shape,
                                        out_strides, dtype, column_bounds)
    else:
        offsets = _whole_or_row_offsets(a_shape, a_strides, b_shape, b_strides, out_shape,
                                        out_strides, dtype, row_bounds)
    if offsets is None:
        return None
    offsets.flags.writeable = False  # shared by every product of this layout
    gram_gaps = None
    if a_shape[-2] == b_shape[-1] and a_strides[-2:] == b_strides[-2:][::-1] and \
            offsets[0, TRANS_A] != offsets[0, TRANS_B]:
        gram_gaps = frozenset((offsets[:, A] - offsets[:, B]).tolist())
    return offsets, gram_gaps


def _whole_or_row_offsets(a_shape, a_strides, b_shape, b_strides, out_shape, out_strides, dtype,
                          row_bounds):
    """The offsets table of one call per matrix, or per range of rows; None as above."""
    (m, k), n, itemsize = a_shape[-2:], b_shape[-1], dtype.itemsize
    if m < 2 or n < 2 or k < 2:
        return None  # NumPy gives a vector to gemv or dot
    a_layout = _operand(a_strides[-2:], m, k, itemsize)
    b_layout = _operand(b_strides[-2:], k, n, itemsize)
    if a_layout is None or b_layout is None or out_strides[-1] != itemsize or \
            out_strides[-2] % itemsize or out_strides[-2] // itemsize < n:
        return None
    if row_bounds is not None:
        starts = np.asarray(row_bounds[:-1], dtype=np.int64)
        rows = np.diff(np.asarray(row_bounds, dtype=np.int64))
        if rows.min() < 2:
            return None
        a_offsets, b_offsets, out_offsets = starts * a_strides[-2], 0, starts * out_strides[-2]
        calls = np.empty((len(starts), CALL_FIELDS), dtype=np.int64)
        calls[:, M] = rows
    else:
        batch = out_shape[:-2]
        a_offsets, b_offsets, out_offsets = (_matrix_offsets(strides[:-2], batch)
                                             for strides in (a_strides, b_strides, out_strides))
        calls = np.empty((max(1, int(np.prod(batch, dtype=np.int64))), CALL_FIELDS),
                         dtype=np.int64)
        calls[:, M] = m
    calls[:, TRANS_A], calls[:, LDA] = a_layout
    calls[:, TRANS_B], calls[:, LDB] = b_layout
    calls[:, N], calls[:, K], calls[:, LDC] = n, k, out_strides[-2] // itemsize
    calls[:, A], calls[:, B], calls[:, C] = a_offsets, b_offsets, out_offsets
    return calls


def _column_block_offsets(a_shape, a_strides, b_shape, b_strides, out_shape, out_strides, dtype,
                          column_bounds):
    """The offsets table for each range of columns, from the whole product's: a block's calls
    differ from the whole's only in their width and where they start reading b and writing
    out."""
    starts = np.asarray(column_bounds[:-1], dtype=np.int64)
    widths = np.diff(np.asarray(column_bounds, dtype=np.int64))
    if widths.min() < 2:
        return None  # NumPy gives a one-column block to gemv
    whole = _whole_or_row_offsets(a_shape, a_strides, b_shape, b_strides, out_shape,
                                  out_strides, dtype, None)
    if whole is None:
        return None
    calls = np.tile(whole, (len(starts), 1))
    per_block = len(whole)
    calls[:, N] = np.repeat(widths, per_block)
    calls[:, B] += np.repeat(starts * b_strides[-1], per_block)
    calls[:, C] += np.repeat(starts * out_strides[-1], per_block)
    return calls


def _matrix_offsets(batch_strides, batch) -> np.ndarray:
    """Byte offsets of each matrix of a batch (C order), from its batch strides."""
    offsets = np.zeros(batch, dtype=np.int64)
    for axis, (size, stride) in enumerate(zip(batch, batch_strides)):
        shape = [1] * len(batch)
        shape[axis] = size
        offsets = offsets + (np.arange(size, dtype=np.int64) * stride).reshape(shape)
    return offsets.reshape(-1)


__all__ = ["GemmCalls", "gemm_functions", "gemm_call_table", "make_calls"]
