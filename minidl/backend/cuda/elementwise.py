"""Elementwise math: one scalar definition per operation, one broadcasting kernel per arity.

Each operation is written once, as a plain Python function of scalars (``add(a, b)``); numba
compiles it as a CUDA device function and :func:`_binary_kernels` / :func:`_unary_kernel` wrap
it in a kernel that walks the output and reads each operand in place: at the output's own index
when it has the output's shape, else through its broadcast strides, collapsed and walked with
32-bit arithmetic and no division (:mod:`.broadcast_index`). So broadcasting is handled once, in
the kernel templates, and a new operation is three lines.

Dtypes follow NumPy exactly: the result dtype of an operation is what NumPy gives for one
element of each operand (Python scalars stay weak, so ``float32 * 0.5`` is float32); operands are
converted to the dtype the math runs in before the kernel, scalars on the host (as a kernel
argument, never a copy).

The scalar functions guard the domain errors by hand (log of a negative, exp overflow): on a GPU
the math library returns nan/inf there anyway, and on the simulator Python's ``math`` would
raise instead.
"""

from __future__ import annotations

import math

import numpy as np
from numba import cuda, uint32, uint64

from ..primitives import check_math_function
from .broadcast_index import broadcast_walk, walk_offset
from .device import DeviceArray, broadcast_strides, empty, launch

_INF = math.inf
_NAN = math.nan
_EXP_LIMIT = 709.0  # exp(x) overflows float64 just above 709.78


# -- the scalar definitions ----------------------------------------------------------------------

def add(a, b):
    return a + b


def sub(a, b):
    return a - b


def mul(a, b):
    return a * b


def div(a, b):
    return a / b


def floor_divide_float(a, b):
    # NumPy's divmod: the quotient of a - fmod(a, b), which is exact, rounded toward -inf and
    # corrected where a naive floor(a / b) would round the wrong way.
    if b == 0:
        return a / b
    if a - a != 0:  # a is inf or nan
        return _NAN
    mod = math.fmod(a, b)
    quotient = (a - mod) / b
    if mod != 0 and (b < 0) != (mod < 0):
        quotient -= 1
    if quotient - quotient != 0:  # inf or nan: nothing to round
        return quotient
    if quotient != 0:
        # floor in floating point (numba's math.floor returns an int64, which would overflow)
        floored = quotient - math.fmod(quotient, 1.0)
        if floored > quotient:
            floored -= 1.0
        if quotient - floored > 0.5:
            floored += 1
        return floored
    return math.copysign(0.0, a / b)


def floor_divide_int(a, b):
    if b == 0:
        return a - a
    quotient = a // b  # numba and Python both floor integer division
    return quotient


def remainder_float(a, b):
    if b == 0 or a - a != 0:  # no remainder by 0, nor of inf or nan
        return _NAN
    mod = math.fmod(a, b)
    if mod != 0:
        if (b < 0) != (mod < 0):
            mod += b
        return mod
    return math.copysign(0.0, b)


def remainder_int(a, b):
    if b == 0:
        return a - a
    return a % b


def power(a, b):
    return a ** b


def exp(a):
    if a > _EXP_LIMIT:
        return _INF
    return math.exp(a)


def log(a):
    if a < 0 or a != a:
        return _NAN
    if a == 0:
        return -_INF
    return math.log(a)


def sqrt(a):
    if a < 0 or a != a:
        return _NAN
    return math.sqrt(a)


def tanh(a):
    return math.tanh(a)


# The math_function primitive's device functions. On a GPU math.sin(inf) is nan and math.sinh(800)
# is inf, as in NumPy; under numba's simulator the same code runs Python's math module, which
# raises there instead. So each function answers at its domain's edges itself, before calling
# math: the answers on a GPU, spelt out.
def sin(a):
    if a - a != 0:  # inf or nan
        return _NAN
    return math.sin(a)


def cos(a):
    if a - a != 0:
        return _NAN
    return math.cos(a)


def tan(a):
    if a - a != 0:
        return _NAN
    return math.tan(a)


def asin(a):
    if not -1.0 <= a <= 1.0:  # nan too
        return _NAN
    return math.asin(a)


