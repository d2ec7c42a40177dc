"""2-D max and average pooling as Numba kernels (same names as :mod:`minidl.backend.reference.pool`).

Every kernel walks one (n, c) plane at a time and that plane's windows directly, skipping taps
that fall in the padding instead of materialising a padded copy. Backward passes scatter into
the plane's own input cells only, so planes are independent tasks: large problems split them over
Numba's threads (see :data:`PARALLEL_MIN_WORK`), and as each plane is computed by the same code
whichever thread runs it, results are bitwise the same at any thread count.

Output sizes and average-pool divisors follow PyTorch; the size rule is shared with the reference
(:func:`pool_output_size`) and the divisor rule is restated inside the kernels.
"""

from __future__ import annotations

import functools

import numpy as np
from numba import njit, prange

from ..reference.pool import pool_output_size
from ..threads import on_numba_threads

__all__ = [
    "pool_output_size",
    "max_pool2d_forward",
    "max_pool2d_backward",
    "avg_pool2d_forward",
    "avg_pool2d_backward",
]


@njit(cache=True, inline="always")
def _max_pool_plane(x, out, argmax, plane, kh, kw, sh, sw, ph, pw, dh, dw):
    c, height, width = x.shape[1], x.shape[2], x.shape[3]
    b, ch = plane // c, plane % c
    for oh in range(out.shape[2]):
        for ow in range(out.shape[3]):
            best = -np.inf
            best_index = -1
            for i in range(kh):
                ih = oh * sh - ph + i * dh
                if ih < 0 or ih >= height:
                    continue
                for j in range(kw):
                    iw = ow * sw - pw + j * dw
                    if iw < 0 or iw >= width:
                        continue
                    value = x[b, ch, ih, iw]
                    # First in-image tap claims the window; later ones need to be strictly
                    # larger (first max wins ties) or NaN (NaN propagates), as in PyTorch.
                    if best_index < 0 or value > best or np.isnan(value):
                        best = value
                        best_index = ih * width + iw
            out[b, ch, oh, ow] = best
            argmax[b, ch, oh, ow] = best_index


@njit(inline="always")
def _challenge(best, best_offset, value, offset):
    """One more tap of a window: it wins if strictly larger (the first maximum keeps ties) or NaN
    (NaN propagates; as in the general kernel, a later NaN takes over from an earlier one).

    Written as selects, not an if: which tap wins is data-dependent, so a branch would often be
    mispredicted.
    """
    take = (value > best) | (value != value)
    return (value if take else best), (offset if take else best_offset)


@njit(cache=True, inline="always")
def _max_pool_2x2_plane(x, out, argmax, plane):
    """The same maxima for the usual ``MaxPool2d(2)``: 2x2 windows, stride 2, no padding, every
    window inside the image.

    The general kernel tests every tap against the image bounds and loops over a kernel size known
    only at run time, so LLVM can neither drop the tests nor unroll the window. Here the four taps
    are spelled out and none can fall outside: the top-left tap claims the window and three
    compares finish it. This measured ~4x faster than the general kernel on LeNet's 64x6x28x28
    activations.
    """
    c, width = x.shape[1], x.shape[3]
    b, ch = plane // c, plane % c
    for oh in range(out.shape[2]):
        for ow in range(out.shape[3]):
            ih, iw = 2 * oh, 2 * ow
            top = ih * width + iw  # flat in-plane index of the top-left tap
            best, best_offset = x[b, ch, ih, iw], top
            best, best_offset = _challenge(best, best_offset, x[b, ch, ih, iw + 1], top + 1)
            best, best_offset = _challenge(best, best_offset, x[b, ch, ih + 1, iw], top + width)
            best, best_offset = _challenge(best, best_offset, x[b, ch, ih + 1, iw + 1],
                                           top + width + 1)
            out[b, ch, oh, ow] = best
            argmax[b, ch, oh, ow] = best_offset


@njit(cache=True, inline="always")
def _max_pool_backward_plane(grad_rows, argmax_rows, dx_rows, plane):
    """Plane ``plane``'s input gradient, the arrays seen as one row per (n, c) plane.

    argmax holds each window's winner as a flat in-plane index, so the plane's row is addressed
    with it directly: splitting it into (h, w) cost an integer division per window, which made
    this kernel ~3x slower."""
    cells, grads, winners = dx_rows[plane], grad_rows[plane], argmax_rows[plane]
    for k in range(cells.size):
        cells[k] = 0
    for window in range(grads.size):
        index = winners[window]
        if index >= 0:  # -1: the window lay entirely in the padding
            cells[index] += grads[window]


