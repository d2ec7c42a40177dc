"""ONNX operators computed with minidl ops, so an imported graph runs *and* differentiates.

Every operator follows its definition in the ONNX specification, including its defaults (which
are not always PyTorch's: ONNX MaxPool's stride defaults to 1, AveragePool leaves padding out of
the average by default, integer Div truncates towards zero). The table lives in
:mod:`.registry`; this module holds the arithmetic, reduction, matrix and shape operators and
imports the modules that register the rest:

* :mod:`.ops_elementwise`: activations, rounding, trigonometry, logic, tests like IsNaN;
* :mod:`.ops_shape`: creating, indexing and rearranging tensors (Split, Pad, Tile, TopK, …);
* :mod:`.ops_nn`: convolution, pooling, normalisation and dropout in 1-D, 2-D and 3-D;
* :mod:`.resize`, :mod:`.grid_sample` and :mod:`.einsum`;
* :mod:`.attention` (Attention, RMSNormalization, RotaryEmbedding), :mod:`.recurrent` (RNN,
  GRU, LSTM), :mod:`.losses` (NegativeLogLikelihoodLoss, SoftmaxCrossEntropyLoss) and
  :mod:`.quantization` (QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear).

Inputs that only describe shapes (Reshape's target, Slice's bounds, reduction axes) are read as
concrete values, so shapes may depend on the input (``Shape`` → ``Gather`` → ``Reshape`` chains,
as PyTorch writes them for dynamic batch sizes, work).
"""

from __future__ import annotations

import math

import numpy as np

from ..ops import elementwise as ew, linalg, reduction, shape
from .dtypes import numpy_dtype
from .registry import (ONNX_OPS, RunContext, axes_of, check_size, host_result, index_in_range,
                       onnx_op, optional, scalar_of, values_of)

__all__ = ["ONNX_OPS", "RunContext", "run_node"]


def _is_float(*tensors) -> bool:
    return all(t.dtype.kind == "f" for t in tensors)


# -- arithmetic ---------------------------------------------------------------------------------

def _truncating_divide(a, b):
    """Integer division rounding towards zero (C's, and ONNX's), not NumPy's floor division."""
    if a.dtype.kind == "u":
        return a // b
    quotient = np.abs(a) // np.abs(b)
    return np.where((a < 0) != (b < 0), -quotient, quotient).astype(a.dtype)


# Float operands go through minidl ops (they carry gradients); integer operands have none and
# must keep their type (ONNX gives Add/Sub/Mul/Div both operands and the result one type T).
_ARITHMETIC = {"Add": (ew.add, np.add), "Sub": (ew.sub, np.subtract),
               "Mul": (ew.mul, np.multiply), "Div": (ew.div, _truncating_divide)}


def _arithmetic(op_type):
    differentiable, integer = _ARITHMETIC[op_type]

    def compute(inputs, attributes, context):
        a, b = inputs
        if _is_float(a) or _is_float(b):
            return differentiable(a, b)
        with np.errstate(all="ignore"):  # wrap-around, as integer hardware does
            return host_result(integer(a.numpy(), b.numpy()).astype(a.dtype), a)
    return compute


for _op_type in _ARITHMETIC:
    ONNX_OPS[_op_type] = _arithmetic(_op_type)


@onnx_op("Pow")
def _pow(inputs, attributes, context):
    base, exponent = inputs
    if not _is_float(base):
        with np.errstate(all="ignore"):
            return host_result(np.power(base.numpy(), exponent.numpy()).astype(base.dtype), base)
    if exponent.ndim == 0 and not exponent.requires_grad:
        return ew.pow(base, float(scalar_of(exponent)))  # a constant power: PowScalar's rule
    return ew.pow(base, exponent.to(dtype=base.dtype))


