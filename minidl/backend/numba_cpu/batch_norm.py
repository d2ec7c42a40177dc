"""Batch norm as Numba kernels, split over threads by (n, c) planes.

Same names and results as :func:`minidl.backend.reference.nn_kernels.batch_norm_forward` and
``batch_norm_backward``, whose docstrings state the formulas. Statistics are per channel of x
viewed as (N, C, S): channel c is the N planes ``x[b, c]``, each S contiguous values.

**Planes are the units of work.** Every pass walks whole planes, each a contiguous run that
LLVM vectorises, and Numba's threads take blocks of whole planes (about :data:`TASK_ELEMENTS`
values each, a number of blocks fixed by the shape). A pass that sums writes one partial sum per
plane, into an (N, C) array; a channel's total then adds its N partials in the order b = 0, 1, ...
Forward with the batch's statistics (three passes over x)::

    sums[b, c]    = Σ_k x[b, c, k]                  mean[c] = Σ_b sums[b, c] / (N·S)
    squares[b, c] = Σ_k (x[b, c, k] - mean[c])²     var[c]  = Σ_b squares[b, c] / (N·S)
    y[b, c, k]    = (x[b, c, k] - mean[c])·rstd[c]·weight[c] + bias[c]

(the second pass sums the centred values: exact where E[x²] - E[x]² would cancel). Backward (two
passes): Σg and Σg·(x - mean) per plane, added per channel into dbias and dweight/rstd, then dx
plane by plane. Accumulators and the per-channel arithmetic are float64, as in the reference.

**Why the bits never depend on the thread count.** A plane's sum is computed by the same compiled
loop whichever thread runs it, and the channel totals add the planes' sums in a fixed order: the
split of planes over threads changes who computes a number, never how.

**Why the plane sums may reassociate.** A sum written as one running total is a chain of
dependent additions that LLVM must keep in order, one element at a time (~0.35 ns per element
on an AVX-512 core). The plane sums are compiled with the licence to reassociate (``fastmath={"reassoc"}``,
nothing else: NaN and infinity still propagate), so LLVM keeps several vector-wide partial sums
and adds them at the end: ~0.15 ns per element. The order it picks depends only on the plane's
length, so each plane's sum is still the same bits on every call and thread. Only these sums get
the licence; the elementwise passes run exactly as written (the evaluation-mode forward pass must
give the reference's bits, see :mod:`.loading`).
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit, prange

from .conv import PARALLEL_MIN_WORK

__all__ = ["batch_norm_forward", "batch_norm_backward"]

REASSOCIATE = {"reassoc"}
"""Numba ``fastmath`` flags for the plane sums: only the licence to reorder additions."""


# -- blocks of planes: x is seen as (N·C, S), one row per plane; plane p is of channel p % C ------
# A task handles planes [first, last) in one call: a call per plane would cost more than a short
# plane's work (Numba counts references to every array argument at each call), and BatchNorm1d's
# planes are a single value.

TASK_ELEMENTS = 1 << 14
"""About how many elements one task's block of planes holds (whole planes, at least one)."""


@njit(cache=True, fastmath=REASSOCIATE)
def _plane_sums(x, first, last, sums):
    """sums[p] = Σ_k x[p, k] for planes p in [first, last), in float64."""
    for p in range(first, last):
        total = 0.0
        for k in range(x.shape[1]):
            total += x[p, k]
        sums[p] = total


@njit(cache=True, fastmath=REASSOCIATE)
def _plane_sums_of_squares(x, mean, first, last, squares):
    """squares[p] = Σ_k (x[p, k] - mean[c])², c = p's channel, in float64."""
    channels = mean.size
    for p in range(first, last):
        center = mean[p % channels]
        total = 0.0
        for k in range(x.shape[1]):
            d = x[p, k] - center
            total += d * d
        squares[p] = total


