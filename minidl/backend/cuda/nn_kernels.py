"""Row kernels for softmax, log-softmax, fused softmax-cross-entropy and layer norm; GELU.

A row kernel gives each row (the softmax axis, a layer-norm feature vector) to one thread
block. Its threads stride along the row, and the row's maximum, sum or mean comes from a tree
reduction in shared memory (see :mod:`.reduction` for the pattern); then every thread writes its
share of the row from those per-row numbers. Statistics are accumulated in float64 and results
rounded once to the input's dtype, so they agree with the reference to the dtype's precision.

The formulas, and why they are stable, are documented in the reference
(:mod:`minidl.backend.reference.nn_kernels`); the kernels follow them.
"""

from __future__ import annotations

import math

import numpy as np
from numba import cuda, float64

from ..reference.nn_kernels import check_cross_entropy_reduction, check_gelu_approximate
from .deferred_checks import report_bad_value, take_slot
from .device import empty, launch
from .elementwise import binary, unary
from .movement import reshape, transpose
from .reduction import REDUCE_THREADS, sum as reduce_sum

ROW_BLOCKS = 4 if REDUCE_THREADS < 32 else 65535
"""Most blocks a row kernel launches (each loops over rows with a grid stride)."""


@cuda.jit(device=True)
def block_total(scratch, value, largest):
    """The block-wide sum (or max when ``largest``) of every thread's ``value``."""
    t = cuda.threadIdx.x
    scratch[t] = value
    cuda.syncthreads()
    step = REDUCE_THREADS // 2
    while step > 0:
        if t < step:
            if largest:
                if scratch[t + step] > scratch[t]:
                    scratch[t] = scratch[t + step]
            else:
                scratch[t] += scratch[t + step]
        cuda.syncthreads()
        step //= 2
    total = scratch[0]
    cuda.syncthreads()
    return total


@cuda.jit(device=True)
def _exp(z):
    # z <= 0 here (shifted by the row max) except for nan; guarded so the simulator's Python
    # math never raises.
    if z != z:
        return z
    return math.exp(z)


@cuda.jit(device=True)
def _softmax_row(x, out, base, length, logarithm, scratch):
    """One row's softmax (or log-softmax), by the whole block: its max, then its sum of
    exponentials shifted by the max, then every value."""
    t = cuda.threadIdx.x
    peak = -math.inf
    for i in range(t, length, REDUCE_THREADS):
        if x[base + i] > peak:
            peak = float(x[base + i])
    peak = block_total(scratch, peak, True)
    total = 0.0
    for i in range(t, length, REDUCE_THREADS):
        total += _exp(x[base + i] - peak)
    total = block_total(scratch, total, False)
    for i in range(t, length, REDUCE_THREADS):
        if logarithm:
            out[base + i] = x[base + i] - peak - math.log(total)
        else:
            out[base + i] = _exp(x[base + i] - peak) / total


@cuda.jit
def _softmax_rows(x, out, rows, length, logarithm):
    scratch = cuda.shared.array(REDUCE_THREADS, np.float64)
    for row in range(cuda.blockIdx.x, rows, cuda.gridDim.x):
        _softmax_row(x, out, row * length, length, logarithm, scratch)


def _along_last(x, axis):
    axis = int(axis) % x.ndim
    if axis == x.ndim - 1:
        return x, None
    order = tuple(a for a in range(x.ndim) if a != axis) + (axis,)
    return transpose(x, order), order


def _softmax(x, axis, logarithm):
    moved, order = _along_last(x, axis)
    length = moved.shape[-1] if moved.ndim else 1
    rows = moved.size // length if length else 0
    out = empty(moved.shape, x.dtype)
    if out.size:
        _softmax_rows[min(rows, ROW_BLOCKS), REDUCE_THREADS](moved.buffer, out.buffer, rows,
                                                              length, logarithm)
    if order is None:
        return out
    inverse = tuple(np.argsort(order))
    return transpose(out, inverse)


def softmax(x, axis):
    return _softmax(x, axis, False)


def log_softmax(x, axis):
    return _softmax(x, axis, True)


# -- softmax + cross-entropy -----------------------------------------------------------------------

