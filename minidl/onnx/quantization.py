"""Linear quantization: QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear.

    q = saturate(round(x / scale) + zero_point)        x ≈ (q − zero_point) · scale

with ``round`` to nearest even and ``saturate`` clipping to the integer type's range. Scale and
zero point are one value (per tensor), one per index of ``axis`` (per channel), or one per
``block_size`` consecutive elements along ``axis`` (blocked). The results are integers, or
floats read from integers, so these run on the host without a gradient.
"""

from __future__ import annotations

import numpy as np

from .dtypes import numpy_dtype
from .registry import host_result, onnx_op, optional


def _broadcastable(value: np.ndarray, shape, axis: int, block_size: int) -> np.ndarray:
    """Scale or zero point shaped to broadcast against the data."""
    if value.ndim == 0 or value.size == 1:
        return value.reshape(())
    axis %= len(shape)
    if not block_size:
        dims = [1] * len(shape)
        dims[axis] = value.size
        return value.reshape(dims)
    return np.take(np.repeat(value, block_size, axis=axis), range(shape[axis]), axis=axis)


def _integer_range(dtype):
    info = np.iinfo(dtype)
    return info.min, info.max


@onnx_op("QuantizeLinear")
def _quantize(inputs, attributes, context):
    x, scale, zero_point = inputs[0], inputs[1], optional(inputs, 2)
    axis, block = attributes.get("axis", 1), attributes.get("block_size", 0)
    if zero_point is not None:
        dtype = zero_point.dtype
    elif "output_dtype" in attributes and attributes["output_dtype"]:
        dtype = numpy_dtype(attributes["output_dtype"])
    else:
        dtype = np.dtype(np.uint8)
    if dtype.kind not in "iu":
        raise ValueError(f"QuantizeLinear: output type {dtype} is not supported")
    values = x.numpy() / _broadcastable(scale.numpy(), x.shape, axis, block)
    q = np.rint(values).astype(np.int64)
    if zero_point is not None:
        q = q + _broadcastable(zero_point.numpy(), x.shape, axis, block).astype(np.int64)
    low, high = _integer_range(dtype)
    return host_result(np.clip(q, low, high).astype(dtype), x)


@onnx_op("DequantizeLinear")
def _dequantize(inputs, attributes, context):
    q, scale, zero_point = inputs[0], inputs[1], optional(inputs, 2)
    axis, block = attributes.get("axis", 1), attributes.get("block_size", 0)
    values = q.numpy().astype(np.int64)
    if zero_point is not None:
        values = values - _broadcastable(zero_point.numpy(), q.shape, axis, block).astype(np.int64)
    dtype = numpy_dtype(attributes["output_dtype"]) if attributes.get("output_dtype") else \
        scale.dtype
    result = values * _broadcastable(scale.numpy(), q.shape, axis, block)
    return host_result(result.astype(dtype), q)


@onnx_op("DynamicQuantizeLinear")
def _dynamic_quantize(inputs, attributes, context):
    """uint8 quantization whose range covers the data and 0: scale = (max − min)/255."""
    x = inputs[0]
    values = x.numpy()
    low, high = min(0.0, float(values.min(initial=0.0))), max(0.0, float(values.max(initial=0.0)))
    scale = np.float32((high - low) / 255.0)
    zero = np.uint8(np.clip(np.rint(-low / scale) if scale else 0, 0, 255))
    q = np.clip(np.rint(values / scale) + zero if scale else zero, 0, 255).astype(np.uint8)
    return (host_result(q, x), host_result(np.asarray(scale, np.float32), x),
            host_result(np.asarray(zero, np.uint8), x))
