"""Softmax, fused softmax-cross-entropy, ReLU and GELU gradients and layer norm as Numba kernels.

Same names and results as :mod:`minidl.backend.reference.nn_kernels`. The NumPy versions make
several passes over memory and allocate a temporary per expression; these kernels handle one row
(or one chunk of elements) per parallel task, keeping the row's running max, sums and outputs in a
single pass or two. The formulas are restated in the reference module's docstrings.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit, prange

from ..reference.array_ops import relu_backward as _reference_relu_backward
from .conv import PARALLEL_MIN_WORK
from ..reference.nn_kernels import check_class_targets, check_gelu_approximate

__all__ = [
    "softmax",
    "log_softmax",
    "softmax_cross_entropy_forward",
    "softmax_cross_entropy_backward",
    "relu_backward",
    "gelu_forward",
    "gelu_backward",
    "layer_norm_forward",
    "layer_norm_backward",
    "batch_norm_forward",
    "batch_norm_backward",
]

# ---------------------------------------------------------------------------------------------
# softmax over the last axis of a 2-D array; other axes are moved there by the wrappers.
# Softmax and cross-entropy run on one thread: a classifier's (batch, classes) logits are a few
# thousand numbers, less work than waking a thread pool costs.


@njit(cache=True)
def _softmax_rows(x, out, take_log):
    rows, width = x.shape
    for r in range(rows):
        row_max = -np.inf
        for k in range(width):
            row_max = max(row_max, x[r, k])
        total = 0.0
        for k in range(width):
            total += math.exp(x[r, k] - row_max)  # shift by the max: every exponent is <= 0
        if take_log:
            log_total = math.log(total)
            for k in range(width):
                out[r, k] = x[r, k] - row_max - log_total
        else:
            inv_total = 1.0 / total
            for k in range(width):
                out[r, k] = math.exp(x[r, k] - row_max) * inv_total


def _softmax_along(x, axis, take_log):
    x = np.asarray(x)
    moved = np.moveaxis(x, axis, -1)
    width = moved.shape[-1]
    # Rows are counted explicitly: reshape cannot infer -1 when the softmax axis is empty.
    rows = np.asarray(moved, order="C").reshape(moved.size // width if width else 0, width)
    out = np.empty_like(rows)
    if out.size:
        _softmax_rows(rows, out, take_log)
    return np.moveaxis(out.reshape(moved.shape), -1, axis)


def softmax(x: np.ndarray, axis: int) -> np.ndarray:
    """exp(x) / sum(exp(x)) along ``axis``, computed with the max subtracted first."""
    return _softmax_along(x, axis, False)


def log_softmax(x: np.ndarray, axis: int) -> np.ndarray:
    """x - max - log(sum(exp(x - max))) along ``axis``."""
    return _softmax_along(x, axis, True)


# ---------------------------------------------------------------------------------------------
# softmax + cross-entropy


@njit(cache=True)
def _cross_entropy_forward_kernel(logits, targets, ignore_index, smoothing, losses, log_probs):
    rows, num_classes = logits.shape
    for r in range(rows):
        row_max = -np.inf
        for k in range(num_classes):
            row_max = max(row_max, logits[r, k])
        total = 0.0
        for k in range(num_classes):
            total += math.exp(logits[r, k] - row_max)
        log_total = math.log(total)
        sum_log_probs = 0.0
        for k in range(num_classes):
            value = logits[r, k] - row_max - log_total
            log_probs[r, k] = value
            sum_log_probs += value
        target = targets[r]
        if target == ignore_index:
            losses[r] = 0
        else:
            losses[r] = -(1.0 - smoothing) * log_probs[r, target] - smoothing / num_classes * sum_log_probs


@njit(cache=True)
def _cross_entropy_backward_kernel(grad_losses, log_probs, targets, ignore_index, smoothing, dlogits):
    rows, num_classes = log_probs.shape
    uniform = smoothing / num_classes
    for r in range(rows):
        target = targets[r]
        if target == ignore_index:
            for k in range(num_classes):
                dlogits[r, k] = 0
            continue
        grad = grad_losses[r]
        # d loss / d logit_k = softmax_k - ((1-eps)*[k == target] + eps/C)
        for k in range(num_classes):
            dlogits[r, k] = grad * (math.exp(log_probs[r, k]) - uniform)
        dlogits[r, target] -= grad * (1.0 - smoothing)


def softmax_cross_entropy_forward(logits: np.ndarray, targets: np.ndarray, ignore_index: int, label_smoothing: float):
    """Per-sample cross-entropy with label smoothing and ignore_index; returns (losses, log_probs).

    loss_i = -(1-eps) * logp[i, t_i] - eps/C * sum_c logp[i, c]; ignored rows get 0.
    """
    logits = np.asarray(logits, order="C")
    targets = np.asarray(targets, dtype=np.int64, order="C")
    rows, num_classes = logits.shape
    check_class_targets(targets, num_classes, ignore_index)
    losses = np.empty(rows, dtype=logits.dtype)
    log_probs = np.empty_like(logits)
    if logits.size:
        _cross_entropy_forward_kernel(logits, targets, int(ignore_index), float(label_smoothing), losses, log_probs)
    return losses, log_probs


def softmax_cross_entropy_backward(grad_losses, log_probs, targets, ignore_index, label_smoothing) -> np.ndarray:
    """dlogits = grad_i * (softmax - ((1-eps)*onehot + eps/C)); zero rows for ignored targets."""
    log_probs = np.asarray(log_probs, order="C")
    grad_losses = np.asarray(grad_losses, dtype=log_probs.dtype, order="C")
    targets = np.asarray(targets, dtype=np.int64, order="C")
    dlogits = np.empty_like(log_probs)
    if dlogits.size:
        _cross_entropy_backward_kernel(
            grad_losses, log_probs, targets, int(ignore_index), float(label_smoothing), dlogits
        )
    return dlogits


# ---------------------------------------------------------------------------------------------
# GELU, elementwise over the flattened array

_SQRT_HALF = math.sqrt(0.5)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)
_TANH_SCALE = math.sqrt(2.0 / math.pi)
_TANH_CUBIC = 0.044715


@njit(cache=True)
def _gelu_slope_parts(v, use_tanh):
    """Return (Phi(v), dPhi/dv) for the chosen curve, in float64 and free of cancellation.

    Exact: Phi = erfc(-v/sqrt 2)/2, phi = exp(-v^2/2)/sqrt(2 pi). Tanh: Phi ~ sigmoid(2u) and its
    derivative 2 sigmoid(2u) sigmoid(-2u) u'(v) (see the reference module's notes).
    """
    if use_tanh:
        u = _TANH_SCALE * (v + _TANH_CUBIC * v * v * v)
        rising = 1.0 / (1.0 + math.exp(-2.0 * u))
        falling = 1.0 / (1.0 + math.exp(2.0 * u))
        return rising, 2.0 * rising * falling * _TANH_SCALE * (1.0 + 3.0 * _TANH_CUBIC * v * v)
    return 0.5 * math.erfc(-_SQRT_HALF * v), _INV_SQRT_2PI * math.exp(-0.5 * v * v)


@njit(cache=True)
def _gelu_forward_kernel(x, out, use_tanh):
    for k in range(x.size):
        v = float(x[k])
        cdf, _ = _gelu_slope_parts(v, use_tanh)
        out[k] = v * cdf


@njit(cache=True)
def _gelu_backward_kernel(grad, x, dx, use_tanh):
    for k in range(x.size):
        v = float(x[k])
        cdf, density = _gelu_slope_parts(v, use_tanh)
        dx[k] = grad[k] * (cdf + v * density)  # d/dv [v Phi(v)] = Phi(v) + v Phi'(v)


@njit(cache=True)
def _relu_backward_kernel(grad, x, dx):
    zero = dx.dtype.type(0)
    for k in range(dx.size):
        # A select, not a branch: LLVM turns the loop into vector compares and blends.
        dx[k] = grad[k] if x[k] > 0 else zero


def relu_backward(grad: np.ndarray, x: np.ndarray) -> np.ndarray:
    """grad where x > 0, else 0 (also at x == 0 and where x is NaN), in grad's dtype.

    NumPy's ``np.where(x > 0, grad, 0)`` writes a boolean mask, then reads it back with a
    broadcast scalar through its slow general path; one fused pass measured ~25x faster on a
    LeNet activation (64x6x28x28).
    """
    grad, x = np.asarray(grad), np.asarray(x)
    if grad.shape != x.shape:  # broadcasting: rare, left to the reference
        return _reference_relu_backward(grad, x)
    dx = np.empty(grad.shape, dtype=grad.dtype)
    if dx.size:
        # ravel() is a view of a contiguous array and a contiguous copy of anything else.
        _relu_backward_kernel(grad.ravel(), x.ravel(), dx.reshape(-1))
    return dx


def gelu_forward(x: np.ndarray, approximate: str) -> np.ndarray:
    """GELU(x) = x * Phi(x), exact ("none", via erf) or with PyTorch's tanh approximation."""
    check_gelu_approximate(approximate)
    x = np.asarray(x, order="C")
    out = np.empty_like(x)
    if x.size:
        _gelu_forward_kernel(x.reshape(-1), out.reshape(-1), approximate == "tanh")
    return out


