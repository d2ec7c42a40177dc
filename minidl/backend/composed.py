"""Array operations written with primitives: on every backend, from one definition.

Each function takes the backend ``be`` first and uses only its primitives, so it runs on any
device. Two kinds live here:

* **Operations that are not primitives.** ``ones``, ``zeros_like``/``ones_like``, ``fill_``,
  ``neg``, the comparisons other than ``equal`` and ``less``, the logical operations, ``sign``,
  ``clip``, ``stack`` and ``min``/``argmin`` would each cost a primitive's place in the contract
  (and a kernel in every backend) without paying for it: composed, they do the same arithmetic,
  so they give the same bits (but for the sign of a NaN under ``neg``) in one or a few passes
  over memory. Ops call them as ``composed.sign(be, x)``.
* **Fallbacks for fused primitives** (batch norm, the optimizers' group updates): what a backend
  without a fused kernel of its own binds, with :class:`OfTheBackendClass`, to have the primitive
  at once. Correct everywhere and slower than a fused kernel: every expression is a pass over
  memory and a kernel launch (compare the CUDA backend's ``backend/cuda/batch_norm.py``, two
  launches).
"""

from __future__ import annotations

import functools
import inspect

import numpy as np

_CHANNELS = (1, -1, 1)  # a (C,) vector broadcast along axis 1 of (N, C, S)


# -- creation and in place ---------------------------------------------------------------------

def ones(be, shape, dtype):
    """A new array of ``shape`` filled with 1."""
    return be.full(shape, 1, dtype)


def zeros_like(be, array):
    """A new array of zeros with ``array``'s shape and dtype."""
    return be.zeros(array.shape, array.dtype)


def ones_like(be, array):
    """A new array of ones with ``array``'s shape and dtype."""
    return be.full(array.shape, 1, array.dtype)


def fill_(be, array, value):
    """Set every element of ``array`` to the Python scalar ``value``, in place, cast to the
    array's dtype as an assignment casts (2.5 into integers is 2, as PyTorch's ``fill_``)."""
    be.setitem_(array, (Ellipsis,), value)


# -- comparisons and logic ---------------------------------------------------------------------
# The contract keeps ``equal`` and ``less``; the rest follow exactly, NaN included (every
# comparison with NaN is false except !=): a > b is b < a, and a <= b is (a < b) or (a == b),
# not "not (a > b)", which would be true for NaN. Bools order False < True, so "and" is the
# minimum and "or" the maximum.

def logical_not(be, a):
    """not a, for a bool array (a == False; for numbers a == 0, as NumPy's logical_not)."""
    return be.equal(a, False)


def logical_and(be, a, b):
    """a and b, for bool operands (broadcasting): their minimum."""
    return be.minimum(a, b)


def logical_or(be, a, b):
    """a or b, for bool operands (broadcasting): their maximum."""
    return be.maximum(a, b)


def not_equal(be, a, b):
    """a != b, bool (true where either is NaN)."""
    return logical_not(be, be.equal(a, b))


def greater(be, a, b):
    """a > b, bool."""
    return be.less(b, a)


def less_equal(be, a, b):
    """a <= b, bool."""
    return logical_or(be, be.less(a, b), be.equal(a, b))


def greater_equal(be, a, b):
    """a >= b, bool."""
    return less_equal(be, b, a)


# -- elementwise -------------------------------------------------------------------------------

def neg(be, a):
    """-a. Floats: a·(-1), which IEEE makes an exact negation (0 becomes -0), except that a NaN
    keeps its sign bit where NumPy's negative flips it. Integers wrap as two's complement (the
    most negative value is its own negative); unsigned ones as 0 - a, since -1 is not theirs."""
    if a.dtype.kind == "b":
        raise TypeError("neg: a bool array has no negative (logical_not is its complement)")
    if a.dtype.kind == "u":
        return be.sub(a.dtype.type(0), a)
    return be.mul(a, a.dtype.type(-1))


