"""Batch norm as two fused kernels: one pass pair forward, one backward, a block per channel.

Batch norm normalises each channel c of x (N, C, S) over its m = N·S values. Composed from
generic primitives it costs a dozen kernel launches and as many trips through memory (sum,
subtract, square, sum, sqrt, divide, multiply, add, and the backward's sums and corrections).
Here one thread block owns one channel and does all of it with the data in flight:

* forward: the block's threads stride over the channel's values (value j is at
  ``(j // S)·C·S + c·S + j % S``), summing them; a shared-memory tree reduction (see
  :mod:`.reduction`) gives the mean; a second pass sums the squared deviations, giving the
  biased variance (two passes, because E[x²] - E[x]² loses digits when the mean is large); a
  third writes y = (x - mean)·rstd·weight + bias, with rstd = 1/sqrt(var + eps). With given
  statistics (evaluation) only the last pass runs.
* backward: with x̂ = (x - mean)·rstd, one pass sums g and g·x̂ (which are dbias and dweight),
  a second writes dx = weight·rstd·(g - Σg/m - x̂·Σ(g·x̂)/m): the gradient with the parts that
  flow back through the batch mean and variance removed (layer norm's formula, per channel).
  With fixed statistics dx = weight·rstd·g.

Sums and the per-channel numbers are float64 (whatever the dtypes of the weight or the given
statistics: the kernels compile for the ones they get) and each output is rounded once, as in the
reference (:mod:`minidl.backend.reference.nn_kernels`), so they agree to the dtype's precision.
"""

from __future__ import annotations

import math

import numpy as np
from numba import cuda, float64

from .device import empty, launch
from .exact_math import exact_operations
from .movement import fill_
from .nn_kernels import ROW_BLOCKS, block_total, optional_buffer
from .reduction import REDUCE_THREADS


