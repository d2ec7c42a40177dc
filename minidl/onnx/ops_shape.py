"""ONNX operators that create, index and rearrange tensors.

Everything that moves float data is built from minidl's differentiable ``getitem``, ``cat``,
``reshape``, ``permute``, ``expand`` and ``where``, so gradients flow through an imported
graph's Pad, Tile, Split, TopK or ScatterND as through any layer. The index arithmetic (which
element goes where) is plain NumPy on the host: it is data about positions, not values, and has
no gradient. Sizes that come from the file or the input pass :func:`.registry.check_size` before
anything is allocated.
"""

from __future__ import annotations

import math

import numpy as np

from ..ops import elementwise as ew, linalg, shape
from .registry import (ONNX_OPS, check_size, host_result, index_in_range, onnx_op, optional,
                       scalar_of, values_of)

# -- creating -------------------------------------------------------------------------------------


@onnx_op("ConstantOfShape")
def _constant_of_shape(inputs, attributes, context):
    value = attributes.get("value")
    dtype, fill = (np.dtype(value["dtype"]), value["values"][0]) if value else \
        (np.dtype(np.float32), 0.0)
    if dtype.kind not in "biuf":  # a saved graph is data: only numeric element types
        raise TypeError(f"ConstantOfShape: value of type {dtype}")
    dims = check_size(values_of(inputs[0]), dtype, context, "ConstantOfShape")
    return host_result(np.full(dims, fill, dtype), inputs[0])


@onnx_op("Range")
def _range(inputs, attributes, context):
    start, limit, delta = (scalar_of(t) for t in inputs)
    if delta == 0:
        raise ValueError("Range: delta must not be 0")
    count = max(math.ceil((limit - start) / delta), 0)
    dtype = inputs[0].dtype
    check_size((count,), dtype, context, "Range")
    return host_result((start + np.arange(count) * delta).astype(dtype), inputs[0])


@onnx_op("EyeLike")
def _eye_like(inputs, attributes, context):
    x = inputs[0]
    dtype = _dtype_attribute(attributes, x.dtype)
    return host_result(np.eye(x.shape[0], x.shape[1], attributes.get("k", 0), dtype), x)


@onnx_op("OneHot")
def _one_hot(inputs, attributes, context):
    indices, depth, values = inputs
    depth = int(scalar_of(depth))
    index = indices.numpy().astype(np.int64)
    index = np.where(index < 0, index + depth, index)
    hot = (index[..., None] == np.arange(depth))
    off, on = values.numpy()
    result = np.where(hot, on, off).astype(values.dtype)
    return host_result(np.moveaxis(result, -1, attributes.get("axis", -1)), values)


def _dtype_attribute(attributes, default):
    from .dtypes import numpy_dtype
    return numpy_dtype(attributes["dtype"]) if "dtype" in attributes else default


# -- gathering and scattering -------------------------------------------------------------------

def take_along_axis(x, index: np.ndarray, axis: int):
    """x's elements at ``index`` along ``axis`` (NumPy's take_along_axis), differentiably."""
    grid = list(np.indices(index.shape, sparse=True))
    grid[axis] = index
    return shape.getitem(x, tuple(grid))


@onnx_op("GatherElements")
def _gather_elements(inputs, attributes, context):
    data, indices = inputs
    axis = attributes.get("axis", 0) % data.ndim
    index = index_in_range(indices.numpy(), data.shape[axis], "GatherElements")
    return take_along_axis(data, index, axis)


@onnx_op("GatherND")
def _gather_nd(inputs, attributes, context):
    data, indices = inputs
    batch = attributes.get("batch_dims", 0)
    index = indices.numpy().astype(np.int64)
    depth = index.shape[-1]
    for axis in range(depth):
        index[..., axis] = index_in_range(index[..., axis], data.shape[batch + axis], "GatherND")
    # The leading batch axes pair up one to one: index them with aranges of their own.
    leading = [np.arange(n).reshape((-1,) + (1,) * (index.ndim - 2 - i))
               for i, n in enumerate(index.shape[:batch])]
    parts = tuple(leading) + tuple(index[..., axis] for axis in range(depth))
    return shape.getitem(data, parts)


