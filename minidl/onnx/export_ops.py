"""How each minidl op (a ``Function`` subclass) is written as ONNX nodes.

``FUNCTION_EXPORTERS`` maps an op class to ``exporter(builder, inputs, attrs, output)``, called
right after the op ran during the trace: ``inputs`` are its input Tensors, ``attrs`` the keyword
arguments ``apply`` received, ``output`` the Tensor it produced. The exporter appends the nodes
that compute ``output`` from the inputs' ONNX values and binds ``output`` to its ONNX name.

Ops with no entry here (losses, for instance: they have no place in an inference graph) are
collected by the tracer and reported all together.
"""

from __future__ import annotations

import math

import numpy as np

from ..ops import activations, conv, conv_transpose, elementwise as ew, linalg, nn_ops, pool
from ..ops import reduction, shape
from . import batch_axis as batch
from .dtypes import onnx_code
from .errors import UnsupportedOperatorError

INT64_MIN = -2**63


def _names(builder, inputs):
    return [builder.name_of(t) for t in inputs]


def _as_mean(builder, inputs, output) -> bool:
    """Rewrite ``sum(x) * (1/count)`` — how ``Tensor.mean`` is built — as one ReduceMean.

    The trace sees the count as a constant taken from the example; over the batch axis that
    constant would be wrong at any other batch size, while ReduceMean counts at run time.
    """
    total, scale = inputs
    if not builder.nodes or builder.known(scale) or scale.ndim != 0 or not builder.known(total):
        return False
    last = builder.nodes[-1]
    if last.op_type != "ReduceSum" or last.output[0] != builder.name_of(total):
        return False
    source_shape = builder.reduced_shapes.get(last.output[0])
    axes = [int(a) for a in builder.reduced_axes.get(last.output[0], ())] or None
    count = math.prod(source_shape if axes is None else [source_shape[a] for a in axes])
    if not count or not np.isclose(float(scale.item()), 1.0 / count, rtol=1e-6, atol=0):
        return False
    last.op_type = "ReduceMean"
    builder.alias(output, last.output[0], builder.batch_axis[last.output[0]])
    return True


def _elementwise(onnx_op):
    """Exporter of an op that ONNX has under the same broadcasting rules (NumPy's)."""
    def export(builder, inputs, attrs, output):
        if onnx_op == "Mul" and _as_mean(builder, inputs, output):
            return
        names = _names(builder, inputs)
        axis = batch.after_broadcast(
            [(builder.batch_axis[n], t.ndim) for n, t in zip(names, inputs)], output.ndim)
        builder.emit(onnx_op, names, output, axis)
    return export


def _export_pow_scalar(builder, inputs, attrs, output):
    (x,) = _names(builder, inputs)
    exponent = builder.constant(np.asarray(attrs["exponent"], inputs[0].dtype), "exponent")
    builder.emit("Pow", [x, exponent], output, builder.batch_axis[x])


def _export_gelu(builder, inputs, attrs, output):
    (x,) = _names(builder, inputs)
    approximate = attrs.get("approximate", "none")
    if builder.opset >= 20:
        builder.emit("Gelu", [x], output, builder.batch_axis[x], approximate=approximate)
        return
    # Before opset 20 ONNX has no Gelu: write its definition out.
    dtype = inputs[0].dtype
    c = lambda value, hint: builder.constant(np.asarray(value, dtype), hint)  # noqa: E731
    if approximate == "tanh":
        # ½x(1 + tanh(√(2/π)(x + 0.044715x³)))
        cube = builder.add_node("Mul", [x, builder.add_node("Mul", [x, x])])
        inner = builder.add_node("Add", [x, builder.add_node("Mul", [cube, c(0.044715, "k")])])
        scaled = builder.add_node("Mul", [inner, c(math.sqrt(2 / math.pi), "sqrt_2_over_pi")])
        phi = builder.add_node("Add", [builder.add_node("Tanh", [scaled]), c(1.0, "one")])
    else:
        # ½x(1 + erf(x/√2))
        phi = builder.add_node("Add", [builder.add_node(
            "Erf", [builder.add_node("Div", [x, c(math.sqrt(2.0), "sqrt_2")])]), c(1.0, "one")])
    half_x = builder.add_node("Mul", [x, c(0.5, "half")])
    builder.emit("Mul", [half_x, phi], output, builder.batch_axis[x])


