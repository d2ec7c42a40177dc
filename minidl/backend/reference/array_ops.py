"""Array primitives on NumPy: creation, elementwise math, reductions, movement and matmul.

These are shared by both CPU backends. NumPy's ufuncs are already vectorised C and its matmul is
BLAS, so a Numba rewrite would not be faster; the Numba backend inherits them unchanged. Each is a
named function with the contract's parameters (see :mod:`minidl.backend.primitives`), so a
signature check can compare it with the contract.
"""

import math

import numpy as np

from ..primitives import check_math_function


# -- creation and transfer ---------------------------------------------------------------------

def from_numpy(array):
    """Bring a NumPy array onto this backend (on the CPU: the array itself)."""
    return np.asarray(array)


def to_numpy(array):
    """Return the array as a NumPy array (on the CPU: the array itself, no copy)."""
    return np.asarray(array)


def zeros(shape, dtype):
    return np.zeros(shape, dtype=dtype)


def full(shape, value, dtype):
    return np.full(shape, value, dtype=dtype)


def astype(array, dtype):
    return array.astype(dtype, copy=False)


def copy(array):
    return np.array(array, copy=True, order="C")


# -- in place and memory -----------------------------------------------------------------------

def assign_(target, source):
    np.copyto(target, source, casting="same_kind")


def setitem_(array, index, value):
    array[index] = value


def owns_memory(array) -> bool:
    # A view (reshape, transpose, slice, broadcast) has a base; np.broadcast_to is also
    # read-only. Either way the memory is shared with some other array.
    return array.base is None and array.flags.writeable


# -- elementwise math --------------------------------------------------------------------------

def add(a, b):
    return np.add(a, b)


def sub(a, b):
    return np.subtract(a, b)


def mul(a, b):
    return np.multiply(a, b)


def div(a, b):
    return np.true_divide(a, b)


def floor_divide(a, b):
    return np.floor_divide(a, b)


def remainder(a, b):
    return np.remainder(a, b)


def power(a, b):
    return np.power(a, b)


def exp(a):
    return np.exp(a)


def log(a):
    return np.log(a)


def sqrt(a):
    return np.sqrt(a)


# math_function's names -> NumPy's ufunc of the same function.
_NUMPY_MATH = {"sin": np.sin, "cos": np.cos, "tan": np.tan, "asin": np.arcsin, "acos": np.arccos,
               "atan": np.arctan, "sinh": np.sinh, "cosh": np.cosh, "tanh": np.tanh,
               "asinh": np.arcsinh, "acosh": np.arccosh, "atanh": np.arctanh}
_erf = np.vectorize(math.erf, otypes=[np.float64])  # NumPy has no erf ufunc


def math_function(a, name):
    check_math_function(name)
    if name == "erf":
        # math.erf is exact to double precision; computing in float64 and rounding once keeps
        # a float32 result within float32's own rounding of the true value.
        return _erf(np.asarray(a, dtype=np.float64)).astype(a.dtype)
    with np.errstate(all="ignore"):  # outside the domain the answer is nan or inf, as in NumPy
        return _NUMPY_MATH[name](a)


def abs(a):  # noqa: A001 - the primitive is named after the math
    return np.abs(a)


def maximum(a, b):
    return np.maximum(a, b)


def minimum(a, b):
    return np.minimum(a, b)


def equal(a, b):
    return np.equal(a, b)


def less(a, b):
    return np.less(a, b)


def sigmoid(a):
    """1 / (1 + e^-a), evaluated without overflow.

    For a >= 0 use 1 / (1 + e^-a); for a < 0 the algebraically equal e^a / (1 + e^a), so the
    exponent is always of a non-positive number and can never overflow.
    """
    e = np.exp(-np.abs(a))
    return np.where(a >= 0, 1.0 / (1.0 + e), e / (1.0 + e)).astype(a.dtype, copy=False)


def relu(a):
    return np.maximum(a, 0).astype(a.dtype, copy=False)