@njit(cache=True)
def _avg_window(o, stride, padding, kernel, size, count_include_pad):
    """Window o's in-image range [start, end) along one axis and its divisor count.

    count_include_pad counts the cells inside the padded input (clipped at the right padding for
    ceil_mode windows); otherwise only in-image cells count.
    """
    start = o * stride - padding
    end = min(start + kernel, size + padding)
    padded_count = end - start
    start = max(start, 0)
    end = min(end, size)
    count = padded_count if count_include_pad else end - start
    return start, end, count


@njit(cache=True, inline="always")
def _avg_pool_plane(x, out, plane, kh, kw, sh, sw, ph, pw, count_include_pad):
    c, height, width = x.shape[1], x.shape[2], x.shape[3]
    b, ch = plane // c, plane % c
    for oh in range(out.shape[2]):
        h0, h1, count_h = _avg_window(oh, sh, ph, kh, height, count_include_pad)
        for ow in range(out.shape[3]):
            w0, w1, count_w = _avg_window(ow, sw, pw, kw, width, count_include_pad)
            total = x.dtype.type(0)
            for ih in range(h0, h1):
                for iw in range(w0, w1):
                    total += x[b, ch, ih, iw]
            out[b, ch, oh, ow] = total / (count_h * count_w)


@njit(cache=True, inline="always")
def _avg_pool_backward_plane(grad_out, dx, plane, kh, kw, sh, sw, ph, pw, count_include_pad):
    c, height, width = dx.shape[1], dx.shape[2], dx.shape[3]
    b, ch = plane // c, plane % c
    for ih in range(height):
        for iw in range(width):
            dx[b, ch, ih, iw] = 0
    for oh in range(grad_out.shape[2]):
        h0, h1, count_h = _avg_window(oh, sh, ph, kh, height, count_include_pad)
        for ow in range(grad_out.shape[3]):
            w0, w1, count_w = _avg_window(ow, sw, pw, kw, width, count_include_pad)
            share = grad_out[b, ch, oh, ow] / (count_h * count_w)
            for ih in range(h0, h1):
                for iw in range(w0, w1):
                    dx[b, ch, ih, iw] += share


# Each kernel is a loop over the (n, c) planes, serial or split over threads. Starting threads
# costs tens of microseconds, so a problem under PARALLEL_MIN_WORK elements stays on the calling
# thread (the four kernels' loops are spelled out: Numba caches a kernel per function, so one
# function cannot be compiled both ways). The plane functions are inlined into these loops: a
# Numba call per plane counts references on each array argument, and with thousands of small
# planes (CIFAR's 8x8 maps) the calls cost as much as the pooling (max pooling forward over a
# CIFAR CNN's three layers measured ~2x faster inlined).

PARALLEL_MIN_WORK = 1 << 18
"""Input elements (output elements for the backward passes) from which pooling is split over
threads (measured with the other passes: see :data:`.elementwise.PARALLEL_MIN_WORK`)."""

VECTORISED_MIN_WORK = 1 << 14
"""Input elements from which max pooling below :data:`PARALLEL_MIN_WORK` still runs the
threaded kernel, held to the calling thread (``on_numba_threads(1, ...)``), rather than the serial
loop. The two loops are the same code, but LLVM vectorises only the threaded one: Numba compiles
a ``prange`` body as a function of its own whose arrays are declared not to overlap, while the
serial loop may write into the input as far as LLVM knows, and the overlap test it adds before a
vectorised row pays only from rows of 24 windows. LeNet's 14-window rows ran ~2.2x faster
threaded on one thread (64x6x28x28: 78 against 170 us). Holding the pool costs ~3 us, which
small problems do not win back: the two loops cross between 2^13 and 2^14 elements (2x6x28x28:
5.7 us serial against 5.9 held; 4x6x28x28: 10.9 against 8.2; one 6x28x28 image: 3.0 against
4.8)."""


