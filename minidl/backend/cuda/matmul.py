"""Batched matrix product C = A @ B as a tiled GEMM in shared memory.

Why tiles. Computing C (M x N) from A (M x K) and B (K x N) reads each element of A N times and
each element of B M times. Straight from global memory (the GPU's DRAM, hundreds of cycles away)
that traffic, not the arithmetic, would set the speed. So a thread block takes a BM x BN tile of
C and walks along K in steps of BK: at each step the block copies a BM x BK slab of A and a
BK x BN slab of B into **shared memory** (on-chip, a few cycles away, visible to the whole block)
once, and every thread then reads them from there many times. Each element fetched from DRAM is
reused BN times (from A) or BM times (from B) instead of once.

Why each thread computes several outputs. Even shared memory has a bandwidth limit. A thread
computing a TM x TN patch of C keeps it in registers and, per k, loads TM values of A and TN
values of B to do TM*TN multiply-adds: the ratio of arithmetic to loads grows with the patch.

Thread mapping. A block has (BM/TM) * (BN/TN) threads, numbered t. Thread t owns the patch at
rows (t // (BN/TN)) * TM ... and columns (t % (BN/TN)) * TN ... of the block's tile. To fill the
shared slabs the same threads are renumbered as a flat team: thread t loads slab elements t,
t + threads, ... in row-major order, so neighbouring threads read neighbouring addresses of a
row (coalesced loads). Two ``syncthreads`` per step: one after loading (nobody reads a slab
before it is complete) and one after computing (nobody overwrites a slab still being read).
Elements outside A or B load as 0, so edge tiles need no special case in the inner loop.

Transposed operands. A and B are read through a row and a column stride, as BLAS's
``transa``/``transb`` read them: ``matmul(a, b, transpose_b=True)`` reads b's stored (n x k)
matrices column by column as the (k x n) operand, so the backward pass of a linear layer or a
convolution never makes a transposed copy to feed the product.

The grid is (ceil(N/BN), ceil(M/BM), batch): blockIdx.z selects the matrix pair (in launches of
at most 65535, the grid's limit); a batch stride
of 0 reuses one matrix for every batch entry (a 2-D weight against a batch of inputs).

Sizes: BM = BN = 64, BK = 16, TM = TN = 4 gives 256 threads and 2 * 64 * 16 * 4 bytes = 8 KiB of
shared memory per block (float32). On the simulator, where each thread is a Python thread, the
same kernel runs with 4 x 4 tiles of 2 x 2 patches (4 threads).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numba import cuda, from_dtype

from ..batched_product import product_layout
from .device import SIMULATED, contiguous_strides, empty
from .movement import fill_, transpose

if SIMULATED:
    BM, BN, BK, TM, TN = 4, 4, 4, 2, 2
else:
    BM, BN, BK, TM, TN = 64, 64, 16, 4, 4
GEMM_THREADS = (BM // TM) * (BN // TN)
_MAX_GRID_Z = 65535

_kernels: dict = {}


def _gemm_kernel(dtype, transpose_a: bool, transpose_b: bool):
    """The GEMM for ``dtype`` and one pair of transpose flags. The flags are compile-time
    constants: each operand's strides are then 1 or its leading dimension, the multiplications
    by 1 vanish and the load order is fixed, so the plain product costs no more registers than
    before the flags existed."""
    dtype = np.dtype(dtype)
    key = (dtype, transpose_a, transpose_b)
    if key in _kernels:
        return _kernels[key]
    numba_type = from_dtype(dtype)
    zero = dtype.type(0)

    @cuda.jit
    def gemm(a, b, c, m, n, k, a_ld, b_ld, c_ld, batch_shape, a_batch, b_batch, c_batch,
             sums, a_sum, b_sum, first_batch):
        a_tile = cuda.shared.array((BM, BK), numba_type)
        b_tile = cuda.shared.array((BK, BN), numba_type)
        patch = cuda.local.array((TM, TN), numba_type)
        a_column = cuda.local.array(TM, numba_type)
        b_row = cuda.local.array(TN, numba_type)

        t = cuda.threadIdx.x
        row0 = cuda.blockIdx.y * BM          # this block's tile of C
        col0 = cuda.blockIdx.x * BN
        patch_row = (t // (BN // TN)) * TM   # this thread's patch inside the tile
        patch_col = (t % (BN // TN)) * TN
        # The block's matrices: blockIdx.z counts the batch (up to three axes, each operand
        # with its own strides along them; a stride of 0 shares one matrix along that axis).
        z = first_batch + cuda.blockIdx.z
        z2 = z % batch_shape[2]
        z = z // batch_shape[2]
        z1 = z % batch_shape[1]
        z0 = z // batch_shape[1]
        a_base = z0 * a_batch[0] + z1 * a_batch[1] + z2 * a_batch[2]
        b_base = z0 * b_batch[0] + z1 * b_batch[1] + z2 * b_batch[2]
        c_base = z0 * c_batch[0] + z1 * c_batch[1] + z2 * c_batch[2]
        # A transposed operand is its stored matrix read column by column.
        a_row_stride, a_column_stride = (1, a_ld) if transpose_a else (a_ld, 1)
        b_row_stride, b_column_stride = (1, b_ld) if transpose_b else (b_ld, 1)
        # Neighbouring threads load neighbouring addresses: along a slab's rows when the operand
        # is stored row-major, down its columns when it is a transposed (column-major) operand.
        a_by_rows = not transpose_a
        b_by_rows = not transpose_b

        for i in range(TM):
            for j in range(TN):
                patch[i, j] = zero

        # A summed batch axis (a convolution's images, for its weight gradient) is one more
        # loop around k: sum_s A_s @ B_s accumulates in the same registers.
        for s in range(sums):
            a_start = a_base + s * a_sum
            b_start = b_base + s * b_sum
            for k0 in range(0, k, BK):
                # Cooperative, coalesced loads of the two slabs (zeros past the edges).
                for e in range(t, BM * BK, GEMM_THREADS):
                    if a_by_rows:
                        r, q = e // BK, e % BK
                    else:
                        r, q = e % BM, e // BM
                    if row0 + r < m and k0 + q < k:
                        a_tile[r, q] = a[a_start + (row0 + r) * a_row_stride
                                         + (k0 + q) * a_column_stride]
                    else:
                        a_tile[r, q] = zero
                for e in range(t, BK * BN, GEMM_THREADS):
                    if b_by_rows:
                        q, s2 = e // BN, e % BN
                    else:
                        q, s2 = e % BK, e // BK
                    if k0 + q < k and col0 + s2 < n:
                        b_tile[q, s2] = b[b_start + (k0 + q) * b_row_stride
                                          + (col0 + s2) * b_column_stride]
                    else:
                        b_tile[q, s2] = zero
                cuda.syncthreads()
                for q in range(BK):
                    for i in range(TM):
                        a_column[i] = a_tile[patch_row + i, q]
                    for j in range(TN):
                        b_row[j] = b_tile[q, patch_col + j]
                    for i in range(TM):
                        for j in range(TN):
                            patch[i, j] += a_column[i] * b_row[j]
                cuda.syncthreads()

        for i in range(TM):
            row = row0 + patch_row + i
            if row < m:
                for j in range(TN):
                    col = col0 + patch_col + j
                    if col < n:
                        c[c_base + row * c_ld + col] = patch[i, j]

    _kernels[key] = gemm
    return gemm


@dataclass
class _Operand:
    """A matrix operand as the kernel reads it: a flat buffer, its strides along each of the
    product's batch axes (0 where it is shared) and its row and column strides."""

    buffer: object
    batch: list
    rows: int
    columns: int
    row_stride: int
    column_stride: int

    def flipped(self) -> "_Operand":
        """The same numbers read as the transposed matrix."""
        return _Operand(self.buffer, self.batch, self.columns, self.rows, self.column_stride,
                        self.row_stride)

    def leading_dimension(self):
        """(transposed, leading dimension) when one of the matrix strides is 1 (or its axis
        has one element), as a BLAS operand; None when neither is."""
        if self.column_stride == 1 or self.columns == 1:
            return False, self.row_stride
        if self.row_stride == 1 or self.rows == 1:
            return True, self.column_stride
        return None