def sign(be, a):
    """-1, 0 or 1 by the sign of a, in a's dtype (NaN stays NaN; -0 gives 0, as NumPy)."""
    # (0 < a) - (a < 0): comparisons and a subtraction, no branch per element (a where()
    # would cost more than all of them together).
    signs = be.sub(be.astype(be.less(0, a), a.dtype), be.astype(be.less(a, 0), a.dtype))
    if a.dtype.kind != "f":
        return signs
    # Both comparisons are false for NaN; adding 0·clip(a, -1, 1) restores it (maximum and
    # minimum propagate NaN, and clipping first keeps 0·inf from making NaN of an infinity).
    # Elsewhere it adds a zero, which leaves ±1 alone, and +0 + -0 is +0: NumPy's bits.
    bounded = be.minimum(be.maximum(a, a.dtype.type(-1)), a.dtype.type(1))
    return be.add(signs, be.mul(bounded, a.dtype.type(0)))


def clip(be, x, low, high):
    """x limited to [low, high]; either bound may be None (no limit on that side). NaN stays
    NaN (maximum and minimum propagate it). Always a new array."""
    out = x
    if low is not None:
        out = be.maximum(out, low)
    if high is not None:
        out = be.minimum(out, high)
    return out if out is not x else be.copy(x)


# -- reductions and joins ----------------------------------------------------------------------

def _order_reversed(be, x):
    # A bijection of x's dtype that reverses the order and is its own inverse, so the smallest
    # element is where the largest of the image is: -x for floats (exact, NaN stays NaN),
    # -1 - x (the bitwise complement) for signed ints, whose -x would overflow at the most
    # negative value, max - x for unsigned ints, and not x for bools.
    kind = x.dtype.kind
    if kind == "f":
        return neg(be, x)
    if kind == "b":
        return logical_not(be, x)
    if kind == "u":
        return be.sub(x.dtype.type(np.iinfo(x.dtype).max), x)
    return be.sub(x.dtype.type(-1), x)


def min(be, x, axis=None, keepdims=False):  # noqa: A001
    """The smallest element over ``axis`` (``ValueError`` over an empty axis): the largest of
    the order-reversed values, mapped back."""
    return _order_reversed(be, be.max(_order_reversed(be, x), axis=axis, keepdims=keepdims))


def argmin(be, x, axis=None, keepdims=False):
    """int64 index of the smallest element along the int ``axis`` (flattened when None); the
    first one on ties, as the reversal keeps ties."""
    return be.argmax(_order_reversed(be, x), axis=axis, keepdims=keepdims)


def stack(be, arrays, axis):
    """The same-shaped arrays (a non-empty sequence) joined along a new ``axis``."""
    arrays = list(arrays)
    if not arrays:
        raise ValueError("stack: needs at least one array")
    shape = arrays[0].shape
    for i, array in enumerate(arrays):
        if array.shape != shape:
            raise ValueError(f"stack: every array must have the shape {shape} of the first, "
                             f"array {i} has {array.shape}")
    if not -len(shape) - 1 <= axis <= len(shape):
        raise ValueError(f"stack: axis {axis} is out of range for {len(shape) + 1} dimensions")
    axis %= len(shape) + 1
    with_axis = shape[:axis] + (1,) + shape[axis:]
    return be.concatenate([be.reshape(array, with_axis) for array in arrays], axis)


# -- fallbacks for fused primitives ------------------------------------------------------------

def softmax_backward(be, grad, out, axis):
    """:meth:`Backend.softmax_backward`: out ⊙ (grad - Σ_axis grad ⊙ out), for a backend
    without a fused kernel (CUDA's; Numba's threaded kernel is faster on the CPU).

    The Jacobian of softmax is diag(out) - out outᵀ; applied to grad it is out ⊙ grad -
    out (outᵀ grad), so one dot product per row is all it needs.
    """
    dot = be.sum(be.mul(grad, out), axis=axis, keepdims=True)
    return be.mul(out, be.sub(grad, dot))


