"""ONNX ``GridSample``: read an input at the positions a grid gives, with interpolation.

The grid holds, for every output position, a point in normalised coordinates (−1 … 1 spans
the input; the last axis lists them x first, i.e. the last spatial axis first). Each point is
mapped to pixel coordinates (``align_corners`` decides whether ±1 are the corner pixels'
centres or their outer edges), moved back inside by ``padding_mode`` (border: clamped;
reflection: mirrored at the edges) and read by ``mode``: the nearest pixel, the 2ᴰ linear
neighbours or the 4ᴰ cubic ones (Keys' kernel, a = −0.75), pixels outside the input counting
as 0 (zeros), the edge (border) or their mirror image (reflection).

The output is Σ weight · x[neighbour] over the neighbours: a differentiable gather of the input.
The weights are differentiable in the grid too (a spatial transformer learns its grid): the
map from a grid value to a pixel position is piecewise linear — an affine rescaling, then a
clamp or a mirror — so each position is written as slope · g + offset, slope and offset read
on the host, and the weights are built from that with minidl ops.
"""

from __future__ import annotations

import itertools

import numpy as np

from ..ops import elementwise as ew, linalg, shape
from .registry import host_result, onnx_op

_CUBIC_A = -0.75


def _reflect(x, low, high):
    """Mirror x at low and high until it lies between them (as many times as needed)."""
    span = high - low
    if span <= 0:
        return np.full_like(x, low)
    distance = np.where(x < low, low - x, x - high)
    flips = np.floor(distance / span)
    rest = distance - flips * span
    even = flips % 2 == 0
    below = np.where(even, low + rest, high - rest)
    above = np.where(even, high - rest, low + rest)
    return np.where(x < low, below, np.where(x > high, above, x))


def _cubic_weights(t):
    """Keys' kernel at distances t+1, t, 1−t, 2−t (neighbours floor−1 … floor+2)."""
    a = _CUBIC_A
    d = [t + 1, t, 1 - t, 2 - t]
    near = lambda s: ((a + 2) * s - (a + 3)) * s * s + 1                   # noqa: E731
    far = lambda s: ((a * s - 5 * a) * s + 8 * a) * s - 4 * a              # noqa: E731
    return [far(d[0]), near(d[1]), near(d[2]), far(d[3])]


def _neighbours(position, exact, size, mode, padding, low, high):
    """[(index, weight, valid)] for one axis: indices into the input, interpolation weights
    (Tensors, or a constant for nearest) and whether the pixel exists (outside pixels read 0
    with zeros padding). ``position`` is the differentiable position, ``exact`` its value."""
    if mode == "nearest":
        offsets, base = [0], exact.astype(np.int64)
        weights = [1.0]
    else:
        base = np.floor(exact).astype(np.int64)
        t = ew.sub(position, host_result(base.astype(position.dtype), position))
        if mode == "linear":
            offsets, weights = [0, 1], [ew.sub(1.0, t), t]
        else:
            offsets, weights = [-1, 0, 1, 2], _cubic_weights(t)
    result = []
    for offset, weight in zip(offsets, weights):
        index = base + offset
        if padding == "zeros":
            valid = (index >= 0) & (index < size)
        else:
            valid = np.ones(index.shape, np.bool_)
            if padding == "border":
                index = np.clip(index, 0, size - 1)
            else:
                index = _reflect(index.astype(np.float64), low, high).astype(np.int64)
        result.append((np.clip(index, 0, size - 1), weight, valid))
    return result


