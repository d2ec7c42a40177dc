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

import numpy as np
from numba import cuda, from_dtype

from .device import SIMULATED, empty
from .movement import broadcast_to

if SIMULATED:
    BM, BN, BK, TM, TN = 4, 4, 4, 2, 2
else:
    BM, BN, BK, TM, TN = 64, 64, 16, 4, 4
GEMM_THREADS = (BM // TM) * (BN // TN)
_MAX_GRID_Z = 65535

_kernels: dict = {}


def _gemm_kernel(dtype, transpose_a: bool, transpose_b: bool):
    """The GEMM for ``dtype`` and one pair of transpose flags. The flags are compile-time
    constants: each operand's strides are then 1 or a size, the multiplications by 1 vanish and
    the load order is fixed, so the plain product costs no more registers than before the flags
    existed."""
    dtype = np.dtype(dtype)
    key = (dtype, transpose_a, transpose_b)
    if key in _kernels:
        return _kernels[key]
    numba_type = from_dtype(dtype)
    zero = dtype.type(0)

    @cuda.jit
    def gemm(a, b, c, m, n, k, a_batch_stride, b_batch_stride, first_batch):
        a_tile = cuda.shared.array((BM, BK), numba_type)
        b_tile = cuda.shared.array((BK, BN), numba_type)
        patch = cuda.local.array((TM, TN), numba_type)
        a_column = cuda.local.array(TM, numba_type)
        b_row = cuda.local.array(TN, numba_type)

        t = cuda.threadIdx.x
        batch = first_batch + cuda.blockIdx.z
        row0 = cuda.blockIdx.y * BM          # this block's tile of C
        col0 = cuda.blockIdx.x * BN
        patch_row = (t // (BN // TN)) * TM   # this thread's patch inside the tile
        patch_col = (t % (BN // TN)) * TN
        a_base = batch * a_batch_stride
        b_base = batch * b_batch_stride
        # A transposed operand is its stored matrix read column by column.
        a_row_stride, a_column_stride = (1, m) if transpose_a else (k, 1)
        b_row_stride, b_column_stride = (1, k) if transpose_b else (n, 1)
        # Neighbouring threads load neighbouring addresses: along a slab's rows when the operand
        # is stored row-major, down its columns when it is a transposed (column-major) operand.
        a_by_rows = not transpose_a
        b_by_rows = not transpose_b

        for i in range(TM):
            for j in range(TN):
                patch[i, j] = zero

        for k0 in range(0, k, BK):
            # Cooperative, coalesced loads of the two slabs (zeros past the edges).
            for e in range(t, BM * BK, GEMM_THREADS):
                if a_by_rows:
                    r, q = e // BK, e % BK
                else:
                    r, q = e % BM, e // BM
                if row0 + r < m and k0 + q < k:
                    a_tile[r, q] = a[a_base + (row0 + r) * a_row_stride
                                     + (k0 + q) * a_column_stride]
                else:
                    a_tile[r, q] = zero
            for e in range(t, BK * BN, GEMM_THREADS):
                if b_by_rows:
                    q, s = e // BN, e % BN
                else:
                    q, s = e % BK, e // BK
                if k0 + q < k and col0 + s < n:
                    b_tile[q, s] = b[b_base + (k0 + q) * b_row_stride
                                     + (col0 + s) * b_column_stride]
                else:
                    b_tile[q, s] = zero
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

        c_base = batch * m * n
        for i in range(TM):
            row = row0 + patch_row + i
            if row < m:
                for j in range(TN):
                    col = col0 + patch_col + j
                    if col < n:
                        c[c_base + row * n + col] = patch[i, j]

    _kernels[key] = gemm
    return gemm


def _batched(array, batch_shape):
    """(buffer, batch stride) of ``array`` read as ``batch`` matrices: stride 0 when it has one
    matrix for the whole batch, else broadcast (a copy only when its batch axes differ)."""
    matrix = array.shape[-2] * array.shape[-1]
    own = math.prod(array.shape[:-2])
    if own == 1:
        return array.buffer, 0
    if tuple(array.shape[:-2]) != tuple(batch_shape):
        array = broadcast_to(array, tuple(batch_shape) + array.shape[-2:])
    return array.buffer, matrix


def _swap_last_two(shape) -> tuple:
    return tuple(shape[:-2]) + (shape[-1], shape[-2])


def matmul(a, b, transpose_a=False, transpose_b=False):
    if a.ndim < 2 or b.ndim < 2:
        raise ValueError(f"matmul needs arrays of at least 2 dimensions, got shapes {a.shape} "
                         f"and {b.shape}")
    if a.dtype != b.dtype or a.dtype.kind != "f":
        raise ValueError(f"matmul needs two arrays of the same floating dtype, got {a.dtype} "
                         f"and {b.dtype}")
    a_shape = _swap_last_two(a.shape) if transpose_a else a.shape
    b_shape = _swap_last_two(b.shape) if transpose_b else b.shape
    m, k = a_shape[-2:]
    k2, n = b_shape[-2:]
    if k != k2:
        raise ValueError(f"matmul: shapes {a_shape} and {b_shape} do not align ({k} != {k2})")
    batch_shape = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    batch = math.prod(batch_shape)
    out = empty(tuple(batch_shape) + (m, n), a.dtype)
    if out.size == 0:
        return out
    if k == 0:
        from .movement import fill_
        fill_(out, 0)
        return out
    a_buffer, a_stride = _batched(a, batch_shape)
    b_buffer, b_stride = _batched(b, batch_shape)
    kernel = _gemm_kernel(a.dtype, bool(transpose_a), bool(transpose_b))
    for first in range(0, batch, _MAX_GRID_Z):  # the grid's z extent is limited to 65535
        grid = (-(-n // BN), -(-m // BM), min(batch - first, _MAX_GRID_Z))
        kernel[grid, GEMM_THREADS](a_buffer, b_buffer, out.buffer, m, n, k, a_stride, b_stride,
                                   first)
    return out


__all__ = ["matmul"]
