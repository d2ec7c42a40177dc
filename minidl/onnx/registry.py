"""The table of ONNX operators the interpreter runs, and what every operator's code shares.

``ONNX_OPS`` maps an ONNX ``op_type`` to ``compute(inputs, attributes, context)``: ``inputs``
are Tensors (None where the node left an optional input empty), ``attributes`` the node's
attributes as plain Python data and ``context`` a :class:`RunContext`. It returns the node's
output Tensor, or a tuple of them for operators with several outputs (TopK's values and indices,
Split's pieces, LayerNormalization's mean and inverse standard deviation).

Two kinds of computation meet here. What can carry a gradient (float data) is built from minidl
ops, so an imported graph differentiates and trains. What cannot — integer and boolean results,
indices, masks, the values of shape inputs — is computed with NumPy on the host by
:func:`host_result`: those values have no gradient to pass on, and many of them (a target shape,
the bounds of a Slice) must be concrete Python values anyway to build the next op.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..autograd.tensor import Tensor

ONNX_OPS = {}

# Default bound on one tensor an operator may allocate from sizes the file or the input chose
# (Expand, Reshape, ConstantOfShape, Tile, Range, Pad, Resize): 4 GiB.
DEFAULT_MAX_TENSOR_BYTES = 4 << 30


@dataclass
class RunContext:
    """What a node's computation may need beyond its inputs.

    ``training``: the module's mode (Dropout drops, BatchNormalization uses and updates batch
    statistics). ``max_tensor_bytes``: the largest tensor a size read from the graph or the
    input may create. ``node``: a name for error messages. ``outputs``: how many outputs the
    node declares (ops skip the optional ones nobody reads).
    """

    training: bool = False
    max_tensor_bytes: int = DEFAULT_MAX_TENSOR_BYTES
    node: str = ""
    outputs: int = 1


def onnx_op(*op_types):
    """Register the decorated function as the computation of ``op_types``."""
    def register(function):
        for op_type in op_types:
            ONNX_OPS[op_type] = function
        return function
    return register


def values_of(tensor) -> list:
    """A shape-describing input as a list of Python ints."""
    return [int(v) for v in np.asarray(tensor.numpy()).reshape(-1)]


def scalar_of(tensor) -> float:
    """A one-element input as a Python number (int for integer tensors)."""
    value = np.asarray(tensor.numpy()).reshape(-1)[0]
    return int(value) if value.dtype.kind in "biu" else float(value)


def optional(inputs, position: int):
    """The input at ``position``, or None when the node left it out."""
    return inputs[position] if len(inputs) > position else None


def axes_of(inputs, attributes, position: int):
    """Axes given as an input (newer opsets) or as the ``axes`` attribute (older ones)."""
    given = optional(inputs, position)
    if given is not None:
        return values_of(given)
    return attributes.get("axes")


def host_result(array, like: Tensor) -> Tensor:
    """A NumPy result (no gradient) as a Tensor on ``like``'s device."""
    return Tensor(np.asarray(array), device=like.device)


def index_in_range(index, size: int, what: str) -> np.ndarray:
    """ONNX indices (negative ones count from the end) as non-negative NumPy indices, or an
    IndexError naming ``what`` for one outside [-size, size)."""
    index = np.asarray(index).astype(np.int64)
    if index.size and (index.min() < -size or index.max() >= size):
        raise IndexError(f"{what}: index out of range for an axis of size {size}")
    return np.where(index < 0, index + size, index)


def check_size(shape, dtype, context: RunContext, what: str) -> tuple:
    """``shape`` as a tuple of ints, refused (not allocated) beyond the context's byte bound."""
    shape = tuple(int(n) for n in shape)
    if any(n < 0 for n in shape):
        raise ValueError(f"{what}: negative size in shape {list(shape)}")
    size = math.prod(shape) * np.dtype(dtype).itemsize
    if size > context.max_tensor_bytes:
        raise ValueError(f"{what}: a tensor of shape {list(shape)} ({size} bytes) is beyond the "
                         f"bound of {context.max_tensor_bytes} bytes (raise it with "
                         f"import_model(..., max_tensor_bytes=N) if it is meant)")
    return shape


def computed_in_float32(compute):
    """Run ``compute`` on float16 inputs widened to float32 and round its results back.

    The CPU kernels of a few ops (softmax, its logarithm) exist for float32 and float64 only;
    half precision graphs run them in single precision, which is what ONNX's
    ``softmax_precision`` asks for in attention anyway.
    """
    from ..ops import shape

    def widened(inputs, attributes, context):
        if not any(t is not None and t.dtype == np.float16 for t in inputs):
            return compute(inputs, attributes, context)
        wider = [t if t is None or t.dtype != np.float16 else shape.cast(t, np.float32)
                 for t in inputs]
        results = compute(wider, attributes, context)
        narrow = [shape.cast(r, np.float16) if r.dtype == np.float32 else r
                  for r in (results if isinstance(results, tuple) else (results,))]
        return tuple(narrow) if isinstance(results, tuple) else narrow[0]
    widened.__name__, widened.__doc__ = compute.__name__, compute.__doc__
    return widened
