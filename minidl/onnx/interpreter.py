"""ONNX operators computed with minidl ops, so an imported graph runs *and* differentiates.

``ONNX_OPS`` maps an ONNX ``op_type`` to ``compute(inputs, attributes) -> output Tensor``:
``inputs`` are Tensors (None where the node left an optional input empty) and ``attributes`` the
node's attributes as plain Python data. Each one follows the operator's definition in the ONNX
specification, including its defaults (which are not always PyTorch's: ONNX MaxPool's stride
defaults to 1, AveragePool leaves padding out of the average by default).

Inputs that only describe shapes (Reshape's target, Slice's bounds, reduction axes) are read as
concrete values, so shapes may depend on the input (``Shape`` → ``Gather`` → ``Reshape`` chains,
as PyTorch writes them for dynamic batch sizes, work). Only the first output of a node is
computed; the importer refuses graphs that use the others (a Dropout mask, MaxPool indices).
"""

from __future__ import annotations

import math

import numpy as np

from ..autograd.tensor import Tensor
from ..ops import conv, elementwise as ew, linalg, nn_ops, pool, reduction, shape
from .dtypes import numpy_dtype
from .erf import erf

ONNX_OPS = {}


def onnx_op(*op_types):
    """Register the decorated function as the computation of ``op_types``."""
    def register(function):
        for op_type in op_types:
            ONNX_OPS[op_type] = function
        return function
    return register


def _values(tensor) -> list:
    """A shape-describing input as a list of Python ints."""
    return [int(v) for v in np.asarray(tensor.numpy()).reshape(-1)]


def _scalar(tensor) -> float:
    return float(np.asarray(tensor.numpy()).reshape(()))


def _axes(inputs, attributes, position: int):
    """Axes given as an input (newer opsets) or as the ``axes`` attribute (older ones)."""
    if len(inputs) > position and inputs[position] is not None:
        return _values(inputs[position])
    return attributes.get("axes")


# -- elementwise --------------------------------------------------------------------------------

for _op_type, _function in (("Add", ew.add), ("Sub", ew.sub), ("Mul", ew.mul), ("Div", ew.div)):
    onnx_op(_op_type)(lambda inputs, attributes, _f=_function: _f(inputs[0], inputs[1]))

for _op_type, _function in (("Neg", ew.neg), ("Abs", ew.abs), ("Exp", ew.exp), ("Log", ew.log),
                            ("Sqrt", ew.sqrt), ("Tanh", ew.tanh), ("Sigmoid", ew.sigmoid),
                            ("Relu", ew.relu), ("Erf", erf)):
    onnx_op(_op_type)(lambda inputs, attributes, _f=_function: _f(inputs[0]))


@onnx_op("Pow")
def _pow(inputs, attributes):
    base, exponent = inputs
    if exponent.ndim == 0 and not exponent.requires_grad:
        return ew.pow(base, _scalar(exponent))  # a constant power: the cheaper PowScalar rule
    return ew.pow(base, exponent.to(dtype=base.dtype))


@onnx_op("Gelu")
def _gelu(inputs, attributes):
    return ew.gelu(inputs[0], attributes.get("approximate", "none"))


def _variadic(function):
    """An op of any number of inputs, folded pairwise (each pair broadcasts)."""
    def compute(inputs, attributes):
        result = inputs[0]
        for other in inputs[1:]:
            result = function(result, other)
        return result
    return compute


ONNX_OPS["Max"] = _variadic(ew.maximum)
ONNX_OPS["Min"] = _variadic(ew.minimum)
ONNX_OPS["Sum"] = _variadic(ew.add)


@onnx_op("Clip")
def _clip(inputs, attributes):
    x = inputs[0]
    def bound(position, name):  # an input since opset 11, an attribute before
        present = len(inputs) > position and inputs[position] is not None
        return _scalar(inputs[position]) if present else attributes.get(name)

    low, high = bound(1, "min"), bound(2, "max")
    if low is None and high is None:
        return x
    return ew.clamp(x, min=low, max=high)


@onnx_op("Identity", "Dropout")
def _identity(inputs, attributes):
    return inputs[0]  # Dropout is the identity at inference time


@onnx_op("Cast")
def _cast(inputs, attributes):
    return shape.cast(inputs[0], numpy_dtype(attributes["to"]))


@onnx_op("Where")
def _where(inputs, attributes):
    condition, a, b = inputs  # the condition may be computed by the graph (Greater, ...)
    return shape.where(condition, a, b)


# -- comparisons and logic: bool results, no gradient -------------------------------------------