@onnx_op("Mod")
def _mod(inputs, attributes, context):
    a, b = inputs
    fmod = bool(attributes.get("fmod", 0))
    if not _is_float(a):
        with np.errstate(all="ignore"):
            remainder = (np.fmod if fmod else np.mod)(a.numpy(), b.numpy())
            return host_result(remainder.astype(a.dtype), a)
    # The gradient is that of a - b·q with q the (step function, gradient-free) quotient:
    # truncated for fmod, floored otherwise, so the remainder has the sign of a (fmod) or of
    # b (mod). The value is NumPy's remainder, exact in IEEE arithmetic, where b·q rounds (in
    # float16 already for quotients above 2^11): exact - (f - f) with f = a - b·q and the
    # first f a constant is exact to the bit (the sign of a zero included) with f's gradient.
    # Where the formula breaks down (infinities, a zero divisor) the exact value stands alone.
    x, y = a.numpy(), b.numpy()
    with np.errstate(all="ignore"):
        ratio = x / y
        quotient = np.trunc(ratio) if fmod else np.floor(ratio)
        exact = (np.fmod if fmod else np.mod)(x, y)
        usable = np.isfinite(x) & np.isfinite(y) & (y != 0) & np.isfinite(quotient)
    formula = ew.sub(a, ew.mul(b, host_result(np.where(usable, quotient, 0).astype(a.dtype), a)))
    remainder = ew.sub(host_result(np.broadcast_to(exact, formula.shape).astype(a.dtype), a),
                       ew.sub(formula.detach(), formula))
    if usable.all():
        return remainder
    return shape.where(host_result(np.broadcast_to(usable, remainder.shape), a), remainder,
                       host_result(exact.astype(a.dtype), a))


def _variadic(differentiable, integer):
    """An op of any number of inputs, folded pairwise (each pair broadcasts)."""
    def compute(inputs, attributes, context):
        if not _is_float(*inputs):
            result = inputs[0].numpy()
            for other in inputs[1:]:
                result = integer(result, other.numpy())
            return host_result(result.astype(inputs[0].dtype), inputs[0])
        result = inputs[0]
        for other in inputs[1:]:
            result = differentiable(result, other)
        return result
    return compute


ONNX_OPS["Max"] = _variadic(ew.maximum, np.maximum)
ONNX_OPS["Min"] = _variadic(ew.minimum, np.minimum)
ONNX_OPS["Sum"] = _variadic(ew.add, np.add)


@onnx_op("Mean")
def _mean(inputs, attributes, context):
    return ew.div(ONNX_OPS["Sum"](inputs, attributes, context), float(len(inputs)))


@onnx_op("Clip")
def _clip(inputs, attributes, context):
    x = inputs[0]

    def bound(position, name):  # an input since opset 11, an attribute before
        given = optional(inputs, position)
        return scalar_of(given) if given is not None else attributes.get(name)

    low, high = bound(1, "min"), bound(2, "max")
    if low is None and high is None:
        return x
    if not _is_float(x):
        return host_result(np.clip(x.numpy(), low, high).astype(x.dtype), x)
    return ew.clamp(x, min=low, max=high)


@onnx_op("Identity")
def _identity(inputs, attributes, context):
    return inputs[0]


@onnx_op("Cast")
def _cast(inputs, attributes, context):
    return _cast_to(inputs[0], numpy_dtype(attributes["to"]))


@onnx_op("CastLike")
def _cast_like(inputs, attributes, context):
    return _cast_to(inputs[0], inputs[1].dtype)


def _cast_to(x, dtype):
    if x.dtype == dtype:
        return x
    if x.dtype.kind == "f" and dtype.kind in "iu":
        # ONNX truncates floats towards zero and saturates nothing: out-of-range is undefined.
        with np.errstate(all="ignore"):
            return host_result(np.trunc(x.numpy()).astype(dtype), x)
    return shape.cast(x, dtype)


# -- reductions ---------------------------------------------------------------------------------

def _reduction_axes(x, inputs, attributes):
    """(axes as a sorted tuple, or None for all; or "identity" for noop_with_empty_axes)."""
    axes = axes_of(inputs, attributes, 1)
    if not axes:
        return "identity" if attributes.get("noop_with_empty_axes", 0) else None
    return tuple(sorted({a % x.ndim for a in axes}))


def _empty_reduction(x, axes, keepdims, identity_value):
    """Reducing over an axis of length 0: every result is the reduction's identity."""
    axes = tuple(range(x.ndim)) if axes is None else axes
    out = [1 if i in axes else n for i, n in enumerate(x.shape) if keepdims or i not in axes]
    return host_result(np.full(out, identity_value, x.dtype), x)


