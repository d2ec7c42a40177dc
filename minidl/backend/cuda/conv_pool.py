"""im2col/col2im and 2-D pooling, one thread per output element.

Every kernel here is a gather: a thread computes one output element from the inputs that feed
it, so no two threads write the same address and no atomics are needed. The adjoints (col2im,
the pooling backward passes) are written the same way, from the input's side: a pixel loops over
the kernel taps that could have read it and sums their gradients in a fixed order, the order the
reference accumulates them in. Results are therefore deterministic, and equal the reference
wherever the additions are exact. Max pooling's backward gathers too, given the windows its
forward pass recorded; an argmax from elsewhere is the exception, explained there.

Shapes and sizes are worked out on the host with the reference's own functions
(:func:`~minidl.backend.reference.pool.pool_output_size`, PyTorch's rules).
"""

from __future__ import annotations

import numpy as np
from numba import cuda, float64

from ..conv_arithmetic import conv_output_size
from ..reference.pool import pool_output_size
from .device import DeviceArray, empty, launch


@cuda.jit
def _im2col(count, x, cols, c, h, w, kh, kw, sh, sw, ph, pw, dh, dw, n, oh, ow):
    # cols[(ci, i, j), (ni, y, z)] = x[ni, ci, y*sh - ph + i*dh, z*sw - pw + j*dw] (0 outside)
    width = n * oh * ow
    for e in range(cuda.grid(1), count, cuda.gridsize(1)):
        row, column = e // width, e % width
        ci, tap = row // (kh * kw), row % (kh * kw)
        i, j = tap // kw, tap % kw
        ni, pixel = column // (oh * ow), column % (oh * ow)
        y = (pixel // ow) * sh - ph + i * dh
        z = (pixel % ow) * sw - pw + j * dw
        if 0 <= y < h and 0 <= z < w:
            cols[e] = x[((ni * c + ci) * h + y) * w + z]
        else:
            cols[e] = 0


@cuda.jit
def _col2im(count, cols, x, c, h, w, kh, kw, sh, sw, ph, pw, dh, dw, n, oh, ow):
    width = n * oh * ow
    for e in range(cuda.grid(1), count, cuda.gridsize(1)):
        z = e % w
        y = (e // w) % h
        ci = (e // (w * h)) % c
        ni = e // (w * h * c)
        total = cols[0] * 0
        for i in range(kh):
            ty = y + ph - i * dh          # = oy * sh for the window row oy that read (y, z)
            if ty < 0 or ty % sh != 0 or ty // sh >= oh:
                continue
            oy = ty // sh
            for j in range(kw):
                tz = z + pw - j * dw
                if tz < 0 or tz % sw != 0 or tz // sw >= ow:
                    continue
                row = (ci * kh + i) * kw + j
                total += cols[row * width + (ni * oh + oy) * ow + tz // sw]
        x[e] = total


def _conv_geometry(x_shape, kernel_size, stride, padding, dilation):
    n, c, h, w = x_shape
    oh = conv_output_size(h, kernel_size[0], stride[0], padding[0], dilation[0])
    ow = conv_output_size(w, kernel_size[1], stride[1], padding[1], dilation[1])
    return (c, h, w, kernel_size[0], kernel_size[1], stride[0], stride[1], padding[0],
            padding[1], dilation[0], dilation[1], n, oh, ow)


def im2col(x, kernel_size, stride, padding, dilation):
    geometry = _conv_geometry(x.shape, kernel_size, stride, padding, dilation)
    c, kh, kw, n, oh, ow = geometry[0], geometry[3], geometry[4], *geometry[11:]
    cols = empty((c * kh * kw, n * oh * ow), x.dtype)
    if cols.size:
        blocks, threads = launch(cols.size)
        _im2col[blocks, threads](cols.size, x.buffer, cols.buffer, *geometry)
    return cols


def col2im(cols, x_shape, kernel_size, stride, padding, dilation):
    geometry = _conv_geometry(tuple(x_shape), kernel_size, stride, padding, dilation)
    x = empty(tuple(x_shape), cols.dtype)
    if x.size:
        blocks, threads = launch(x.size)
        _col2im[blocks, threads](x.size, cols.buffer, x.buffer, *geometry)
    return x


# -- max pooling -----------------------------------------------------------------------------------

@cuda.jit
def _max_pool(count, x, out, argmax, h, w, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw, lowest):
    for e in range(cuda.grid(1), count, cuda.gridsize(1)):
        plane = e // (oh * ow)
        oy, oz = (e // ow) % oh, e % ow
        best = lowest
        best_at = -1
        for i in range(kh):
            y = oy * sh - ph + i * dh
            if y < 0 or y >= h:
                continue
            for j in range(kw):
                z = oz * sw - pw + j * dw
                if z < 0 or z >= w:
                    continue
                value = x[plane * h * w + y * w + z]
                # The first in-image tap claims the window; later ones win only when strictly
                # larger, or nan (nan propagates, as in PyTorch).
                if best_at < 0 or value > best or value != value:
                    best, best_at = value, y * w + z
        out[e] = best
        argmax[e] = best_at


@cuda.jit
def _max_pool_backward(count, grad, argmax, dx64, plane_size, windows_per_plane):
    for e in range(cuda.grid(1), count, cuda.gridsize(1)):
        position = argmax[e]
        if position >= 0:  # -1: a window entirely in the padding has no input cell
            cuda.atomic.add(dx64, (e // windows_per_plane) * plane_size + position, grad[e])


@cuda.jit
def _max_pool_backward_disjoint(count, grad, argmax, dx, h, w, oh, ow, kh, kw, sh, sw, ph, pw,
                                dh, dw):
    # Windows that do not overlap: an input cell lies in at most one window, found by
    # division, and takes that window's gradient if it won it, else 0.
    for e in range(cuda.grid(1), count, cuda.gridsize(1)):
        plane, y, z = e // (h * w), (e // w) % h, e % w
        value = grad[0] * 0
        oy, oz = (y + ph) // sh, (z + pw) // sw
        iy, iz = y + ph - oy * sh, z + pw - oz * sw  # the cell's offset inside that window
        if (oy < oh and oz < ow and iy % dh == 0 and iy // dh < kh and iz % dw == 0
                and iz // dw < kw):
            window = plane * oh * ow + oy * ow + oz
            if argmax[window] == y * w + z:
                value = grad[window]
        dx[e] = value


@cuda.jit
def _max_pool_backward_gather(count, grad, argmax, dx, h, w, oh, ow, kh, kw, sh, sw, ph, pw,
                              dh, dw):
    # Each input cell gathers the gradients of the windows it won. The windows that can hold
    # row y are those with oy·sh - ph + i·dh = y for a tap i < kh (likewise for columns): at
    # most one when windows do not overlap, a few when they do. The sum runs in float64 in a
    # fixed order (taps, then columns) and is rounded once: deterministic, and the reference's
    # float64 sum of the same few terms.
    for e in range(cuda.grid(1), count, cuda.gridsize(1)):
        plane, y, z = e // (h * w), (e // w) % h, e % w
        cell = y * w + z
        total = float64(0.0)  # (a bare 0.0 would add in float32 on the simulator, NumPy's rule)
        for i in range(kh):
            ty = y + ph - i * dh
            if ty < 0 or ty % sh != 0 or ty // sh >= oh:
                continue
            for j in range(kw):
                tz = z + pw - j * dw
                if tz < 0 or tz % sw != 0 or tz // sw >= ow:
                    continue
                window = plane * oh * ow + (ty // sh) * ow + tz // sw
                if argmax[window] == cell:
                    total += grad[window]
        dx[e] = total


class PoolArgmax(DeviceArray):
    """:func:`max_pool2d_forward`'s argmax, remembering the windows' geometry, so the backward
    pass can gather each cell's gradient instead of adding window gradients atomically."""

    __slots__ = ("geometry",)


def _disjoint(kernel_size, stride, dilation) -> bool:
    """Whether consecutive windows never share a cell (stride >= the dilated window) on both
    axes: each cell then has at most one window, the common ``MaxPool2d(2)`` case."""
    return all(s >= (k - 1) * d + 1 for k, s, d in zip(kernel_size, stride, dilation))


def max_pool2d_forward(x, kernel_size, stride, padding, dilation, ceil_mode):
    n, c, h, w = x.shape
    oh = pool_output_size(h, kernel_size[0], stride[0], padding[0], dilation[0], ceil_mode)
    ow = pool_output_size(w, kernel_size[1], stride[1], padding[1], dilation[1], ceil_mode)
    out = empty((n, c, oh, ow), x.dtype)
    positions = empty((n, c, oh, ow), np.int64)
    argmax = PoolArgmax(positions.buffer, positions.shape, positions.dtype)
    argmax.geometry = tuple(kernel_size) + tuple(stride) + tuple(padding) + tuple(dilation)
    if out.size:
        blocks, threads = launch(out.size)
        lowest = x.dtype.type(-np.inf) if x.dtype.kind == "f" else np.iinfo(x.dtype).min
        _max_pool[blocks, threads](out.size, x.buffer, out.buffer, argmax.buffer, h, w, oh, ow,
                                   *kernel_size, *stride, *padding, *dilation, lowest)
    return out, argmax


def max_pool2d_backward(grad_out, argmax, x_shape):
    """Each window's gradient goes to the cell that won it. With the windows' geometry (an
    argmax from :func:`max_pool2d_forward`) every cell gathers its windows' gradients: one
    launch, no atomics, deterministic. An argmax without it (made elsewhere, say copied from the
    host) is scattered instead: atomic adds into float64, where the few float32 terms a cell
    receives add up exactly whatever order the threads arrive in, rounded once (the
    reference's float64 bincount)."""
    from .movement import astype, zeros
    n, c, h, w = x_shape
    oh, ow = grad_out.shape[2:]
    geometry = getattr(argmax, "geometry", None)
    if geometry is not None:
        dx = empty(tuple(x_shape), grad_out.dtype)
        if dx.size:
            # Without overlap a cell finds its one window directly, with less integer work
            # than trying every tap.
            kernel_size, stride, dilation = geometry[0:2], geometry[2:4], geometry[6:8]
            gather = _max_pool_backward_disjoint if _disjoint(kernel_size, stride, dilation) \
                else _max_pool_backward_gather
            blocks, threads = launch(dx.size)
            gather[blocks, threads](dx.size, grad_out.buffer, argmax.buffer, dx.buffer, h, w, oh,
                                    ow, *geometry)
        return dx
    dx64 = zeros(tuple(x_shape), np.float64)
    if grad_out.size:
        blocks, threads = launch(grad_out.size)
        _max_pool_backward[blocks, threads](grad_out.size, grad_out.buffer, argmax.buffer,
                                            dx64.buffer, h * w, oh * ow)
    return astype(dx64, grad_out.dtype)


# -- average pooling -------------------------------------------------------------------------------

@cuda.jit(device=True)
def _divisor(start, kernel, size, padding, count_include_pad):
    end = min(start + kernel, size + padding)
    if count_include_pad:
        return end - start
    return min(end, size) - max(start, 0)


@cuda.jit
def _avg_pool(count, x, out, h, w, oh, ow, kh, kw, sh, sw, ph, pw, include_pad):
    for e in range(cuda.grid(1), count, cuda.gridsize(1)):
        plane = e // (oh * ow)
        oy, oz = (e // ow) % oh, e % ow
        total = x[0] * 0
        for i in range(kh):
            y = oy * sh - ph + i
            for j in range(kw):
                z = oz * sw - pw + j
                if 0 <= y < h and 0 <= z < w:
                    total += x[plane * h * w + y * w + z]
        divisor = _divisor(oy * sh - ph, kh, h, ph, include_pad) * \
            _divisor(oz * sw - pw, kw, w, pw, include_pad)
        out[e] = total / divisor


@cuda.jit
def _avg_pool_backward(count, grad, dx, h, w, oh, ow, kh, kw, sh, sw, ph, pw, include_pad):
    for e in range(cuda.grid(1), count, cuda.gridsize(1)):
        plane, y, z = e // (h * w), (e // w) % h, e % w
        total = grad[0] * 0
        for i in range(kh):
            ty = y + ph - i
            if ty < 0 or ty % sh != 0 or ty // sh >= oh:
                continue
            oy = ty // sh
            for j in range(kw):
                tz = z + pw - j
                if tz < 0 or tz % sw != 0 or tz // sw >= ow:
                    continue
                oz = tz // sw
                divisor = _divisor(oy * sh - ph, kh, h, ph, include_pad) * \
                    _divisor(oz * sw - pw, kw, w, pw, include_pad)
                total += grad[plane * oh * ow + oy * ow + oz] / divisor
        dx[e] = total


def _avg_sizes(x_shape, kernel_size, stride, padding, ceil_mode):
    h, w = x_shape[2:]
    return (pool_output_size(h, kernel_size[0], stride[0], padding[0], 1, ceil_mode),
            pool_output_size(w, kernel_size[1], stride[1], padding[1], 1, ceil_mode))


def avg_pool2d_forward(x, kernel_size, stride, padding, ceil_mode, count_include_pad):
    n, c, h, w = x.shape
    oh, ow = _avg_sizes(x.shape, kernel_size, stride, padding, ceil_mode)
    out = empty((n, c, oh, ow), x.dtype)
    if out.size:
        blocks, threads = launch(out.size)
        _avg_pool[blocks, threads](out.size, x.buffer, out.buffer, h, w, oh, ow, *kernel_size,
                                   *stride, *padding, bool(count_include_pad))
    return out


def avg_pool2d_backward(grad_out, x_shape, kernel_size, stride, padding, ceil_mode,
                        count_include_pad):
    n, c, h, w = x_shape
    oh, ow = _avg_sizes(x_shape, kernel_size, stride, padding, ceil_mode)
    dx = empty(tuple(x_shape), grad_out.dtype)
    if dx.size:
        blocks, threads = launch(dx.size)
        _avg_pool_backward[blocks, threads](dx.size, grad_out.buffer, dx.buffer, h, w, oh, ow,
                                            *kernel_size, *stride, *padding,
                                            bool(count_include_pad))
    return dx