def gelu_backward(grad: np.ndarray, x: np.ndarray, approximate: str) -> np.ndarray:
    """grad * GELU'(x) for the chosen approximation."""
    check_gelu_approximate(approximate)
    x = np.asarray(x, order="C")
    grad = np.asarray(np.broadcast_to(grad, x.shape), dtype=x.dtype, order="C")
    dx = np.empty_like(x)
    if x.size:
        _gelu_backward_kernel(grad.reshape(-1), x.reshape(-1), dx.reshape(-1), approximate == "tanh")
    return dx


# ---------------------------------------------------------------------------------------------
# layer norm over the last axis of (M, D)


@njit(cache=True)
def _layer_norm_forward_kernel(x, weight, bias, has_weight, has_bias, eps, y, mean, rstd):
    rows, width = x.shape
    for r in range(rows):
        total = 0.0
        for k in range(width):
            total += x[r, k]
        row_mean = total / width
        # Second pass over the centred values: exact where E[x^2] - E[x]^2 would cancel.
        squares = 0.0
        for k in range(width):
            centered = x[r, k] - row_mean
            squares += centered * centered
        row_rstd = 1.0 / math.sqrt(squares / width + eps)
        mean[r] = row_mean
        rstd[r] = row_rstd
        for k in range(width):
            value = (x[r, k] - row_mean) * row_rstd
            if has_weight:
                value *= weight[k]
            if has_bias:
                value += bias[k]
            y[r, k] = value