def _extreme(dtype, sign):
    """The value any element beats: -inf for a max over floats, the smallest integer, False."""
    if dtype == np.bool_:
        return sign > 0
    if dtype.kind == "f":
        return sign * np.inf
    info = np.iinfo(dtype)
    return info.max if sign > 0 else info.min


def _reduce(differentiable, host, identity):
    """A reduction: minidl op for floats, NumPy for integers, the identity over empty axes.

    ``identity(dtype)`` is the value of the reduction over no elements (0 for a sum, -inf for
    a max), which the ONNX definitions (and the conformance cases) ask for.
    """
    def compute(inputs, attributes, context):
        x = inputs[0]
        axes = _reduction_axes(x, inputs, attributes)
        if axes == "identity":
            return x
        keepdims = bool(attributes.get("keepdims", 1))
        reduced = range(x.ndim) if axes is None else axes
        if any(x.shape[a] == 0 for a in reduced):
            return _empty_reduction(x, axes, keepdims, identity(x.dtype))
        if not _is_float(x):
            result = host(x.numpy(), axis=axes, keepdims=keepdims)
            return host_result(np.asarray(result).astype(x.dtype), x)
        return differentiable(x, axis=axes, keepdims=keepdims)
    return compute


def _log_sum_exp(x, axis, keepdims):
    # log Σ e^x = m + log Σ e^(x−m) with m the maximum: no overflow for large x.
    peak = reduction.amax(x, axis=axis, keepdims=True).detach()
    total = reduction.sum(ew.exp(ew.sub(x, peak)), axis=axis, keepdims=True)
    result = ew.add(ew.log(total), peak)
    if keepdims:
        return result
    return shape.reshape(result, tuple(n for i, n in enumerate(result.shape)
                                       if axis is not None and i not in axis))


def _product(x, axis, keepdims):
    """Π over ``axis`` as a chain of products (differentiable even where an element is 0)."""
    axes = tuple(range(x.ndim)) if axis is None else axis
    kept = [i for i in range(x.ndim) if i not in axes]
    moved = shape.permute(x, tuple(axes) + tuple(kept))
    rows = shape.reshape(moved, (-1,) + tuple(x.shape[i] for i in kept))
    result = rows[0]
    for index in range(1, rows.shape[0]):
        result = ew.mul(result, rows[index])
    if keepdims:
        return shape.reshape(result, tuple(1 if i in axes else n for i, n in enumerate(x.shape)))
    return result


def _zero(dtype):
    return 0


ONNX_OPS["ReduceSum"] = _reduce(reduction.sum, np.sum, _zero)
ONNX_OPS["ReduceMean"] = _reduce(reduction.mean, np.mean, lambda dtype: np.nan)
ONNX_OPS["ReduceMax"] = _reduce(reduction.amax, np.max, lambda dtype: _extreme(dtype, -1))
ONNX_OPS["ReduceMin"] = _reduce(reduction.amin, np.min, lambda dtype: _extreme(dtype, 1))
ONNX_OPS["ReduceProd"] = _reduce(_product, np.prod, lambda dtype: 1)
ONNX_OPS["ReduceLogSumExp"] = _reduce(
    _log_sum_exp, lambda a, axis, keepdims: np.log(np.sum(np.exp(a), axis, keepdims=keepdims)),
    lambda dtype: -np.inf)
ONNX_OPS["ReduceSumSquare"] = _reduce(
    lambda x, axis, keepdims: reduction.sum(ew.mul(x, x), axis=axis, keepdims=keepdims),
    lambda a, axis, keepdims: np.sum(a * a, axis, keepdims=keepdims), _zero)
ONNX_OPS["ReduceL1"] = _reduce(
    lambda x, axis, keepdims: reduction.sum(ew.abs(x), axis=axis, keepdims=keepdims),
    lambda a, axis, keepdims: np.sum(np.abs(a), axis, keepdims=keepdims), _zero)
ONNX_OPS["ReduceL2"] = _reduce(
    lambda x, axis, keepdims: ew.sqrt(reduction.sum(ew.mul(x, x), axis=axis, keepdims=keepdims)),
    lambda a, axis, keepdims: np.sqrt(np.sum(a * a, axis, keepdims=keepdims)), _zero)