@njit(cache=True, fastmath=REASSOCIATE)
def _plane_gradient_sums(grad, x, mean, first, last, sums_g, sums_gd):
    """sums_g[p] = Σ_k g[p, k] and sums_gd[p] = Σ_k g[p, k]·(x[p, k] - mean[c]), in float64."""
    channels = mean.size
    for p in range(first, last):
        center = mean[p % channels]
        sum_g, sum_gd = 0.0, 0.0
        for k in range(x.shape[1]):
            g = np.float64(grad[p, k])
            sum_g += g
            sum_gd += g * (x[p, k] - center)
        sums_g[p], sums_gd[p] = sum_g, sum_gd


@njit(cache=True, inline="always")
def _normalise_planes(x, y, mean, scale, shift, first, last):
    channels = mean.size
    for p in range(first, last):
        c = p % channels
        # Locals, not array reads in the loop: LLVM cannot rule out that writing y changes mean
        # or scale, and would reload them for every element.
        center, channel_scale, channel_shift = mean[c], scale[c], shift[c]
        for k in range(x.shape[1]):
            y[p, k] = (x[p, k] - center) * channel_scale + channel_shift


@njit(cache=True, inline="always")
def _input_gradient_planes(grad, x, dx, mean, rstd, scale, mean_g, mean_gx, batch_stats, first,
                           last):
    channels = mean.size
    for p in range(first, last):
        c = p % channels
        channel_scale = scale[c]
        if not batch_stats:  # constant statistics: x does not enter (a NaN x keeps dx finite)
            for k in range(x.shape[1]):
                dx[p, k] = channel_scale * grad[p, k]
            continue
        center, channel_rstd = mean[c], rstd[c]
        channel_mean_g, channel_mean_gx = mean_g[c], mean_gx[c]
        for k in range(x.shape[1]):
            xhat = (x[p, k] - center) * channel_rstd
            dx[p, k] = channel_scale * (grad[p, k] - channel_mean_g - xhat * channel_mean_gx)


# -- per channel: the planes' partial sums added in the order b = 0, 1, ... ----------------------