def _operand(array, axes, batch) -> _Operand:
    """``array`` read through the permutation ``axes``, its batch axes aligned to ``batch``."""
    stored = contiguous_strides(array.shape)
    shape = [array.shape[axis] for axis in axes]
    strides = [stored[axis] for axis in axes]
    own = len(shape) - 2
    batch_strides = [0] * (len(batch) - own) + [
        stride if size != 1 else 0 for size, stride in zip(shape[:own], strides[:own])]
    return _Operand(array.buffer, batch_strides, shape[-2], shape[-1], strides[-2], strides[-1])


def _result_strides(layout) -> tuple:
    """(strides along the product's batch axes, row stride, column stride) of the result stored
    as ``transpose(product, out_axes)``; the summed axis gets stride 0."""
    stored = contiguous_strides(layout.shape)
    by_axis = [0] * len(layout.out_axes)
    for position, axis in enumerate(layout.out_axes):
        by_axis[axis] = stored[position]
    kept = by_axis[:-2]
    if layout.sum_axis is not None:
        kept.insert(layout.sum_axis, 0)
    return kept, by_axis[-2], by_axis[-1]


def _batch_axes(sizes, *operand_strides) -> list:
    """The batch as (size, strides...) rows: axes of one element dropped, neighbours merged
    where every operand steps through them as through one axis (fewer axes to decompose)."""
    axes = []
    for size, *strides in zip(sizes, *operand_strides):
        if size == 1:
            continue
        if axes and all(outer == inner * size for outer, inner in zip(axes[-1][1:], strides)):
            axes[-1] = (axes[-1][0] * size, *strides)
        else:
            axes.append((size, *strides))
    return axes


