"""Primitives written with other primitives, for a backend without a fused kernel of its own.

Each function takes the backend ``be`` first and uses only its primitives, so it runs on any
device; a new backend can bind it with the rest of its arguments and have the primitive at once.
It is correct everywhere and slower than a fused kernel: every expression is a pass over memory
and a kernel launch (compare the CUDA backend's ``backend/cuda/batch_norm.py``, two launches).
"""

from __future__ import annotations

import functools
import inspect

_CHANNELS = (1, -1, 1)  # a (C,) vector broadcast along axis 1 of (N, C, S)


def softmax_backward(be, grad, out, axis):
    """:meth:`Backend.softmax_backward`: out ⊙ (grad - Σ_axis grad ⊙ out)."""
    dot = be.sum(be.mul(grad, out), axis=axis, keepdims=True)
    return be.mul(out, be.sub(grad, dot))


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


def running_average_(be, running, batch, momentum, batch_scale):
    """:meth:`Backend.running_average_` from elementwise primitives (four launches on a device,
    where the CUDA backend's own kernel takes one)."""
    if batch_scale != 1:
        batch = be.mul(batch, batch.dtype.type(batch_scale))
    dtype = running.dtype.type
    be.assign_(running, be.add(be.mul(running, dtype(1 - momentum)),
                               be.mul(be.astype(batch, running.dtype), dtype(momentum))))


def sgd_update_group(be, params, grads, momentum_buffers, *settings):
    """:meth:`Backend.sgd_update_group`: ``be.sgd_update`` once per tensor."""
    for param, grad, buffer in zip(params, grads, momentum_buffers, strict=True):
        be.sgd_update(param, grad, buffer, *settings)


def adam_update_group(be, params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, *settings):
    """:meth:`Backend.adam_update_group`: ``be.adam_update`` once per tensor."""
    for param, grad, m, v, v_max in zip(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs,
                                        strict=True):
        be.adam_update(param, grad, m, v, v_max, *settings)


class OfTheBackendClass:
    """A composed primitive ``function(be, ...)`` bound to the backend class it is read from.

    A subclass that replaces the primitives ``function`` calls (Numba's CPU backend replaces
    ``sgd_update`` with its kernel) inherits the composed one already calling its own kernels.
    """

    def __init__(self, function, name: str):
        self.function, self.name = function, name

    def __get__(self, instance, owner):
        from .primitives import Backend
        contract = getattr(Backend, self.name)

        @functools.wraps(contract)
        def primitive(*args, **kwargs):
            return self.function(owner, *args, **kwargs)
        primitive.__signature__ = inspect.signature(contract)
        return primitive
