"""Batch norm as Numba kernels, split over threads by blocks of channels.

Same names and results as :func:`minidl.backend.reference.nn_kernels.batch_norm_forward` and
``batch_norm_backward``, whose docstrings state the formulas. Statistics are per channel of x
viewed as (N, C, S): channel c is the N planes ``x[b, c]``, each S contiguous values.

**Channels are the units of work.** A channel's statistics, and then its normalisation, need
nothing from any other channel, so a task takes a block of whole channels (about
:data:`TASK_ELEMENTS` values, a number of blocks fixed by the shape) and does all of a pass's
work for them: the threads start once per call, not once per pass. Within a block every pass
walks whole planes, each a contiguous run that LLVM vectorises. A pass that sums writes one
partial sum per plane, into an (N, C) array; a channel's total then adds its N partials in the
order b = 0, 1, ... Forward with the batch's statistics (three passes over the block)::

    sums[b, c]    = Σ_k x[b, c, k]                  mean[c] = Σ_b sums[b, c] / (N·S)
    squares[b, c] = Σ_k (x[b, c, k] - mean[c])²     var[c]  = Σ_b squares[b, c] / (N·S)
    y[b, c, k]    = (x[b, c, k] - mean[c])·rstd[c]·weight[c] + bias[c]

(the second pass sums the centred values: exact where E[x²] - E[x]² would cancel). Backward (two
passes): Σg and Σg·(x - mean) per plane, added per channel into dbias and dweight/rstd, then dx
plane by plane. Accumulators and the per-channel arithmetic are float64, as in the reference.

**Why the later passes are cheap.** A block is small enough to stay in a core's own cache (in
the first CIFAR layer, 2 channels of 64 planes of 32x32 float32: 512 KiB), so only the first
pass reads x from memory: the second and third re-read the block from cache. Passes over the
whole batch, one after the other, read all of x from memory three times and started the
threads three times (a CIFAR training step's batch norm forward took 3.1 ms that way at two
threads, 1.95 ms in blocks).

**Why the bits never depend on the thread count.** A channel's statistics and outputs are
computed by the same compiled function whichever task or thread runs it, adding its planes' sums
in a fixed order: the split of channels over tasks and threads changes who computes a number,
never how.

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


# -- blocks of channels: a task handles channels [first, last), every plane of each ---------------
# A task handles its block in one call: a call per plane would cost more than a short plane's
# work (Numba counts references to every array argument at each call), and BatchNorm1d's planes
# are a single value.

TASK_ELEMENTS = 1 << 16
"""About how many elements one task's block of channels holds (whole channels, at least one).