def _export_clamp(builder, inputs, attrs, output):
    (x,) = _names(builder, inputs)
    dtype = inputs[0].dtype
    bounds = ["" if attrs.get(key) is None else builder.constant(np.asarray(attrs[key], dtype), key)
              for key in ("low", "high")]
    builder.emit("Clip", [x] + bounds, output, builder.batch_axis[x])


def _reduction(onnx_op):
    def export(builder, inputs, attrs, output):
        (x,) = _names(builder, inputs)
        axes, keepdims = attrs["axes"], bool(attrs["keepdims"])
        operands = [x] if axes is None else [x, builder.int64s(axes, "axes")]
        axis = batch.after_reduction(builder.batch_axis[x], axes, keepdims)
        name = builder.emit(onnx_op, operands, output, axis, keepdims=int(keepdims))
        builder.reduced_shapes[name], builder.reduced_axes[name] = inputs[0].shape, axes or ()
    return export


def _export_extremum(builder, inputs, attrs, output):
    op = {"max": "ReduceMax", "min": "ReduceMin"}[attrs["primitive"]]
    _reduction(op)(builder, inputs, attrs, output)


def _export_reshape(builder, inputs, attrs, output):
    (x,) = _names(builder, inputs)
    target, axis = batch.reshape_target(inputs[0].shape, output.shape, builder.batch_axis[x])
    builder.emit("Reshape", [x, builder.int64s(target, "shape")], output, axis)


def _export_permute(builder, inputs, attrs, output):
    (x,) = _names(builder, inputs)
    perm = [int(a) for a in attrs["axes"]]
    old = builder.batch_axis[x]
    builder.emit("Transpose", [x], output, None if old is None else perm.index(old), perm=perm)


def _export_broadcast_to(builder, inputs, attrs, output):
    (x,) = _names(builder, inputs)
    target = [int(n) for n in output.shape]
    axis = batch.after_broadcast([(builder.batch_axis[x], inputs[0].ndim)], output.ndim)
    if axis is not None:
        target[axis] = 1  # Expand broadcasts both ways: 1 keeps whatever the batch is
    builder.emit("Expand", [x, builder.int64s(target, "shape")], output, axis)


def _export_concatenate(builder, inputs, attrs, output):
    names = _names(builder, inputs)
    axis = next((builder.batch_axis[n] for n in names if builder.batch_axis[n] is not None), None)
    builder.emit("Concat", names, output, axis, axis=int(attrs["axis"]))


def _export_where(builder, inputs, attrs, output):
    a, b, cond = _names(builder, inputs)
    condition = inputs[2]
    axis = batch.after_broadcast([(builder.batch_axis[a], inputs[0].ndim),
                                  (builder.batch_axis[b], inputs[1].ndim),
                                  (builder.batch_axis[cond], condition.ndim)], output.ndim)
    if builder.batch_axis[cond] is None and cond in builder.initializers and axis is not None:
        # A condition no traced op produced is a constant (a mask built in NumPy, say). If it
        # has an axis of the example's batch size where the output's batch axis is, it almost
        # certainly describes the example's samples: written down, it would be the example's
        # mask at every batch size, so it is refused rather than silently frozen. (Size 1
        # there, or no such axis, is a mask shared by every sample, which is fine.)
        at = axis - (output.ndim - condition.ndim)
        if at >= 0 and condition.shape[at] == output.shape[axis]:
            raise UnsupportedOperatorError(
                "Where on a constant condition that spans the batch axis (a mask computed "
                "outside minidl's ops, which the export would freeze at the example's values)",
                ["Where(constant condition over the batch)"])
    builder.emit("Where", [cond, a, b], output, axis)