ONNX_OPS["ReduceLogSum"] = _reduce(
    lambda x, axis, keepdims: ew.log(reduction.sum(x, axis=axis, keepdims=keepdims)),
    lambda a, axis, keepdims: np.log(np.sum(a, axis, keepdims=keepdims)),
    lambda dtype: -np.inf)


def _arg_extremum(function, host):
    """ArgMax/ArgMin: ``axis`` defaults to 0 and ``keepdims`` to 1 (not NumPy's defaults)."""
    def compute(inputs, attributes, context):
        x = inputs[0]
        axis = attributes.get("axis", 0) % max(x.ndim, 1)
        keepdims = bool(attributes.get("keepdims", 1))
        last = bool(attributes.get("select_last_index", 0))
        if not _is_float(x) or last:
            # The last of tied extrema is the first one counted from the end: search the
            # reversed axis, then turn the position back into an index from the front.
            values = np.flip(x.numpy(), axis) if last else x.numpy()
            index = host(values, axis=axis, keepdims=keepdims)
            index = (x.shape[axis] - 1) - index if last else index
            return host_result(index.astype(np.int64), x)
        return function(x, axis=axis, keepdims=keepdims)
    return compute


ONNX_OPS["ArgMax"] = _arg_extremum(reduction.argmax, np.argmax)
ONNX_OPS["ArgMin"] = _arg_extremum(reduction.argmin, np.argmin)


# -- matrix products ------------------------------------------------------------------------------

@onnx_op("MatMul")
def _matmul(inputs, attributes, context):
    a, b = inputs
    if not _is_float(a, b):
        return host_result(np.matmul(a.numpy(), b.numpy()), a)
    return linalg.matmul(a, b)


@onnx_op("Gemm")
def _gemm(inputs, attributes, context):
    """Y = alpha·A'·B' + beta·C, A' and B' transposed when transA/transB say so."""
    a, b, c = inputs[0], inputs[1], optional(inputs, 2)
    alpha, beta = attributes.get("alpha", 1.0), attributes.get("beta", 1.0)
    if attributes.get("transA", 0):
        a = shape.transpose(a)
    if attributes.get("transB", 0) and alpha == 1.0 and beta == 1.0 and \
            (c is None or c.shape == (b.shape[0],)):
        return linalg.linear(a, b, c)  # PyTorch's Linear as exported: one fused node
    if attributes.get("transB", 0):
        b = shape.transpose(b)
    y = linalg.matmul(a, b)
    if alpha != 1.0:
        y = y * alpha
    if c is not None:
        y = y + (c if beta == 1.0 else c * beta)
    return y


# -- shapes ----------------------------------------------------------------------------------------

@onnx_op("Shape")
def _shape(inputs, attributes, context):
    dims = inputs[0].shape
    start, end = attributes.get("start", 0), attributes.get("end", len(dims))
    return host_result(np.asarray(dims[start:end], np.int64), inputs[0])


@onnx_op("Size")
def _size(inputs, attributes, context):
    return host_result(np.asarray(math.prod(inputs[0].shape), np.int64), inputs[0])