def matmul(a, b, transpose_a=False, transpose_b=False, *, a_axes=None, b_axes=None,
           out_axes=None, sum_axis=None):
    layout = product_layout(a.shape, b.shape, transpose_a, transpose_b, a_axes, b_axes,
                            out_axes, sum_axis)
    if a.dtype != b.dtype or a.dtype.kind != "f":
        raise ValueError(f"matmul needs two arrays of the same floating dtype, got {a.dtype} "
                         f"and {b.dtype}")
    out = empty(layout.shape, a.dtype)
    if out.size == 0:
        return out
    if layout.k == 0 or (layout.sum_axis is not None and layout.batch[layout.sum_axis] == 0):
        fill_(out, 0)
        return out
    left, right = _operand(a, layout.a_axes, layout.batch), _operand(b, layout.b_axes,
                                                                      layout.batch)
    if left.leading_dimension() is None or right.leading_dimension() is None:
        # An operand whose last axis went into the batch has no unit matrix stride: read a
        # copy of it in the order asked for (the one case that copies).
        if left.leading_dimension() is None:
            a, a_axes, transpose_a = transpose(a, layout.a_axes), None, False
        if right.leading_dimension() is None:
            b, b_axes, transpose_b = transpose(b, layout.b_axes), None, False
        return matmul(a, b, transpose_a, transpose_b, a_axes=a_axes, b_axes=b_axes,
                      out_axes=out_axes, sum_axis=sum_axis)
    c_batch, c_row_stride, c_column_stride = _result_strides(layout)
    if c_column_stride != 1 and layout.n != 1:
        if c_row_stride != 1 and layout.m != 1:
            # The result's columns are not its fastest axis: compute C, copy it into place.
            plain = matmul(a, b, transpose_a, transpose_b, a_axes=a_axes, b_axes=b_axes,
                           sum_axis=sum_axis)
            return transpose(plain, layout.out_axes)
        # Cᵀ = Bᵀ Aᵀ: the same sums in the same order, written with a unit column stride.
        left, right = right.flipped(), left.flipped()
        c_row_stride = c_column_stride
    _launch(left, right, out.buffer, c_row_stride, c_batch, list(layout.batch),
            layout.sum_axis)
    return out


def _launch(left, right, c, c_ld, c_batch, sizes, sum_axis) -> None:
    """Launch the GEMM over the batch: up to three batch axes per grid, one grid per index of
    any further (leading) axes."""
    transpose_a, a_ld = left.leading_dimension()
    transpose_b, b_ld = right.leading_dimension()
    a_batch, b_batch = list(left.batch), list(right.batch)
    sums, a_sum, b_sum = 1, 0, 0
    if sum_axis is not None:
        sums, a_sum, b_sum = sizes[sum_axis], a_batch[sum_axis], b_batch[sum_axis]
        for strides in (sizes, a_batch, b_batch, c_batch):
            del strides[sum_axis]
    axes = _batch_axes(sizes, a_batch, b_batch, c_batch)
    outer, axes = axes[:-3], [(1, 0, 0, 0)] * max(0, 3 - len(axes)) + axes[-3:]
    shape = tuple(size for size, *_ in axes)
    a_strides, b_strides, c_strides = (tuple(axis[i] for axis in axes) for i in (1, 2, 3))
    m, n, k = left.rows, right.columns, left.columns
    kernel = _gemm_kernel(c.dtype, transpose_a, transpose_b)
    batch = math.prod(shape)
    for index in np.ndindex(*(size for size, *_ in outer)):
        a_at, b_at, c_at = (sum(i * axis[j] for i, axis in zip(index, outer)) for j in (1, 2, 3))
        for first in range(0, batch, _MAX_GRID_Z):  # the grid's z extent is limited to 65535
            grid = (-(-n // BN), -(-m // BM), min(batch - first, _MAX_GRID_Z))
            kernel[grid, GEMM_THREADS](left.buffer[a_at:], right.buffer[b_at:], c[c_at:],
                                       m, n, k, a_ld, b_ld, c_ld, shape, a_strides,
                                       b_strides, c_strides, sums, a_sum, b_sum, first)


__all__ = ["matmul"]