@njit(cache=True)
def _layer_norm_backward_kernel(grad, x, mean, rstd, weight, has_weight, dx, partial_dweight, partial_dbias):
    rows, width = x.shape
    chunks = partial_dweight.shape[0]
    # Rows are split into contiguous chunks; each chunk sums its own dweight/dbias rows, so the
    # parameter gradients need no atomics and are reduced once at the end.
    for chunk in range(chunks):
        first = chunk * rows // chunks
        last = (chunk + 1) * rows // chunks
        for r in range(first, last):
            row_mean = mean[r]
            row_rstd = rstd[r]
            # mean(g) and mean(g * xhat) with g = grad * weight
            sum_g = 0.0
            sum_g_xhat = 0.0
            for k in range(width):
                g = grad[r, k] * weight[k] if has_weight else grad[r, k]
                xhat = (x[r, k] - row_mean) * row_rstd
                sum_g += g
                sum_g_xhat += g * xhat
                if has_weight:
                    partial_dweight[chunk, k] += grad[r, k] * xhat
                    partial_dbias[chunk, k] += grad[r, k]
            mean_g = sum_g / width
            mean_g_xhat = sum_g_xhat / width
            for k in range(width):
                g = grad[r, k] * weight[k] if has_weight else grad[r, k]
                xhat = (x[r, k] - row_mean) * row_rstd
                dx[r, k] = row_rstd * (g - mean_g - xhat * mean_g_xhat)


