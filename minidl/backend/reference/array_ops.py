"""Array primitives on NumPy: creation, elementwise math, reductions, movement and matmul.

These are shared by both CPU backends. NumPy's ufuncs are already vectorised C and its matmul is
BLAS, so a Numba rewrite would not be faster; the Numba backend imports them unchanged.
"""

import numpy as np

from ..primitives import ARRAY_PRIMITIVES

# Exactly the array half of the seam's primitive list.
__all__ = list(ARRAY_PRIMITIVES)


# -- creation and transfer ---------------------------------------------------------------------

def from_numpy(array):
    """Bring a NumPy array onto this backend (on the CPU: the array itself)."""
    return np.asarray(array)


def to_numpy(array):
    """Return the array as a NumPy array (on the CPU: the array itself, no copy)."""
    return np.asarray(array)


def zeros(shape, dtype):
    return np.zeros(shape, dtype=dtype)


def ones(shape, dtype):
    return np.ones(shape, dtype=dtype)


def full(shape, value, dtype):
    return np.full(shape, value, dtype=dtype)


def zeros_like(array):
    return np.zeros_like(array)


def ones_like(array):
    return np.ones_like(array)


def astype(array, dtype):
    return array.astype(dtype, copy=False)


def copy(array):
    return np.array(array, copy=True)


# -- elementwise math --------------------------------------------------------------------------

add = np.add
sub = np.subtract
mul = np.multiply
div = np.true_divide
floor_divide = np.floor_divide  # rounds toward -inf, as Python's // and PyTorch's
remainder = np.remainder  # takes the divisor's sign, as Python's % and PyTorch's
neg = np.negative
power = np.power
exp = np.exp
log = np.log
sqrt = np.sqrt
tanh = np.tanh
abs = np.abs  # noqa: A001 - the primitive's name is the math name
sign = np.sign
maximum = np.maximum
minimum = np.minimum
equal = np.equal
not_equal = np.not_equal
less = np.less
less_equal = np.less_equal
greater = np.greater
greater_equal = np.greater_equal
logical_not = np.logical_not


def sigmoid(x):
    """1 / (1 + e^-x), evaluated without overflow.

    For x >= 0 use 1 / (1 + e^-x); for x < 0 the algebraically equal e^x / (1 + e^x), so the
    exponent is always of a non-positive number and can never overflow.
    """
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e)).astype(x.dtype, copy=False)


def relu(x):
    return np.maximum(x, 0).astype(x.dtype, copy=False)


def relu_backward(grad, x):
    """d relu(x)/dx is 1 where x > 0 and 0 elsewhere (0 at x == 0, as PyTorch)."""
    return np.where(x > 0, grad, 0).astype(grad.dtype, copy=False)


def where(condition, a, b):
    return np.where(condition, a, b)


def clip(x, low, high):
    return np.clip(x, low, high)


# -- reductions --------------------------------------------------------------------------------

def sum(x, axis=None, keepdims=False):  # noqa: A001
    return np.sum(x, axis=axis, keepdims=keepdims, dtype=x.dtype if x.dtype.kind == "f" else None)


def max(x, axis=None, keepdims=False):  # noqa: A001
    return np.max(x, axis=axis, keepdims=keepdims)


def min(x, axis=None, keepdims=False):  # noqa: A001
    return np.min(x, axis=axis, keepdims=keepdims)


def argmax(x, axis=None, keepdims=False):
    return np.argmax(x, axis=axis, keepdims=keepdims)


def argmin(x, axis=None, keepdims=False):
    return np.argmin(x, axis=axis, keepdims=keepdims)


# -- movement ----------------------------------------------------------------------------------

def reshape(x, shape):
    return np.reshape(x, shape)


def transpose(x, axes):
    return np.transpose(x, axes)


def broadcast_to(x, shape):
    return np.broadcast_to(x, shape)


def getitem(x, index):
    return x[index]


def setitem(x, index, values):
    """Write ``values`` into ``x[index]`` in place (the only primitive that mutates an array)."""
    x[index] = values


def index_add(shape, index, values, dtype):
    """Zeros of ``shape`` with ``values`` scatter-added at ``index``: the adjoint of getitem.

    ``np.add.at`` accumulates repeated indices (x[[0, 0]] sends two gradients to x[0]), which
    plain ``out[index] += values`` would not.
    """
    out = np.zeros(shape, dtype=dtype)
    np.add.at(out, index, values)
    return out


def concatenate(arrays, axis):
    return np.concatenate(arrays, axis=axis)


def stack(arrays, axis):
    return np.stack(arrays, axis=axis)


# -- linear algebra ----------------------------------------------------------------------------

matmul = np.matmul