_COMPARISONS = {"equal": "Equal", "less": "Less", "less_equal": "LessOrEqual",
                "greater": "Greater", "greater_equal": "GreaterOrEqual"}


def _export_compare(builder, inputs, attrs, output):
    names = _names(builder, inputs)
    axis = batch.after_broadcast(
        [(builder.batch_axis[n], t.ndim) for n, t in zip(names, inputs)], output.ndim)
    dtypes = {t.dtype for t in inputs}
    if len(dtypes) > 1:
        # NumPy compares an int64 with a bool (or int32) after promoting both; ONNX requires the
        # two inputs to have one type, so the promotion is written out.
        common = np.result_type(*dtypes)
        names = [n if t.dtype == common else builder.add_node("Cast", [n], to=onnx_code(common))
                 for n, t in zip(names, inputs)]
    primitive = attrs["primitive"]
    if primitive == "not_equal":  # ONNX has no NotEqual: not(a == b)
        builder.emit("Not", [builder.add_node("Equal", names)], output, axis)
    else:
        builder.emit(_COMPARISONS[primitive], names, output, axis)


def _arg_extremum(onnx_op):
    def export(builder, inputs, attrs, output):
        (x,) = _names(builder, inputs)
        axis, keepdims = attrs["axis"], bool(attrs["keepdims"])
        if axis is None:
            # NumPy's "index into the flattened tensor": flatten, then search axis 0.
            flat = builder.add_node("Reshape", [x, builder.int64s([-1], "shape")])
            if not keepdims:
                builder.emit(onnx_op, [flat], output, None, axis=0, keepdims=0)
                return
            index = builder.add_node(onnx_op, [flat], axis=0, keepdims=1)
            builder.emit("Reshape", [index, builder.int64s([1] * inputs[0].ndim, "shape")],
                         output, None)
            return
        # select_last_index=0: the first of tied extrema, as NumPy.
        builder.emit(onnx_op, [x], output,
                     batch.after_reduction(builder.batch_axis[x], (axis,), keepdims),
                     axis=int(axis), keepdims=int(keepdims), select_last_index=0)
    return export


def _export_cast(builder, inputs, attrs, output):
    (x,) = _names(builder, inputs)
    builder.emit("Cast", [x], output, builder.batch_axis[x], to=onnx_code(attrs["dtype"]))


def _export_matmul(builder, inputs, attrs, output):
    a, b = _names(builder, inputs)
    axis = None
    if builder.batch_axis[a] is not None and builder.batch_axis[a] != inputs[0].ndim - 1:
        axis = builder.batch_axis[a] + output.ndim - inputs[0].ndim
    elif builder.batch_axis[b] is not None and builder.batch_axis[b] < inputs[1].ndim - 2:
        axis = builder.batch_axis[b] + output.ndim - inputs[1].ndim
    builder.emit("MatMul", [a, b], output, axis)


def _export_linear(builder, inputs, attrs, output):
    names = _names(builder, inputs)
    x = names[0]
    axis = builder.batch_axis[x] if builder.batch_axis[x] != inputs[0].ndim - 1 else None
    if inputs[0].ndim == 2:
        # Gemm computes alpha·A·Bᵀ + beta·C with transB=1: exactly x Wᵀ + b, W kept (out, in).
        builder.emit("Gemm", names, output, axis, transB=1)
        return
    weight_t = builder.add_node("Transpose", [names[1]], perm=[1, 0])
    if len(names) == 2:
        builder.emit("MatMul", [x, weight_t], output, axis)
        return
    product = builder.add_node("MatMul", [x, weight_t])
    builder.emit("Add", [product, names[2]], output, axis)


def _export_conv2d(builder, inputs, attrs, output):
    names = _names(builder, inputs)
    kh, kw = inputs[1].shape[2:]
    ph, pw = attrs["padding"]
    builder.emit("Conv", names, output, builder.batch_axis[names[0]],
                 kernel_shape=[kh, kw], strides=list(attrs["stride"]), pads=[ph, pw, ph, pw],
                 dilations=list(attrs["dilation"]), group=int(attrs["groups"]))


