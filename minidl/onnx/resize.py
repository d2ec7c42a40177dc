"""ONNX ``Resize``: nearest, linear and cubic interpolation, one axis at a time.

Interpolation is separable: resizing an N-D tensor is resizing one axis after another. Along one
axis every output element is a weighted sum of a few input elements, so the whole axis is one
(out × in) matrix W, computed on the host from the operator's attributes, and the resize is a
matrix product with W along that axis — differentiable, with gradient Wᵀ.

Building W follows the operator's definition: each output index y maps back to a source
coordinate x (``coordinate_transformation_mode``: half_pixel, align_corners, asymmetric, …);
the n input elements nearest x get the mode's coefficients (nearest: one of two; linear:
1 − t and t; cubic: Keys' kernel with ``cubic_coeff_a``; ``antialias`` widens the kernel by
1/scale when shrinking); neighbours past the ends repeat the edge element, or are dropped and
the rest renormalised with ``exclude_outside``. ``tf_crop_and_resize`` reads a region of
interest and writes ``extrapolation_value`` where x falls outside the input.
"""

from __future__ import annotations

import math

import numpy as np

from ..ops import linalg, shape
from .registry import check_size, host_result, onnx_op, optional


def _nearest(mode):
    def coefficients(ratio, scale):
        if float(ratio).is_integer():
            return np.array([0.0, 1.0])
        if mode == "round_prefer_floor":
            return np.array([ratio <= 0.5, ratio > 0.5], np.float64)
        if mode == "round_prefer_ceil":
            return np.array([ratio < 0.5, ratio >= 0.5], np.float64)
        if mode == "floor":
            return np.array([1.0, 0.0])
        if mode == "ceil":
            return np.array([0.0, 1.0])
        raise ValueError(f"Resize: unknown nearest_mode {mode!r}")
    return coefficients


def _linear(antialias):
    def coefficients(ratio, scale):
        if not antialias:
            return np.array([1.0 - ratio, ratio])
        scale = min(scale, 1.0)
        start = int(np.floor(-1 / scale) + 1)
        points = (np.arange(start, 2 - start) - ratio) * scale
        weights = np.clip(1 - np.abs(points), 0, 1)
        return weights / weights.sum()
    return coefficients


def _keys_kernel(distance, a):
    """Keys' cubic convolution kernel at |distance| (a = cubic_coeff_a)."""
    x = abs(distance)
    if x <= 1:
        return (a + 2) * x ** 3 - (a + 3) * x ** 2 + 1
    if x < 2:
        return a * x ** 3 - 5 * a * x ** 2 + 8 * a * x - 4 * a
    return 0.0


def _cubic(antialias, a):
    def coefficients(ratio, scale):
        if not antialias:
            return np.array([_keys_kernel(d, a) for d in (ratio + 1, ratio, 1 - ratio,
                                                          2 - ratio)])
        scale = min(scale, 1.0)
        start = int(np.floor(-2 / scale) + 1)
        weights = np.array([_keys_kernel(scale * (i - ratio), a) for i in range(start, 2 - start)])
        return weights / weights.sum()
    return coefficients


def _source_coordinates(mode, y, scale, size_in, size_out_float, size_out, roi):
    """Where each output index y samples the input (and, for tf_crop_and_resize, which
    outputs fall outside it)."""
    outside = None
    if mode == "align_corners":
        x = np.zeros(size_out) if size_out_float == 1 else y * (size_in - 1) / (size_out_float - 1)
    elif mode == "asymmetric":
        x = y / scale
    elif mode == "tf_crop_and_resize":
        start, end = roi
        if size_out_float == 1:
            x = np.full(size_out, (end - start) * (size_in - 1) / 2)
        else:
            x = y * (end - start) * (size_in - 1) / (size_out_float - 1)
        x = x + start * (size_in - 1)
        outside = (x < 0) | (x > size_in - 1)
    elif mode == "pytorch_half_pixel":
        x = np.full(size_out, -0.5) if size_out_float == 1 else (y + 0.5) / scale - 0.5
    elif mode == "half_pixel":
        x = (y + 0.5) / scale - 0.5
    elif mode == "half_pixel_symmetric":
        offset = size_in / 2 * (1 - size_out / size_out_float)
        x = offset + (y + 0.5) / scale - 0.5
    else:
        raise ValueError(f"Resize: unknown coordinate_transformation_mode {mode!r}")
    return x, outside


