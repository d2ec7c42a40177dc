"""Changing the spatial size of images: adaptive max pooling and upsampling (interpolation).

Both are written with indexing and arithmetic ops, so their gradients come from those ops'
rules: gathering rows with an index array scatters the gradient back onto them (adding where
several outputs read one input), and interpolation weights multiply the gradient as they
multiplied the values.

Which input cells an output cell reads follows PyTorch exactly:

* adaptive pooling: output cell i of n, over an axis of size s, covers
  [floor(i·s/n), ceil((i+1)·s/n));
* nearest: source index floor(i·scale), with scale = 1/scale_factor or in/out;
* bilinear (align_corners=False): source coordinate (i + 1/2)·scale - 1/2, clamped at 0, mixed
  from its two neighbours; align_corners=True maps the corner pixels onto each other instead,
  scale = (in - 1)/(out - 1).
"""

from __future__ import annotations

import math

import numpy as np

from ..autograd.tensor import Tensor
from .size_arguments import int_pair
from .pool import max_pool2d
from .reduction import amax, argmax
from .shape import cat, where


def adaptive_windows(size: int, out: int) -> list[tuple[int, int]]:
    """The [start, stop) input range of each of ``out`` adaptive-pooling cells over ``size``."""
    return [((i * size) // out, -(-((i + 1) * size) // out)) for i in range(out)]


def _adaptive_cells(x: Tensor, output_size) -> tuple[int, int]:
    if x.ndim != 4:
        raise ValueError(f"adaptive_max_pool2d: input must be 4-D (N, C, H, W), got {x.shape}")
    sizes = output_size if isinstance(output_size, (tuple, list)) else (output_size,) * 2
    out_h, out_w = (x.shape[2 + i] if s is None else s for i, s in enumerate(sizes))
    out_h, out_w = int_pair((out_h, out_w), "adaptive_max_pool2d", "output_size")
    if min(out_h, out_w) < 1:
        raise ValueError(f"adaptive_max_pool2d: output_size must be >= 1, got {output_size!r}")
    return out_h, out_w


def adaptive_max_pool2d(x: Tensor, output_size) -> Tensor:
    """Max pooling of x (N, C, H, W) to ``output_size`` cells (None keeps that axis)."""
    out_h, out_w = _adaptive_cells(x, output_size)
    h, w = x.shape[2:]
    if h % out_h == 0 and w % out_w == 0:  # equal windows: one ordinary pooling
        return max_pool2d(x, (h // out_h, w // out_w))
    # Windows of unequal sizes, gathered into (N, C, out_h, out_w, kh·kw) with short windows
    # padded by repeating their first cell. Each output reads the first largest cell of its
    # window (row by row, as max_pool2d and PyTorch do), or its last NaN (PyTorch's scan
    # replaces the maximum by every NaN it meets), through an index: its gradient goes to
    # that one cell, not split between tied cells (common after a ReLU).
    (rows, row_valid), (cols, col_valid) = _window_cells(h, out_h), _window_cells(w, out_w)
    n, c = x.shape[:2]
    windows = x[:, :, rows[:, :, None, None], cols[None, None, :, :]]  # N, C, oh, kh, ow, kw
    windows = windows.permute(0, 1, 2, 4, 3, 5).reshape(n, c, out_h, out_w, -1)
    # each slot's place in its window's scan, -1 for padding (never the last NaN)
    valid = row_valid[:, None, :, None] & col_valid[None, :, None, :]
    places = np.where(valid, np.arange(valid.shape[2] * valid.shape[3]).reshape(
        valid.shape[2:]), -1).reshape(out_h, out_w, -1)
    scanned = windows.detach()
    is_nan = scanned != scanned
    last_nan = argmax(where(is_nan, Tensor(places, device=x.device), -1), axis=4)
    pick = where(is_nan.any(dim=4), last_nan, argmax(scanned, axis=4))
    flat = windows.reshape(n * c * out_h * out_w, -1)
    return flat[np.arange(flat.shape[0]), pick.reshape(-1)].reshape(n, c, out_h, out_w)


def adaptive_max_pool2d_by_reductions(x: Tensor, output_size) -> Tensor:
    """The values of :func:`adaptive_max_pool2d` as ops ONNX has (MaxPool, or slices,
    ReduceMax and Concat), for export: a window is a rectangle, so its max is the max over
    rows of the max over columns, one reduction per output row and per output column. (Its
    gradient would split ties, so training uses the gather above.)"""
    out_h, out_w = _adaptive_cells(x, output_size)
    h, w = x.shape[2:]
    if h % out_h == 0 and w % out_w == 0:
        return max_pool2d(x, (h // out_h, w // out_w))
    rows = cat([amax(x[:, :, a:b, :], 2, True) for a, b in adaptive_windows(h, out_h)], axis=2)
    return cat([amax(rows[:, :, :, a:b], 3, True) for a, b in adaptive_windows(w, out_w)],
               axis=3)


def _window_cells(size: int, out: int) -> tuple[np.ndarray, np.ndarray]:
    """(out, widest window) input indices of each adaptive window, short windows padded with
    their first index (a repeat never wins over the first occurrence of a maximum), and
    which of them are the window's own."""
    windows = adaptive_windows(size, out)
    width = max(b - a for a, b in windows)
    offsets = np.arange(width)
    starts, stops = (np.array(ends)[:, None] for ends in zip(*windows))
    own = starts + offsets < stops
    return np.where(own, starts + offsets, starts), own


def _output_sizes(x: Tensor, size, scale_factor) -> tuple[list, list]:
    spatial = x.shape[2:]
    if (size is None) == (scale_factor is None):
        raise ValueError("interpolate: give exactly one of size and scale_factor")
    if size is not None:
        sizes = list(size) if isinstance(size, (tuple, list)) else [size] * len(spatial)
        if len(sizes) != len(spatial) or any(not isinstance(s, int) or s < 1 for s in sizes):
            raise ValueError(f"interpolate: size {size!r} must be {len(spatial)} ints >= 1")
        return sizes, [i / o for i, o in zip(spatial, sizes)]
    factors = list(scale_factor) if isinstance(scale_factor, (tuple, list)) \
        else [scale_factor] * len(spatial)
    if len(factors) != len(spatial) or any(not f > 0 for f in factors):
        raise ValueError(f"interpolate: scale_factor {scale_factor!r} must be {len(spatial)} "
                         f"numbers > 0")
    sizes = [int(math.floor(i * f)) for i, f in zip(spatial, factors)]
    if min(sizes) < 1:
        raise ValueError(f"interpolate: scale_factor {scale_factor!r} leaves an empty output")
    return sizes, [1.0 / f for f in factors]


def _take(x: Tensor, axis: int, indices: np.ndarray) -> Tensor:
    index = (slice(None),) * axis + (indices,)
    return x[index]


def _linear_along(x: Tensor, axis: int, size_in: int, size_out: int, scale: float,
                  align_corners: bool) -> Tensor:
    out = np.arange(size_out, dtype=np.float64)
    if align_corners:
        source = out * ((size_in - 1) / (size_out - 1) if size_out > 1 else 0.0)
    else:
        source = np.maximum((out + 0.5) * scale - 0.5, 0.0)
    low = np.minimum(np.floor(source).astype(np.int64), size_in - 1)
    high = np.minimum(low + 1, size_in - 1)
    shape = [1] * x.ndim
    shape[axis] = size_out
    weight_high = (source - low).astype(x.dtype).reshape(shape)
    # PyTorch mixes as (1 - λ)·low + λ·high; the same order of operations keeps results equal.
    weight_high = Tensor(weight_high, device=x.device)  # a constant of the sizes: one copy
    return _take(x, axis, low) * (1 - weight_high) + _take(x, axis, high) * weight_high


def interpolate(x: Tensor, size=None, scale_factor=None, mode: str = "nearest",
                align_corners: bool | None = None) -> Tensor:
    """Resize the spatial axes of x (N, C, L) or (N, C, H, W), as PyTorch's ``F.interpolate``:
    ``mode`` "nearest" (any rank) or "bilinear" (4-D)."""
    if x.ndim not in (3, 4):
        raise ValueError(f"interpolate: input must be 3-D or 4-D, got shape {x.shape}")
    sizes, scales = _output_sizes(x, size, scale_factor)
    if mode == "nearest":
        if align_corners is not None:
            raise ValueError("interpolate: align_corners only applies to mode='bilinear'")
        for i, (size_in, size_out, scale) in enumerate(zip(x.shape[2:], sizes, scales)):
            source = np.minimum(np.floor(np.arange(size_out) * scale).astype(np.int64),
                                size_in - 1)
            x = _take(x, 2 + i, source)
        return x
    if mode == "bilinear":
        if x.ndim != 4:
            raise ValueError(f"interpolate: bilinear needs a 4-D input, got shape {x.shape}")
        # along the width first, then the height: PyTorch's order of the products, which
        # decides where 0·inf makes a NaN when the input holds infinities
        for i, (size_in, size_out, scale) in reversed(list(enumerate(zip(x.shape[2:], sizes,
                                                                          scales)))):
            x = _linear_along(x, 2 + i, size_in, size_out, scale, bool(align_corners))
        return x
    raise ValueError(f"interpolate: mode must be 'nearest' or 'bilinear', got {mode!r}")