for _op_type, _function in (("Equal", ew.eq), ("Less", ew.lt), ("LessOrEqual", ew.le),
                            ("Greater", ew.gt), ("GreaterOrEqual", ew.ge),
                            ("And", ew.logical_and), ("Or", ew.logical_or)):
    onnx_op(_op_type)(lambda inputs, attributes, _f=_function: _f(inputs[0], inputs[1]))


@onnx_op("Not")
def _not(inputs, attributes):
    return ew.logical_not(inputs[0])


def _arg_extremum(function):
    """ArgMax/ArgMin: ``axis`` defaults to 0 and ``keepdims`` to 1 (not NumPy's defaults)."""
    def compute(inputs, attributes):
        x = inputs[0]
        axis = attributes.get("axis", 0) % max(x.ndim, 1)
        keepdims = bool(attributes.get("keepdims", 1))
        if not attributes.get("select_last_index", 0):
            return function(x, axis=axis, keepdims=keepdims)
        # The last of tied extrema is the first one counted from the end: search the reversed
        # axis, then turn the position back into an index from the front.
        reversed_x = shape.getitem(x, (slice(None),) * axis + (slice(None, None, -1),))
        return (x.shape[axis] - 1) - function(reversed_x, axis=axis, keepdims=keepdims)
    return compute


ONNX_OPS["ArgMax"] = _arg_extremum(reduction.argmax)
ONNX_OPS["ArgMin"] = _arg_extremum(reduction.argmin)


# -- matrix products ------------------------------------------------------------------------------

@onnx_op("MatMul")
def _matmul(inputs, attributes):
    return linalg.matmul(inputs[0], inputs[1])


@onnx_op("Gemm")
def _gemm(inputs, attributes):
    """Y = alpha·A'·B' + beta·C, A' and B' transposed when transA/transB say so."""
    a, b = inputs[0], inputs[1]
    c = inputs[2] if len(inputs) > 2 else None
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


# -- convolution and pooling ------------------------------------------------------------------------

def _symmetric_pads(attributes, spatial: int = 2):
    """ONNX pads are (begin₁, begin₂, end₁, end₂); minidl pads both sides alike."""
    pads = attributes.get("pads", [0] * (2 * spatial))
    begin, end = pads[:spatial], pads[spatial:]
    if list(begin) != list(end):
        raise ValueError(f"asymmetric pads {pads} are not supported")
    return tuple(begin)


@onnx_op("Conv")
def _conv(inputs, attributes):
    x, weight = inputs[0], inputs[1]
    bias = inputs[2] if len(inputs) > 2 else None
    return conv.conv2d(x, weight, bias, stride=tuple(attributes.get("strides", [1, 1])),
                       padding=_symmetric_pads(attributes),
                       dilation=tuple(attributes.get("dilations", [1, 1])),
                       groups=attributes.get("group", 1))


@onnx_op("MaxPool")
def _max_pool(inputs, attributes):
    return pool.max_pool2d(inputs[0], tuple(attributes["kernel_shape"]),
                           stride=tuple(attributes.get("strides", [1, 1])),
                           padding=_symmetric_pads(attributes),
                           dilation=tuple(attributes.get("dilations", [1, 1])),
                           ceil_mode=bool(attributes.get("ceil_mode", 0)))


@onnx_op("AveragePool")
def _average_pool(inputs, attributes):
    return pool.avg_pool2d(inputs[0], tuple(attributes["kernel_shape"]),
                           stride=tuple(attributes.get("strides", [1, 1])),
                           padding=_symmetric_pads(attributes),
                           ceil_mode=bool(attributes.get("ceil_mode", 0)),
                           count_include_pad=bool(attributes.get("count_include_pad", 0)))


@onnx_op("GlobalAveragePool")
def _global_average_pool(inputs, attributes):
    x = inputs[0]
    return reduction.mean(x, axis=tuple(range(2, x.ndim)), keepdims=True)


# -- normalisation and softmax ------------------------------------------------------------------

@onnx_op("BatchNormalization")
def _batch_norm(inputs, attributes):
    x, scale, bias, mean, var = inputs[:5]
    return nn_ops.batch_norm(x, mean, var, scale, bias, training=False,
                             eps=attributes.get("epsilon", 1e-5))


@onnx_op("LayerNormalization")
def _layer_norm(inputs, attributes):
    x, scale = inputs[0], inputs[1]
    bias = inputs[2] if len(inputs) > 2 and inputs[2] is not None else \
        Tensor(np.zeros(scale.shape, scale.dtype), device=x.device)
    axis = attributes.get("axis", -1) % x.ndim
    normalized = x.shape[axis:]
    scale = shape.reshape(scale, normalized) if scale.shape != normalized else scale
    bias = shape.reshape(bias, normalized) if bias.shape != normalized else bias
    return nn_ops.layer_norm(x, normalized, scale, bias, eps=attributes.get("epsilon", 1e-5))