def relu_backward(grad, x):
    """d relu(x)/dx is 1 where x > 0 and 0 elsewhere (0 at x == 0, as PyTorch)."""
    return np.where(x > 0, grad, 0).astype(grad.dtype, copy=False)


def where(condition, a, b):
    return np.where(condition, a, b)


# -- reductions --------------------------------------------------------------------------------

def sum(x, axis=None, keepdims=False):  # noqa: A001
    return np.sum(x, axis=axis, keepdims=keepdims, dtype=x.dtype if x.dtype.kind == "f" else None)


def max(x, axis=None, keepdims=False):  # noqa: A001
    return np.max(x, axis=axis, keepdims=keepdims)


def argmax(x, axis=None, keepdims=False):
    return np.argmax(x, axis=axis, keepdims=keepdims)


# -- movement ----------------------------------------------------------------------------------

# The array methods rather than np.reshape/np.transpose: the functions' dispatch wrappers cost
# about as much as the reshape itself, and small models make many.
def reshape(x, shape):
    return x.reshape(shape)


def transpose(x, axes):
    return x.transpose(axes)


def broadcast_to(x, shape):
    return np.broadcast_to(x, shape)


def getitem(x, index):
    return x[index]


def index_add(shape, index, values, dtype):
    """Zeros of ``shape`` with ``values`` scatter-added at ``index``: the adjoint of getitem.

    ``np.add.at`` accumulates repeated indices (x[[0, 0]] sends two gradients to x[0]), which
    plain ``out[index] += values`` would not.
    """
    out = np.zeros(shape, dtype=dtype)
    parts = index if isinstance(index, tuple) else (index,)
    if all(part is None or part is Ellipsis or isinstance(part, (int, np.integer, slice))
           for part in parts):
        # Basic indexing (slices, ints) selects each cell at most once, so a plain assignment
        # is the same sum, without add.at's slow per-element loop (an attention block's q/k/v
        # slices measured ~10% of its step that way).
        out[index] = values
    else:
        np.add.at(out, index, values)
    return out


def _check_rows(op: str, indices, rows: int) -> None:
    # One pass over the indices on the device that holds them; NumPy's own indexing would wrap
    # negative indices instead of rejecting them.
    if indices.size == 0:
        return
    bad = (indices < 0) | (indices >= rows)
    if bad.any():
        raise IndexError(f"{op}: index {int(indices[bad][0])} is out of range for {rows} rows")


def take(table, indices):
    _check_rows("take", indices, table.shape[0])
    return np.take(table, indices, axis=0)


def one_hot(indices, num_classes, dtype):
    _check_rows("one_hot", indices, num_classes)
    out = np.zeros(indices.shape + (num_classes,), dtype=dtype)
    np.put_along_axis(out, indices[..., None].astype(np.intp, copy=False), 1, axis=-1)
    return out


def nonzero(mask):
    return tuple(i.astype(np.int64, copy=False) for i in np.nonzero(mask))


def concatenate(arrays, axis):
    return np.concatenate(arrays, axis=axis)


# -- linear algebra ----------------------------------------------------------------------------

def matmul(a, b, transpose_a=False, transpose_b=False):
    # NumPy's transposes are views: BLAS reads them in place, as the flags ask.
    if transpose_a:
        a = np.swapaxes(a, -1, -2)
    if transpose_b:
        b = np.swapaxes(b, -1, -2)
    if a.ndim > 2 and b.ndim == 2:
        # A stack of matrices times one matrix is one product of the stacked rows: NumPy does
        # the stacked form without BLAS (measured ~100x slower on (32, 64, 512) @ (512, 128),
        # a transformer's Linear), while (32·64, 512) @ (512, 128) is a single GEMM.
        rows = np.matmul(a.reshape(math.prod(a.shape[:-1]), a.shape[-1]), b)
        return rows.reshape(a.shape[:-1] + (b.shape[1],))
    return np.matmul(a, b)