_SCATTER_REDUCTIONS = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}


def _scatter(data, updates, positions: np.ndarray, reduction: str):
    """data with the updates written at flat ``positions`` (one per element of ``updates``).

    Without a reduction the result is where(written, updates moved into place, data): both
    data and updates get gradients. With one, the elements combine on the host (no gradient).
    """
    positions = positions.reshape(-1)
    if reduction != "none":
        result = data.numpy().copy().reshape(-1)
        _SCATTER_REDUCTIONS[reduction].at(result, positions, updates.numpy().reshape(-1))
        return host_result(result.reshape(data.shape), data)
    source = np.full(math.prod(data.shape), -1, np.int64)
    source[positions] = np.arange(positions.size)  # a repeated position keeps its last write
    written = source >= 0
    if data.dtype.kind != "f":
        result = data.numpy().copy().reshape(-1)
        result[written] = updates.numpy().reshape(-1)[source[written]]
        return host_result(result.reshape(data.shape), data)
    moved = shape.getitem(shape.reshape(updates, (-1,)), (np.where(written, source, 0),))
    mask = host_result(written.reshape(data.shape), data)
    return shape.where(mask, shape.reshape(moved, data.shape), data)


@onnx_op("ScatterElements", "Scatter")
def _scatter_elements(inputs, attributes, context):
    data, indices, updates = inputs
    axis = attributes.get("axis", 0) % data.ndim
    index = index_in_range(indices.numpy(), data.shape[axis], "ScatterElements")
    grid = list(np.indices(index.shape))
    grid[axis] = index
    positions = np.ravel_multi_index(tuple(grid), data.shape)
    return _scatter(data, updates, positions, attributes.get("reduction", "none"))


@onnx_op("ScatterND")
def _scatter_nd(inputs, attributes, context):
    data, indices, updates = inputs
    index = indices.numpy().astype(np.int64)
    depth = index.shape[-1]
    for axis in range(depth):
        index[..., axis] = index_in_range(index[..., axis], data.shape[axis], "ScatterND")
    rows = np.ravel_multi_index(tuple(np.moveaxis(index, -1, 0)), data.shape[:depth])
    inner = math.prod(data.shape[depth:])
    positions = rows[..., None] * inner + np.arange(inner)
    return _scatter(data, updates, positions, attributes.get("reduction", "none"))


@onnx_op("NonZero")
def _non_zero(inputs, attributes, context):
    x = inputs[0]
    return host_result(np.array(np.nonzero(x.numpy()), np.int64).reshape(x.ndim, -1), x)


@onnx_op("Compress")
def _compress(inputs, attributes, context):
    x, condition = inputs
    chosen = np.nonzero(condition.numpy())[0]
    if "axis" not in attributes:
        return shape.getitem(shape.reshape(x, (-1,)), (chosen,))
    axis = attributes["axis"] % x.ndim
    return shape.getitem(x, (slice(None),) * axis + (chosen,))


# -- sorting and accumulating ---------------------------------------------------------------------

@onnx_op("TopK")
def _top_k(inputs, attributes, context):
    x, k = inputs[0], int(scalar_of(inputs[1]))
    axis = attributes.get("axis", -1) % x.ndim
    if not 0 <= k <= x.shape[axis]:
        raise ValueError(f"TopK: k={k} for an axis of size {x.shape[axis]}")
    values = x.numpy()
    # Ties go to the smaller index: a stable sort of keys that put the wanted end first.
    if attributes.get("largest", 1):
        keys = np.invert(values) if values.dtype.kind in "ub" else -values
    else:
        keys = values
    order = np.argsort(keys, axis=axis, kind="stable")
    index = np.take(order, np.arange(k), axis=axis)
    return take_along_axis(x, index, axis), host_result(index.astype(np.int64), x)