def layer_norm_forward(x: np.ndarray, weight, bias, eps: float):
    """Normalise each row of ``x`` (M, D), then scale by weight and shift by bias (either may be None).

    Returns ``(y, mean, rstd)``, mean and rstd of shape (M,).
    """
    x = np.asarray(x, order="C")
    rows, width = x.shape
    empty = np.empty(0, dtype=x.dtype)  # stands in for a missing weight/bias (never read)
    weight_arr = empty if weight is None else np.asarray(weight, dtype=x.dtype, order="C")
    bias_arr = empty if bias is None else np.asarray(bias, dtype=x.dtype, order="C")
    y = np.empty_like(x)
    mean = np.empty(rows, dtype=x.dtype)
    rstd = np.empty(rows, dtype=x.dtype)
    if x.size:
        _layer_norm_forward_kernel(
            x, weight_arr, bias_arr, weight is not None, bias is not None, float(eps), y, mean, rstd
        )
    return y, mean, rstd


def layer_norm_backward(grad: np.ndarray, x: np.ndarray, mean, rstd, weight):
    """Gradients ``(dx, dweight, dbias)`` of layer norm; dweight and dbias are None without weight."""
    x = np.asarray(x, order="C")
    grad = np.asarray(grad, dtype=x.dtype, order="C")
    mean = np.asarray(mean, dtype=x.dtype, order="C")
    rstd = np.asarray(rstd, dtype=x.dtype, order="C")
    rows, width = x.shape
    has_weight = weight is not None
    weight_arr = np.asarray(weight, dtype=x.dtype, order="C") if has_weight else np.empty(0, dtype=x.dtype)
    # The kernel sums dweight/dbias per chunk of rows. The kernels run on one thread (see the
    # package docstring), so one chunk; the count is fixed, never the thread count, so the
    # summation order (and so every bit of the result) does not depend on the machine.
    chunks = 1
    partial_dweight = np.zeros((chunks, width), dtype=x.dtype)
    partial_dbias = np.zeros_like(partial_dweight)
    dx = np.empty_like(x)
    if x.size:
        _layer_norm_backward_kernel(grad, x, mean, rstd, weight_arr, has_weight, dx, partial_dweight, partial_dbias)
    if not has_weight:
        return dx, None, None
    return dx, partial_dweight.sum(axis=0), partial_dbias.sum(axis=0)


# -- batch norm ----------------------------------------------------------------------------------
# One channel at a time over (N, C, S): its N runs of S contiguous values are read two or three
# times while they are still in cache, where the NumPy form makes a full-size temporary per
# expression (centred values, their squares, x̂, grad·x̂, ...). Accumulators are float64, as in
# the reference; each channel's sums run in one fixed order, so results do not vary run to run.


@njit(cache=True)
def _batch_norm_forward_channel(x, weight, bias, has_weight, has_bias, batch_stats, eps, mean,
                                var, rstd, y, c):
    n, _, size = x.shape
    count = n * size
    if batch_stats:
        total = 0.0
        for b in range(n):
            for k in range(size):
                total += x[b, c, k]
        channel_mean = total / count
        squares = 0.0
        for b in range(n):
            for k in range(size):
                d = x[b, c, k] - channel_mean
                squares += d * d
        channel_var = squares / count
    else:
        channel_mean = np.float64(mean[c])  # float64: Numba's float() keeps float32
        channel_var = np.float64(var[c])
    channel_rstd = 1.0 / math.sqrt(channel_var + eps)
    scale = channel_rstd * weight[c] if has_weight else channel_rstd
    shift = bias[c] if has_bias else 0.0
    for b in range(n):
        for k in range(size):
            y[b, c, k] = (x[b, c, k] - channel_mean) * scale + shift
    mean[c], var[c], rstd[c] = channel_mean, channel_var, channel_rstd


@njit(cache=True)
def _batch_norm_backward_channel(grad, x, mean, rstd, weight, has_weight, batch_stats, dx,
                                 dweight, dbias, c):
    n, _, size = x.shape
    count = n * size
    channel_mean = np.float64(mean[c])  # float64: Numba's float() keeps float32
    channel_rstd = np.float64(rstd[c])
    sum_g = 0.0
    sum_gx = 0.0
    for b in range(n):
        for k in range(size):
            g = grad[b, c, k]
            sum_g += g
            sum_gx += g * ((x[b, c, k] - channel_mean) * channel_rstd)
    scale = channel_rstd * weight[c] if has_weight else channel_rstd
    mean_g = sum_g / count if batch_stats else 0.0
    mean_gx = sum_gx / count if batch_stats else 0.0
    for b in range(n):
        for k in range(size):
            xhat = (x[b, c, k] - channel_mean) * channel_rstd
            dx[b, c, k] = scale * (grad[b, c, k] - mean_g - xhat * mean_gx)
    dweight[c], dbias[c] = sum_gx, sum_g