def acos(a):
    if not -1.0 <= a <= 1.0:
        return _NAN
    return math.acos(a)


def atan(a):
    return math.atan(a)


def sinh(a):
    if a > _EXP_LIMIT + 1.0:  # sinh(x) ~ e^x / 2 overflows a little later than e^x
        return _INF
    if a < -_EXP_LIMIT - 1.0:
        return -_INF
    return math.sinh(a)


def cosh(a):
    if abs(a) > _EXP_LIMIT + 1.0:
        return _INF
    return math.cosh(a)


def asinh(a):
    return math.asinh(a)


def acosh(a):
    if not a >= 1.0:
        return _NAN
    return math.acosh(a)


def atanh(a):
    if not -1.0 <= a <= 1.0:
        return _NAN
    if a == 1.0:
        return _INF
    if a == -1.0:
        return -_INF
    return math.atanh(a)


def erf(a):
    return math.erf(a)


_MATH_FUNCTIONS = {"exp": exp, "log": log, "sqrt": sqrt, "sin": sin, "cos": cos, "tan": tan,
                   "asin": asin, "acos": acos, "atan": atan, "sinh": sinh, "cosh": cosh,
                   "tanh": tanh, "asinh": asinh, "acosh": acosh, "atanh": atanh, "erf": erf}


def sigmoid(a):
    # exp of -|a| never overflows: 1 / (1 + e^-a) for a >= 0, e^a / (1 + e^a) below.
    if a != a:
        return a
    e = math.exp(-abs(a))
    if a >= 0:
        return 1.0 / (1.0 + e)
    return e / (1.0 + e)


def relu(a):
    if a != a:
        return a
    return a if a > 0 else 0


def relu_backward(grad, x):
    return grad if x > 0 else 0


def absolute(a):
    return abs(a)


def maximum(a, b):
    if a != a:
        return a
    if b != b:
        return b
    return a if a >= b else b


def minimum(a, b):
    if a != a:
        return a
    if b != b:
        return b
    return a if a <= b else b


def equal(a, b):
    return a == b


def less(a, b):
    return a < b


# -- kernel templates ------------------------------------------------------------------------------
#
# Two walks over the output. The flat kernels serve operands already of the output's shape (and
# scalars): element i of each is at i, so the loop is a load, the math and a store, with an
# unsigned index (numba would otherwise test every signed index for wrapping around) and a
# ``while`` (a ``range`` with a step divides once to count its trips). The broadcast kernels read
# each operand through the 32-bit walk of :mod:`.broadcast_index`: collapsed axes, no division.

_kernels: dict = {}


def _unary_kernel(fn):
    if fn in _kernels:
        return _kernels[fn]
    scalar = cuda.jit(device=True)(fn)

    @cuda.jit
    def kernel(out, count, a):
        i, end = uint64(cuda.grid(1)), uint64(count)
        while i < end:
            out[i] = scalar(a[i])
            i += uint64(cuda.gridsize(1))

    _kernels[fn] = kernel
    return kernel


def _binary_kernels(fn):
    """Kernels for ``fn(a, b)``: both operands arrays, or one of them a scalar argument; each
    in a broadcasting form (the 32-bit walk) and a flat form for operands already of the
    output's shape."""
    if fn in _kernels:
        return _kernels[fn]
    scalar = cuda.jit(device=True)(fn)

    @cuda.jit
    def arrays(out, count, sizes, magics, shifts, a, a_strides, b, b_strides):
        i = uint32(cuda.grid(1))
        while i < count:
            out[i] = scalar(a[walk_offset(i, sizes, magics, shifts, a_strides)],
                            b[walk_offset(i, sizes, magics, shifts, b_strides)])
            i = uint32(i + cuda.gridsize(1))

    @cuda.jit
    def scalar_b(out, count, sizes, magics, shifts, a, a_strides, b):
        i = uint32(cuda.grid(1))
        while i < count:
            out[i] = scalar(a[walk_offset(i, sizes, magics, shifts, a_strides)], b)
            i = uint32(i + cuda.gridsize(1))

    @cuda.jit
    def scalar_a(out, count, sizes, magics, shifts, a, b, b_strides):
        i = uint32(cuda.grid(1))
        while i < count:
            out[i] = scalar(a, b[walk_offset(i, sizes, magics, shifts, b_strides)])
            i = uint32(i + cuda.gridsize(1))

    @cuda.jit
    def flat_arrays(out, count, a, b):
        i, end = uint64(cuda.grid(1)), uint64(count)
        while i < end:
            out[i] = scalar(a[i], b[i])
            i += uint64(cuda.gridsize(1))

    @cuda.jit
    def flat_scalar_b(out, count, a, b):
        i, end = uint64(cuda.grid(1)), uint64(count)
        while i < end:
            out[i] = scalar(a[i], b)
            i += uint64(cuda.gridsize(1))

    @cuda.jit
    def flat_scalar_a(out, count, a, b):
        i, end = uint64(cuda.grid(1)), uint64(count)
        while i < end:
            out[i] = scalar(a, b[i])
            i += uint64(cuda.gridsize(1))

    _kernels[fn] = (arrays, scalar_b, scalar_a, flat_arrays, flat_scalar_b, flat_scalar_a)
    return _kernels[fn]


