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
from .vector_math import (CONTRACT_TO_FMA, NORMAL_DENSITY_SCALE, UNSCALE_FLOAT32, exp_of_negative,
                          scaled_exp_of_negative_float32, scaled_normal_tail_float32)

__all__ = [
    "softmax",
    "softmax_backward",
    "log_softmax",
    "softmax_cross_entropy_forward",
    "softmax_cross_entropy_backward",
    "relu_backward",
    "gelu_forward",
    "gelu_backward",
    "layer_norm_forward",
    "layer_norm_backward",
]

# ---------------------------------------------------------------------------------------------
# softmax over the last axis of a 2-D array; other axes are moved there by the wrappers.
# These kernels run on one thread; .row_threads splits large inputs into fixed blocks of rows
# and runs them on each block.


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


# float32 log-softmax and cross-entropy rows take the vectorised float64 exp of .vector_math,
# and find their max and sums by folding (softmax sums in lanes instead, see _LANES below):
# adding the upper half of a row's values onto its lower half is one loop of independent
# additions, which LLVM vectorises (a running total is a chain of dependent additions, one every
# ~4 cycles, that it may not reorder). Folded until a few values remain, the row is summed as a
# fixed tree -- pairwise summation, more accurate than a running total -- in an order set by the
# width alone, so every thread count gives the same bits. The maximum folds the same way.
_FOLDED_TO = 8


@njit(cache=True, inline="always", error_model="numpy")
def _folded_sum(values, count):
    """Σ values[:count] as a fixed tree of vectorised folds (``values`` is overwritten)."""
    while count > _FOLDED_TO:
        half = (count + 1) // 2
        for k in range(count - half):
            values[k] += values[k + half]
        count = half
    total = 0.0
    for k in range(count):
        total += values[k]
    return total


@njit(cache=True, inline="always", error_model="numpy")
def _largest(row, scratch):
    """max(row), folded in ``scratch`` (float64, at least as long as the row).

    A NaN may or may not win (a select keeps the left value unless the right one is larger),
    but a row holding a NaN becomes all NaN either way: its exp(x - max) is NaN, so is the sum.
    """
    count, half = row.size, (row.size + 1) // 2
    for k in range(count - half):  # the first fold, read from the row itself
        left, right = row[k], row[k + half]
        scratch[k] = right if right > left else left
    if count % 2:  # the middle value has no partner
        scratch[half - 1] = row[half - 1]
    count = half
    while count > 1:
        half = (count + 1) // 2
        for k in range(count - half):
            left, right = scratch[k], scratch[k + half]
            scratch[k] = right if right > left else left
        count = half
    return scratch[0]


@njit(cache=True, inline="always", error_model="numpy", fastmath=CONTRACT_TO_FMA)
def _log_sum_exp_shifted(row, row_max, scratch):
    """log Σ exp(row - row_max), each exp vectorised (row_max - x >= 0, or NaN) and summed in
    float64 by folding: the log-sum-exp of the row less its max, at least log 1 = 0.

    The first fold is made as the exps are computed, two per step, and the rest in the scratch.
    """
    count, half = row.size, (row.size + 1) // 2
    for k in range(count - half):
        scratch[k] = (exp_of_negative(row_max - np.float64(row[k]))
                      + exp_of_negative(row_max - np.float64(row[k + half])))
    if count % 2:
        scratch[half - 1] = exp_of_negative(row_max - np.float64(row[half - 1]))
    return math.log(_folded_sum(scratch, half))


@njit(cache=True, inline="always", error_model="numpy", fastmath=CONTRACT_TO_FMA)
def _scaled_exp_of_difference_float32(high_value, low_value):
    """exp(-(high_value - low_value))·2^64 in float32, for float32 values with high >= low.

    The difference is rounded to float32 as y, and its rounding error e = (high - low) - y is
    found exactly by Knuth's two-sum (six float32 operations, no branch); the exponential takes
    the pair y + e. Rounding y alone would cost exp(-y) a relative error of up to y·2^-24: at
    y ~ 100 (an entry e^-100 below the row's max) dozens of ulps.
    """
    y = high_value - low_value
    high_part = y + low_value  # two-sum of high and -low: the parts of y each came from
    low_part = y - high_part  # (-low's)
    error = (high_value - high_part) - (low_value + low_part)
    return scaled_exp_of_negative_float32(y, error)