# A serial and a parallel loop over the channels (threads pay only on large activations, see
# PARALLEL_MIN_WORK). A channel is one task either way, so its sums run in the same order and
# the results are identical whichever loop ran.


@njit(cache=True)
def _batch_norm_forward_serial(x, weight, bias, has_weight, has_bias, batch_stats, eps, mean, var,
                               rstd, y):
    for c in range(x.shape[1]):
        _batch_norm_forward_channel(x, weight, bias, has_weight, has_bias, batch_stats, eps,
                                    mean, var, rstd, y, c)


@njit(cache=True, parallel=True)
def _batch_norm_forward_parallel(x, weight, bias, has_weight, has_bias, batch_stats, eps, mean,
                                 var, rstd, y):
    for c in prange(x.shape[1]):
        _batch_norm_forward_channel(x, weight, bias, has_weight, has_bias, batch_stats, eps,
                                    mean, var, rstd, y, c)


@njit(cache=True)
def _batch_norm_backward_serial(grad, x, mean, rstd, weight, has_weight, batch_stats, dx, dweight,
                                dbias):
    for c in range(x.shape[1]):
        _batch_norm_backward_channel(grad, x, mean, rstd, weight, has_weight, batch_stats, dx,
                                     dweight, dbias, c)


@njit(cache=True, parallel=True)
def _batch_norm_backward_parallel(grad, x, mean, rstd, weight, has_weight, batch_stats, dx,
                                  dweight, dbias):
    for c in prange(x.shape[1]):
        _batch_norm_backward_channel(grad, x, mean, rstd, weight, has_weight, batch_stats, dx,
                                     dweight, dbias, c)


def batch_norm_forward(x: np.ndarray, weight, bias, mean, var, eps: float):
    """Batch norm of ``x`` (N, C, S) per channel; ``(y, mean, var, rstd)`` (see the reference)."""
    x = np.ascontiguousarray(x)
    channels = x.shape[1]
    empty = np.empty(0, dtype=x.dtype)  # stands in for a missing argument (never read)
    batch_stats = mean is None
    y = np.empty_like(x)
    stats = [np.empty(channels, np.float64) for _ in range(3)]  # mean, var, rstd
    if not batch_stats:  # the kernel reads the given statistics from here
        stats[0][:], stats[1][:] = mean, var
    if x.shape[0] * x.shape[2]:
        kernel = _batch_norm_forward_parallel if x.size >= PARALLEL_MIN_WORK and \
            x.shape[1] > 1 else _batch_norm_forward_serial
        kernel(
            x, empty if weight is None else np.ascontiguousarray(weight),
            empty if bias is None else np.ascontiguousarray(bias), weight is not None,
            bias is not None, batch_stats, float(eps), stats[0], stats[1], stats[2], y)
    return (y,) + tuple(a.astype(x.dtype) for a in stats)


def batch_norm_backward(grad: np.ndarray, x: np.ndarray, mean, rstd, weight, batch_stats: bool):
    """Gradients ``(dx, dweight, dbias)`` of batch norm; the last two None without a weight."""
    x = np.ascontiguousarray(x)
    grad = np.ascontiguousarray(grad, dtype=x.dtype)
    channels = x.shape[1]
    has_weight = weight is not None
    dx = np.empty_like(x)
    dweight = np.zeros(channels, np.float64)
    dbias = np.zeros(channels, np.float64)
    if x.size:
        kernel = _batch_norm_backward_parallel if x.size >= PARALLEL_MIN_WORK and \
            x.shape[1] > 1 else _batch_norm_backward_serial
        kernel(
            grad, x, np.ascontiguousarray(mean), np.ascontiguousarray(rstd),
            np.ascontiguousarray(weight) if has_weight else np.empty(0, x.dtype), has_weight,
            bool(batch_stats), dx, dweight, dbias)
    if not has_weight:
        return dx, None, None
    return dx, dweight.astype(x.dtype), dbias.astype(x.dtype)