@cuda.jit
def _ternary_kernel(out, count, sizes, magics, shifts, c, c_strides, a, a_strides, b,
                    b_strides):
    i = uint32(cuda.grid(1))
    while i < count:
        if c[walk_offset(i, sizes, magics, shifts, c_strides)]:
            out[i] = a[walk_offset(i, sizes, magics, shifts, a_strides)]
        else:
            out[i] = b[walk_offset(i, sizes, magics, shifts, b_strides)]
        i = uint32(i + cuda.gridsize(1))


@cuda.jit
def _ternary_flat(out, count, c, a, b):
    i, end = uint64(cuda.grid(1)), uint64(count)
    while i < end:
        out[i] = a[i] if c[i] else b[i]
        i += uint64(cuda.gridsize(1))


# -- dtypes and operands ---------------------------------------------------------------------------

def _is_array(value) -> bool:
    return isinstance(value, DeviceArray)


def _host_stand_in(value):
    # One element with the operand's dtype (or the scalar itself, so it stays weak): NumPy then
    # tells us the result dtype of the real operation.
    return np.zeros(1, value.dtype) if _is_array(value) else value


def result_dtype(numpy_function, *operands) -> np.dtype:
    """The dtype NumPy's ``numpy_function`` gives for these operands."""
    with np.errstate(all="ignore"):
        return np.asarray(numpy_function(*(_host_stand_in(v) for v in operands))).dtype


def _as(value, dtype):
    """An operand in ``dtype``: arrays cast on the device, scalars on the host."""
    if _is_array(value):
        from .movement import astype
        return astype(value, dtype)
    return np.dtype(dtype).type(value)


def _output_shape(*operands) -> tuple:
    shapes = [v.shape for v in operands if _is_array(v)]
    try:
        return np.broadcast_shapes(*shapes)
    except ValueError:
        raise ValueError(f"operands could not be broadcast together with shapes "
                         f"{' '.join(map(str, shapes))}") from None


def _walk(shape, operands):
    """The 32-bit broadcast walk over ``shape`` of the array ``operands`` (a tuple per operand
    after ``sizes, magics, shifts``), or ``None`` past 2**31 elements."""
    return broadcast_walk(shape, *(broadcast_strides(v.shape, shape) for v in operands))


def _of_shape(value, shape):
    """An array operand as a contiguous array of ``shape`` (the 64-bit path for arrays of 2**31
    elements or more: the broadcast copy indexes in 64 bits, the flat kernels need no index)."""
    if not _is_array(value) or value.shape == shape:
        return value
    from .movement import broadcast_to
    return broadcast_to(value, shape)


def unary(fn, a, out_dtype, compute_dtype=None):
    """``fn`` applied to every element of ``a``, computed in ``compute_dtype``."""
    a = _as(a, compute_dtype or a.dtype)
    out = empty(a.shape, out_dtype)
    if out.size:
        blocks, threads = launch(out.size)
        _unary_kernel(fn)[blocks, threads](out.buffer, out.size, a.buffer)
    return out


