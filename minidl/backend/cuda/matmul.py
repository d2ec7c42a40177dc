"""The ``matmul`` primitive on the device: a strided batched GEMM, as cuBLAS's
``gemmStridedBatched``.

The product's operands are arrays read through permutations of their axes (the primitive's
``transpose_*`` and ``*_axes``, worked out in :mod:`minidl.backend.batched_product`). Here each
becomes what a BLAS routine takes: a flat buffer, a stride per batch axis (0 where one matrix is
shared, as a 2-D weight against a batch of inputs) and, for the matrix itself, a transpose flag
and a leading dimension. That is enough for a convolution: its im2col columns (K, N·L) read as N
matrices (K, L) have batch stride L and leading dimension N·L, so they feed the product as they
lie, and its (N, O, L) output is written straight from the product. A result whose columns are
not its fastest axis is computed as Cᵀ = Bᵀ Aᵀ (the same sums in the same order); only an operand
whose last stored axis went into the batch, or a result stored batch-last, is copied.

The kernel is :mod:`.gemm_tiles`. This side chooses its variant: the 128 x 128 tiles when a
float32 product has enough of them to occupy the GPU, else 64 x 64 (small or skinny products: a
128-row tile of a 20-row product would compute mostly padding); vector loads of an operand when
every group of 4 along its contiguous axis starts 16-byte aligned; 32-bit offsets when every
offset inside a matrix fits. The grid is (column tiles, row tiles, batch), in launches of at most
65535 matrices (the grid's z limit); up to three batch axes are decomposed in the kernel, any
further leading ones get a launch per index.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..batched_product import cached_product_layout
from .device import SIMULATED, contiguous_strides, empty
from .gemm_tiles import LARGE, SMALL, VECTOR, gemm_kernel
from .movement import fill_, transpose

_MAX_GRID_Z = 65535
_INT32_MAX = 2**31 - 1
_LARGE_TILES_FILL_THE_GPU = 1 if SIMULATED else 128
"""Blocks of large tiles from which they are used: about one per streaming multiprocessor (an
H100 has 132). With fewer, the small tiles' four times as many blocks keep more of them busy.
Not measured on a GPU."""


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
    layout = cached_product_layout(a.shape, b.shape, transpose_a, transpose_b, a_axes, b_axes,
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
    batch = math.prod(shape)
    # float64 keeps the small tiles: 64 double sums a thread take 128 registers of the 255, and
    # the large tiles' float64 kernel uses ~240, one block per multiprocessor.
    tiles = LARGE if (c.dtype.itemsize <= 4 and m >= LARGE.rows and n >= LARGE.columns
                      and batch * -(-m // LARGE.rows) * -(-n // LARGE.columns)
                      >= _LARGE_TILES_FILL_THE_GPU) else SMALL
    outer_strides = [axis[1:] for axis in outer]
    aligned_a = _vector_aligned(left, transpose_a, a_ld, a_strides + (a_sum,),
                                [strides[0] for strides in outer_strides])
    aligned_b = _vector_aligned(right, transpose_b, b_ld, b_strides + (b_sum,),
                                [strides[1] for strides in outer_strides])
    narrow = max(_largest_offset(left), _largest_offset(right),
                 (m - 1) * c_ld + n - 1) <= _INT32_MAX
    kernel = gemm_kernel(tiles, c.dtype, transpose_a, transpose_b, aligned_a, aligned_b, narrow)
    # Sizes and leading dimensions as 32-bit kernel arguments when they fit, so that the
    # kernel's offsets inside a matrix are 32-bit multiplies and adds from the start.
    sizes = tuple((np.int32 if narrow else np.int64)(value)
                  for value in (m, n, k, a_ld, b_ld, c_ld))
    for index in np.ndindex(*(size for size, *_ in outer)):
        a_at, b_at, c_at = (sum(i * axis[j] for i, axis in zip(index, outer)) for j in (1, 2, 3))
        for first in range(0, batch, _MAX_GRID_Z):  # the grid's z extent is limited to 65535
            grid = (-(-n // tiles.columns), -(-m // tiles.rows), min(batch - first, _MAX_GRID_Z))
            kernel[grid, tiles.threads](_from(left.buffer, a_at), _from(right.buffer, b_at),
                                        _from(c, c_at), *sizes, shape,
                                        a_strides, b_strides, c_strides, sums, a_sum, b_sum,
                                        first)


def _from(buffer, offset):
    return buffer[offset:] if offset else buffer


def _vector_aligned(operand, transposed, ld, batch_strides, outer_strides) -> bool:
    """Whether every group of 4 the kernel fetches along the operand's contiguous axis starts on
    a multiple of 4 elements (16 bytes for float32; buffers start 256-byte aligned) and lies
    wholly inside or wholly outside the matrix."""
    extent = operand.rows if transposed else operand.columns
    return all(value % VECTOR == 0 for value in (extent, ld, *batch_strides, *outer_strides))


def _largest_offset(operand) -> int:
    """The largest offset the kernel computes inside one matrix of the operand."""
    return (operand.rows - 1) * operand.row_stride + (operand.columns - 1) * operand.column_stride


__all__ = ["matmul"]
