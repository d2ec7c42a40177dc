"""im2col / col2im as Numba kernels (same names and meaning as :mod:`minidl.backend.reference.conv`).

NumPy can only build im2col out of kh*kw strided copies, each a pass over the whole batch. Here a
single compiled pass fills the column matrix: one parallel task per (n, c) input plane, and for
every kernel tap (i, j) it writes whole output rows contiguously. col2im is the same walk with the
copy reversed into an add; since a task owns one input plane, no two threads ever add to the same
cell and no atomics are needed.

Kernels compile on their first call (``cache=True`` stores the machine code on disk for later
runs); importing this module compiles nothing.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from ..reference.conv import conv_output_size

__all__ = ["conv_output_size", "im2col", "col2im"]


@njit(cache=True)
def _valid_output_range(out_size, stride, offset, size):
    """Outputs o with 0 <= o*stride + offset < size form one interval [lo, hi); return it.

    Knowing the interval lets the inner loops run without a bounds test per element.
    """
    # o*stride + offset >= 0  <=>  o >= ceil(-offset / stride)
    lo = 0 if offset >= 0 else (-offset + stride - 1) // stride
    # o*stride + offset <= size - 1  <=>  o <= floor((size - 1 - offset) / stride)
    last = size - 1 - offset
    hi = 0 if last < 0 else last // stride + 1
    lo = min(lo, out_size)
    hi = max(min(hi, out_size), lo)
    return lo, hi


@njit(cache=True, parallel=True)
def _im2col_kernel(x, cols, kh, kw, sh, sw, ph, pw, dh, dw, out_h, out_w):
    n, c, height, width = x.shape
    for plane in prange(n * c):
        b = plane // c
        ch = plane % c
        for i in range(kh):
            for j in range(kw):
                row = (ch * kh + i) * kw + j  # (c, i, j) order of the column axis
                col_offset = j * dw - pw
                lo, hi = _valid_output_range(out_w, sw, col_offset, width)
                for oh in range(out_h):
                    ih = oh * sh - ph + i * dh
                    base = oh * out_w
                    if ih < 0 or ih >= height:
                        for ow in range(out_w):
                            cols[b, row, base + ow] = 0
                        continue
                    for ow in range(lo):
                        cols[b, row, base + ow] = 0
                    for ow in range(lo, hi):
                        cols[b, row, base + ow] = x[b, ch, ih, ow * sw + col_offset]
                    for ow in range(hi, out_w):
                        cols[b, row, base + ow] = 0


@njit(cache=True, parallel=True)
def _col2im_kernel(cols, dx, kh, kw, sh, sw, ph, pw, dh, dw, out_h, out_w):
    n, c, height, width = dx.shape
    for plane in prange(n * c):
        b = plane // c
        ch = plane % c
        for ih in range(height):
            for iw in range(width):
                dx[b, ch, ih, iw] = 0
        for i in range(kh):
            for j in range(kw):
                row = (ch * kh + i) * kw + j
                col_offset = j * dw - pw
                lo, hi = _valid_output_range(out_w, sw, col_offset, width)
                for oh in range(out_h):
                    ih = oh * sh - ph + i * dh
                    if ih < 0 or ih >= height:
                        continue  # this tap read padding: its gradient has nowhere to go
                    base = oh * out_w
                    for ow in range(lo, hi):
                        dx[b, ch, ih, ow * sw + col_offset] += cols[b, row, base + ow]


def _geometry(x_shape, kernel_size, stride, padding, dilation):
    """All integer parameters of a convolution as plain ints, plus the output size."""
    kh, kw = (int(k) for k in kernel_size)
    sh, sw = (int(s) for s in stride)
    ph, pw = (int(p) for p in padding)
    dh, dw = (int(d) for d in dilation)
    out_h = conv_output_size(x_shape[2], kh, sh, ph, dh)
    out_w = conv_output_size(x_shape[3], kw, sw, pw, dw)
    return kh, kw, sh, sw, ph, pw, dh, dw, out_h, out_w


def im2col(x: np.ndarray, kernel_size, stride, padding, dilation) -> np.ndarray:
    """Unfold every kernel window of ``x`` (N, C, H, W) into a column: (N, C*kh*kw, OH*OW).

    The column axis is ordered (c, i, j); cells outside the image read as zero.
    """
    x = np.ascontiguousarray(x)
    params = _geometry(x.shape, kernel_size, stride, padding, dilation)
    kh, kw, out_h, out_w = params[0], params[1], params[8], params[9]
    n, c = x.shape[:2]
    cols = np.empty((n, c * kh * kw, out_h * out_w), dtype=x.dtype)
    if cols.size:
        _im2col_kernel(x, cols, *params)
    return cols


def col2im(cols: np.ndarray, x_shape, kernel_size, stride, padding, dilation) -> np.ndarray:
    """Adjoint of :func:`im2col`: sum every column entry back into the image cell it came from."""
    x_shape = tuple(int(s) for s in x_shape)
    params = _geometry(x_shape, kernel_size, stride, padding, dilation)
    kh, kw, out_h, out_w = params[0], params[1], params[8], params[9]
    n, c = x_shape[:2]
    cols = np.ascontiguousarray(cols).reshape(n, c * kh * kw, out_h * out_w)
    dx = np.empty(x_shape, dtype=cols.dtype)
    if dx.size:
        _col2im_kernel(cols, dx, *params)
    return dx
