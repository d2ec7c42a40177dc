"""Batch norm as Numba kernels, split over threads by (n, c) planes.

Same names and results as :func:`minidl.backend.reference.nn_kernels.batch_norm_forward` and
``batch_norm_backward``, whose docstrings state the formulas. Statistics are per channel of x
viewed as (N, C, S): channel c is the N planes ``x[b, c]``, each S contiguous values.

**Planes are the tasks.** Every pass walks whole planes, each a contiguous run that LLVM
vectorises, and a plane is one task for Numba's threads (N·C of them: 2048 to 4096 for a CIFAR
CNN's layers, enough for any core count). A pass that sums writes one partial sum per plane,
into an (N, C) array; a channel's total then adds its N partials in the order b = 0, 1, ...
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
here). The plane sums are compiled with the licence to reassociate (``fastmath={"reassoc"}``,
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


# -- one plane ------------------------------------------------------------------------------------

@njit(cache=True, fastmath=REASSOCIATE)
def _plane_sum(x, b, c, center):
    """Σ_k (x[b, c, k] - center), in float64."""
    total = 0.0
    for k in range(x.shape[2]):
        total += x[b, c, k] - center
    return total


@njit(cache=True, fastmath=REASSOCIATE)
def _plane_sum_of_squares(x, b, c, center):
    """Σ_k (x[b, c, k] - center)², in float64."""
    total = 0.0
    for k in range(x.shape[2]):
        d = x[b, c, k] - center
        total += d * d
    return total


@njit(cache=True, fastmath=REASSOCIATE)
def _plane_gradient_sums(grad, x, b, c, center):
    """(Σ_k g, Σ_k g·(x - center)) over plane (b, c), in float64."""
    sum_g, sum_gd = 0.0, 0.0
    for k in range(x.shape[2]):
        g = np.float64(grad[b, c, k])
        sum_g += g
        sum_gd += g * (x[b, c, k] - center)
    return sum_g, sum_gd


@njit(cache=True, inline="always")
def _normalise_plane(x, y, b, c, center, scale, shift):
    # center, scale and shift are locals, not array reads in the loop: LLVM cannot rule out that
    # writing y changes them, and would reload them for every element.
    for k in range(x.shape[2]):
        y[b, c, k] = (x[b, c, k] - center) * scale + shift


@njit(cache=True, inline="always")
def _input_gradient_plane(grad, x, dx, b, c, center, rstd, scale, mean_g, mean_gx, batch_stats):
    if not batch_stats:  # constant statistics: x does not enter (a NaN x keeps a finite dx)
        for k in range(x.shape[2]):
            dx[b, c, k] = scale * grad[b, c, k]
        return
    for k in range(x.shape[2]):
        xhat = (x[b, c, k] - center) * rstd
        dx[b, c, k] = scale * (grad[b, c, k] - mean_g - xhat * mean_gx)


# -- per channel: the planes' partial sums added in the order b = 0, 1, ... ----------------------

@njit(cache=True, inline="always")
def _channel_totals(partials, out, divisor):
    """out[c] = Σ_b partials[b, c] / divisor, b in order (the loop over c vectorises instead)."""
    out[:] = partials[0]
    for b in range(1, partials.shape[0]):
        for c in range(out.size):
            out[c] += partials[b, c]
    for c in range(out.size):
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


# -- the passes, on the calling thread or split over Numba's threads by plane ---------------------
# Starting threads costs tens of microseconds, so a problem under PARALLEL_MIN_WORK elements stays
# on the calling thread. The serial and threaded twins differ only in range/prange: Numba caches a
# kernel per function, so one function cannot be compiled both ways.

@njit(cache=True)
def _forward_serial(x, weight, bias, has_weight, has_bias, batch_stats, eps, mean, var, rstd, y):
    n, channels, size = x.shape
    if batch_stats:
        partials = np.empty((n, channels))
        for plane in range(n * channels):
            b, c = plane // channels, plane % channels
            partials[b, c] = _plane_sum(x, b, c, 0.0)
        _channel_totals(partials, mean, n * size)
        for plane in range(n * channels):
            b, c = plane // channels, plane % channels
            partials[b, c] = _plane_sum_of_squares(x, b, c, mean[c])
        _channel_totals(partials, var, n * size)
    scale, shift = _scale_and_shift(weight, bias, has_weight, has_bias, eps, var, rstd)
    for plane in range(n * channels):
        b, c = plane // channels, plane % channels
        _normalise_plane(x, y, b, c, mean[c], scale[c], shift[c])


@njit(cache=True, parallel=True)
def _forward_threaded(x, weight, bias, has_weight, has_bias, batch_stats, eps, mean, var, rstd,
                      y):
    n, channels, size = x.shape
    if batch_stats:
        partials = np.empty((n, channels))
        for plane in prange(n * channels):
            b, c = plane // channels, plane % channels
            partials[b, c] = _plane_sum(x, b, c, 0.0)
        _channel_totals(partials, mean, n * size)
        for plane in prange(n * channels):
            b, c = plane // channels, plane % channels
            partials[b, c] = _plane_sum_of_squares(x, b, c, mean[c])
        _channel_totals(partials, var, n * size)
    scale, shift = _scale_and_shift(weight, bias, has_weight, has_bias, eps, var, rstd)
    for plane in prange(n * channels):
        b, c = plane // channels, plane % channels
        _normalise_plane(x, y, b, c, mean[c], scale[c], shift[c])


@njit(cache=True)
def _backward_serial(grad, x, mean, rstd, weight, has_weight, batch_stats, dx, dweight, dbias):
    n, channels, size = x.shape
    sums_g, sums_gd = np.empty((n, channels)), np.empty((n, channels))
    for plane in range(n * channels):
        b, c = plane // channels, plane % channels
        sums_g[b, c], sums_gd[b, c] = _plane_gradient_sums(grad, x, b, c, mean[c])
    _channel_totals(sums_g, dbias, 1.0)
    _channel_totals(sums_gd, dweight, 1.0)
    mean_g, mean_gx = np.empty(channels), np.empty(channels)
    scale = _input_gradient_factors(mean_g, mean_gx, dweight, dbias, rstd, weight, has_weight,
                                    n * size)
    for plane in range(n * channels):
        b, c = plane // channels, plane % channels
        _input_gradient_plane(grad, x, dx, b, c, mean[c], rstd[c], scale[c], mean_g[c],
                              mean_gx[c], batch_stats)


@njit(cache=True, parallel=True)
def _backward_threaded(grad, x, mean, rstd, weight, has_weight, batch_stats, dx, dweight, dbias):
    n, channels, size = x.shape
    sums_g, sums_gd = np.empty((n, channels)), np.empty((n, channels))
    for plane in prange(n * channels):
        b, c = plane // channels, plane % channels
        sums_g[b, c], sums_gd[b, c] = _plane_gradient_sums(grad, x, b, c, mean[c])
    _channel_totals(sums_g, dbias, 1.0)
    _channel_totals(sums_gd, dweight, 1.0)
    mean_g, mean_gx = np.empty(channels), np.empty(channels)
    scale = _input_gradient_factors(mean_g, mean_gx, dweight, dbias, rstd, weight, has_weight,
                                    n * size)
    for plane in prange(n * channels):
        b, c = plane // channels, plane % channels
        _input_gradient_plane(grad, x, dx, b, c, mean[c], rstd[c], scale[c], mean_g[c],
                              mean_gx[c], batch_stats)


def _threaded(x) -> bool:
    """Whether batch norm of ``x`` (N, C, S) is split over threads."""
    return x.size >= PARALLEL_MIN_WORK and x.shape[0] * x.shape[1] > 1


def batch_norm_forward(x: np.ndarray, weight, bias, mean, var, eps: float):
    """Batch norm of ``x`` (N, C, S) per channel; ``(y, mean, var, rstd)`` (see the reference)."""
    x = np.ascontiguousarray(x)
    channels = x.shape[1]
    empty = np.empty(0, dtype=x.dtype)  # stands in for a missing argument (never read)
    batch_stats = mean is None
    y = np.empty(x.shape, x.dtype)  # as empty_like (x is contiguous), without its Python layer
    # mean, var, rstd as the rows of one array: one allocation and one cast back for the three
    # (a single-sample forward is a few microseconds of work, and each small array counts)
    stats = np.empty((3, channels), np.float64)
    if not batch_stats:  # the kernel reads the given statistics from here
        stats[0], stats[1] = mean, var
    if x.shape[0] * x.shape[2]:
        kernel = _forward_threaded if _threaded(x) else _forward_serial
        kernel(x, empty if weight is None else np.ascontiguousarray(weight),
               empty if bias is None else np.ascontiguousarray(bias), weight is not None,
               bias is not None, batch_stats, float(eps), stats[0], stats[1], stats[2], y)
    mean, var, rstd = stats.astype(x.dtype)
    return y, mean, var, rstd


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
        kernel = _backward_threaded if _threaded(x) else _backward_serial
        kernel(grad, x, np.asarray(mean, np.float64), np.asarray(rstd, np.float64),
               np.ascontiguousarray(weight) if has_weight else np.empty(0, x.dtype), has_weight,
               bool(batch_stats), dx, dweight, dbias)
    if not has_weight:
        return dx, None, None
    return dx, dweight.astype(x.dtype), dbias.astype(x.dtype)
