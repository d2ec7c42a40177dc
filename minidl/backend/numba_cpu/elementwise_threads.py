"""The Numba side of :mod:`.elementwise`: adds, subtractions, products, comparisons, selections
and ReLU over spans of elements, split over threads.

An elementwise result does not depend on how the elements are split, so these give NumPy's bits
at any thread count. A task is a span of :data:`SPAN` elements, or of whole rows when a row
vector (a bias) is broadcast along the rows, or of whole (height × width) planes when a value per
channel (a convolution's bias) is broadcast over an (N, C, H, W) array.
"""

from __future__ import annotations

from numba import njit, prange

from .nn_kernels import _relu_backward_kernel

SPAN = 1 << 14
"""Elements per task: enough to amortise a task's start, small enough to balance the threads."""

ADD, SUB, MUL = 0, 1, 2


@njit(cache=True, inline="always")
def _apply(op, x, y):
    if op == ADD:
        return x + y
    if op == SUB:
        return x - y
    return x * y


@njit(cache=True)
def _binary_span(a, b, out, op):
    # Indices from 0 (Numba then drops its negative-index test) and the op and the one-value case
    # tested outside the loop: the loop vectorises (indexing from the span's start in place ran
    # slower than NumPy on one thread).
    if b.size == 1:
        value = b[0]
        for k in range(out.size):
            out[k] = _apply(op, a[k], value)
    else:
        for k in range(out.size):
            out[k] = _apply(op, a[k], b[k])


@njit(cache=True, parallel=True)
def binary_spans(a, b, out, op):
    """out = a op b, all flat: ``a`` and ``out`` the same size, ``b`` too or a single value."""
    for span in prange((out.size + SPAN - 1) // SPAN):
        first, last = span * SPAN, min(out.size, (span + 1) * SPAN)
        _binary_span(a[first:last], b if b.size == 1 else b[first:last], out[first:last], op)


@njit(cache=True, parallel=True)
def rows_with_row(a, row, out, op):
    """out = a op row for (rows, width) ``a`` and ``out`` and a (width,) ``row``."""
    rows, width = a.shape
    block = max(1, SPAN // width)
    for task in prange((rows + block - 1) // block):
        for r in range(task * block, min(rows, (task + 1) * block)):
            for k in range(width):
                out[r, k] = _apply(op, a[r, k], row[k])


@njit(cache=True, parallel=True)
def planes_with_values(a, values, out, op):
    """out[n, c] = a[n, c] op values[c] for (batch, channels, plane) ``a`` and ``out`` and a
    (channels,) ``values``."""
    batch, channels, plane = a.shape
    block = max(1, SPAN // plane)  # whole planes per task
    planes = batch * channels
    for task in prange((planes + block - 1) // block):
        for p in range(task * block, min(planes, (task + 1) * block)):
            n, c = p // channels, p % channels
            value = values[c]
            for k in range(plane):
                out[n, c, k] = _apply(op, a[n, c, k], value)


@njit(cache=True)
def _less_span(a, b, out):
    if b.size == 1:
        value = b[0]
        for k in range(out.size):  # from 0, so that it vectorises (see _binary_span)
            out[k] = a[k] < value
    else:
        for k in range(out.size):
            out[k] = a[k] < b[k]


@njit(cache=True, parallel=True)
def less_spans(a, b, out):
    """out = a < b (bool), all flat: ``a`` and ``out`` the same size, ``b`` too or one value."""
    for span in prange((out.size + SPAN - 1) // SPAN):
        first, last = span * SPAN, min(out.size, (span + 1) * SPAN)
        _less_span(a[first:last], b if b.size == 1 else b[first:last], out[first:last])


@njit(cache=True)
def _select(condition, a, b, out):
    # One loop per case, indices from 0: each loop then vectorises (a select between two
    # registers, or between a register and a load).
    if a.size == 1 and b.size == 1:
        value_a, value_b = a[0], b[0]
        for k in range(out.size):
            out[k] = value_a if condition[k] else value_b
    elif b.size == 1:
        value_b = b[0]
        for k in range(out.size):
            out[k] = a[k] if condition[k] else value_b
    elif a.size == 1:
        value_a = a[0]
        for k in range(out.size):
            out[k] = value_a if condition[k] else b[k]
    else:
        for k in range(out.size):
            out[k] = a[k] if condition[k] else b[k]


@njit(cache=True, parallel=True)
def select_spans(condition, a, b, out):
    """out = a where condition else b, all flat; ``a`` or ``b`` may hold one value, used for
    every element (dropout's mask: 1/(1-p) where kept, else 0)."""
    for span in prange((out.size + SPAN - 1) // SPAN):
        first, last = span * SPAN, min(out.size, (span + 1) * SPAN)
        _select(condition[first:last], a if a.size == 1 else a[first:last],
                b if b.size == 1 else b[first:last], out[first:last])


@njit(cache=True)
def relu_span(a, out):
    """max(a, 0) on the calling thread, all flat: :func:`relu_spans`' loop, one span of any
    length, so the same bits."""
    zero = out.dtype.type(0)
    for k in range(out.size):  # from 0, so that it vectorises (see _binary_span)
        value = a[k]
        out[k] = value if (value > 0) | (value != value) else zero


@njit(cache=True, parallel=True)
def relu_spans(a, out):
    """max(a, 0) as NumPy computes it: NaN stays NaN, -0.0 becomes +0.0."""
    for span in prange((out.size + SPAN - 1) // SPAN):
        first, last = span * SPAN, min(out.size, (span + 1) * SPAN)
        relu_span(a[first:last], out[first:last])


@njit(cache=True, parallel=True)
def relu_backward_spans(grad, x, dx):
    """:func:`.nn_kernels.relu_backward`'s kernel on each span."""
    for span in prange((dx.size + SPAN - 1) // SPAN):
        part = slice(span * SPAN, min(dx.size, (span + 1) * SPAN))
        _relu_backward_kernel(grad[part], x[part], dx[part])