# Short rows (attention's 64 keys) are too short for folding: a fold of 32, 16, 8 values is
# shorter than LLVM's vectorised loop body (a few vectors, unrolled), so each fold ran in its
# scalar remainder. The kernels below instead keep a row's running maxima and sums in lanes,
# lane j taking the elements j, j + lanes, j + 2·lanes, ...: an inner loop of a fixed number
# of steps, which LLVM turns into whole-vector operations, then the lanes are combined as a
# fixed tree. The order depends on the width alone, so every thread count gives the same bits.
# How many lanes was measured per loop (rows of 64 and 128 floats): a plain sum (of values or
# products) runs best over _SUM_LANES, which LLVM's loop vectoriser takes as a few unrolled
# vectors (16 lanes: 1.6-1.7x slower, layer norm's statistics and softmax's gradient); layer
# norm's gradient terms over _LANES (64: 1.3x slower); softmax's max the same either way. A sum
# is best kept a loop of its own: softmax's exps summed as they were made took 1.2x longer
# than made in one plain loop, then summed in another.
_LANES = 16
_SUM_LANES = 64


@njit(cache=True, inline="always")
def _lanes_total(lanes, count):
    """Σ lanes[:count] (count a power of two) as a fixed tree of halves, leaving every lane 0
    for the next row's sum. ``count`` is a module constant, so the inlined tree's loops have
    fixed lengths, and LLVM unrolls and vectorises them."""
    half = count // 2
    while half:
        for lane in range(half):
            lanes[lane] += lanes[lane + half]
            lanes[lane + half] = 0.0
        half //= 2
    total = lanes[0]
    lanes[0] = 0.0
    return total


@njit(cache=True, error_model="numpy", fastmath=CONTRACT_TO_FMA)
def _softmax_rows_vectorised(x, out, take_log):
    """float32 softmax (or log-softmax) rows with one vectorised exp per element.

    Softmax computes in float32 -- twice float64's lanes per vector instruction -- with the
    exps summed in float64: exp(x - max)·2^64 (:func:`_scaled_exp_of_difference_float32`)
    goes into ``out``, is summed from there, and ``out`` is scaled by 1/sum in place. The 2^64
    cancels in the ratio, and keeps entries as small as float32's subnormals accurate until that
    one last rounding. Log-softmax: the exps are only summed
    (:func:`_log_sum_exp_shifted`), then x - max - log(sum) is written. A NaN in the row, or a
    max of ±inf (inf - inf), makes a NaN exp, so the sum and then every entry are NaN, as in
    the reference's exp(x - max) (a NaN may or may not win the max; the row is NaN either way).
    """
    rows, width = x.shape
    if take_log:
        scratch = np.empty(width)
        for r in range(rows):
            row = x[r]
            _log_softmax_row(row, _largest(row, scratch), out[r], scratch, False)
        return
    maxima = np.empty(_LANES, np.float32)
    sums = np.zeros(_SUM_LANES)
    whole = width - width % _LANES  # the row's elements in whole groups of _LANES
    whole_sum = width - width % _SUM_LANES
    for r in range(rows):
        for lane in range(_LANES):
            maxima[lane] = -np.inf
        for start in range(0, whole, _LANES):
            for lane in range(_LANES):
                value = x[r, start + lane]
                maxima[lane] = value if value > maxima[lane] else maxima[lane]
        for k in range(whole, width):
            value = x[r, k]
            maxima[k - whole] = value if value > maxima[k - whole] else maxima[k - whole]
        half = _LANES // 2
        while half:
            for lane in range(half):
                other = maxima[lane + half]
                maxima[lane] = other if other > maxima[lane] else maxima[lane]
            half //= 2
        largest = maxima[0]
        for k in range(width):
            out[r, k] = _scaled_exp_of_difference_float32(largest, x[r, k])
        for start in range(0, whole_sum, _SUM_LANES):  # summed apart: see _SUM_LANES
            for lane in range(_SUM_LANES):
                sums[lane] += np.float64(out[r, start + lane])
        for k in range(whole_sum, width):
            sums[k - whole_sum] += np.float64(out[r, k])
        inv_total = np.float32(1.0 / _lanes_total(sums, _SUM_LANES))
        for k in range(width):
            out[r, k] = out[r, k] * inv_total


