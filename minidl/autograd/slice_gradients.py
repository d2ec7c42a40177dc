"""The gradients of several slices of one tensor, written into one buffer.

``x[index]`` with ints and slices only (basic indexing: q, k and v cut from one qkv projection,
the steps of a sequence) is a view, and its gradient is zeros of x's shape with the slice's
gradient at ``index`` (:meth:`Backend.index_add`). Made one by one and summed, n slices of x
cost n zero arrays of x's full size and n - 1 full-size sums. When no two of the slices share
an element (:func:`_overlap`), the engine instead holds their gradients back
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
        if len(pieces) > 1 and not any(_overlap(a, b, self.shape)
                                       for i, (a, _) in enumerate(pieces)
                                       for b, _ in pieces[i + 1:]):
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


def _overlap(index_a: tuple, index_b: tuple, shape) -> bool:
    """Whether two basic indices of an array of ``shape`` may select a common element: unless
    on some axis the positions one picks and those the other picks are apart. Indices with None,
    Ellipsis or a bool (which NumPy reads as a new axis, not a position), whose parts do not line
    up with the axes one to one, count as overlapping."""
    if any(part is None or part is Ellipsis or isinstance(part, (bool, np.bool_))
           for part in index_a + index_b):
        return True
    return all(_positions_meet(_positions(part_a, size), _positions(part_b, size))
               for part_a, part_b, size in zip(index_a, index_b, shape))


def _positions(part, size: int) -> range:
    """The positions along an axis of ``size`` that an int or a slice selects."""
    if isinstance(part, slice):
        return range(*part.indices(size))
    position = int(part) % size  # getitem already refused ints out of range
    return range(position, position + 1)


def _positions_meet(a: range, b: range) -> bool:
    """Whether two ranges of positions share one (by their bounds when both are runs of
    neighbours, the common case of ints and plain slices)."""
    if not a or not b:
        return False
    if abs(a.step) == 1 and abs(b.step) == 1:
        (low_a, high_a), (low_b, high_b) = sorted((a[0], a[-1])), sorted((b[0], b[-1]))
        return max(low_a, low_b) <= min(high_a, high_b)
    return not set(a).isdisjoint(b)