@cuda.jit
def _cross_entropy_rows(logits, log_probs, targets, losses, rows, classes, ignore_index,
                        smoothing, first_bad, slot, reduce, partials):
    # A block per row: the row's log-softmax, then its loss from the log-probabilities just
    # written. Thread 0 keeps the running sum of its block's losses and the count of its rows
    # not ignored; with ``reduce`` it leaves them in partials[2b], partials[2b + 1]: the first
    # level of the tree that sums the losses, at no extra launch (:func:`_cross_entropy_total`
    # is the second).
    scratch = cuda.shared.array(REDUCE_THREADS, np.float64)
    t = cuda.threadIdx.x
    total, kept = float64(0.0), 0.0  # (float64: a bare 0.0 adds in float32 on the simulator)
    for row in range(cuda.blockIdx.x, rows, cuda.gridDim.x):
        base = row * classes
        _softmax_row(logits, log_probs, base, classes, True, scratch)
        spread = 0.0  # Σ_c log p_c, for label smoothing
        if smoothing != 0.0:
            for c in range(t, classes, REDUCE_THREADS):
                spread += log_probs[base + c]
        # (block_total's barrier also makes every thread's log_probs visible to thread 0)
        spread = block_total(scratch, spread, False)
        if t == 0:
            target = targets[row]
            loss = 0.0
            if target != ignore_index:
                kept += 1.0
                if target < 0 or target >= classes:
                    # Checked here, where the target is read anyway, and reported at the next
                    # synchronisation (deferred_checks); the row's loss is nan until then.
                    cuda.atomic.min(first_bad, slot, row)
                    loss = math.nan
                else:
                    loss = -(1.0 - smoothing) * log_probs[base + target] \
                        - smoothing / classes * spread
            losses[row] = loss
            total += losses[row]  # (the rounded loss, as a sum of the losses array adds it)
    if reduce and t == 0:
        partials[2 * cuda.blockIdx.x] = total
        partials[2 * cuda.blockIdx.x + 1] = kept


@cuda.jit
def _cross_entropy_total(partials, blocks, mean, out):
    # One block folds the per-block sums and counts (in a fixed order: the bits repeat) into
    # the sum, or the mean over the rows not ignored: nan when there are none, as PyTorch's.
    scratch = cuda.shared.array(REDUCE_THREADS, np.float64)
    t = cuda.threadIdx.x
    total, kept = 0.0, 0.0
    for b in range(t, blocks, REDUCE_THREADS):
        total += partials[2 * b]
        kept += partials[2 * b + 1]
    total = block_total(scratch, total, False)
    kept = block_total(scratch, kept, False)
    if t == 0:
        if mean:
            out[0] = total / kept if kept > 0 else math.nan
        else:
            out[0] = total


@cuda.jit
def _cross_entropy_mean_scale(grad, targets, rows, ignore_index, out):
    # d mean / d loss_i = grad / (rows not ignored), the count at least 1 so that a batch with
    # every row ignored gets a zero gradient rather than nan. One block counts the targets.
    scratch = cuda.shared.array(REDUCE_THREADS, np.float64)
    t = cuda.threadIdx.x
    kept = 0.0
    for i in range(t, rows, REDUCE_THREADS):
        if targets[i] != ignore_index:
            kept += 1.0
    kept = block_total(scratch, kept, False)
    if t == 0:
        out[0] = grad[0] / (kept if kept > 1.0 else 1.0)


@cuda.jit
def _cross_entropy_grad(count, grad_losses, grad_stride, log_probs, targets, out, classes,
                        ignore_index, smoothing):
    # grad_stride 0 reads one gradient for every row (a reduced loss's), 1 one per row.
    # Element e is (row i, class c). The thread divides once, for its first element and for
    # its grid stride in rows and classes; then it steps (i, c) along without dividing.
    e, step = cuda.grid(1), cuda.gridsize(1)
    i, c = e // classes, e % classes
    step_rows, step_classes = step // classes, step % classes
    while e < count:
        target = targets[i]
        if target == ignore_index:
            out[e] = 0
        else:
            d = math.exp(log_probs[e]) - smoothing / classes
            if c == target:
                d -= 1.0 - smoothing
            out[e] = d * grad_losses[i * grad_stride]
        e += step
        i += step_rows
        c += step_classes
        if c >= classes:
            c -= classes
            i += 1