@njit(cache=True, inline="always", error_model="numpy", fastmath=CONTRACT_TO_FMA)
def _log_softmax_row(row, row_max, out_row, scratch, with_sum):
    """out_row = row - max - log Σ exp(row - max), in float64 rounded once on the store.

    Returns Σ out_row (the float64 values, folded) when ``with_sum``, else 0: cross-entropy's
    label smoothing needs it, and the plain log-softmax skips its pass over the scratch row.
    """
    log_total = _log_sum_exp_shifted(row, row_max, scratch)
    if not with_sum:
        for k in range(row.size):
            out_row[k] = (np.float64(row[k]) - row_max) - log_total
        return 0.0
    for k in range(row.size):
        value = (np.float64(row[k]) - row_max) - log_total
        out_row[k] = value
        scratch[k] = value
    return _folded_sum(scratch, row.size)


def _softmax_along(x, axis, take_log):
    x = np.asarray(x)
    moved = np.moveaxis(x, axis, -1)
    width = moved.shape[-1]
    # Rows are counted explicitly: reshape cannot infer -1 when the softmax axis is empty.
    rows = np.asarray(moved, order="C").reshape(moved.size // width if width else 0, width)
    out = np.empty_like(rows)
    if out.size:
        if rows.dtype == np.float32:
            _softmax_rows_vectorised(rows, out, take_log)
        else:
            _softmax_rows(rows, out, take_log)
    return np.moveaxis(out.reshape(moved.shape), -1, axis)


def softmax(x: np.ndarray, axis: int) -> np.ndarray:
    """exp(x) / sum(exp(x)) along ``axis``, computed with the max subtracted first."""
    return _softmax_along(x, axis, False)


@njit(cache=True)
def _softmax_backward_rows(grad, out, dx):
    rows, width = out.shape
    dots = np.zeros(_SUM_LANES)  # Σ grad ⊙ out in lanes, as softmax's sums (see _SUM_LANES)
    whole = width - width % _SUM_LANES
    for r in range(rows):
        for start in range(0, whole, _SUM_LANES):
            for lane in range(_SUM_LANES):
                dots[lane] += grad[r, start + lane] * out[r, start + lane]
        for k in range(whole, width):
            dots[k - whole] += grad[r, k] * out[r, k]
        dot = _lanes_total(dots, _SUM_LANES)
        for k in range(width):
            dx[r, k] = out[r, k] * (grad[r, k] - dot)


def softmax_backward(grad: np.ndarray, out: np.ndarray, axis: int) -> np.ndarray:
    """out ⊙ (grad - Σ grad ⊙ out) along ``axis``: one pass for the dot, one for the result,
    where NumPy makes four (product, sum, difference, product) and three temporaries."""
    out = np.asarray(out)
    grad = np.broadcast_to(np.asarray(grad, dtype=out.dtype), out.shape)
    moved_out, moved_grad = np.moveaxis(out, axis, -1), np.moveaxis(grad, axis, -1)
    width = moved_out.shape[-1]
    count = moved_out.size // width if width else 0
    out_rows = np.asarray(moved_out, order="C").reshape(count, width)
    grad_rows = np.asarray(moved_grad, order="C").reshape(count, width)
    dx = np.empty_like(out_rows)
    if dx.size:
        _softmax_backward_rows(grad_rows, out_rows, dx)
    return np.moveaxis(dx.reshape(moved_out.shape), -1, axis)


def log_softmax(x: np.ndarray, axis: int) -> np.ndarray:
    """x - max - log(sum(exp(x - max))) along ``axis``."""
    return _softmax_along(x, axis, True)


# ---------------------------------------------------------------------------------------------
# softmax + cross-entropy


@njit(cache=True, inline="always")
def _smoothed_loss(log_probs_row, target, ignore_index, smoothing, sum_log_probs):
    """-(1-eps) logp[target] - eps/C Σ logp, or 0 for an ignored row."""
    if target == ignore_index:
        return 0.0
    if smoothing == 0.0:
        # no smoothing term at all: 0 · Σ logp would be nan where a log-probability is -inf
        # (a logit 1e308 below the largest), as the reference leaves it out too
        return -log_probs_row[target]
    return (-(1.0 - smoothing) * log_probs_row[target]
            - smoothing / log_probs_row.size * sum_log_probs)


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
        losses[r] = _smoothed_loss(log_probs[r], targets[r], ignore_index, smoothing,
                                   sum_log_probs)


@njit(cache=True, error_model="numpy", fastmath=CONTRACT_TO_FMA)
def _cross_entropy_forward_vectorised(logits, targets, ignore_index, smoothing, losses,
                                      log_probs):
    """float32 rows: the log-softmax of :func:`_softmax_rows_vectorised`, then the loss."""
    rows, num_classes = logits.shape
    scratch = np.empty(num_classes)
    for r in range(rows):
        row, out_row = logits[r], log_probs[r]
        sum_log_probs = _log_softmax_row(row, _largest(row, scratch), out_row, scratch,
                                         smoothing != 0.0)
        losses[r] = _smoothed_loss(out_row, targets[r], ignore_index, smoothing, sum_log_probs)


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


@njit(cache=True, error_model="numpy", fastmath=CONTRACT_TO_FMA)
def _cross_entropy_backward_vectorised(grad_losses, log_probs, targets, ignore_index, smoothing,
                                       dlogits):
    """float32 rows: :func:`_cross_entropy_backward_kernel` with softmax_k = exp(logp_k) from
    the vectorised exp(-y), in float64.

    That exp takes y = -logp >= 0, which every log-probability the forward pass makes satisfies
    (or is NaN). A row given a positive one (not a log-probability, but allowed) is redone with
    the C library's exp, so that it overflows as before.
    """
    rows, num_classes = log_probs.shape
    uniform = smoothing / num_classes
    for r in range(rows):
        target = targets[r]
        out_row = dlogits[r]
        if target == ignore_index:
            out_row[:] = 0
            continue
        row, grad = log_probs[r], np.float64(grad_losses[r])
        positive = False
        for k in range(num_classes):
            log_prob = np.float64(row[k])
            out_row[k] = grad * (exp_of_negative(-log_prob) - uniform)
            positive |= log_prob > 0.0
        if positive:
            _cross_entropy_backward_kernel(grad_losses[r:r + 1], log_probs[r:r + 1],
                                           targets[r:r + 1], ignore_index, smoothing,
                                           dlogits[r:r + 1])
        else:
            out_row[target] -= grad * (1.0 - smoothing)


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
        kernel = (_cross_entropy_forward_vectorised if logits.dtype == np.float32
                  else _cross_entropy_forward_kernel)
        kernel(logits, targets, int(ignore_index), float(label_smoothing), losses, log_probs)
    return losses, log_probs


def softmax_cross_entropy_backward(grad_losses, log_probs, targets, ignore_index, label_smoothing) -> np.ndarray:
    """dlogits = grad_i * (softmax - ((1-eps)*onehot + eps/C)); zero rows for ignored targets."""
    log_probs = np.asarray(log_probs, order="C")
    grad_losses = np.asarray(grad_losses, dtype=log_probs.dtype, order="C")
    targets = np.asarray(targets, dtype=np.int64, order="C")
    dlogits = np.empty_like(log_probs)
    if dlogits.size:
        kernel = (_cross_entropy_backward_vectorised if log_probs.dtype == np.float32
                  else _cross_entropy_backward_kernel)
        kernel(grad_losses, log_probs, targets, int(ignore_index), float(label_smoothing), dlogits)
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


# float32 arrays take float32 formulas (.vector_math): twice float64's lanes per vector
# instruction, no C-library call, results within a few float32 ulps of the float64 curve (the
# kernel tests measure the bound over a dense sweep). Both curves come from
# one exponential scaled by 2^64 (S below) and are unscaled by one last multiply by 1/S, so
# that the far negative tail keeps its accuracy down to float32's subnormals.
_DENSITY_SCALE_FLOAT32 = np.float32(NORMAL_DENSITY_SCALE)
_TANH_SCALE_FLOAT32 = np.float32(_TANH_SCALE)
_TANH_SLOPE_CUBIC_FLOAT32 = np.float32(3.0 * _TANH_CUBIC)
_ONE_FLOAT32 = np.float32(1.0)
_TWO_FLOAT32 = np.float32(2.0)
# Beyond |v| = 16 the tanh curve's exponential is exactly 0, so v·u'(v) only has to stay
# finite there (v³ overflows float32 near 7e12, and 0·inf is NaN): v is clamped to ±16 in it.
_TANH_SLOPE_BOUND = np.float32(16.0)


@njit(cache=True, inline="always", error_model="numpy", fastmath=CONTRACT_TO_FMA)
def _tanh_exponential_float32(v):
    """(S·exp(-2|u|), 1 / (1 + exp(-2|u|))) for the tanh curve's u = sqrt(2/pi)(v + 0.044715 v³).

    2|u| reaches ~100 in the tails, where float32 arithmetic alone would be off by dozens of
    ulps (see .vector_math), so it is formed in float64 and split into the float32 pair
    high + low that the exponential takes. (A float32-only pair, as v²/2 gets, would cost about
    as much here: u has rounded constants and a sum, ~18 float32 instructions against ~9
    double-width float64 ones, counted, not timed.) The second value is sigmoid(2|u|),
    the larger of sigmoid(±2u); the smaller is exp(-2|u|) times it.
    """
    wide = np.float64(v)
    exponent = abs(2.0 * _TANH_SCALE * wide * (1.0 + _TANH_CUBIC * wide * wide))
    high = np.float32(exponent)
    scaled = scaled_exp_of_negative_float32(high, np.float32(exponent - np.float64(high)))
    return scaled, _ONE_FLOAT32 / (_ONE_FLOAT32 + scaled * UNSCALE_FLOAT32)


@njit(cache=True, inline="always", error_model="numpy", fastmath=CONTRACT_TO_FMA)
def _gelu_float32(v, use_tanh):
    """GELU(v) = v Phi(v) of a float32 v, in float32.

    v >= 0: v·(1 - Phi(-v)). v < 0: v·Phi(v) = v·tail, scaled until the end. Tanh: Phi(v) ~
    sigmoid(2u), which is `large` for v >= 0 and e·large below (u has v's sign).
    """
    if use_tanh:
        scaled, large = _tanh_exponential_float32(v)
        return v * large if v >= 0 else (v * scaled * large) * UNSCALE_FLOAT32
    tail, _ = scaled_normal_tail_float32(v)
    return v * (_ONE_FLOAT32 - tail * UNSCALE_FLOAT32) if v >= 0 else (v * tail) * UNSCALE_FLOAT32


@njit(cache=True, inline="always", error_model="numpy", fastmath=CONTRACT_TO_FMA)
def _gelu_slope_float32(v, use_tanh):
    """GELU'(v) = Phi(v) + v Phi'(v) of a float32 v, in float32.

    Exact: Phi'(v) = phi(v). v >= 0: 1 + (v phi - tail); v < 0: tail + v phi, scaled until the
    end (it crosses zero at v = -0.75, where the two cancel). Tanh: Phi'(v) =
    2 sigmoid(2u) sigmoid(-2u) u'(v), and sigmoid(2u) sigmoid(-2u) = e·large² either way.
    """
    if use_tanh:
        scaled, large = _tanh_exponential_float32(v)
        # v - v is 0, except at ±inf (and NaN), where it keeps the reference's inf·0 = NaN.
        bounded = max(min(v, _TANH_SLOPE_BOUND), -_TANH_SLOPE_BOUND) + (v - v)
        inner_slope = _TANH_SCALE_FLOAT32 * (
            _ONE_FLOAT32 + _TANH_SLOPE_CUBIC_FLOAT32 * bounded * bounded)
        spread = _TWO_FLOAT32 * bounded * inner_slope * large  # v Phi'(v) = spread · e · large
        if v >= 0:
            return large + (spread * scaled * large) * UNSCALE_FLOAT32
        return (scaled * large * (_ONE_FLOAT32 + spread)) * UNSCALE_FLOAT32
    tail, gaussian = scaled_normal_tail_float32(v)
    spread = v * _DENSITY_SCALE_FLOAT32 * gaussian  # v phi(v), scaled
    if v >= 0:
        return _ONE_FLOAT32 + (spread - tail) * UNSCALE_FLOAT32
    return (tail + spread) * UNSCALE_FLOAT32


@njit(cache=True, error_model="numpy", fastmath=CONTRACT_TO_FMA)
def _gelu_forward_vectorised(x, out, use_tanh):
    for k in range(x.size):
        out[k] = _gelu_float32(x[k], use_tanh)


@njit(cache=True, error_model="numpy", fastmath=CONTRACT_TO_FMA)
def _gelu_backward_vectorised(grad, x, dx, use_tanh):
    # The loop runs over range(x.size), not a (start, stop) pair: with a start Numba cannot
    # tell that k >= 0 and guards every read against a negative index, which stopped LLVM from
    # vectorising this three-array loop (7x slower). Spans pass slices instead.
    for k in range(x.size):
        dx[k] = grad[k] * _gelu_slope_float32(x[k], use_tanh)


# Large activations are cut into spans spread over Numba's threads (elementwise, so the result
# is the same bits for any thread count); below PARALLEL_MIN_WORK elements starting the threads
# costs more than it saves.
_SPAN = 1 << 14


@njit(cache=True, parallel=True, error_model="numpy", fastmath=CONTRACT_TO_FMA)
def _gelu_forward_spans(x, out, use_tanh):
    for span in prange((x.size + _SPAN - 1) // _SPAN):
        part = slice(span * _SPAN, min(x.size, (span + 1) * _SPAN))
        _gelu_forward_vectorised(x[part], out[part], use_tanh)


@njit(cache=True, parallel=True, error_model="numpy", fastmath=CONTRACT_TO_FMA)
def _gelu_backward_spans(grad, x, dx, use_tanh):
    for span in prange((x.size + _SPAN - 1) // _SPAN):
        part = slice(span * _SPAN, min(x.size, (span + 1) * _SPAN))
        _gelu_backward_vectorised(grad[part], x[part], dx[part], use_tanh)


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


@njit(cache=True)
def _erf_kernel(x, out):
    for i in range(x.size):
        # In float64, rounded once on the store: the reference's rule for float32.
        out[i] = math.erf(np.float64(x[i]))


def erf(a: np.ndarray) -> np.ndarray:
    """erf of every element as one compiled loop: NumPy has no erf ufunc, so the reference calls
    Python's ``math.erf`` once per element (``math_function(a, "erf")`` of the Numba backend)."""
    a = np.asarray(a, order="C")
    out = np.empty_like(a)
    if a.size:
        _erf_kernel(a.reshape(-1), out.reshape(-1))
    return out


def gelu_forward(x: np.ndarray, approximate: str) -> np.ndarray:
    """GELU(x) = x * Phi(x), exact ("none", via erf) or with PyTorch's tanh approximation."""
    check_gelu_approximate(approximate)
    x = np.asarray(x, order="C")
    out = np.empty_like(x)
    if x.size:
        flat_x, flat_out, use_tanh = x.reshape(-1), out.reshape(-1), approximate == "tanh"
        if x.dtype != np.float32:
            _gelu_forward_kernel(flat_x, flat_out, use_tanh)
        elif x.size >= PARALLEL_MIN_WORK:
            _gelu_forward_spans(flat_x, flat_out, use_tanh)
        else:
            _gelu_forward_vectorised(flat_x, flat_out, use_tanh)
    return out


def gelu_backward(grad: np.ndarray, x: np.ndarray, approximate: str) -> np.ndarray:
    """grad * GELU'(x) for the chosen approximation."""
    check_gelu_approximate(approximate)
    x = np.asarray(x, order="C")
    grad = np.asarray(np.broadcast_to(grad, x.shape), dtype=x.dtype, order="C")
    dx = np.empty_like(x)
    if x.size:
        flat = grad.reshape(-1), x.reshape(-1), dx.reshape(-1), approximate == "tanh"
        if x.dtype != np.float32:
            _gelu_backward_kernel(*flat)
        elif x.size >= PARALLEL_MIN_WORK:
            _gelu_backward_spans(*flat)
        else:
            _gelu_backward_vectorised(*flat)
    return dx


# ---------------------------------------------------------------------------------------------
# layer norm over the last axis of (M, D)


# Each row's sums are kept in _LANES float64 lanes, as softmax's are (see _LANES): a running
# total is a chain of dependent additions, one every ~4 cycles, which LLVM may not reorder;
# _LANES independent totals are whole-vector additions. The lanes are then added as a fixed
# tree (:func:`_lanes_total`), so the order, and every bit, depends on the width alone.
@njit(cache=True)
def _layer_norm_forward_kernel(x, weight, bias, has_weight, has_bias, eps, y, mean, rstd):
    rows, width = x.shape
    totals = np.zeros(_SUM_LANES)
    whole = width - width % _SUM_LANES  # the row's elements in whole groups of _SUM_LANES
    for r in range(rows):
        for start in range(0, whole, _SUM_LANES):
            for lane in range(_SUM_LANES):
                totals[lane] += x[r, start + lane]
        for k in range(whole, width):
            totals[k - whole] += x[r, k]
        row_mean = _lanes_total(totals, _SUM_LANES) / width
        # Second pass over the centred values: exact where E[x^2] - E[x]^2 would cancel.
        for start in range(0, whole, _SUM_LANES):
            for lane in range(_SUM_LANES):
                centered = x[r, start + lane] - row_mean
                totals[lane] += centered * centered
        for k in range(whole, width):
            centered = x[r, k] - row_mean
            totals[k - whole] += centered * centered
        row_rstd = 1.0 / math.sqrt(_lanes_total(totals, _SUM_LANES) / width + eps)
        mean[r] = row_mean
        rstd[r] = row_rstd
        for k in range(width):
            value = (x[r, k] - row_mean) * row_rstd
            if has_weight:
                value *= weight[k]
            if has_bias:
                value += bias[k]
            y[r, k] = value


@njit(cache=True, inline="always")
def _layer_norm_terms(grad_value, x_value, weight_value, has_weight, row_mean, row_rstd):
    """(g, xhat) of one element: g = grad * weight (grad without a weight) and the normalised
    xhat = (x - mean) * rstd, in the arrays' arithmetic."""
    g = grad_value * weight_value if has_weight else grad_value
    return g, (x_value - row_mean) * row_rstd


@njit(cache=True)
def _layer_norm_backward_kernel(grad, x, mean, rstd, weight, has_weight, dx, partial_dweight, partial_dbias):
    rows, width = x.shape
    chunks = partial_dweight.shape[0]
    sums_g = np.zeros(_LANES)
    sums_g_xhat = np.zeros(_LANES)
    whole = width - width % _LANES  # the row's elements in whole groups of _LANES
    # Rows are split into contiguous chunks; each chunk sums its own dweight/dbias rows, so the
    # parameter gradients need no atomics and are reduced once at the end.
    for chunk in range(chunks):
        first = chunk * rows // chunks
        last = (chunk + 1) * rows // chunks
        for r in range(first, last):
            row_mean = mean[r]
            row_rstd = rstd[r]
            # mean(g) and mean(g * xhat) with g = grad * weight, each summed in lanes, and
            # the row's terms of dweight and dbias added in the same loop (moved to a loop of
            # their own, or into the dx loop below, they took float64 rows 1.4x longer and
            # saved float32 rows only 5%)
            for start in range(0, whole, _LANES):
                for lane in range(_LANES):
                    k = start + lane
                    g, xhat = _layer_norm_terms(grad[r, k], x[r, k], weight[k] if has_weight
                                                else 1.0, has_weight, row_mean, row_rstd)
                    sums_g[lane] += g
                    sums_g_xhat[lane] += g * xhat
                    if has_weight:
                        partial_dweight[chunk, k] += grad[r, k] * xhat
                        partial_dbias[chunk, k] += grad[r, k]
            for k in range(whole, width):
                g, xhat = _layer_norm_terms(grad[r, k], x[r, k], weight[k] if has_weight
                                            else 1.0, has_weight, row_mean, row_rstd)
                sums_g[k - whole] += g
                sums_g_xhat[k - whole] += g * xhat
                if has_weight:
                    partial_dweight[chunk, k] += grad[r, k] * xhat
                    partial_dbias[chunk, k] += grad[r, k]
            mean_g = _lanes_total(sums_g, _LANES) / width
            mean_g_xhat = _lanes_total(sums_g_xhat, _LANES) / width
            for k in range(width):
                g, xhat = _layer_norm_terms(grad[r, k], x[r, k], weight[k] if has_weight
                                            else 1.0, has_weight, row_mean, row_rstd)
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