def _pixel_position(n, size, align, mode, padding):
    """(position, slope): where grid value n lands in pixels, and d position / d n."""
    slope = np.full(n.shape, (size - 1) / 2 if align else size / 2)
    position = (n + 1) / 2 * (size - 1) if align else ((n + 1) * size - 1) / 2
    if mode == "nearest":
        return np.rint(position), np.zeros(n.shape)
    low, high = (0.0, size - 1.0) if align else (-0.5, size - 0.5)
    outside = (position < low) | (position > high)
    if padding == "border":
        clamped = np.clip(position, 0, size - 1)
        slope = np.where(clamped != position, 0.0, slope)
        position = clamped
    elif padding == "reflection":
        mirrored = _reflect(position, low, high)
        # The first mirror reverses the direction, the next restores it, and so on: an even
        # number of further flips (see _reflect) leaves the slope reversed.
        span = high - low
        distance = np.where(position < low, low - position, position - high)
        flips = np.floor(distance / span) if span > 0 else np.zeros(n.shape)
        slope = np.where(outside & (flips % 2 == 0), -slope, slope)
        position = np.where(outside, mirrored, position)
    return position, slope


@onnx_op("GridSample")
def _grid_sample(inputs, attributes, context):
    x, grid = inputs
    mode = {"bilinear": "linear", "bicubic": "cubic"}.get(attributes.get("mode", "linear"),
                                                           attributes.get("mode", "linear"))
    padding = attributes.get("padding_mode", "zeros")
    align = bool(attributes.get("align_corners", 0))
    sizes = x.shape[2:]
    values = grid.numpy().astype(np.float64)
    depth = len(sizes)
    per_axis = []
    for axis, size in enumerate(sizes):
        component = depth - 1 - axis                 # the grid lists the last axis first
        n = values[..., component]
        exact, slope = _pixel_position(n, size, align, mode, padding)
        # position = slope · g + (exact − slope · n): exact in value, linear in the grid.
        g = shape.getitem(grid, (Ellipsis, component))
        position = ew.add(ew.mul(g, host_result(slope.astype(grid.dtype), grid)),
                          host_result((exact - slope * n).astype(grid.dtype), grid))
        low, high = (0.0, size - 1.0) if align else (-0.5, size - 0.5)
        per_axis.append(_neighbours(position, exact, size, mode, padding, low, high))
    batch = np.arange(x.shape[0]).reshape((-1,) + (1,) * (values.ndim - 2))
    total = None
    for combination in itertools.product(*per_axis):
        valid = np.logical_and.reduce([v for _, _, v in combination])
        weight = host_result(valid.astype(x.dtype), x)
        for _, factor, _ in combination:
            weight = weight if isinstance(factor, float) else ew.mul(weight, factor)
        # x[n, :, i₁, …, i_D]: the advanced indices come first, the channel axis last.
        picked = shape.getitem(x, (batch, slice(None)) + tuple(i for i, _, _ in combination))
        term = ew.mul(picked, shape.unsqueeze(weight, -1))
        total = term if total is None else ew.add(total, term)
    return shape.permute(total, (0, total.ndim - 1) + tuple(range(1, total.ndim - 1)))


@onnx_op("AffineGrid")
def _affine_grid(inputs, attributes, context):
    """The sampling grid of an affine map θ: each output position's normalised coordinates
    (x first), multiplied by θ (N, D, D+1) — the companion of GridSample in spatial
    transformers; θ gets gradients through the product."""
    theta, size = inputs[0], [int(v) for v in inputs[1].numpy().reshape(-1)]
    align = bool(attributes.get("align_corners", 0))
    spatial = size[2:]
    axes = []
    for length in spatial:
        steps = np.arange(length, dtype=np.float64)
        axes.append(np.linspace(-1, 1, length) if align else (2 * steps + 1) / length - 1)
    mesh = np.meshgrid(*axes, indexing="ij")                      # one array per axis, D..W
    base = np.stack(list(mesh)[::-1] + [np.ones(mesh[0].shape)], axis=-1)  # (…, x, y, [z,] 1)
    rows = host_result(base.reshape(-1, len(spatial) + 1).astype(theta.dtype), theta)
    grid = linalg.matmul(rows, shape.transpose(theta, -2, -1))         # (N, positions, D)
    return shape.reshape(grid, (size[0], *spatial, len(spatial)))