@onnx_op("CumSum")
def _cumsum(inputs, attributes, context):
    x, axis = inputs[0], int(scalar_of(inputs[1])) % inputs[0].ndim
    exclusive, reverse = attributes.get("exclusive", 0), attributes.get("reverse", 0)
    n = x.shape[axis]
    # y_j = Σ_i x_i·T_ij with T the triangle of positions summed into j: a matrix product,
    # so the gradient is the product with Tᵀ.
    rows, columns = np.indices((n, n))
    triangle = (rows >= columns) if reverse else (rows <= columns)
    if exclusive:
        triangle &= rows != columns
    if x.dtype.kind != "f":
        moved = np.moveaxis(x.numpy(), axis, -1)
        total = np.moveaxis(moved @ triangle.astype(x.dtype), -1, axis)
        return host_result(total.astype(x.dtype), x)
    moved = shape.permute(x, tuple(i for i in range(x.ndim) if i != axis) + (axis,))
    total = linalg.matmul(moved, host_result(triangle.astype(x.dtype), x))
    inverse = list(range(x.ndim - 1))
    inverse.insert(axis, x.ndim - 1)
    return shape.permute(total, tuple(inverse))


@onnx_op("CumProd")
def _cumprod(inputs, attributes, context):
    """Running products along an axis (``exclusive`` starts at 1, ``reverse`` from the end),
    as a chain of products so that the gradient is right even where an element is 0."""
    x, axis = inputs[0], int(scalar_of(inputs[1])) % inputs[0].ndim
    exclusive, reverse = attributes.get("exclusive", 0), attributes.get("reverse", 0)
    if x.dtype.kind != "f":
        values = np.flip(x.numpy(), axis) if reverse else x.numpy()
        running = np.cumprod(values, axis=axis)
        if exclusive:
            ones = np.ones_like(np.take(running, [0], axis=axis))
            running = np.concatenate([ones, np.delete(running, -1, axis=axis)], axis=axis)
        return host_result((np.flip(running, axis) if reverse else running).astype(x.dtype), x)
    n = x.shape[axis]
    order = range(n - 1, -1, -1) if reverse else range(n)
    pieces, running = {}, None
    for i in order:
        element = shape.getitem(x, (slice(None),) * axis + (slice(i, i + 1),))
        if exclusive:
            pieces[i] = running if running is not None else \
                host_result(np.ones(element.shape, x.dtype), x)
            running = element if running is None else ew.mul(running, element)
        else:
            running = element if running is None else ew.mul(running, element)
            pieces[i] = running
    return shape.cat([pieces[i] for i in range(n)], axis=axis)


# -- rearranging -----------------------------------------------------------------------------------

@onnx_op("Split")
def _split(inputs, attributes, context):
    x = inputs[0]
    axis = attributes.get("axis", 0) % x.ndim
    size = x.shape[axis]
    given = optional(inputs, 1)
    if given is not None or "split" in attributes:
        sizes = values_of(given) if given is not None else list(attributes["split"])
    else:
        parts = attributes.get("num_outputs", context.outputs)
        step = math.ceil(size / parts)  # the last piece is smaller when the size does not divide
        sizes = [min(step, size - i * step) for i in range(parts)]
    if sum(sizes) != size or any(n < 0 for n in sizes):
        raise ValueError(f"Split: sizes {sizes} do not add up to the axis size {size}")
    bounds = np.cumsum([0] + sizes)
    return tuple(shape.getitem(x, (slice(None),) * axis + (slice(int(a), int(b)),))
                 for a, b in zip(bounds[:-1], bounds[1:]))