def _axis_matrix(size_in, size_out, scale, coefficients, attributes, roi):
    """(W, outside) for one axis: W (size_out × size_in) float64, outside a mask or None."""
    y = np.arange(size_out, dtype=np.float64)
    x, outside = _source_coordinates(
        attributes.get("coordinate_transformation_mode", "half_pixel"), y, scale, size_in,
        scale * size_in, size_out, roi)
    base = np.floor(x).astype(np.int64)
    ratios = np.where(x == base, 1.0, x - base)  # an exact integer x prefers its left neighbour
    weights = np.stack([coefficients(float(r), scale) for r in ratios]) if size_out else \
        np.zeros((0, 2))
    n = weights.shape[1]
    # The n inputs nearest x (ties to the smaller index), as the definition picks them.
    pad = math.ceil(n / 2)
    padded = x + pad
    floor = np.floor(padded).astype(np.int64)
    fraction = padded - floor
    if n % 2 == 0:
        offset = np.where(fraction == 0, -(n // 2), -(n // 2) + 1)
    else:
        offset = np.where(fraction <= 0.5, -((n - 1) // 2), -((n - 1) // 2) + 1)
    neighbours = (floor + offset)[:, None] + np.arange(n)[None, :] - pad
    if attributes.get("exclude_outside", 0):
        weights = np.where((neighbours < 0) | (neighbours >= size_in), 0.0, weights)
        totals = weights.sum(axis=1, keepdims=True)
        weights = weights / np.where(totals == 0, 1.0, totals)
    matrix = np.zeros((size_out, size_in))
    rows = np.repeat(np.arange(size_out), n)
    np.add.at(matrix, (rows, np.clip(neighbours, 0, size_in - 1).reshape(-1)), weights.reshape(-1))
    return matrix, outside


def _coefficient_function(attributes):
    mode = attributes.get("mode", "nearest")
    antialias = bool(attributes.get("antialias", 0))
    if mode == "nearest":
        return _nearest(attributes.get("nearest_mode", "round_prefer_floor"))
    if mode == "linear":
        return _linear(antialias)
    if mode == "cubic":
        return _cubic(antialias, attributes.get("cubic_coeff_a", -0.75))
    raise ValueError(f"Resize: unknown mode {mode!r}")


def _scales_and_sizes(x, inputs, attributes):
    """Per-axis scale factors and output sizes, from ``scales`` or ``sizes``."""
    rank = x.ndim
    axes = [a % rank for a in attributes.get("axes", range(rank))]
    scales_in, sizes_in = optional(inputs, 2), optional(inputs, 3)
    scales, sizes = [1.0] * rank, list(x.shape)
    if sizes_in is not None and sizes_in.numel():
        wanted = [int(v) for v in sizes_in.numpy().reshape(-1)]
        for axis, size in zip(axes, wanted):
            scales[axis] = size / x.shape[axis]
            sizes[axis] = size
        policy = attributes.get("keep_aspect_ratio_policy", "stretch")
        if policy != "stretch":
            pick = {"not_larger": min, "not_smaller": max}.get(policy)
            if pick is None:
                raise ValueError(f"Resize: unknown keep_aspect_ratio_policy {policy!r}")
            scale = pick(scales[a] for a in axes)
            for axis in axes:
                scales[axis] = scale
                sizes[axis] = int(scale * x.shape[axis] + 0.5)
    elif scales_in is not None and scales_in.numel():
        for axis, scale in zip(axes, scales_in.numpy().reshape(-1)):
            scales[axis] = float(scale)
            sizes[axis] = int(float(scale) * x.shape[axis])
    else:
        raise ValueError("Resize: neither scales nor sizes is given")
    return axes, scales, sizes


@onnx_op("Resize")
def _resize(inputs, attributes, context):
    x = inputs[0]
    axes, scales, sizes = _scales_and_sizes(x, inputs, attributes)
    check_size(sizes, x.dtype, context, "Resize")
    given_roi = optional(inputs, 1)
    roi = given_roi.numpy().reshape(-1).astype(np.float64) if given_roi is not None and \
        given_roi.numel() else None
    coefficients = _coefficient_function(attributes)
    result, outside_any = x, np.zeros(sizes, np.bool_)
    for position, axis in enumerate(axes):
        axis_roi = None
        if roi is not None:
            half = len(roi) // 2
            axis_roi = (roi[position], roi[half + position]) if half == len(axes) else \
                (roi[axis], roi[half + axis])
        if math.isclose(scales[axis], 1.0) and sizes[axis] == x.shape[axis] and \
                (axis_roi is None or axis_roi == (0.0, 1.0)):
            continue
        matrix, outside = _axis_matrix(x.shape[axis], sizes[axis], scales[axis], coefficients,
                                       attributes, axis_roi)
        result = _along_axis(result, matrix, axis)
        if outside is not None:
            outside_any |= outside.reshape((1,) * axis + (-1,) + (1,) * (x.ndim - axis - 1))
    if outside_any.any():
        value = attributes.get("extrapolation_value", 0.0)
        result = shape.where(host_result(outside_any, x), value, result)
    return result


def _along_axis(x, matrix, axis):
    """y = W applied along ``axis`` of x."""
    if x.dtype.kind != "f":
        moved = np.moveaxis(x.numpy().astype(np.float64), axis, -1) @ matrix.T
        info = np.iinfo(x.dtype)
        rounded = np.clip(np.rint(np.moveaxis(moved, -1, axis)), info.min, info.max)
        return host_result(rounded.astype(x.dtype), x)
    order = tuple(i for i in range(x.ndim) if i != axis) + (axis,)
    moved = linalg.matmul(shape.permute(x, order), host_result(matrix.T.astype(x.dtype), x))
    inverse = list(range(x.ndim - 1))
    inverse.insert(axis, x.ndim - 1)
    return shape.permute(moved, tuple(inverse))
