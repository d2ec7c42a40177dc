"""The gradients of several slices of one tensor, written into one buffer.

``x[index]`` with ints and slices only (basic indexing: q, k and v cut from one qkv projection,
the steps of a sequence) is a view, and its gradient is zeros of x's shape with the slice's
gradient at ``index`` (:meth:`Backend.index_add`). Made one by one and summed, n slices of x
cost n zero arrays of x's full size and n - 1 full-size sums. When no two of the slices share
an element (:func:`_disjoint`), the engine instead holds their gradients back
(:class:`SliceGradients`) until x's gradient is needed and writes each into its place in one
zero buffer. For an attention block's q/k/v split that is one zero array and three slice-sized
copies instead of three zero arrays, three scatters and two full-size sums.

Same bits as the sums it replaces: each element lies in one slice at most, so the sum of the n
index_adds there is its value v in that slice plus +0 once or more (or +0 alone). Adding +0
changes nothing but a -0, which it makes +0; so the buffer receives v + 0, computed once per
slice. Slices that may overlap (or that this module cannot place: None, Ellipsis or a bool in
the index) are summed as before, one index_add each.
"""

from __future__ import annotations

import numpy as np


class SliceGradients:
    """Gradients of basic-index slices of one tensor of ``shape`` and ``dtype``, held as
    (index, values) pairs in arrival order until :meth:`total` adds them up."""

    __slots__ = ("shape", "dtype", "pieces")

    def __init__(self, shape, dtype, index, values):
        self.shape, self.dtype, self.pieces = shape, dtype, [(index, values)]

    def append(self, index, values) -> None:
        """Add the gradient ``values`` of the slice ``index`` (after those already held)."""
        self.pieces.append((index, values))

    def total(self, backend):
        """The tensor's gradient: the sum of the slices' gradients, as a new backend array."""
        pieces = self.pieces
        if len(pieces) > 1 and _disjoint([index for index, _ in pieces], self.shape):
            buffer = backend.zeros(self.shape, self.dtype)
            zero = backend.zeros((), self.dtype)
            for index, values in pieces:
                backend.setitem_(buffer, index, backend.add(values, zero))  # -0 becomes +0
            return buffer
        total = None
        for index, values in pieces:
            gradient = backend.index_add(self.shape, index, values, self.dtype)
            total = gradient if total is None else backend.add(total, gradient)
        return total


def _disjoint(indices: list, shape) -> bool:
    """Whether no two of the basic indices of an array of ``shape`` select a common element,
    known by one axis on which the positions each picks are apart from all the others' (q, k
    and v: ints 0, 1, 2 on one axis; a sequence's steps; a weight's blocks of rows). Indices
    with None, Ellipsis or a bool (which NumPy reads as a new axis, not a position) do not line
    up with the axes one to one, and count as overlapping."""
    if any(part is None or part is Ellipsis or isinstance(part, (bool, np.bool_))
           for index in indices for part in index):
        return False
    for axis in range(min(len(index) for index in indices)):
        runs = [_positions(index[axis], shape[axis]) for index in indices]
        if _apart(runs):
            return True
    return False


def _positions(part, size: int) -> range:
    """The positions along an axis of ``size`` that an int or a slice selects."""
    if isinstance(part, slice):
        return range(*part.indices(size))
    position = int(part) % size  # getitem already refused ints out of range
    return range(position, position + 1)


def _apart(runs: list) -> bool:
    """Whether no position lies in two of the ranges: sorted by their first position when all
    are runs of neighbours (ints, plain slices: one pass), else counted as a set."""
    runs = [run for run in runs if run]  # an empty slice selects nothing
    if all(abs(run.step) == 1 for run in runs):
        bounds = sorted((min(run[0], run[-1]), max(run[0], run[-1])) for run in runs)
        return all(high < low for (_, high), (low, _) in zip(bounds, bounds[1:]))
    return len(set().union(*runs)) == sum(len(run) for run in runs)
