"""Softmax, log-softmax, softmax's gradient, softmax-cross-entropy and layer norm, split over
threads for large inputs (a 10k-class language model's logits, attention scores).

Each of these computes every row on its own (a row's max, sums and outputs never touch another
row), so a block of rows is an independent task. The tasks call the one-thread row kernels of
:mod:`.nn_kernels` on their block, so a row's arithmetic, and every bit of its result, is the same
on any thread and at any thread count. Layer norm's backward pass also sums dweight and dbias
over the rows: each block sums its own rows into its own partial row, and the partials are added
in block order at the end; the blocks are fixed by the shape, never by the thread count, so
those sums too are the same bits on any number of threads.

Numba's on-disk cache keeps each task loop here compiled together with the row kernels it
calls, and checks only this file for changes: after editing a row kernel of :mod:`.nn_kernels`,
delete this module's cache files (``__pycache__/row_threads.*.nbi`` / ``.nbc``) or the threaded
path keeps running the old one.

Below :data:`~.conv.PARALLEL_MIN_WORK` elements (waking the pool costs more than the rows), and
for dtypes other than float32/float64, each primitive hands its call to :mod:`.nn_kernels`
unchanged (other dtypes through the loader, which converts what Numba cannot compute with).
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from . import loading, nn_kernels
from .conv import PARALLEL_MIN_WORK
from ..reference.nn_kernels import (
    check_class_targets, check_cross_entropy_reduction, cross_entropy_row_grads,
    reduce_cross_entropy,
)
from .nn_kernels import (_cross_entropy_backward_kernel, _cross_entropy_backward_vectorised,
                         _cross_entropy_forward_kernel, _cross_entropy_forward_vectorised,
                         _layer_norm_backward_kernel, _layer_norm_forward_kernel,
                         _softmax_backward_rows, _softmax_rows, _softmax_rows_vectorised)

__all__ = ["softmax", "log_softmax", "softmax_backward", "softmax_cross_entropy_forward",
           "softmax_cross_entropy_backward", "layer_norm_forward", "layer_norm_backward"]

TASK_ELEMENTS = 1 << 14
"""About how many elements one task's block of rows holds (whole rows, at least one)."""