@onnx_op("Tile")
def _tile(inputs, attributes, context):
    x, repeats = inputs[0], values_of(inputs[1])
    if len(repeats) != x.ndim or min(repeats, default=1) < 0:
        raise ValueError(f"Tile: repeats {repeats} for a tensor of shape {x.shape}")
    target = [r * n for r, n in zip(repeats, x.shape)]
    check_size(target, x.dtype, context, "Tile")
    # (n₀, n₁, …) → (1, n₀, 1, n₁, …) → expand to (r₀, n₀, r₁, n₁, …) → merge pairs.
    interleaved = shape.reshape(x, tuple(v for n in x.shape for v in (1, n)))
    expanded = shape.expand(interleaved, tuple(v for r, n in zip(repeats, x.shape)
                                               for v in (r, n)))
    return shape.reshape(expanded, tuple(target))


def pad_constant(x, begins, ends, value=0.0):
    """x with ``begins[i]``/``ends[i]`` elements of ``value`` added before/after axis i;
    negative amounts crop instead."""
    crop = tuple(slice(max(-b, 0), n - max(-e, 0)) for b, e, n in zip(begins, ends, x.shape))
    if any(b < 0 or e < 0 for b, e in zip(begins, ends)):
        x = shape.getitem(x, crop)
    for axis, (before, after) in enumerate(zip(begins, ends)):
        pieces = []
        for amount in (before, after):
            dims = list(x.shape)
            dims[axis] = max(amount, 0)
            pieces.append(host_result(np.full(dims, value, x.dtype), x) if amount > 0 else None)
        if pieces[0] is not None or pieces[1] is not None:
            x = shape.cat([p for p in (pieces[0], x, pieces[1]) if p is not None], axis=axis)
    return x


_NUMPY_PAD_MODES = {"reflect": "reflect", "edge": "edge", "wrap": "wrap"}


@onnx_op("Pad")
def _pad(inputs, attributes, context):
    x = inputs[0]
    pads = values_of(inputs[1]) if optional(inputs, 1) is not None else attributes["pads"]
    given_value = optional(inputs, 2)
    value = scalar_of(given_value) if given_value is not None else attributes.get("value", 0.0)
    given_axes = optional(inputs, 3)
    axes = [a % x.ndim for a in values_of(given_axes)] if given_axes is not None else \
        list(range(x.ndim))
    if len(pads) != 2 * len(axes):
        raise ValueError(f"Pad: {len(pads)} pads for {len(axes)} axes")
    begins, ends = [0] * x.ndim, [0] * x.ndim
    for i, axis in enumerate(axes):
        begins[axis], ends[axis] = pads[i], pads[i + len(axes)]
    check_size([n + b + e for n, b, e in zip(x.shape, begins, ends)], x.dtype, context, "Pad")
    mode = attributes.get("mode", "constant")
    if mode == "constant":
        return pad_constant(x, begins, ends, value)
    if mode not in _NUMPY_PAD_MODES:
        raise ValueError(f"Pad: unknown mode {mode!r}")
    # Crop the negative pads first, then read every output position's source index.
    x = pad_constant(x, [min(b, 0) for b in begins], [min(e, 0) for e in ends])
    for axis in range(x.ndim):
        before, after = max(begins[axis], 0), max(ends[axis], 0)
        if before or after:
            source = np.pad(np.arange(x.shape[axis]), (before, after),
                            mode=_NUMPY_PAD_MODES[mode])
            x = shape.getitem(x, (slice(None),) * axis + (source,))
    return x


