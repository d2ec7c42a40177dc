"""Primitives written with other primitives, for a backend without a fused kernel of its own.

Each function takes the backend ``be`` first and uses only its primitives, so it runs on any
device; a new backend can bind it with the rest of its arguments and have the primitive at once.
It is correct everywhere and slower than a fused kernel: every expression is a pass over memory
and a kernel launch (compare the CUDA backend's ``backend/cuda/batch_norm.py``, two launches).
"""

from __future__ import annotations

_CHANNELS = (1, -1, 1)  # a (C,) vector broadcast along axis 1 of (N, C, S)


def batch_norm_forward(be, x, weight, bias, mean, var, eps):
    """:meth:`Backend.batch_norm_forward` from reductions and elementwise primitives."""
    count = float(x.shape[0] * x.shape[2])
    if mean is None:
        mean = be.div(be.sum(x, axis=(0, 2)), count)
        centered = be.sub(x, be.reshape(mean, _CHANNELS))
        var = be.div(be.sum(be.mul(centered, centered), axis=(0, 2)), count)
    else:
        mean, var = be.copy(be.astype(mean, x.dtype)), be.copy(be.astype(var, x.dtype))
        centered = be.sub(x, be.reshape(mean, _CHANNELS))
    rstd = be.div(1.0, be.sqrt(be.add(var, float(eps))))
    y = be.mul(centered, be.reshape(rstd, _CHANNELS))
    if weight is not None:
        y = be.mul(y, be.reshape(weight, _CHANNELS))
    if bias is not None:
        y = be.add(y, be.reshape(bias, _CHANNELS))
    return y, mean, var, rstd


def batch_norm_backward(be, grad, x, mean, rstd, weight, batch_stats):
    """:meth:`Backend.batch_norm_backward` from reductions and elementwise primitives."""
    count = float(x.shape[0] * x.shape[2])
    rstd_c = be.reshape(rstd, _CHANNELS)
    xhat = be.mul(be.sub(x, be.reshape(mean, _CHANNELS)), rstd_c)
    sum_g = be.sum(grad, axis=(0, 2))
    sum_gx = be.sum(be.mul(grad, xhat), axis=(0, 2))
    scale = rstd_c if weight is None else be.mul(rstd_c, be.reshape(weight, _CHANNELS))
    if batch_stats:
        # dx = weight·rstd·(grad - Σgrad/m - x̂·Σ(grad·x̂)/m)
        grad = be.sub(be.sub(grad, be.reshape(be.div(sum_g, count), _CHANNELS)),
                      be.mul(xhat, be.reshape(be.div(sum_gx, count), _CHANNELS)))
    dx = be.mul(grad, scale)
    if weight is None:
        return dx, None, None
    return dx, sum_gx, sum_g