def softmax_cross_entropy_forward(logits, targets, ignore_index, label_smoothing,
                                  reduction="none"):
    """The contract's primitive in one launch (a block per row: log-softmax and loss), two when
    reduced (each block's partial sum and count, then one block sums those). An
    out-of-range target raises its ``ValueError`` at the next synchronisation (a copy to the
    host, ``md.cuda.synchronize()``), not here: checking at once would stop the host every
    training step (see :mod:`.deferred_checks`)."""
    from .movement import astype, full
    check_cross_entropy_reduction(reduction)
    n, classes = logits.shape
    targets = astype(targets, np.int64)
    log_probs = empty((n, classes), logits.dtype)
    losses = empty((n,), logits.dtype)
    reduce = reduction != "none"
    if not n:
        if not reduce:
            return losses, log_probs
        return full((), 0.0 if reduction == "sum" else math.nan, logits.dtype), log_probs
    first_bad, slot = take_slot(report_bad_value(
        targets, ValueError, lambda value: f"target {value} is out of range for {classes} "
                                           f"classes"))
    blocks = min(n, ROW_BLOCKS)
    partials = empty((2 * blocks,), np.float64) if reduce else losses
    _cross_entropy_rows[blocks, REDUCE_THREADS](logits.buffer, log_probs.buffer, targets.buffer,
                                                losses.buffer, n, classes, int(ignore_index),
                                                float(label_smoothing), first_bad, slot, reduce,
                                                partials.buffer)
    if not reduce:
        return losses, log_probs
    loss = empty((), logits.dtype)
    _cross_entropy_total[1, REDUCE_THREADS](partials.buffer, blocks, reduction == "mean",
                                            loss.buffer)
    return loss, log_probs


def softmax_cross_entropy_backward(grad_losses, log_probs, targets, ignore_index,
                                   label_smoothing, reduction="none"):
    """The contract's primitive: one launch (two for a mean: the count of rows not ignored,
    then the gradient)."""
    from .movement import astype
    check_cross_entropy_reduction(reduction)
    n, classes = log_probs.shape
    targets = astype(targets, np.int64)
    grad_losses = astype(grad_losses, log_probs.dtype)
    out = empty(log_probs.shape, log_probs.dtype)
    if not out.size:
        return out
    if reduction == "mean":
        scale = empty((), log_probs.dtype)
        _cross_entropy_mean_scale[1, REDUCE_THREADS](grad_losses.buffer, targets.buffer, n,
                                                     int(ignore_index), scale.buffer)
        grad_losses = scale
    blocks, threads = launch(out.size)
    _cross_entropy_grad[blocks, threads](out.size, grad_losses.buffer,
                                         1 if reduction == "none" else 0, log_probs.buffer,
                                         targets.buffer, out.buffer, classes,
                                         int(ignore_index), float(label_smoothing))
    return out


# -- GELU ------------------------------------------------------------------------------------------

_SQRT_HALF = math.sqrt(0.5)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)
_TANH_SCALE = math.sqrt(2.0 / math.pi)
_TANH_CUBIC = 0.044715


@cuda.jit(device=True)
def _logistic(z):
    # 1 / (1 + e^-z); e^-z overflowing only makes the result exactly 0
    if -z > 709.0:
        return 0.0
    return 1.0 / (1.0 + math.exp(-z))


def gelu_exact(x):
    x = float(x)
    return x * 0.5 * math.erfc(-_SQRT_HALF * x)


def gelu_tanh(x):
    x = float(x)
    return x * _logistic(2.0 * _TANH_SCALE * (x + _TANH_CUBIC * x * x * x))


def gelu_exact_grad(grad, x):
    x = float(x)
    pdf = _INV_SQRT_2PI * math.exp(-0.5 * x * x)
    return grad * (0.5 * math.erfc(-_SQRT_HALF * x) + x * pdf)


def gelu_tanh_grad(grad, x):
    x = float(x)
    u = _TANH_SCALE * (x + _TANH_CUBIC * x * x * x)
    rising, falling = _logistic(2.0 * u), _logistic(-2.0 * u)
    du_dx = _TANH_SCALE * (1.0 + 3.0 * _TANH_CUBIC * x * x)
    return grad * (rising + 2.0 * x * rising * falling * du_dx)


def gelu_forward(x, approximate):
    check_gelu_approximate(approximate)
    return unary(gelu_tanh if approximate == "tanh" else gelu_exact, x, x.dtype)