@onnx_op("DepthToSpace")
def _depth_to_space(inputs, attributes, context):
    x, b = inputs[0], attributes["blocksize"]
    n, c, h, w = x.shape
    if attributes.get("mode", "DCR") == "DCR":  # depth, column, row: the block is outermost
        blocks = shape.reshape(x, (n, b, b, c // (b * b), h, w))
        moved = shape.permute(blocks, (0, 3, 4, 1, 5, 2))
    else:                                       # column, row, depth
        blocks = shape.reshape(x, (n, c // (b * b), b, b, h, w))
        moved = shape.permute(blocks, (0, 1, 4, 2, 5, 3))
    return shape.reshape(moved, (n, c // (b * b), h * b, w * b))


@onnx_op("SpaceToDepth")
def _space_to_depth(inputs, attributes, context):
    # The inverse of DepthToSpace in the same mode: blocks of the image become channels.
    x, b = inputs[0], attributes["blocksize"]
    n, c, h, w = x.shape
    blocks = shape.reshape(x, (n, c, h // b, b, w // b, b))
    order = (0, 3, 5, 1, 2, 4) if attributes.get("mode", "DCR") == "DCR" else (0, 1, 3, 5, 2, 4)
    return shape.reshape(shape.permute(blocks, order), (n, c * b * b, h // b, w // b))


@onnx_op("CenterCropPad")
def _center_crop_pad(inputs, attributes, context):
    """Crop (a centred window) or pad with zeros (centred) each listed axis to a size."""
    x, sizes = inputs[0], values_of(inputs[1])
    axes = [a % x.ndim for a in attributes.get("axes", range(x.ndim))]
    begins, ends = [0] * x.ndim, [0] * x.ndim
    for axis, size in zip(axes, sizes):
        difference = size - x.shape[axis]
        if difference < 0:                  # crop: the window starts ⌊excess/2⌋ in
            begins[axis] = -(-difference // 2)
        else:                               # pad: the input starts ⌊room/2⌋ in
            begins[axis] = difference // 2
        ends[axis] = difference - begins[axis]
    check_size([n + b + e for n, b, e in zip(x.shape, begins, ends)], x.dtype, context,
               "CenterCropPad")
    return pad_constant(x, begins, ends)


@onnx_op("ReverseSequence")
def _reverse_sequence(inputs, attributes, context):
    """Reverse the first length[b] steps of each sequence b, leaving the rest in place."""
    x, lengths = inputs[0], inputs[1].numpy().astype(np.int64)
    time_axis, batch_axis = attributes.get("time_axis", 0), attributes.get("batch_axis", 1)
    steps = x.shape[time_axis]
    t = np.arange(steps)[:, None]
    source = np.where(t < lengths[None, :], lengths[None, :] - 1 - t, t)   # (time, batch)
    index = [np.arange(n).reshape([-1 if i == axis else 1 for i in range(x.ndim)])
             for axis, n in enumerate(x.shape)]
    shaped = [1] * x.ndim
    shaped[time_axis], shaped[batch_axis] = steps, x.shape[batch_axis]
    if time_axis > batch_axis:
        source = source.T
    index[time_axis] = source.reshape(shaped)
    return shape.getitem(x, tuple(index))


@onnx_op("Unique")
def _unique(inputs, attributes, context):
    """Distinct values (or slices along ``axis``), sorted or in order of first appearance,
    with where each first appears, where each element went, and how often each occurs."""
    x = inputs[0]
    axis = attributes.get("axis")
    values = x.numpy()
    unique, first, inverse, counts = np.unique(values, return_index=True, return_inverse=True,
                                               return_counts=True, axis=axis)
    if not attributes.get("sorted", 1):
        order = np.argsort(first, kind="stable")
        rank = np.empty_like(order)
        rank[order] = np.arange(order.size)
        unique = np.take(unique, order, axis=0 if axis is None else axis)
        first, counts, inverse = first[order], counts[order], rank[inverse.reshape(-1)]
    results = (unique, first, inverse.reshape(-1), counts)
    return tuple(host_result(np.asarray(r, x.dtype if i == 0 else np.int64), x)
                 for i, r in enumerate(results))[:max(context.outputs, 1)]


@onnx_op("Trilu")
def _trilu(inputs, attributes, context):
    x = inputs[0]
    given = optional(inputs, 1)
    k = int(scalar_of(given)) if given is not None else 0
    ones = np.ones(x.shape[-2:], np.bool_)
    keep = np.triu(ones, k) if attributes.get("upper", 1) else np.tril(ones, k)
    if x.dtype.kind != "f":
        return host_result(np.where(keep, x.numpy(), 0).astype(x.dtype), x)
    return shape.where(host_result(keep, x), x, 0.0)


ONNX_OPS["Trilu"] = _trilu