@onnx_op("Softmax")
def _softmax(inputs, attributes):
    return nn_ops.softmax(inputs[0], attributes.get("axis", -1))


@onnx_op("LogSoftmax")
def _log_softmax(inputs, attributes):
    return nn_ops.log_softmax(inputs[0], attributes.get("axis", -1))


# -- reductions ------------------------------------------------------------------------------------

def _reduce(function):
    def compute(inputs, attributes):
        x = inputs[0]
        axes = _axes(inputs, attributes, 1)
        keepdims = bool(attributes.get("keepdims", 1))
        if not axes:
            if attributes.get("noop_with_empty_axes", 0):
                return x
            axes = None
        return function(x, axis=None if axes is None else tuple(a % x.ndim for a in axes),
                        keepdims=keepdims)
    return compute


ONNX_OPS["ReduceSum"] = _reduce(reduction.sum)
ONNX_OPS["ReduceMean"] = _reduce(reduction.mean)
ONNX_OPS["ReduceMax"] = _reduce(reduction.amax)
ONNX_OPS["ReduceMin"] = _reduce(reduction.amin)


# -- shapes ----------------------------------------------------------------------------------------

@onnx_op("Shape")
def _shape(inputs, attributes):
    dims = inputs[0].shape
    start, end = attributes.get("start", 0), attributes.get("end", len(dims))
    return Tensor(np.asarray(dims[start:end], np.int64), device=inputs[0].device)


@onnx_op("Reshape")
def _reshape(inputs, attributes):
    x, target = inputs[0], _values(inputs[1])
    if not attributes.get("allowzero", 0):
        # 0 means "keep this dimension of the input" unless allowzero asks for a real 0.
        target = [x.shape[i] if n == 0 else n for i, n in enumerate(target)]
    return shape.reshape(x, tuple(target))


@onnx_op("Flatten")
def _flatten(inputs, attributes):
    x = inputs[0]
    axis = attributes.get("axis", 1)
    axis = axis + x.ndim if axis < 0 else axis
    return shape.reshape(x, (math.prod(x.shape[:axis]), math.prod(x.shape[axis:])))


@onnx_op("Transpose")
def _transpose(inputs, attributes):
    x = inputs[0]
    return shape.permute(x, tuple(attributes.get("perm", range(x.ndim - 1, -1, -1))))


@onnx_op("Unsqueeze")
def _unsqueeze(inputs, attributes):
    x = inputs[0]
    axes = _axes(inputs, attributes, 1)
    rank = x.ndim + len(axes)
    dims = list(x.shape)
    for axis in sorted(a % rank for a in axes):
        dims.insert(axis, 1)
    return shape.reshape(x, tuple(dims))


@onnx_op("Squeeze")
def _squeeze(inputs, attributes):
    x = inputs[0]
    axes = _axes(inputs, attributes, 1)
    drop = {a % x.ndim for a in axes} if axes else {i for i, n in enumerate(x.shape) if n == 1}
    return shape.reshape(x, tuple(n for i, n in enumerate(x.shape) if i not in drop))


@onnx_op("Expand")
def _expand(inputs, attributes):
    x = inputs[0]
    target = tuple(np.broadcast_shapes(x.shape, tuple(_values(inputs[1]))))
    return x if target == x.shape else shape.expand(x, target)


@onnx_op("Concat")
def _concat(inputs, attributes):
    return shape.cat(inputs, axis=attributes["axis"])


@onnx_op("Gather")
def _gather(inputs, attributes):
    data, indices = inputs
    axis = attributes.get("axis", 0) % data.ndim
    index = np.asarray(indices.numpy()).astype(np.int64)
    index = np.where(index < 0, index + data.shape[axis], index)  # ONNX allows negative indices
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
def _slice(inputs, attributes):
    x = inputs[0]
    starts, ends = _values(inputs[1]), _values(inputs[2])
    axes = _values(inputs[3]) if len(inputs) > 3 and inputs[3] is not None else \
        list(range(len(starts)))
    steps = _values(inputs[4]) if len(inputs) > 4 and inputs[4] is not None else [1] * len(starts)
    index = [slice(None)] * x.ndim
    for start, end, axis, step in zip(starts, ends, axes, steps):
        axis %= x.ndim
        index[axis] = _python_slice(start, end, step, x.shape[axis])
    return shape.getitem(x, tuple(index))


def run_node(op_type: str, inputs, attributes):
    """The first output of one node."""
    return ONNX_OPS[op_type](inputs, attributes)