@njit(cache=True, inline="always")
def _channel_totals(partials, out, divisor):
    """out[c] = Σ_b partials[b·C + c] / divisor, b in order (the loop over c vectorises)."""
    channels = out.size
    out[:] = partials[:channels]
    for b in range(1, partials.size // channels):
        for c in range(channels):
            out[c] += partials[b * channels + c]
    for c in range(channels):
        out[c] /= divisor


@njit(cache=True, inline="always")
def _scale_and_shift(weight, bias, has_weight, has_bias, eps, var, rstd):
    """rstd = 1/sqrt(var + eps), and y's per-channel factors: scale = rstd·weight, shift = bias."""
    channels = var.size
    scale, shift = np.empty(channels), np.zeros(channels)
    for c in range(channels):
        rstd[c] = 1.0 / math.sqrt(var[c] + eps)
        scale[c] = rstd[c] * weight[c] if has_weight else rstd[c]
        if has_bias:
            shift[c] = bias[c]
    return scale, shift


@njit(cache=True, inline="always")
def _input_gradient_factors(mean_g, mean_gx, dweight, dbias, rstd, weight, has_weight, count):
    """Turn the planes' totals into dweight = rstd·Σg·(x - mean), and into dx's per-channel
    factors: scale = weight·rstd and, for batch statistics, mean_g = Σg/m and mean_gx = Σg·x̂/m
    (with constant statistics dx = scale·g); returns scale."""
    scale = np.empty(rstd.size)
    for c in range(rstd.size):
        dweight[c] *= rstd[c]  # Σ g·x̂ = rstd·Σ g·(x - mean)
        mean_g[c], mean_gx[c] = dbias[c] / count, dweight[c] / count
        scale[c] = rstd[c] * weight[c] if has_weight else rstd[c]
    return scale


# -- the passes, on the calling thread or split over Numba's threads by blocks of planes ----------
# Starting threads costs tens of microseconds, so a problem under PARALLEL_MIN_WORK elements stays
# on the calling thread. The serial and threaded twins differ only in their loops over blocks:
# Numba caches a kernel per function, so one function cannot be compiled both ways. The blocks
# depend on the shape only; as each plane is summed alone, they would not change a bit anyway.

@njit(cache=True, inline="always")
def _rows_of_planes(a):
    """(N, C, S) contiguous ``a`` seen as (N·C, S), one row per plane (a free view here, where
    NumPy's reshape is a Python call per array)."""
    return a.reshape((a.shape[0] * a.shape[1], a.shape[2]))


@njit(cache=True, inline="always")
def _float64_statistics(channels, batch_stats, given_mean, given_var):
    """mean, var and rstd as float64 arrays, mean and var filled from the given statistics unless
    the batch's are to be computed (converted here: a NumPy copy per array cost more than the
    normalisation of a single image)."""
    mean, var, rstd = np.empty(channels), np.empty(channels), np.empty(channels)
    if not batch_stats:
        for c in range(channels):
            mean[c], var[c] = given_mean[c], given_var[c]
    return mean, var, rstd


@njit(cache=True, inline="always")
def _store_statistics(mean, var, rstd, statistics):
    """statistics[0], [1], [2] = mean, var, rstd, each rounded once to the output's dtype."""
    for c in range(mean.size):
        statistics[0, c], statistics[1, c], statistics[2, c] = mean[c], var[c], rstd[c]


@njit(cache=True)
def _forward_serial(x_planes, weight, bias, has_weight, has_bias, batch_stats, eps, given_mean,
                    given_var, statistics, y_planes):
    x, y = _rows_of_planes(x_planes), _rows_of_planes(y_planes)
    planes, size = x.shape
    mean, var, rstd = _float64_statistics(statistics.shape[1], batch_stats, given_mean, given_var)
    if batch_stats:
        partials = np.empty(planes)
        _plane_sums(x, 0, planes, partials)
        _channel_totals(partials, mean, planes // mean.size * size)
        _plane_sums_of_squares(x, mean, 0, planes, partials)
        _channel_totals(partials, var, planes // mean.size * size)
    scale, shift = _scale_and_shift(weight, bias, has_weight, has_bias, eps, var, rstd)
    _normalise_planes(x, y, mean, scale, shift, 0, planes)
    _store_statistics(mean, var, rstd, statistics)


@njit(cache=True, parallel=True)
def _forward_threaded(x_planes, weight, bias, has_weight, has_bias, batch_stats, eps, given_mean,
                      given_var, statistics, y_planes, tasks):
    x, y = _rows_of_planes(x_planes), _rows_of_planes(y_planes)
    planes, size = x.shape
    mean, var, rstd = _float64_statistics(statistics.shape[1], batch_stats, given_mean, given_var)
    if batch_stats:
        partials = np.empty(planes)
        for task in prange(tasks):
            _plane_sums(x, task * planes // tasks, (task + 1) * planes // tasks, partials)
        _channel_totals(partials, mean, planes // mean.size * size)
        for task in prange(tasks):
            _plane_sums_of_squares(x, mean, task * planes // tasks,
                                   (task + 1) * planes // tasks, partials)
        _channel_totals(partials, var, planes // mean.size * size)
    scale, shift = _scale_and_shift(weight, bias, has_weight, has_bias, eps, var, rstd)
    for task in prange(tasks):
        _normalise_planes(x, y, mean, scale, shift, task * planes // tasks,
                          (task + 1) * planes // tasks)
    _store_statistics(mean, var, rstd, statistics)


@njit(cache=True)
def _backward_serial(grad, x, mean, rstd, weight, has_weight, batch_stats, dx, dweight, dbias):
    planes, size = x.shape
    sums_g, sums_gd = np.empty(planes), np.empty(planes)
    _plane_gradient_sums(grad, x, mean, 0, planes, sums_g, sums_gd)
    _channel_totals(sums_g, dbias, 1.0)
    _channel_totals(sums_gd, dweight, 1.0)
    mean_g, mean_gx = np.empty(mean.size), np.empty(mean.size)
    scale = _input_gradient_factors(mean_g, mean_gx, dweight, dbias, rstd, weight, has_weight,
                                    planes // mean.size * size)
    _input_gradient_planes(grad, x, dx, mean, rstd, scale, mean_g, mean_gx, batch_stats, 0,
                           planes)


@njit(cache=True, parallel=True)
def _backward_threaded(grad, x, mean, rstd, weight, has_weight, batch_stats, dx, dweight, dbias,
                       tasks):
    planes, size = x.shape
    sums_g, sums_gd = np.empty(planes), np.empty(planes)
    for task in prange(tasks):
        _plane_gradient_sums(grad, x, mean, task * planes // tasks,
                             (task + 1) * planes // tasks, sums_g, sums_gd)
    _channel_totals(sums_g, dbias, 1.0)
    _channel_totals(sums_gd, dweight, 1.0)
    mean_g, mean_gx = np.empty(mean.size), np.empty(mean.size)
    scale = _input_gradient_factors(mean_g, mean_gx, dweight, dbias, rstd, weight, has_weight,
                                    planes // mean.size * size)
    for task in prange(tasks):
        _input_gradient_planes(grad, x, dx, mean, rstd, scale, mean_g, mean_gx, batch_stats,
                               task * planes // tasks, (task + 1) * planes // tasks)


def _run(serial, threaded, x, arguments):
    """``serial(*arguments)`` on the calling thread below PARALLEL_MIN_WORK elements of ``x``
    (N, C, S), else ``threaded`` with blocks of planes of about TASK_ELEMENTS elements each."""
    planes = x.shape[0] * x.shape[1]
    if x.size < PARALLEL_MIN_WORK or planes < 2:
        serial(*arguments)
    else:
        threaded(*arguments, min(planes, max(2, x.size // TASK_ELEMENTS)))


def batch_norm_forward(x: np.ndarray, weight, bias, mean, var, eps: float):
    """Batch norm of ``x`` (N, C, S) per channel; ``(y, mean, var, rstd)`` (see the reference)."""
    x = np.ascontiguousarray(x)
    channels = x.shape[1]
    batch_stats = mean is None
    y = np.empty(x.shape, x.dtype)  # as empty_like (x is contiguous), without its Python layer
    # The returned mean, var and rstd as the rows of one array in x's dtype, which the kernel
    # fills: it reads given statistics in their own dtype and rounds its float64 ones once.
    statistics = np.empty((3, channels), x.dtype)
    missing = statistics[2]  # stands in for a missing argument (never read; 1-D, x's dtype)
    if batch_stats:
        mean = var = missing
    elif type(mean) is not np.ndarray or type(var) is not np.ndarray:
        mean, var = np.asarray(mean), np.asarray(var)
    if x.size:
        _run(_forward_serial, _forward_threaded, x, (
            x, missing if weight is None else np.ascontiguousarray(weight),
            missing if bias is None else np.ascontiguousarray(bias), weight is not None,
            bias is not None, batch_stats, float(eps), mean, var, statistics, y))
    else:  # no plane to normalise: the statistics as the reference gives them
        with np.errstate(divide="ignore", invalid="ignore"):
            given = np.full((2, channels), np.nan) if batch_stats else np.array([mean, var],
                                                                                  np.float64)
            statistics[:] = given[0], given[1], 1.0 / np.sqrt(given[1] + float(eps))
    return y, statistics[0], statistics[1], statistics[2]  # (unpacking iterates: slower)


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
        # The statistics as float64, so that the kernel's arithmetic is float64 throughout:
        # in float32, x - mean loses the digits where Σ grad·x̂ cancels.
        rows = (x.shape[0] * channels, x.shape[2])  # one row per (n, c) plane
        _run(_backward_serial, _backward_threaded, x, (
            grad.reshape(rows), x.reshape(rows), np.asarray(mean, np.float64),
            np.asarray(rstd, np.float64),
            np.ascontiguousarray(weight) if has_weight else np.empty(0, x.dtype), has_weight,
            bool(batch_stats), dx.reshape(rows), dweight, dbias))
    if not has_weight:
        return dx, None, None
    return dx, dweight.astype(x.dtype), dbias.astype(x.dtype)