def _block_rows(width: int) -> int:
    return max(1, TASK_ELEMENTS // max(width, 1))


@njit(cache=True, parallel=True, error_model="numpy")
def _softmax_blocks(x, out, block_rows, take_log, vectorised):
    rows = x.shape[0]
    for block in prange((rows + block_rows - 1) // block_rows):
        first, last = block * block_rows, min((block + 1) * block_rows, rows)
        if vectorised:
            _softmax_rows_vectorised(x[first:last], out[first:last], take_log)
        else:
            _softmax_rows(x[first:last], out[first:last], take_log)


@njit(cache=True, parallel=True)
def _softmax_backward_blocks(grad, out, dx, block_rows):
    rows = out.shape[0]
    for block in prange((rows + block_rows - 1) // block_rows):
        first, last = block * block_rows, min((block + 1) * block_rows, rows)
        _softmax_backward_rows(grad[first:last], out[first:last], dx[first:last])


@njit(cache=True, parallel=True, error_model="numpy")
def _cross_entropy_forward_blocks(logits, targets, ignore_index, smoothing, losses, log_probs,
                                  block_rows, vectorised):
    rows = logits.shape[0]
    for block in prange((rows + block_rows - 1) // block_rows):
        first, last = block * block_rows, min((block + 1) * block_rows, rows)
        arguments = (logits[first:last], targets[first:last], ignore_index, smoothing,
                     losses[first:last], log_probs[first:last])
        if vectorised:
            _cross_entropy_forward_vectorised(*arguments)
        else:
            _cross_entropy_forward_kernel(*arguments)


@njit(cache=True, parallel=True, error_model="numpy")
def _cross_entropy_backward_blocks(grad_losses, log_probs, targets, ignore_index, smoothing,
                                   dlogits, block_rows, vectorised):
    rows = log_probs.shape[0]
    for block in prange((rows + block_rows - 1) // block_rows):
        first, last = block * block_rows, min((block + 1) * block_rows, rows)
        arguments = (grad_losses[first:last], log_probs[first:last], targets[first:last],
                     ignore_index, smoothing, dlogits[first:last])
        if vectorised:
            _cross_entropy_backward_vectorised(*arguments)
        else:
            _cross_entropy_backward_kernel(*arguments)


@njit(cache=True, parallel=True)
def _layer_norm_forward_blocks(x, weight, bias, has_weight, has_bias, eps, y, mean, rstd,
                               block_rows):
    rows = x.shape[0]
    for block in prange((rows + block_rows - 1) // block_rows):
        first, last = block * block_rows, min((block + 1) * block_rows, rows)
        _layer_norm_forward_kernel(x[first:last], weight, bias, has_weight, has_bias, eps,
                                   y[first:last], mean[first:last], rstd[first:last])


@njit(cache=True, parallel=True)
def _layer_norm_backward_blocks(grad, x, mean, rstd, weight, has_weight, dx, partial_dweight,
                                partial_dbias, block_rows):
    rows = x.shape[0]
    for block in prange(partial_dweight.shape[0]):
        first, last = block * block_rows, min((block + 1) * block_rows, rows)
        _layer_norm_backward_kernel(grad[first:last], x[first:last], mean[first:last],
                                    rstd[first:last], weight, has_weight, dx[first:last],
                                    partial_dweight[block:block + 1],
                                    partial_dbias[block:block + 1])


_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


def _threaded(x: np.ndarray) -> bool:
    return x.dtype in _FLOATS and x.size >= PARALLEL_MIN_WORK


def _one_thread(name: str, x: np.ndarray):
    """nn_kernels' primitive ``name`` for ``x``: directly for float32/float64, else as the
    backend binds it (with whatever conversions the loader adds for other dtypes)."""
    return getattr(nn_kernels, name) if x.dtype in _FLOATS else loading._kernel("nn_kernels", name)


def _as_rows(x: np.ndarray, axis: int):
    """(x with ``axis`` moved last, the same as C-ordered (rows, width))."""
    moved = np.moveaxis(x, axis, -1)
    width = moved.shape[-1]
    return moved, np.asarray(moved, order="C").reshape(moved.size // width, width)


def _softmax_along(x, axis, take_log):
    x = np.asarray(x)
    if not _threaded(x):
        return _one_thread("log_softmax" if take_log else "softmax", x)(x, axis)
    moved, rows = _as_rows(x, axis)
    out = np.empty_like(rows)
    _softmax_blocks(rows, out, _block_rows(rows.shape[1]), take_log,
                    rows.dtype == np.float32)  # as nn_kernels chooses
    return np.moveaxis(out.reshape(moved.shape), -1, axis)


def softmax(x: np.ndarray, axis: int) -> np.ndarray:
    """:func:`.nn_kernels.softmax`, rows split over threads when large."""
    return _softmax_along(x, axis, False)


def log_softmax(x: np.ndarray, axis: int) -> np.ndarray:
    """:func:`.nn_kernels.log_softmax`, rows split over threads when large."""
    return _softmax_along(x, axis, True)


def softmax_backward(grad: np.ndarray, out: np.ndarray, axis: int) -> np.ndarray:
    """:func:`.nn_kernels.softmax_backward`, rows split over threads when large."""
    out = np.asarray(out)
    if not _threaded(out):
        return _one_thread("softmax_backward", out)(grad, out, axis)
    grad = np.broadcast_to(np.asarray(grad, dtype=out.dtype), out.shape)
    moved, out_rows = _as_rows(out, axis)
    _, grad_rows = _as_rows(grad, axis)
    dx = np.empty_like(out_rows)
    _softmax_backward_blocks(grad_rows, out_rows, dx, _block_rows(out_rows.shape[1]))
    return np.moveaxis(dx.reshape(moved.shape), -1, axis)


def softmax_cross_entropy_forward(logits: np.ndarray, targets: np.ndarray, ignore_index: int,
                                  label_smoothing: float, reduction: str = "none"):
    """:func:`.nn_kernels.softmax_cross_entropy_forward`, rows split over threads when large;
    the losses reduced as the reference reduces them."""
    check_cross_entropy_reduction(reduction)
    logits = np.asarray(logits, order="C")
    if not _threaded(logits):
        losses, log_probs = _one_thread("softmax_cross_entropy_forward", logits)(
            logits, targets, ignore_index, label_smoothing)
    else:
        targets = np.asarray(targets, dtype=np.int64, order="C")
        check_class_targets(targets, logits.shape[1], ignore_index)
        losses, log_probs = np.empty(logits.shape[0], logits.dtype), np.empty_like(logits)
        _cross_entropy_forward_blocks(logits, targets, int(ignore_index), float(label_smoothing),
                                      losses, log_probs, _block_rows(logits.shape[1]),
                                      logits.dtype == np.float32)  # as nn_kernels chooses
    return reduce_cross_entropy(losses, targets, ignore_index, reduction), log_probs


def softmax_cross_entropy_backward(grad_losses, log_probs, targets, ignore_index,
                                   label_smoothing, reduction: str = "none") -> np.ndarray:
    """:func:`.nn_kernels.softmax_cross_entropy_backward`, rows split over threads when large."""
    grad_losses = cross_entropy_row_grads(grad_losses, targets, ignore_index, reduction,
                                          np.asarray(log_probs).dtype)
    log_probs = np.asarray(log_probs, order="C")
    if not _threaded(log_probs):
        return _one_thread("softmax_cross_entropy_backward", log_probs)(
            grad_losses, log_probs, targets, ignore_index, label_smoothing)
    dlogits = np.empty_like(log_probs)
    _cross_entropy_backward_blocks(np.asarray(grad_losses, log_probs.dtype, order="C"), log_probs,
                                   np.asarray(targets, np.int64, order="C"), int(ignore_index),
                                   float(label_smoothing), dlogits,
                                   _block_rows(log_probs.shape[1]),
                                   log_probs.dtype == np.float32)  # as nn_kernels chooses
    return dlogits


def layer_norm_forward(x: np.ndarray, weight, bias, eps: float):
    """:func:`.nn_kernels.layer_norm_forward`, rows split over threads when large."""
    x = np.asarray(x, order="C")
    if not _threaded(x):
        return _one_thread("layer_norm_forward", x)(x, weight, bias, eps)
    rows, width = x.shape
    y, mean, rstd = np.empty_like(x), np.empty(rows, x.dtype), np.empty(rows, x.dtype)
    _layer_norm_forward_blocks(x, _parameter(weight, x.dtype), _parameter(bias, x.dtype),
                               weight is not None, bias is not None, float(eps), y, mean, rstd,
                               _block_rows(width))
    return y, mean, rstd


def _parameter(values, dtype) -> np.ndarray:
    """A weight or bias as the kernel reads it; an empty array (never read) when missing."""
    return np.empty(0, dtype) if values is None else np.asarray(values, dtype=dtype, order="C")


def layer_norm_backward(grad: np.ndarray, x: np.ndarray, mean, rstd, weight):
    """:func:`.nn_kernels.layer_norm_backward`, rows split over threads when large (dweight
    and dbias then summed per block of rows, the blocks in order)."""
    x = np.asarray(x, order="C")
    if not _threaded(x):
        return _one_thread("layer_norm_backward", x)(grad, x, mean, rstd, weight)
    rows, width = x.shape
    grad = np.asarray(grad, dtype=x.dtype, order="C")
    block_rows = _block_rows(width)
    blocks = (rows + block_rows - 1) // block_rows
    partial_dweight = np.zeros((blocks, width), x.dtype)
    partial_dbias = np.zeros_like(partial_dweight)
    dx = np.empty_like(x)
    _layer_norm_backward_blocks(grad, x, np.asarray(mean, x.dtype, order="C"),
                                np.asarray(rstd, x.dtype, order="C"), _parameter(weight, x.dtype),
                                weight is not None, dx, partial_dweight, partial_dbias, block_rows)
    if weight is None:
        return dx, None, None
    # NumPy adds the rows of a (blocks, width) array one after another: a fixed order.
    return dx, partial_dweight.sum(axis=0), partial_dbias.sum(axis=0)
