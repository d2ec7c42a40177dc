"""A node's output size, known before the node runs, checked against ``max_tensor_bytes``.

Ops that build a tensor from sizes the file or the input chose (Expand, Reshape, Tile, Pad, ...)
check their own target with :func:`.registry.check_size`. Others grow past their inputs through
their structure alone: broadcasting an ``[n, 1]`` against a ``[1, n]`` makes n², so does the
matrix product of a column and a row, and a transposed convolution's output grows with its
stride. For those, the output shape follows from the input shapes and attributes by the ONNX
rules, and is checked before anything is computed. Every other op makes outputs no bigger than a
fixed multiple of its inputs; the interpreter checks their size once they exist, so no value
beyond the bound ever reaches the next node.
"""

from __future__ import annotations

import math

import numpy as np

BROADCASTING = {"Add", "Sub", "Mul", "Div", "Pow", "Mod", "Max", "Min", "Sum", "Mean", "Where",
                "Equal", "Greater", "Less", "GreaterOrEqual", "LessOrEqual", "And", "Or", "Xor",
                "BitShift", "BitwiseAnd", "BitwiseOr", "BitwiseXor", "PRelu"}


def _matmul_shape(a: tuple, b: tuple) -> tuple:
    """numpy.matmul's rule, with a 1-D operand's extra axis of size 1 kept (the element count,
    all that is checked, is the same)."""
    a2, b2 = (1,) + a if len(a) == 1 else a, b + (1,) if len(b) == 1 else b
    return np.broadcast_shapes(a2[:-2], b2[:-2]) + (a2[-2], b2[-1])


def _einsum_shape(equation: str, shapes: list) -> tuple | None:
    equation = equation.replace(" ", "")
    if "..." in equation:
        return None  # checked once computed
    operands, _, output = equation.partition("->")
    terms = operands.split(",")
    if len(terms) != len(shapes) or any(len(t) != len(s) for t, s in zip(terms, shapes)):
        return None  # malformed: the op itself says why
    size = {}
    for term, shape in zip(terms, shapes):
        for letter, n in zip(term, shape):
            size[letter] = max(size.get(letter, 1), n)
    if "->" not in equation:
        output = "".join(sorted(k for k in size if operands.count(k) == 1))
    return tuple(size.get(letter, 1) for letter in output)


def _conv_transpose_shape(x: tuple, w: tuple, attributes: dict) -> tuple:
    spatial = len(x) - 2
    if attributes.get("output_shape"):
        return (x[0], w[1] * attributes.get("group", 1)) + tuple(attributes["output_shape"])
    strides = attributes.get("strides", [1] * spatial)
    dilations = attributes.get("dilations", [1] * spatial)
    extra = attributes.get("output_padding", [0] * spatial)
    kernel = attributes.get("kernel_shape", w[2:])
    return (x[0], w[1] * attributes.get("group", 1)) + tuple(
        (n - 1) * s + d * (k - 1) + 1 + e
        for n, s, d, k, e in zip(x[2:], strides, dilations, kernel, extra))


def predicted_shape(op_type: str, inputs, attributes: dict) -> tuple | None:
    """The output shape of a node whose output may outgrow its inputs, from their shapes; None
    for every other op (and where the inputs are malformed: the op then refuses them)."""
    shapes = [tuple(int(n) for n in t.shape) for t in inputs if t is not None]
    try:
        if op_type in BROADCASTING and shapes:
            return np.broadcast_shapes(*shapes)
        if op_type == "MatMul" and len(shapes) == 2 and all(shapes):
            return _matmul_shape(*shapes)
        if op_type == "Gemm" and len(shapes) >= 2 and all(len(s) == 2 for s in shapes[:2]):
            a, b = shapes[:2]
            return (a[1] if attributes.get("transA") else a[0],
                    b[0] if attributes.get("transB") else b[1])
        if op_type == "Einsum":
            return _einsum_shape(str(attributes.get("equation", "")), shapes)
        if op_type == "ConvTranspose" and len(shapes) >= 2 and len(shapes[0]) >= 3:
            return _conv_transpose_shape(shapes[0], shapes[1], attributes)
    except (ValueError, TypeError, IndexError):
        return None
    return None


def check_output_sizes(results, context) -> None:
    """Refuse any computed output beyond the bound, before a later node can build on it."""
    for result in results:
        nbytes = math.prod(result.shape) * np.dtype(result.dtype).itemsize
        if nbytes > context.max_tensor_bytes:
            raise ValueError(f"computed a tensor of shape {list(result.shape)} ({nbytes} bytes), "
                             f"beyond the bound of {context.max_tensor_bytes} bytes (raise it "
                             f"with import_model(..., max_tensor_bytes=N) if it is meant)")