def binary(fn, a, b, out_dtype, compute_dtype):
    """``fn(a, b)`` elementwise with broadcasting; operands converted to ``compute_dtype``."""
    if not _is_array(a) and not _is_array(b):
        from .movement import full
        a = full((), a, compute_dtype)
    shape = _output_shape(a, b)
    a, b = _as(a, compute_dtype), _as(b, compute_dtype)
    out = empty(shape, out_dtype)
    if not out.size:
        return out
    arrays, scalar_b, scalar_a, flat_arrays, flat_scalar_b, flat_scalar_a = _binary_kernels(fn)
    blocks, threads = launch(out.size)
    operands = [v for v in (a, b) if _is_array(v)]
    walk = None if all(v.shape == shape for v in operands) else _walk(shape, operands)
    if walk is None:
        a, b = _of_shape(a, shape), _of_shape(b, shape)
        kernel = flat_arrays if _is_array(a) and _is_array(b) else \
            flat_scalar_b if _is_array(a) else flat_scalar_a
        kernel[blocks, threads](out.buffer, out.size, a.buffer if _is_array(a) else a,
                                b.buffer if _is_array(b) else b)
        return out
    sizes_magics_shifts, strides = walk[:3], walk[3:]
    common = (out.buffer, np.uint32(out.size)) + sizes_magics_shifts
    if _is_array(a) and _is_array(b):
        arrays[blocks, threads](*common, a.buffer, strides[0], b.buffer, strides[1])
    elif _is_array(a):
        scalar_b[blocks, threads](*common, a.buffer, strides[0], b)
    else:
        scalar_a[blocks, threads](*common, a, b.buffer, strides[0])
    return out


def arithmetic(fn, numpy_function):
    """A primitive ``f(a, b)`` computing in NumPy's result dtype."""
    def primitive(a, b):
        dtype = result_dtype(numpy_function, a, b)
        return binary(fn, a, b, dtype, dtype)
    primitive.__name__ = numpy_function.__name__
    return primitive


def comparison(fn, numpy_function):
    """A primitive ``f(a, b) -> bool`` comparing in the operands' common dtype."""
    def primitive(a, b):
        return binary(fn, a, b, np.dtype(bool), result_dtype(np.add, a, b))
    primitive.__name__ = numpy_function.__name__
    return primitive


def math_function(fn, numpy_function):
    """A primitive ``f(a)`` whose result dtype is NumPy's (floating for integer input)."""
    def primitive(a):
        dtype = result_dtype(numpy_function, a)
        return unary(fn, a, dtype, dtype)
    primitive.__name__ = numpy_function.__name__
    return primitive


def named_math_function(a, name):
    """The ``math_function`` primitive: ``math.<name>`` of every element of a, in a's dtype; erf
    is computed in float64 (as the reference does) and rounded once."""
    check_math_function(name)
    compute_dtype = np.dtype(np.float64) if name == "erf" else a.dtype
    return unary(_MATH_FUNCTIONS[name], a, a.dtype, compute_dtype)


def where(condition, a, b):
    """a where ``condition`` holds, else b (all three broadcast)."""
    from .movement import full
    dtype = np.asarray(np.where(np.zeros(1, bool), _host_stand_in(a), _host_stand_in(b))).dtype
    operands = [v if _is_array(v) else full((), v, dtype if i else np.dtype(bool))
                for i, v in enumerate((condition, a, b))]
    shape = _output_shape(*operands)
    condition, a, b = _as(operands[0], bool), _as(operands[1], dtype), _as(operands[2], dtype)
    out = empty(shape, dtype)
    if out.size:
        blocks, threads = launch(out.size)
        walk = None if all(v.shape == shape for v in (condition, a, b)) else \
            _walk(shape, (condition, a, b))
        if walk is None:
            condition, a, b = (_of_shape(v, shape) for v in (condition, a, b))
            _ternary_flat[blocks, threads](out.buffer, out.size, condition.buffer, a.buffer,
                                           b.buffer)
        else:
            _ternary_kernel[blocks, threads](out.buffer, np.uint32(out.size), *walk[:3],
                                             condition.buffer, walk[3], a.buffer, walk[4],
                                             b.buffer, walk[5])
    return out