@njit(cache=True)
def _max_pool_serial(x, out, argmax, kh, kw, sh, sw, ph, pw, dh, dw, usual_2x2):
    for plane in range(x.shape[0] * x.shape[1]):
        if usual_2x2:
            _max_pool_2x2_plane(x, out, argmax, plane)
        else:
            _max_pool_plane(x, out, argmax, plane, kh, kw, sh, sw, ph, pw, dh, dw)


@njit(cache=True, parallel=True)
def _max_pool_parallel(x, out, argmax, kh, kw, sh, sw, ph, pw, dh, dw, usual_2x2):
    for plane in prange(x.shape[0] * x.shape[1]):
        if usual_2x2:
            _max_pool_2x2_plane(x, out, argmax, plane)
        else:
            _max_pool_plane(x, out, argmax, plane, kh, kw, sh, sw, ph, pw, dh, dw)


@njit(cache=True)
def _max_pool_backward_serial(grad_rows, argmax_rows, dx_rows):
    for plane in range(dx_rows.shape[0]):
        _max_pool_backward_plane(grad_rows, argmax_rows, dx_rows, plane)


@njit(cache=True, parallel=True)
def _max_pool_backward_parallel(grad_rows, argmax_rows, dx_rows):
    # A task owns one input plane, so no two threads ever add to the same cell.
    for plane in prange(dx_rows.shape[0]):
        _max_pool_backward_plane(grad_rows, argmax_rows, dx_rows, plane)


@njit(cache=True)
def _avg_pool_serial(x, out, kh, kw, sh, sw, ph, pw, count_include_pad):
    for plane in range(x.shape[0] * x.shape[1]):
        _avg_pool_plane(x, out, plane, kh, kw, sh, sw, ph, pw, count_include_pad)


@njit(cache=True, parallel=True)
def _avg_pool_parallel(x, out, kh, kw, sh, sw, ph, pw, count_include_pad):
    for plane in prange(x.shape[0] * x.shape[1]):
        _avg_pool_plane(x, out, plane, kh, kw, sh, sw, ph, pw, count_include_pad)


@njit(cache=True)
def _avg_pool_backward_serial(grad_out, dx, kh, kw, sh, sw, ph, pw, count_include_pad):
    for plane in range(dx.shape[0] * dx.shape[1]):
        _avg_pool_backward_plane(grad_out, dx, plane, kh, kw, sh, sw, ph, pw, count_include_pad)


@njit(cache=True, parallel=True)
def _avg_pool_backward_parallel(grad_out, dx, kh, kw, sh, sw, ph, pw, count_include_pad):
    for plane in prange(dx.shape[0] * dx.shape[1]):
        _avg_pool_backward_plane(grad_out, dx, plane, kh, kw, sh, sw, ph, pw, count_include_pad)


def _threaded(work: int) -> bool:
    """Whether a kernel touching ``work`` elements is split over threads."""
    return work >= PARALLEL_MIN_WORK


def _window_ints(kernel_size, stride, padding, dilation=(1, 1)):
    """(kh, kw, sh, sw, ph, pw, dh, dw) as plain ints (Numba compiles a kernel per argument type).
    Unpacked one by one: a comprehension is a Python frame per call, ~0.6 us of a single image's
    pooling."""
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = kernel_size, stride, padding, dilation
    return int(kh), int(kw), int(sh), int(sw), int(ph), int(pw), int(dh), int(dw)


def max_pool2d_forward(x: np.ndarray, kernel_size, stride, padding, dilation, ceil_mode):
    """Max over every window of ``x`` (N, C, H, W); returns ``(out, argmax)``.

    argmax (int64, N, C, OH, OW) is the flat index ``h*W + w`` of the chosen cell in its plane,
    or -1 for a window with no cell inside the image.
    """
    x = np.ascontiguousarray(x)
    n, c, height, width = x.shape
    try:
        geometry = _remembered_max_pool_geometry(height, width, kernel_size, stride, padding,
                                                 dilation, ceil_mode)
    except TypeError:  # a list among the pairs (unhashable), or a bad argument: raised again
        geometry = _max_pool_geometry(height, width, kernel_size, stride, padding, dilation,
                                      ceil_mode)
    shape = (n, c) + geometry[:2]
    out, argmax = np.empty(shape, x.dtype), np.empty(shape, np.int64)
    if out.size:
        if _threaded(x.size):
            _max_pool_parallel(x, out, argmax, *geometry[2:])
        elif x.size >= VECTORISED_MIN_WORK:
            on_numba_threads(1, _max_pool_parallel, x, out, argmax, *geometry[2:])
        else:
            _max_pool_serial(x, out, argmax, *geometry[2:])
    return out, argmax


