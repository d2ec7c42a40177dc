"""Add, subtract, multiply, compare (``less``), select (``where``), ReLU and ReLU's gradient:
NumPy's ufuncs (and ReLU's one-thread kernels), or Numba's threads for large float
arrays; and the math functions, NumPy's but for erf.

NumPy's ufuncs run on one thread, and between the matrix products of a training step these
passes over memory (bias adds, residual adds, activations and their gradients) are a large share
of the time left on one core. Row-major arrays of at least :data:`PARALLEL_MIN_WORK` elements,
of one float dtype, either of one shape, or an array with a 0-d value (a scale), or a
(…, width) array with a (width,) row (a Linear bias), or an (N, C, …) array with a (1, C, 1, …)
value per channel (a convolution's bias), go to the threaded kernels of
:mod:`.elementwise_threads`, which give NumPy's bits (ReLU has its own floor, and runs the same
loop on the calling thread below it: see :func:`relu`). Everything else — small arrays, other
dtypes, general broadcasting, views that are not row-major — is the reference's NumPy call, and
Numba is not imported for it (a small model's first forward pass never waits for Numba; see
:mod:`.loading`).
"""

from __future__ import annotations

import numpy as np

from ..reference import array_ops
from ..threads import follow_in_this_thread, sized_for
from . import loading

PARALLEL_MIN_WORK = 1 << 18
"""Elements from which a pass is split over threads (below it, NumPy's ufunc).

Waking a sleeping worker is what a split must pay for. With OpenMP's threads waiting passively
(~80 µs a region on a 2-core VM) these passes threaded only from 2^20: LeNet's per-channel bias
add (64x6x28x28) held ran in 56 us against NumPy's 85, and threaded made the products after it
8% slower. Now that the threads spin for a moment between regions (~3 µs a region, see
:mod:`.process_settings`), threading from 2^18 pays (2-core VM, two threads, medians of 4
alternating runs, load ~1, together with pooling, bias-gradient sums and im2col/col2im from
2^18): attention 41.4 -> 44.2 steps/s, the Transformer 17.7 -> 19.7, LeNet 163 -> 164, MLP
274 -> 278, CIFAR and the LSTM unchanged."""

_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


def _large(a, b=None) -> bool:
    # Row-major operands only: NumPy's ufunc walks a permuted view in one pass, while copying it
    # to row-major first (one thread) and then running the threads measured slower than NumPy
    # alone at 1 and at 2 threads.
    return (type(a) is np.ndarray and a.size >= PARALLEL_MIN_WORK and a.dtype in _FLOATS
            and a.flags.c_contiguous
            and (b is None or (type(b) is np.ndarray and b.dtype == a.dtype
                               and b.flags.c_contiguous)))


def _binary(a, b, op_name: str, ufunc, commutes: bool):
    if _large(a, b) or (commutes and _large(b, a)):
        if commutes and b.size > a.size:
            a, b = b, a  # (the threaded kernels take the row second; x + y == y + x exactly)
        op = _OPS[op_name]
        if a.shape == b.shape or b.ndim == 0:
            out = np.empty(a.shape, a.dtype)
            _threads("binary_spans", a.size)(a.reshape(-1), b.reshape(-1), out.reshape(-1), op)
            return out
        if b.ndim == 1 and a.ndim >= 2 and b.shape[0] == a.shape[-1] and b.size:
            out = np.empty(a.shape, a.dtype)
            width = b.shape[0]
            _threads("rows_with_row", a.size)(a.reshape(-1, width), b, out.reshape(-1, width),
                                              op)
            return out
        if _per_channel(a, b):
            out = np.empty(a.shape, a.dtype)
            shape3 = (a.shape[0], a.shape[1], -1)
            _threads("planes_with_values", a.size)(a.reshape(shape3), b.reshape(-1),
                                                   out.reshape(shape3), op)
            return out
    return ufunc(a, b)


def _per_channel(a, b) -> bool:
    """Whether ``b`` holds one value per channel of the (N, C, …) ``a``: shape (1, C, 1, …)."""
    return (a.ndim == b.ndim >= 3 and b.shape[1] == a.shape[1] and a.shape[1] > 0
            and b.size == b.shape[1])


_OPS = {"add": 0, "sub": 1, "mul": 2}  # elementwise_threads.ADD, SUB, MUL (that module loads Numba)


def _threads(name: str, work: int):
    """Kernel ``name`` of :mod:`.elementwise_threads`, this thread within the thread budget,
    on the threads ``work`` elements are worth (:func:`..threads.threads_worth`)."""
    follow_in_this_thread()
    return sized_for(loading._kernel("elementwise_threads", name), work)


def add(a, b):
    """:meth:`Backend.add`: a + b."""
    if getattr(a, "size", 0) < PARALLEL_MIN_WORK and getattr(b, "size", 0) < PARALLEL_MIN_WORK:
        return array_ops.add(a, b)  # the common case, kept to one test: a small op's cost
    return _binary(a, b, "add", array_ops.add, True)


def sub(a, b):
    """:meth:`Backend.sub`: a - b."""
    if getattr(a, "size", 0) < PARALLEL_MIN_WORK and getattr(b, "size", 0) < PARALLEL_MIN_WORK:
        return array_ops.sub(a, b)  # the common case, kept to one test: a small op's cost
    return _binary(a, b, "sub", array_ops.sub, False)