def _pool_attributes(builder, op, inputs, attrs, output):
    """kernel/strides/pads/ceil_mode for ONNX, with minidl's (PyTorch's) output size.

    In ceil mode PyTorch drops a last window that would start beyond the input and its left
    padding; ONNX keeps it. Where the two counts differ, the same windows are written in floor
    mode with just enough extra padding at the end — padding that neither a max nor an average
    that excludes padding can see.
    """
    kernel, stride = list(attrs["kernel_size"]), list(attrs["stride"])
    dilation = list(attrs.get("dilation", (1, 1)))
    begin = list(attrs["padding"])
    end = list(begin)
    ceil_mode = int(attrs["ceil_mode"])
    if ceil_mode:
        for axis in range(2):
            size, wanted = inputs[0].shape[2 + axis], output.shape[2 + axis]
            span = size + 2 * begin[axis] - dilation[axis] * (kernel[axis] - 1) - 1
            onnx_ceil = -(-span // stride[axis]) + 1
            if onnx_ceil != wanted:
                if op == "AveragePool" and _counts_padding(attrs):
                    raise UnsupportedOperatorError(
                        "AvgPool2d with ceil_mode, count_include_pad and a dropped last window",
                        ["AvgPool2d(ceil_mode, count_include_pad)"])
                ceil_mode = 0
        if not ceil_mode:
            for axis in range(2):
                size, wanted = inputs[0].shape[2 + axis], output.shape[2 + axis]
                reach = (wanted - 1) * stride[axis] + dilation[axis] * (kernel[axis] - 1) + 1
                end[axis] = max(end[axis], reach - size - begin[axis])
    return {"kernel_shape": kernel, "strides": stride, "pads": begin + end,
            "ceil_mode": ceil_mode}


def _export_max_pool2d(builder, inputs, attrs, output):
    (x,) = _names(builder, inputs)
    builder.emit("MaxPool", [x], output, builder.batch_axis[x],
                 dilations=list(attrs["dilation"]),
                 **_pool_attributes(builder, "MaxPool", inputs, attrs, output))


def _counts_padding(attrs) -> bool:
    # Without padding, counting it or not divides by the same window sizes.
    return bool(attrs["count_include_pad"]) and any(attrs["padding"])


def _export_avg_pool2d(builder, inputs, attrs, output):
    (x,) = _names(builder, inputs)
    builder.emit("AveragePool", [x], output, builder.batch_axis[x],
                 count_include_pad=int(_counts_padding(attrs)),
                 **_pool_attributes(builder, "AveragePool", inputs, attrs, output))


def _softmax(onnx_op):
    def export(builder, inputs, attrs, output):
        (x,) = _names(builder, inputs)
        builder.emit(onnx_op, [x], output, builder.batch_axis[x], axis=int(attrs["axis"]))
    return export


def _export_layer_norm(builder, inputs, attrs, output):
    names = _names(builder, inputs)
    x = inputs[0]
    if len(inputs) > 1:
        axis = x.ndim - inputs[1].ndim
    else:  # the fewest trailing axes holding normalized_size elements
        axis = next(a for a in range(x.ndim, -1, -1)
                    if math.prod(x.shape[a:]) == attrs["normalized_size"])
        names.append(builder.constant(np.ones(x.shape[axis:], x.dtype), "ln_scale"))
    builder.emit("LayerNormalization", names, output, builder.batch_axis[names[0]],
                 axis=axis, epsilon=float(attrs["eps"]))


def _export_batch_norm(builder, inputs, attrs, output):
    if attrs.get("batch_stats"):
        raise UnsupportedOperatorError(
            "BatchNorm with batch statistics (a batch norm layer without running statistics) "
            "cannot be exported", ["BatchNorm(batch statistics)"])
    names = _names(builder, inputs)
    x = inputs[0]
    if len(inputs) == 1:
        channels = x.shape[1]
        names += [builder.constant(np.ones(channels, x.dtype), "bn_scale"),
                  builder.constant(np.zeros(channels, x.dtype), "bn_bias")]
    names += [builder.name_of_array(attrs["mean"], "running_mean"),
              builder.name_of_array(attrs["var"], "running_var")]
    builder.emit("BatchNormalization", names, output, builder.batch_axis[names[0]],
                 epsilon=float(attrs["eps"]))


# -- indexing --------------------------------------------------------------------------------------

def _export_getitem(builder, inputs, attrs, output):
    """Basic indexing (ints, slices, None, ...) and one integer array, as NumPy defines them.

    Each index part acts on one axis in turn, left to right, on the value built so far: None
    inserts an axis (Unsqueeze), a slice keeps it (Slice), an array replaces it by the array's
    axes (Gather), an int removes it (Gather with a scalar index). Alongside, the batch axis is
    followed through each step, so the exported graph still accepts any batch size.
    """
    x = inputs[0]
    current = builder.name_of(x)
    batch_axis = builder.batch_axis[current]
    axis = 0  # where the next part acts in the value being built
    input_axes = iter(x.shape)  # sizes of the input's axes: each part but None consumes one
    for part in _one_part_per_axis(list(attrs["index"]), x.ndim):
        if part is None:
            current, batch_axis = _insert_axis(builder, current, axis, batch_axis)
            axis += 1
        elif isinstance(part, slice):
            current, batch_axis = _slice_axis(builder, current, axis, batch_axis, part,
                                              next(input_axes))
            axis += 1
        elif _is_index_array(part):
            current, batch_axis = _gather_axis(builder, current, axis, batch_axis, part)
            next(input_axes)
            axis += part.ndim
        else:
            current, batch_axis = _take_one(builder, current, axis, batch_axis, part,
                                            next(input_axes))
    if current == builder.name_of(x):  # x[:] or x[...]: no node was needed
        builder.alias(output, current, batch_axis)
    else:
        builder.emit("Identity", [current], output, batch_axis)


def _is_index_array(part) -> bool:
    return isinstance(part, np.ndarray) and part.ndim > 0


def _one_part_per_axis(parts: list, ndim: int) -> list:
    """The index with ``...`` expanded and missing trailing axes filled in, both with ``:``.

    Afterwards every part but None consumes exactly one input axis, in order. Refuses what the
    axis-by-axis walk cannot express: several index arrays, or an array beside an int (NumPy
    treats that int as one more index array), because NumPy then broadcasts the arrays together
    and may move their axes to the front.
    """
    arrays = [p for p in parts if _is_index_array(p)]
    ints = [p for p in parts if isinstance(p, (int, np.integer))
            or (isinstance(p, np.ndarray) and p.ndim == 0)]
    if len(arrays) > 1 or (arrays and ints):
        raise UnsupportedOperatorError("GetItem with several integer-array indices",
                                       ["GetItem(advanced indexing)"])
    consumed = sum(1 for p in parts if p is not None and p is not Ellipsis)
    whole_axes = [slice(None)] * (ndim - consumed)
    ellipsis = [i for i, p in enumerate(parts) if p is Ellipsis]
    if ellipsis:
        parts[ellipsis[0]:ellipsis[0] + 1] = whole_axes
    else:
        parts += whole_axes
    return parts


def _insert_axis(builder, current, axis, batch_axis):
    """``None``: a new axis of size 1 at ``axis``; a batch axis at or after it moves right."""
    current = builder.add_node("Unsqueeze", [current, builder.int64s([axis], "axes")])
    if batch_axis is not None and batch_axis >= axis:
        batch_axis += 1
    return current, batch_axis


def _slice_axis(builder, current, axis, batch_axis, part: slice, size: int):
    """A slice: one Slice node, none when it takes the whole axis.

    The bounds are resolved against the traced size (``slice.indices``), as NumPy does. A slice
    of the batch axis has a size fixed by the example, so the result no longer has a batch axis.
    """
    start, stop, step = part.indices(size)
    if (start, stop, step) == (0, size, 1):
        return current, batch_axis
    if step < 0 and stop < 0:
        # Going backwards through the first element: Python resolves that stop to -1, which
        # ONNX would read as "the last element"; its most negative int64 means "before 0".
        stop = INT64_MIN
    current = builder.add_node("Slice", [
        current, builder.int64s([start], "starts"), builder.int64s([stop], "ends"),
        builder.int64s([axis], "axes"), builder.int64s([step], "steps")])
    return current, None if batch_axis == axis else batch_axis


def _gather_axis(builder, current, axis, batch_axis, part: np.ndarray):
    """An integer array: Gather, whose result has the array's axes where ``axis`` was.

    An index array the trace computed from the input (not a constant) carries its own batch axis,
    which then becomes the result's.
    """
    indices = builder.name_of_array(part if part.dtype == np.int64 else part.astype(np.int64),
                                    "indices")
    current = builder.add_node("Gather", [current, indices], axis=axis)
    index_batch = builder.batch_axis.get(indices)
    if batch_axis == axis:
        batch_axis = None
    elif batch_axis is not None and batch_axis > axis:
        batch_axis += part.ndim - 1
    if index_batch is not None:
        batch_axis = axis + index_batch
    return current, batch_axis


def _take_one(builder, current, axis, batch_axis, part, size: int):
    """An int: Gather with a scalar index, which removes ``axis``; later axes move left.

    The index is written non-negative (its value modulo the traced size) since that is the
    element the trace read.
    """
    index = int(part) % size if size else int(part)
    current = builder.add_node("Gather", [current, builder.constant(
        np.asarray(index, np.int64), "index")], axis=axis)
    if batch_axis == axis:
        batch_axis = None
    elif batch_axis is not None and batch_axis > axis:
        batch_axis -= 1
    return current, batch_axis


def _export_embedding_lookup(builder, inputs, attrs, output):
    # Gather along the table's rows: the output's leading axes are the indices' axes.
    table, indices = _names(builder, inputs)
    builder.emit("Gather", [table, indices], output, builder.batch_axis.get(indices), axis=0)


def _export_identity(builder, inputs, attrs, output):
    (x,) = _names(builder, inputs)
    builder.emit("Identity", [x], output, builder.batch_axis[x])


FUNCTION_EXPORTERS = {
    ew.AddFunction: _elementwise("Add"), ew.SubFunction: _elementwise("Sub"),
    ew.MulFunction: _elementwise("Mul"), ew.DivFunction: _elementwise("Div"),
    ew.PowFunction: _elementwise("Pow"), ew.PowScalarFunction: _export_pow_scalar,
    ew.MaximumFunction: _elementwise("Max"), ew.MinimumFunction: _elementwise("Min"),
    ew.NegFunction: _elementwise("Neg"), ew.ExpFunction: _elementwise("Exp"),
    ew.LogFunction: _elementwise("Log"), ew.SqrtFunction: _elementwise("Sqrt"),
    ew.TanhFunction: _elementwise("Tanh"), ew.SigmoidFunction: _elementwise("Sigmoid"),
    ew.ReluFunction: _elementwise("Relu"), ew.AbsFunction: _elementwise("Abs"),
    ew.GeluFunction: _export_gelu, ew.ClampFunction: _export_clamp,
    ew.CompareFunction: _export_compare, ew.LogicalNotFunction: _elementwise("Not"),
    ew.LogicalAndFunction: _elementwise("And"), ew.LogicalOrFunction: _elementwise("Or"),
    reduction.SumFunction: _reduction("ReduceSum"),
    reduction.ExtremumFunction: _export_extremum,
    reduction.StdFunction: _elementwise("Sqrt"),
    reduction.StopGradientFunction: _export_identity,
    reduction.ArgMaxFunction: _arg_extremum("ArgMax"),
    reduction.ArgMinFunction: _arg_extremum("ArgMin"),
    shape.ReshapeFunction: _export_reshape, shape.PermuteFunction: _export_permute,
    shape.BroadcastToFunction: _export_broadcast_to, shape.GetItemFunction: _export_getitem,
    shape.ConcatenateFunction: _export_concatenate, shape.WhereFunction: _export_where,
    shape.CastFunction: _export_cast, shape.CloneFunction: _export_identity,
    linalg.MatmulFunction: _export_matmul, linalg.LinearFunction: _export_linear,
    conv.Conv2dFunction: _export_conv2d, pool.MaxPool2dFunction: _export_max_pool2d,
    pool.AvgPool2dFunction: _export_avg_pool2d,
    nn_ops.SoftmaxFunction: _softmax("Softmax"),
    nn_ops.LogSoftmaxFunction: _softmax("LogSoftmax"),
    nn_ops.LayerNormFunction: _export_layer_norm, nn_ops.BatchNormFunction: _export_batch_norm,
    nn_ops.EmbeddingLookupFunction: _export_embedding_lookup,
}


# -- the added activations and the transposed convolution -------------------------------------

def _unary(onnx_op, **fixed):
    """Exporter of a pointwise op that ONNX has whole. ``fixed`` gives its ONNX attributes:
    a string names the op attribute to copy, a number is the value itself."""
    def export(builder, inputs, attrs, output):
        (x,) = _names(builder, inputs)
        values = {name: float(attrs[source]) if isinstance(source, str) else source
                  for name, source in fixed.items()}
        builder.emit(onnx_op, [x], output, builder.batch_axis[x], **values)
    return export


def _export_softplus(builder, inputs, attrs, output):
    # ONNX Softplus is log(1 + eˣ); beta scales around it and threshold switches to x, as the op.
    (x,) = _names(builder, inputs)
    dtype = inputs[0].dtype
    beta, threshold = attrs["beta"], attrs["threshold"]
    scaled = builder.add_node("Mul", [x, builder.constant(np.asarray(beta, dtype), "beta")])
    smooth = builder.add_node("Div", [builder.add_node("Softplus", [scaled]),
                                      builder.constant(np.asarray(beta, dtype), "beta")])
    linear = builder.add_node("Greater", [scaled, builder.constant(np.asarray(threshold, dtype),
                                                                   "threshold")])
    builder.emit("Where", [linear, x, smooth], output, builder.batch_axis[x])


def _export_silu(builder, inputs, attrs, output):
    (x,) = _names(builder, inputs)
    builder.emit("Mul", [x, builder.add_node("Sigmoid", [x])], output, builder.batch_axis[x])


def _export_prelu(builder, inputs, attrs, output):
    x, slope = _names(builder, inputs)
    builder.emit("PRelu", [x, slope], output, builder.batch_axis[x])


def _export_conv_transpose2d(builder, inputs, attrs, output):
    names = _names(builder, inputs)
    ph, pw = attrs["padding"]
    builder.emit("ConvTranspose", names, output, builder.batch_axis[names[0]],
                 kernel_shape=list(inputs[1].shape[2:]), strides=list(attrs["stride"]),
                 pads=[ph, pw, ph, pw], dilations=list(attrs["dilation"]),
                 output_padding=list(attrs["output_padding"]), group=int(attrs["groups"]))


FUNCTION_EXPORTERS.update({
    activations.LeakyReluFunction: _unary("LeakyRelu", alpha="negative_slope"),
    activations.EluFunction: _unary("Elu", alpha="alpha"),
    activations.SoftplusFunction: _export_softplus, activations.SiluFunction: _export_silu,
    activations.MishFunction: _unary("Mish"), activations.HardswishFunction: _unary("HardSwish"),
    activations.HardsigmoidFunction: _unary("HardSigmoid", alpha=1.0 / 6.0, beta=0.5),
    activations.PreluFunction: _export_prelu,
    conv_transpose.ConvTranspose2dFunction: _export_conv_transpose2d,
})