@cuda.jit(device=True)
def _position(j, c, channels, spatial):
    """Index in x (N, C, S) of the j-th of channel c's N·S values."""
    return (j // spatial * channels + c) * spatial + j % spatial


@cuda.jit
def _batch_norm_channels(x, y, mean_out, var_out, rstd_out, given_mean, given_var, batch_stats,
                         weight, bias, has_weight, has_bias, channels, spatial, count, eps):
    scratch = cuda.shared.array(REDUCE_THREADS, np.float64)
    t = cuda.threadIdx.x
    for c in range(cuda.blockIdx.x, channels, cuda.gridDim.x):
        if batch_stats:
            total = 0.0
            for j in range(t, count, REDUCE_THREADS):
                total += x[_position(j, c, channels, spatial)]
            mean = block_total(scratch, total, False) / count
            spread = 0.0
            for j in range(t, count, REDUCE_THREADS):
                d = x[_position(j, c, channels, spatial)] - mean
                spread += d * d
            var = block_total(scratch, spread, False) / count
        else:
            mean = float64(given_mean[c])  # float64, as the reference: float() keeps float32
            var = float64(given_var[c])
        rstd = 1.0 / math.sqrt(var + eps)
        scale = rstd * weight[c] if has_weight else rstd
        shift = float64(bias[c]) if has_bias else 0.0
        for j in range(t, count, REDUCE_THREADS):
            i = _position(j, c, channels, spatial)
            y[i] = (x[i] - mean) * scale + shift
        if t == 0:
            mean_out[c] = mean
            var_out[c] = var
            rstd_out[c] = rstd


@cuda.jit
def _batch_norm_grad_channels(grad, x, mean, rstd, weight, has_weight, batch_stats, dx, dweight,
                              dbias, channels, spatial, count):
    scratch = cuda.shared.array(REDUCE_THREADS, np.float64)
    t = cuda.threadIdx.x
    for c in range(cuda.blockIdx.x, channels, cuda.gridDim.x):
        channel_mean = float64(mean[c])
        channel_rstd = float64(rstd[c])
        g_total = 0.0
        gx_total = 0.0
        for j in range(t, count, REDUCE_THREADS):
            i = _position(j, c, channels, spatial)
            g = float64(grad[i])
            g_total += g
            gx_total += g * ((x[i] - channel_mean) * channel_rstd)
        sum_g = block_total(scratch, g_total, False)
        sum_gx = block_total(scratch, gx_total, False)
        scale = channel_rstd * weight[c] if has_weight else channel_rstd
        mean_g = sum_g / count if batch_stats and count > 0 else 0.0
        mean_gx = sum_gx / count if batch_stats and count > 0 else 0.0
        for j in range(t, count, REDUCE_THREADS):
            i = _position(j, c, channels, spatial)
            xhat = (x[i] - channel_mean) * channel_rstd
            dx[i] = scale * (grad[i] - mean_g - xhat * mean_gx)
        if t == 0:
            dweight[c] = sum_gx
            dbias[c] = sum_g


def batch_norm_forward(x, weight, bias, mean, var, eps):
    n, channels, spatial = x.shape
    y = empty(x.shape, x.dtype)
    mean_out, var_out, rstd_out = (empty((channels,), x.dtype) for _ in range(3))
    batch_stats = mean is None
    given_mean, _ = optional_buffer(mean, x.dtype)
    given_var, _ = optional_buffer(var, x.dtype)
    w, has_w = optional_buffer(weight, x.dtype)
    b, has_b = optional_buffer(bias, x.dtype)
    if channels and (n * spatial or not batch_stats):
        _batch_norm_channels[min(channels, ROW_BLOCKS), REDUCE_THREADS](
            x.buffer, y.buffer, mean_out.buffer, var_out.buffer, rstd_out.buffer, given_mean,
            given_var, batch_stats, w, b, has_w, has_b, channels, spatial, n * spatial,
            float(eps))
    elif channels:  # no values to take statistics of: NaN, as NumPy's mean of nothing
        for out in (mean_out, var_out, rstd_out):
            fill_(out, math.nan)
    return y, mean_out, var_out, rstd_out


def batch_norm_backward(grad, x, mean, rstd, weight, batch_stats):
    n, channels, spatial = x.shape
    dx = empty(x.shape, x.dtype)
    dweight, dbias = empty((channels,), x.dtype), empty((channels,), x.dtype)
    w, has_w = optional_buffer(weight, x.dtype)
    if channels:
        _batch_norm_grad_channels[min(channels, ROW_BLOCKS), REDUCE_THREADS](
            grad.buffer, x.buffer, mean.buffer, rstd.buffer, w, has_w, bool(batch_stats), dx.buffer,
            dweight.buffer, dbias.buffer, channels, spatial, n * spatial)
    if weight is None:
        return dx, None, None
    return dx, dweight, dbias


__all__ = ["batch_norm_forward", "batch_norm_backward"]


# -- running statistics ----------------------------------------------------------------------------

_running_kernels: dict = {}


def _running_average_kernel(dtype):
    if dtype not in _running_kernels:
        mul, _ = exact_operations(dtype)

        @cuda.jit
        def running_average(count, running, batch, keep, take, scale, scaled):
            # The composed form's roundings, with the products kept apart from the sum.
            for i in range(cuda.grid(1), count, cuda.gridsize(1)):
                value = mul(batch[i], scale) if scaled else batch[i]
                running[i] = mul(running[i], keep) + mul(value, take)
        _running_kernels[dtype] = running_average
    return _running_kernels[dtype]


def running_average_(running, batch, momentum, batch_scale):
    """The contract's primitive in one launch (the composed form takes four or five)."""
    from .movement import astype
    if running.shape != batch.shape:
        raise ValueError(f"running_average_: batch has shape {batch.shape}, expected "
                         f"{running.shape} like the running statistic")
    if running.dtype.kind != "f" or running.dtype.itemsize not in (4, 8):
        raise ValueError(f"running_average_: the running statistic must be float32 or "
                         f"float64, got {running.dtype}")
    scale = batch.dtype.type(batch_scale)
    if batch.dtype != running.dtype:  # (rare) scaled in batch's dtype first, then cast
        if batch_scale != 1:
            from . import elementwise as ew
            batch = ew.arithmetic(ew.mul, np.multiply)(batch, scale)
        batch, batch_scale = astype(batch, running.dtype), 1
    dtype = running.dtype.type
    if running.size:
        blocks, threads = launch(running.size)
        _running_average_kernel(running.dtype)[blocks, threads](
            running.size, running.buffer, batch.buffer, dtype(1 - momentum), dtype(momentum),
            dtype(scale), batch_scale != 1)