def mul(a, b):
    """:meth:`Backend.mul`: a * b."""
    if getattr(a, "size", 0) < PARALLEL_MIN_WORK and getattr(b, "size", 0) < PARALLEL_MIN_WORK:
        return array_ops.mul(a, b)  # the common case, kept to one test: a small op's cost
    return _binary(a, b, "mul", array_ops.mul, True)


def less(a, b):
    """:meth:`Backend.less`: a < b. On threads for a large float ``a`` against a Python float
    (a Bernoulli draw: uniform samples < p) or a float array of its dtype and shape."""
    if getattr(a, "size", 0) < PARALLEL_MIN_WORK:
        return array_ops.less(a, b)
    if type(b) is float and _large(a):
        # A Python float is compared in a's dtype (NumPy's rule for a weak scalar): rounded once.
        b = np.array(b, a.dtype)
    if not (_large(a, b) and (b.ndim == 0 or b.shape == a.shape)):
        return array_ops.less(a, b)
    out = np.empty(a.shape, np.bool_)
    _threads("less_spans", a.size)(a.reshape(-1), b.reshape(-1), out.reshape(-1))
    return out


def where(condition, a, b):
    """:meth:`Backend.where`: a where ``condition`` holds, else b. On threads for a large bool
    ``condition`` with ``a`` and ``b`` of one float dtype, each of its shape or a single value
    (dropout's mask, a masked fill)."""
    if (getattr(condition, "size", 0) < PARALLEL_MIN_WORK or type(condition) is not np.ndarray
            or condition.dtype != np.bool_ or not condition.flags.c_contiguous
            or not _selectable(a, condition) or not _selectable(b, condition)
            or a.dtype != b.dtype):
        return array_ops.where(condition, a, b)
    out = np.empty(condition.shape, a.dtype)
    _threads("select_spans", condition.size)(condition.reshape(-1), a.reshape(-1),
                                             b.reshape(-1), out.reshape(-1))
    return out


def _selectable(x, condition) -> bool:
    """Whether ``where`` may thread over ``x``: a row-major float array of ``condition``'s shape,
    or one value."""
    return (type(x) is np.ndarray and x.dtype in _FLOATS and x.flags.c_contiguous
            and (x.shape == condition.shape or x.ndim == 0))


RELU_PARALLEL_MIN_WORK = PARALLEL_MIN_WORK
"""Elements from which ReLU and its gradient are split over threads (below it ReLU runs its
own one-thread loop: see :func:`relu`)."""


def _compiled_relu_takes(a) -> bool:
    """Whether ReLU's compiled loops take ``a``: a row-major float32 or float64 array."""
    return type(a) is np.ndarray and a.dtype in _FLOATS and a.flags.c_contiguous


def relu(a):
    """:meth:`Backend.relu`: max(a, 0). A row-major float array of :data:`.loading.SMALL_WORK`
    elements or more runs :mod:`.elementwise_threads`' loop: on the calling thread, or split
    over threads from :data:`RELU_PARALLEL_MIN_WORK` elements. NumPy's ``maximum`` with a
    broadcast zero measured 1.3-2.4x slower than the compiled loop on one thread (LeNet's
    64x16x10x10 activation: 19 against 8 us). Smaller arrays stay with NumPy, as a small first
    forward pass should not wait for Numba to load."""
    if getattr(a, "size", 0) < loading.SMALL_WORK or not _compiled_relu_takes(a):
        return array_ops.relu(a)
    out = np.empty(a.shape, a.dtype)
    if a.size < RELU_PARALLEL_MIN_WORK:
        loading._kernel("elementwise_threads", "relu_span")(a.reshape(-1), out.reshape(-1))
    else:
        _threads("relu_spans", a.size)(a.reshape(-1), out.reshape(-1))
    return out


def math_function(a, name):
    """:meth:`Backend.math_function`: the reference's NumPy ufuncs, and erf as :mod:`.nn_kernels`'
    compiled loop (NumPy has no erf ufunc: the reference calls Python's ``math.erf`` per
    element). Numba is imported for erf only, so an exp or a log never waits for it."""
    if name != "erf":
        return array_ops.math_function(a, name)
    return loading._kernel("nn_kernels", "erf")(a)


def relu_backward(grad, x):
    """:meth:`Backend.relu_backward`: grad where x > 0, else 0 (:mod:`.nn_kernels`' kernel, on
    threads from :data:`RELU_PARALLEL_MIN_WORK` elements)."""
    if not (getattr(grad, "size", 0) >= RELU_PARALLEL_MIN_WORK and _compiled_relu_takes(grad)
            and _compiled_relu_takes(x) and x.dtype == grad.dtype and grad.shape == x.shape):
        return loading._kernel("nn_kernels", "relu_backward")(grad, x)
    dx = np.empty(grad.shape, grad.dtype)
    # ravel() is a view of a contiguous array and a contiguous copy of anything else.
    _threads("relu_backward_spans", x.size)(grad.ravel(), x.ravel(), dx.reshape(-1))
    return dx
