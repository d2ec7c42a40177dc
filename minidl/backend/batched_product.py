"""What a strided batched ``matmul`` computes: its arguments checked and its axes worked out once,
for every backend (plain Python on shapes, no arrays).

``matmul(a, b, transpose_a, transpose_b, a_axes=, b_axes=, out_axes=, sum_axis=)`` is the NumPy
expression ``transpose(sum(transpose(a, a_axes) @ transpose(b, b_axes), axis=sum_axis),
out_axes)`` (with ``transpose_a``/``transpose_b`` swapping the operands' last two axes after
their ``*_axes``). A backend reads that as each operand seen through a permutation of its axes
and the result written through one: BLAS's strided batched product, where the permutations
become batch strides and leading dimensions and no transposed copy is made. A convolution needs
all three: its im2col columns (K, N·L) are the batch of N matrices (K, L) at column offsets n·L,
its output (N, O, L) is written straight from them, and its weight gradient sums over the batch.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class ProductLayout:
    """A checked product: each operand's full axis permutation (transposes included), the
    product's batch shape before the sum, the summed batch axis (or None), the result's
    permutation and its stored shape."""

    a_axes: tuple
    b_axes: tuple
    batch: tuple
    sum_axis: int | None
    out_axes: tuple
    m: int
    k: int
    n: int
    shape: tuple


def _permutation(axes, ndim: int, name: str) -> tuple:
    if axes is None:
        return tuple(range(ndim))
    try:
        axes = tuple(int(axis) for axis in axes)
    except TypeError:
        raise ValueError(f"matmul: {name} must be a sequence of axes, got {axes!r}") from None
    normalised = tuple(axis % ndim if -ndim <= axis < ndim else axis for axis in axes)
    if sorted(normalised) != list(range(ndim)):
        raise ValueError(f"matmul: {name}={axes} is not a permutation of {ndim} axes")
    return normalised


def _with_transpose(axes: tuple, transpose: bool) -> tuple:
    return axes[:-2] + (axes[-1], axes[-2]) if transpose else axes


def product_layout(a_shape, b_shape, transpose_a=False, transpose_b=False, a_axes=None,
                   b_axes=None, out_axes=None, sum_axis=None) -> ProductLayout:
    """The :class:`ProductLayout` of ``matmul`` on arrays of these shapes, or a ``ValueError``
    naming the argument that does not fit."""
    if len(a_shape) < 2 or len(b_shape) < 2:
        raise ValueError(f"matmul needs arrays of at least 2 dimensions, got shapes "
                         f"{tuple(a_shape)} and {tuple(b_shape)}")
    a_axes = _with_transpose(_permutation(a_axes, len(a_shape), "a_axes"), transpose_a)
    b_axes = _with_transpose(_permutation(b_axes, len(b_shape), "b_axes"), transpose_b)
    a_seen = tuple(a_shape[axis] for axis in a_axes)
    b_seen = tuple(b_shape[axis] for axis in b_axes)
    (m, k), (k2, n) = a_seen[-2:], b_seen[-2:]
    if k != k2:
        raise ValueError(f"matmul: shapes {a_seen} and {b_seen} do not align ({k} != {k2})")
    try:
        batch = tuple(np.broadcast_shapes(a_seen[:-2], b_seen[:-2]))
    except ValueError:
        raise ValueError(f"matmul: the batch axes of {a_seen} and {b_seen} do not "
                         f"broadcast") from None
    kept = batch
    if sum_axis is not None:
        if isinstance(sum_axis, bool) or not isinstance(sum_axis, (int, np.integer)) or \
                not -len(batch) <= sum_axis < len(batch):
            raise ValueError(f"matmul: sum_axis={sum_axis!r} is not one of the product's "
                             f"{len(batch)} batch axes (shapes {a_seen} and {b_seen})")
        sum_axis = int(sum_axis) % len(batch)
        kept = batch[:sum_axis] + batch[sum_axis + 1:]
    product = kept + (m, n)
    out_axes = _permutation(out_axes, len(product), "out_axes")
    return ProductLayout(a_axes, b_axes, batch, sum_axis, out_axes, m, k, n,
                         tuple(product[axis] for axis in out_axes))


@functools.lru_cache(maxsize=512)
def _remembered_layout(*arguments) -> ProductLayout:
    return product_layout(*arguments)


def cached_product_layout(a_shape, b_shape, transpose_a=False, transpose_b=False, a_axes=None,
                          b_axes=None, out_axes=None, sum_axis=None) -> ProductLayout:
    """:func:`product_layout`, remembered by its arguments: a model calls the same few products
    on the same shapes every step, and working the layout out costs more Python than a small
    product's arithmetic (a single-sample convolution). Errors are raised, never remembered."""
    def key(axes):
        return axes if axes is None or isinstance(axes, tuple) else tuple(axes)
    try:
        return _remembered_layout(tuple(a_shape), tuple(b_shape), bool(transpose_a),
                                  bool(transpose_b), key(a_axes), key(b_axes), key(out_axes),
                                  sum_axis)
    except TypeError:  # an argument that cannot be a key (an axis list of lists): check it plainly
        return product_layout(a_shape, b_shape, transpose_a, transpose_b, a_axes, b_axes,
                              out_axes, sum_axis)


__all__ = ["ProductLayout", "product_layout", "cached_product_layout"]