def _max_pool_geometry(height, width, kernel_size, stride, padding, dilation, ceil_mode):
    """``(out_h, out_w, kh, kw, sh, sw, ph, pw, dh, dw, usual_2x2)`` of a max pooling: the
    output size, then the kernel's integer arguments (plain ints) and whether the windows are
    the common 2x2 tiling, which the kernel reads in a faster loop."""
    kh, kw, sh, sw, ph, pw, dh, dw = _window_ints(kernel_size, stride, padding, dilation)
    out_h = pool_output_size(height, kh, sh, ph, dh, ceil_mode)
    out_w = pool_output_size(width, kw, sw, pw, dw, ceil_mode)
    # ceil_mode may add a last window hanging over the edge; 2*out <= size rules that out.
    usual_2x2 = (kh == kw == sh == sw == 2 and ph == pw == 0 and dh == dw == 1
                 and 2 * out_h <= height and 2 * out_w <= width)
    return out_h, out_w, kh, kw, sh, sw, ph, pw, dh, dw, usual_2x2


# A layer pools with the same arguments on every call, so its geometry is remembered: one
# lookup where the arithmetic above took ~1 us of a single image's ~6 us pooling. Errors are
# not remembered (each bad call raises again).
_remembered_max_pool_geometry = functools.lru_cache(maxsize=256)(_max_pool_geometry)


def max_pool2d_backward(grad_out: np.ndarray, argmax: np.ndarray, x_shape) -> np.ndarray:
    """Route each window's gradient to the cell that won its max (summed where cells win twice)."""
    grad_out = np.ascontiguousarray(grad_out)
    argmax = np.ascontiguousarray(argmax, dtype=np.int64)
    dx = np.empty(tuple(int(s) for s in x_shape), dtype=grad_out.dtype)
    if dx.size:
        kernel = _max_pool_backward_parallel if _threaded(dx.size) else _max_pool_backward_serial
        planes = dx.shape[0] * dx.shape[1]
        kernel(grad_out.reshape(planes, -1), argmax.reshape(planes, -1), dx.reshape(planes, -1))
    return dx


def avg_pool2d_forward(x: np.ndarray, kernel_size, stride, padding, ceil_mode, count_include_pad) -> np.ndarray:
    """Mean over every window of ``x`` (N, C, H, W), with PyTorch's divisor."""
    x = np.ascontiguousarray(x)
    kh, kw, sh, sw, ph, pw = _window_ints(kernel_size, stride, padding)[:6]
    n, c, height, width = x.shape
    out_h = pool_output_size(height, kh, sh, ph, 1, ceil_mode)
    out_w = pool_output_size(width, kw, sw, pw, 1, ceil_mode)
    out = np.empty((n, c, out_h, out_w), dtype=x.dtype)
    if out.size:
        kernel = _avg_pool_parallel if _threaded(x.size) else _avg_pool_serial
        kernel(x, out, kh, kw, sh, sw, ph, pw, bool(count_include_pad))
    return out


def avg_pool2d_backward(grad_out: np.ndarray, x_shape, kernel_size, stride, padding, ceil_mode, count_include_pad):
    """Every in-image cell of a window receives the window's gradient over its divisor."""
    grad_out = np.ascontiguousarray(grad_out)
    kh, kw, sh, sw, ph, pw = _window_ints(kernel_size, stride, padding)[:6]
    x_shape = tuple(int(s) for s in x_shape)
    # Validates the geometry exactly as the forward pass did.
    pool_output_size(x_shape[2], kh, sh, ph, 1, ceil_mode)
    pool_output_size(x_shape[3], kw, sw, pw, 1, ceil_mode)
    dx = np.empty(x_shape, dtype=grad_out.dtype)
    if dx.size:
        kernel = _avg_pool_backward_parallel if _threaded(dx.size) else _avg_pool_backward_serial
        kernel(grad_out, dx, kh, kw, sh, sw, ph, pw, bool(count_include_pad))
    return dx