Large enough that a block's planes, one image after another, are long contiguous runs (the
memory prefetcher restarts at every jump to the next image), small enough that the backward
pass's block of grad, x and dx (3 x 256 KiB in float32) stays in a core's cache for the second
pass. Measured in a CIFAR training step at one thread: backward 3.80 ms a step with blocks of
2^14 elements, 3.54 ms with 2^16, 3.69 ms with 2^17."""

RUN_ELEMENTS = 1 << 11
"""Fewest values a block holds of each image (its channels' planes, one contiguous run), unless
that leaves fewer than two blocks. Short runs, one per image, are a strided walk through x:
(1024, 256, 4) took 3.5 ms forward in blocks of 64 values per image against 2.1 ms in runs of
512, and BatchNorm1d's one-value planes (4096, 512, 1) 25 against 13 ms (one thread). In the
CIFAR step, runs of 2048 rather than 1024 values (blocks of 2 channels of 32x32, 8 of 16x16)
measured batch norm's backward 4.07 -> 3.88 ms at one thread, 2.31 -> 2.19 ms at two."""


@njit(cache=True, fastmath=REASSOCIATE)
def _plane_sums(x, first, last, sums):
    """sums[b, c] = Σ_k x[b, c, k] for channels c in [first, last), in float64."""
    for b in range(x.shape[0]):
        for c in range(first, last):
            total = 0.0
            for k in range(x.shape[2]):
                total += x[b, c, k]
            sums[b, c] = total


@njit(cache=True, fastmath=REASSOCIATE)
def _plane_sums_of_squares(x, mean, first, last, squares):
    """squares[b, c] = Σ_k (x[b, c, k] - mean[c])² for channels c in [first, last), in float64."""
    for b in range(x.shape[0]):
        for c in range(first, last):
            center = mean[c]
            total = 0.0
            for k in range(x.shape[2]):
                d = x[b, c, k] - center
                total += d * d
            squares[b, c] = total


@njit(cache=True, fastmath=REASSOCIATE)
def _plane_gradient_sums(grad, x, mean, first, last, sums_g, sums_gd):
    """sums_g[b, c] = Σ_k g[b, c, k] and sums_gd[b, c] = Σ_k g[b, c, k]·(x[b, c, k] - mean[c])
    for channels c in [first, last), in float64."""
    for b in range(x.shape[0]):
        for c in range(first, last):
            center = mean[c]
            sum_g, sum_gd = 0.0, 0.0
            for k in range(x.shape[2]):
                g = np.float64(grad[b, c, k])
                sum_g += g
                sum_gd += g * (x[b, c, k] - center)
            sums_g[b, c], sums_gd[b, c] = sum_g, sum_gd


@njit(cache=True, inline="always")
def _channel_totals(partials, first, last, out, divisor):
    """out[c] = Σ_b partials[b, c] / divisor for c in [first, last), b in order (row by row: a
    walk down each column would jump a whole row of partials per value)."""
    out[first:last] = partials[0, first:last]
    for b in range(1, partials.shape[0]):
        for c in range(first, last):
            out[c] += partials[b, c]
    for c in range(first, last):
        out[c] /= divisor


@njit(cache=True)
def _normalise_channels(x, weight, bias, has_weight, has_bias, batch_stats, eps, mean, var, rstd,
                        partials, y, first, last):
    """Channels [first, last) of the forward pass: their statistics (unless given: then mean and
    var hold them already), rstd = 1/sqrt(var + eps), and y."""
    count = x.shape[0] * x.shape[2]
    if batch_stats:
        _plane_sums(x, first, last, partials)
        _channel_totals(partials, first, last, mean, count)
        _plane_sums_of_squares(x, mean, first, last, partials)
        _channel_totals(partials, first, last, var, count)
    for c in range(first, last):
        rstd[c] = 1.0 / math.sqrt(var[c] + eps)
    for b in range(x.shape[0]):
        for c in range(first, last):
            # y = (x - mean)·scale + shift with scale = rstd·weight, shift = bias. Locals, not
            # array reads in the loop: LLVM cannot rule out that writing y changes mean or
            # weight, and would reload them for every element.
            center = mean[c]
            scale = rstd[c] * weight[c] if has_weight else rstd[c]
            shift = np.float64(bias[c]) if has_bias else 0.0
            for k in range(x.shape[2]):
                y[b, c, k] = (x[b, c, k] - center) * scale + shift


@njit(cache=True)
def _channel_gradients(grad, x, mean, rstd, weight, has_weight, batch_stats, sums_g, sums_gd, dx,
                       dweight, dbias, first, last):
    """Channels [first, last) of the backward pass: dbias = Σg, dweight = rstd·Σg·(x - mean) and
    dx = scale·(g - Σg/m - x̂·Σg·x̂/m) with scale = weight·rstd and m = N·S (with constant
    statistics, dx = scale·g: x does not enter, so a NaN x keeps dx finite)."""
    count = x.shape[0] * x.shape[2]
    _plane_gradient_sums(grad, x, mean, first, last, sums_g, sums_gd)
    _channel_totals(sums_g, first, last, dbias, 1.0)
    _channel_totals(sums_gd, first, last, dweight, 1.0)
    for c in range(first, last):
        dweight[c] *= rstd[c]  # Σ g·x̂ = rstd·Σ g·(x - mean)
    for b in range(x.shape[0]):
        for c in range(first, last):
            scale = rstd[c] * weight[c] if has_weight else rstd[c]
            if not batch_stats:
                for k in range(x.shape[2]):
                    dx[b, c, k] = scale * grad[b, c, k]
                continue
            center, channel_rstd = mean[c], rstd[c]
            mean_g, mean_gx = dbias[c] / count, dweight[c] / count
            for k in range(x.shape[2]):
                xhat = (x[b, c, k] - center) * channel_rstd
                dx[b, c, k] = scale * (grad[b, c, k] - mean_g - xhat * mean_gx)


# -- the whole call, on the calling thread or split over Numba's threads by blocks of channels ----
# Starting threads costs tens of microseconds, so a problem under PARALLEL_MIN_WORK elements stays
# on the calling thread. The serial and threaded twins differ only in their loops over blocks:
# Numba caches a kernel per function, so one function cannot be compiled both ways. Both call
# the same compiled function per block, and the blocks depend on the shape only.

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
def _forward_serial(x, weight, bias, has_weight, has_bias, batch_stats, eps, given_mean,
                    given_var, statistics, y):
    channels = x.shape[1]
    mean, var, rstd = _float64_statistics(channels, batch_stats, given_mean, given_var)
    partials = np.empty((x.shape[0], channels))
    _normalise_channels(x, weight, bias, has_weight, has_bias, batch_stats, eps, mean, var, rstd,
                        partials, y, 0, channels)
    _store_statistics(mean, var, rstd, statistics)


@njit(cache=True, parallel=True)
def _forward_threaded(x, weight, bias, has_weight, has_bias, batch_stats, eps, given_mean,
                      given_var, statistics, y, tasks):
    channels = x.shape[1]
    mean, var, rstd = _float64_statistics(channels, batch_stats, given_mean, given_var)
    partials = np.empty((x.shape[0], channels))
    for task in prange(tasks):
        _normalise_channels(x, weight, bias, has_weight, has_bias, batch_stats, eps, mean, var,
                            rstd, partials, y, task * channels // tasks,
                            (task + 1) * channels // tasks)
    _store_statistics(mean, var, rstd, statistics)


@njit(cache=True)
def _backward_serial(grad, x, mean, rstd, weight, has_weight, batch_stats, dx, dweight, dbias):
    sums_g, sums_gd = np.empty(x.shape[:2]), np.empty(x.shape[:2])
    _channel_gradients(grad, x, mean, rstd, weight, has_weight, batch_stats, sums_g, sums_gd, dx,
                       dweight, dbias, 0, x.shape[1])


@njit(cache=True, parallel=True)
def _backward_threaded(grad, x, mean, rstd, weight, has_weight, batch_stats, dx, dweight, dbias,
                       tasks):
    channels = x.shape[1]
    sums_g, sums_gd = np.empty(x.shape[:2]), np.empty(x.shape[:2])
    for task in prange(tasks):
        _channel_gradients(grad, x, mean, rstd, weight, has_weight, batch_stats, sums_g, sums_gd,
                           dx, dweight, dbias, task * channels // tasks,
                           (task + 1) * channels // tasks)


def _run(serial, threaded, x, arguments):
    """``serial(*arguments)`` on the calling thread below PARALLEL_MIN_WORK elements of ``x``
    (N, C, S) or with a single channel, else ``threaded`` with blocks of whole channels of about
    TASK_ELEMENTS elements each and at least RUN_ELEMENTS of each image (at least two blocks)."""
    channels = x.shape[1]
    if x.size < PARALLEL_MIN_WORK or channels < 2:
        serial(*arguments)
    else:
        blocks = min(x.size // TASK_ELEMENTS, channels * x.shape[2] // RUN_ELEMENTS)
        threaded(*arguments, min(channels, max(2, blocks)))


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
        _run(_backward_serial, _backward_threaded, x, (
            grad, x, np.asarray(mean, np.float64), np.asarray(rstd, np.float64),
            np.ascontiguousarray(weight) if has_weight else np.empty(0, x.dtype), has_weight,
            bool(batch_stats), dx, dweight, dbias))
    if not has_weight:
        return dx, None, None
    return dx, dweight.astype(x.dtype), dbias.astype(x.dtype)