def batch_norm_forward(be, x, weight, bias, mean, var, eps):
    """:meth:`Backend.batch_norm_forward` from reductions and elementwise primitives."""
    count = float(x.shape[0] * x.shape[2])
    if mean is None:
        mean = be.div(be.sum(x, axis=(0, 2)), count)
        centered = be.sub(x, be.reshape(mean, _CHANNELS))
        var = be.div(be.sum(be.mul(centered, centered), axis=(0, 2)), count)
    else:
        mean, var = be.copy(be.astype(mean, x.dtype)), be.copy(be.astype(var, x.dtype))
        centered = be.sub(x, be.reshape(mean, _CHANNELS))
    rstd = be.div(1.0, be.math_function(be.add(var, float(eps)), "sqrt"))
    y = be.mul(centered, be.reshape(rstd, _CHANNELS))
    if weight is not None:
        y = be.mul(y, be.reshape(weight, _CHANNELS))
    if bias is not None:
        y = be.add(y, be.reshape(bias, _CHANNELS))
    return y, mean, var, rstd


def batch_norm_backward(be, grad, x, mean, rstd, weight, batch_stats):
    """:meth:`Backend.batch_norm_backward` from reductions and elementwise primitives."""
    count = float(x.shape[0] * x.shape[2])
    rstd_c = be.reshape(rstd, _CHANNELS)
    xhat = be.mul(be.sub(x, be.reshape(mean, _CHANNELS)), rstd_c)
    sum_g = be.sum(grad, axis=(0, 2))
    sum_gx = be.sum(be.mul(grad, xhat), axis=(0, 2))
    scale = rstd_c if weight is None else be.mul(rstd_c, be.reshape(weight, _CHANNELS))
    if batch_stats:
        # dx = weight·rstd·(grad - Σgrad/m - x̂·Σ(grad·x̂)/m)
        grad = be.sub(be.sub(grad, be.reshape(be.div(sum_g, count), _CHANNELS)),
                      be.mul(xhat, be.reshape(be.div(sum_gx, count), _CHANNELS)))
    dx = be.mul(grad, scale)
    if weight is None:
        return dx, None, None
    return dx, sum_gx, sum_g


def running_average_(be, running, batch, momentum, batch_scale):
    """:meth:`Backend.running_average_` from elementwise primitives (four launches on a device,
    where the CUDA backend's own kernel takes one)."""
    if batch_scale != 1:
        batch = be.mul(batch, batch.dtype.type(batch_scale))
    dtype = running.dtype.type
    be.assign_(running, be.add(be.mul(running, dtype(1 - momentum)),
                               be.mul(be.astype(batch, running.dtype), dtype(momentum))))


def sgd_update_group(be, params, grads, momentum_buffers, *settings):
    """:meth:`Backend.sgd_update_group`: ``be.sgd_update`` once per tensor."""
    for param, grad, buffer in zip(params, grads, momentum_buffers, strict=True):
        be.sgd_update(param, grad, buffer, *settings)


def adam_update_group(be, params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, *settings):
    """:meth:`Backend.adam_update_group`: ``be.adam_update`` once per tensor."""
    for param, grad, m, v, v_max in zip(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs,
                                        strict=True):
        be.adam_update(param, grad, m, v, v_max, *settings)


class OfTheBackendClass:
    """A composed primitive ``function(be, ...)`` bound to the backend class it is read from.

    A subclass that replaces the primitives ``function`` calls (Numba's CPU backend replaces
    ``sgd_update`` with its kernel) inherits the composed one already calling its own kernels.
    """

    def __init__(self, function, name: str):
        self.function, self.name = function, name
        # Backend class -> its primitive, made on the first read: making one reads the
        # contract's signature (~20 µs), and an optimizer reads its update once per step.
        self._bound = {}

    def __get__(self, instance, owner):
        primitive = self._bound.get(owner)
        if primitive is None:
            primitive = self._bound[owner] = self._bound_to(owner)
        return primitive

    def _bound_to(self, owner):
        from .primitives import Backend
        contract = getattr(Backend, self.name)

        @functools.wraps(contract)
        def primitive(*args, **kwargs):
            return self.function(owner, *args, **kwargs)
        primitive.__signature__ = inspect.signature(contract)
        return primitive