def gelu_backward(grad, x, approximate):
    check_gelu_approximate(approximate)
    return binary(gelu_tanh_grad if approximate == "tanh" else gelu_exact_grad, grad, x,
                  x.dtype, x.dtype)


# -- layer norm ------------------------------------------------------------------------------------

@cuda.jit
def _layer_norm_rows(x, y, mean_out, rstd_out, weight, bias, has_weight, has_bias, rows, length,
                     eps):
    scratch = cuda.shared.array(REDUCE_THREADS, np.float64)
    t = cuda.threadIdx.x
    for row in range(cuda.blockIdx.x, rows, cuda.gridDim.x):
        base = row * length
        total = 0.0
        for i in range(t, length, REDUCE_THREADS):
            total += x[base + i]
        mean = block_total(scratch, total, False) / length
        spread = 0.0
        for i in range(t, length, REDUCE_THREADS):
            d = x[base + i] - mean
            spread += d * d
        rstd = 1.0 / math.sqrt(block_total(scratch, spread, False) / length + eps)
        for i in range(t, length, REDUCE_THREADS):
            value = (x[base + i] - mean) * rstd
            if has_weight:
                value *= weight[i]
            if has_bias:
                value += bias[i]
            y[base + i] = value
        if t == 0:
            mean_out[row] = mean
            rstd_out[row] = rstd


@cuda.jit
def _layer_norm_grad_rows(grad, x, mean, rstd, weight, has_weight, dx, rows, length):
    # dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = grad * weight
    scratch = cuda.shared.array(REDUCE_THREADS, np.float64)
    t = cuda.threadIdx.x
    for row in range(cuda.blockIdx.x, rows, cuda.gridDim.x):
        base = row * length
        g_total = 0.0
        gx_total = 0.0
        for i in range(t, length, REDUCE_THREADS):
            g = float(grad[base + i])
            if has_weight:
                g *= weight[i]
            g_total += g
            gx_total += g * (x[base + i] - mean[row]) * rstd[row]
        g_mean = block_total(scratch, g_total, False) / length
        gx_mean = block_total(scratch, gx_total, False) / length
        for i in range(t, length, REDUCE_THREADS):
            g = float(grad[base + i])
            if has_weight:
                g *= weight[i]
            xhat = (x[base + i] - mean[row]) * rstd[row]
            dx[base + i] = rstd[row] * (g - g_mean - xhat * gx_mean)


def optional_buffer(array, dtype):
    """(buffer, present): kernels take a one-element stand-in for a missing weight or bias."""
    if array is None:
        return empty((1,), dtype).buffer, False
    return array.buffer, True


def layer_norm_forward(x, weight, bias, eps):
    rows, length = x.shape
    y = empty(x.shape, x.dtype)
    mean, rstd = empty((rows,), x.dtype), empty((rows,), x.dtype)
    if rows and length:
        w, has_w = optional_buffer(weight, x.dtype)
        b, has_b = optional_buffer(bias, x.dtype)
        _layer_norm_rows[min(rows, ROW_BLOCKS), REDUCE_THREADS](
            x.buffer, y.buffer, mean.buffer, rstd.buffer, w, b, has_w, has_b, rows, length,
            float(eps))
    return y, mean, rstd


def layer_norm_backward(grad, x, mean, rstd, weight):
    rows, length = x.shape
    dx = empty(x.shape, x.dtype)
    if rows and length:
        w, has_w = optional_buffer(weight, x.dtype)
        _layer_norm_grad_rows[min(rows, ROW_BLOCKS), REDUCE_THREADS](
            grad.buffer, x.buffer, mean.buffer, rstd.buffer, w, has_w, dx.buffer, rows, length)
    if weight is None:
        return dx, None, None
    from .elementwise import mul, sub
    xhat = binary(mul, binary(sub, x, reshape(mean, (rows, 1)), x.dtype, x.dtype),
                  reshape(rstd, (rows, 1)), x.dtype, x.dtype)
    dweight = reduce_sum(binary(mul, grad, xhat, x.dtype, x.dtype), 0)
    return dx, dweight, reduce_sum(grad, 0)


__all__ = ["softmax", "log_softmax", "softmax_cross_entropy_forward",
           "softmax_cross_entropy_backward", "gelu_forward", "gelu_backward",
           "layer_norm_forward", "layer_norm_backward"]