@onnx_op("Reshape")
def _reshape(inputs, attributes, context):
    x, target = inputs[0], values_of(inputs[1])
    if not attributes.get("allowzero", 0):
        # 0 means "keep this dimension of the input" unless allowzero asks for a real 0.
        target = [x.shape[i] if n == 0 else n for i, n in enumerate(target)]
    if target.count(-1) > 1:
        raise ValueError(f"Reshape: target {target} has more than one -1")
    known = math.prod(n for n in target if n != -1)
    if -1 in target:
        if known == 0 or x.numel() % known:
            raise ValueError(f"Reshape: cannot reshape {x.shape} to {target}")
        target = [x.numel() // known if n == -1 else n for n in target]
    check_size(target, x.dtype, context, "Reshape")
    return shape.reshape(x, tuple(target))


@onnx_op("Flatten")
def _flatten(inputs, attributes, context):
    x = inputs[0]
    axis = attributes.get("axis", 1)
    axis = axis + x.ndim if axis < 0 else axis
    return shape.reshape(x, (math.prod(x.shape[:axis]), math.prod(x.shape[axis:])))


@onnx_op("Transpose")
def _transpose(inputs, attributes, context):
    x = inputs[0]
    return shape.permute(x, tuple(attributes.get("perm", range(x.ndim - 1, -1, -1))))


@onnx_op("Unsqueeze")
def _unsqueeze(inputs, attributes, context):
    x = inputs[0]
    axes = axes_of(inputs, attributes, 1)
    rank = x.ndim + len(axes)
    dims = list(x.shape)
    for axis in sorted(a % rank for a in axes):
        dims.insert(axis, 1)
    return shape.reshape(x, tuple(dims))


@onnx_op("Squeeze")
def _squeeze(inputs, attributes, context):
    x = inputs[0]
    axes = axes_of(inputs, attributes, 1)
    drop = {a % x.ndim for a in axes} if axes else {i for i, n in enumerate(x.shape) if n == 1}
    return shape.reshape(x, tuple(n for i, n in enumerate(x.shape) if i not in drop))


@onnx_op("Expand")
def _expand(inputs, attributes, context):
    x = inputs[0]
    try:
        target = tuple(np.broadcast_shapes(x.shape, tuple(values_of(inputs[1]))))
    except ValueError:
        raise ValueError(f"Expand: shape {x.shape} cannot be expanded to "
                         f"{values_of(inputs[1])}") from None
    check_size(target, x.dtype, context, "Expand")
    return x if target == x.shape else shape.expand(x, target)


@onnx_op("Concat")
def _concat(inputs, attributes, context):
    inputs = [t for t in inputs if t is not None]
    dtype = inputs[0].dtype
    if any(t.dtype != dtype for t in inputs):
        raise TypeError(f"Concat: inputs of different types {[str(t.dtype) for t in inputs]}")
    if not _is_float(*inputs):
        axis = attributes["axis"] % inputs[0].ndim
        return host_result(np.concatenate([t.numpy() for t in inputs], axis), inputs[0])
    return shape.cat(inputs, axis=attributes["axis"])


@onnx_op("Gather")
def _gather(inputs, attributes, context):
    data, indices = inputs
    axis = attributes.get("axis", 0) % data.ndim
    index = index_in_range(indices.numpy(), data.shape[axis], "Gather")
    return shape.getitem(data, (slice(None),) * axis + (index,))


def _python_slice(start: int, end: int, step: int, size: int) -> slice:
    """ONNX Slice bounds (clamped as the spec says) as a Python slice of an axis of ``size``."""
    if step == 0:
        raise ValueError("Slice: steps must not be 0")
    start = start + size if start < 0 else start
    end = end + size if end < 0 else end
    if step > 0:
        return slice(min(max(start, 0), size), min(max(end, 0), size), step)
    start = min(max(start, -1), size - 1)
    end = min(max(end, -1), size - 1)
    # For a backward slice, an end of -1 means "past the first element": Python spells it None.
    return slice(start, None if end < 0 else end, step) if start >= 0 else slice(0, 0, 1)


@onnx_op("Slice")
def _slice(inputs, attributes, context):
    x = inputs[0]
    starts, ends = values_of(inputs[1]), values_of(inputs[2])
    given_axes, given_steps = optional(inputs, 3), optional(inputs, 4)
    axes = values_of(given_axes) if given_axes is not None else list(range(len(starts)))
    steps = values_of(given_steps) if given_steps is not None else [1] * len(starts)
    index = [slice(None)] * x.ndim
    for start, end, axis, step in zip(starts, ends, axes, steps):
        axis %= x.ndim
        index[axis] = _python_slice(start, end, step, x.shape[axis])
    return shape.getitem(x, tuple(index))


def run_node(op_type: str, inputs, attributes, context: RunContext | None = None):
    """The outputs of one node: a Tensor, or a tuple of Tensors for several outputs."""
    return ONNX_OPS[op_type](inputs, attributes, context or RunContext())


# The other operator families register themselves in the same table when imported.
from . import (attention, einsum, grid_sample, losses, ops_elementwise,  # noqa: E402,F401
               ops_nn, ops_shape, quantization, recurrent, resize)
