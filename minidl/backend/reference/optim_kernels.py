"""Optimizer updates in plain NumPy: the reference every faster backend is checked against.

An optimizer step is elementwise: each parameter entry is updated from its own gradient and its
own state slots (momentum, moment estimates), never from its neighbours. So an update is one pass
over flat arrays, and a backend may implement it however it likes as long as it produces the same
numbers. Both primitives below update ``param`` and the state arrays IN PLACE; nothing is returned.

Rounding is part of the contract. Every hyperparameter is first rounded to the array's dtype and
every intermediate is rounded to that dtype after each operation, in the order written in the
comments. A kernel that follows the same order (and never fuses a multiply and an add into one FMA)
reproduces these results bit for bit, which is what makes a resumed training run identical to an
uninterrupted one.

The formulas follow PyTorch's documented ``torch.optim.SGD`` / ``Adam`` / ``AdamW`` algorithms.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["sgd_update", "adam_update"]


def flat_view(array: np.ndarray, name: str) -> np.ndarray:
    # The update must land in the caller's memory, so we need a view, never a copy.
    if not array.flags.c_contiguous or not array.flags.writeable:
        raise ValueError(f"{name} must be a writeable C-contiguous array")
    return array.reshape(-1)


def flat_input(array: np.ndarray, like: np.ndarray, name: str) -> np.ndarray:
    if array.size != like.size:
        raise ValueError(f"{name} has shape {array.shape}, expected {like.shape}")
    return np.ascontiguousarray(array, dtype=like.dtype).reshape(-1)


def sgd_update(param, grad, momentum_buffer, lr, momentum, dampening, weight_decay, nesterov,
               maximize, first_step):
    """One step of stochastic gradient descent with optional momentum, in place.

    With ``g`` the gradient (negated when ``maximize``) and ``b`` the momentum buffer::

        g = g + weight_decay * param                 # L2 penalty folded into the gradient
        b = g                       on the first step  (the buffer starts as the gradient)
        b = momentum * b + (1 - dampening) * g       afterwards
        g = g + momentum * b   if nesterov else  b   # Nesterov looks one step ahead
        param = param - lr * g

    ``momentum_buffer`` may be None when ``momentum == 0``. ``first_step`` says whether the buffer
    holds no history yet (it is then overwritten, whatever it contains).
    """
    dtype = param.dtype.type
    p = flat_view(param, "param")
    g = flat_input(grad, param, "grad")
    g = -g if maximize else g
    if weight_decay != 0:
        g = g + dtype(weight_decay) * p
    if momentum != 0:
        if momentum_buffer is None:
            raise ValueError("momentum_buffer is required when momentum != 0")
        b = flat_view(momentum_buffer, "momentum_buffer")
        if first_step:
            b[...] = g
        else:
            # Two roundings, in this order: b*momentum, then + ((1-dampening)*g).
            b *= dtype(momentum)
            b += dtype(1.0 - dampening) * g
        g = g + dtype(momentum) * b if nesterov else b
    p -= dtype(lr) * g


def adam_update(param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, step, lr, beta1, beta2, eps,
                weight_decay, decoupled_weight_decay, amsgrad, maximize):
    """One Adam (or AdamW) step, in place. ``step`` counts updates including this one (1 first).

    With ``g`` the gradient (negated when ``maximize``), ``m`` / ``v`` the running first and
    second moments of ``g``::

        param = param * (1 - lr * weight_decay)      AdamW: decay the weight itself, or
        g = g + weight_decay * param                 Adam: L2 penalty folded into the gradient
        m = m + (1 - beta1) * (g - m)                # = beta1*m + (1-beta1)*g, a lerp toward g
        v = beta2 * v + (1 - beta2) * g * g
        v_max = max(v_max, v)                        amsgrad only; v_max replaces v below

    m and v start at zero, so early on they underestimate the true moments by the factors
    ``1 - beta1**step`` and ``1 - beta2**step``; dividing by those "bias corrections" undoes it::

        step_size = lr / (1 - beta1**step)
        denom = sqrt(v) / sqrt(1 - beta2**step) + eps
        param = param - step_size * m / denom

    ``max_exp_avg_sq`` may be None unless ``amsgrad``.
    """
    dtype = param.dtype.type
    p = flat_view(param, "param")
    g = flat_input(grad, param, "grad")
    m = flat_view(exp_avg, "exp_avg")
    v = flat_view(exp_avg_sq, "exp_avg_sq")
    g = -g if maximize else g
    if weight_decay != 0:
        if decoupled_weight_decay:
            p *= dtype(1.0 - lr * weight_decay)
        else:
            g = g + dtype(weight_decay) * p
    m += dtype(1.0 - beta1) * (g - m)
    v *= dtype(beta2)
    v += dtype(1.0 - beta2) * g * g          # evaluated as ((1-beta2)*g)*g
    if amsgrad:
        if max_exp_avg_sq is None:
            raise ValueError("max_exp_avg_sq is required when amsgrad is set")
        v_max = flat_view(max_exp_avg_sq, "max_exp_avg_sq")
        np.maximum(v_max, v, out=v_max)
        v = v_max
    # The scalar factors are computed in double precision, then rounded once to the array dtype.
    step_size = lr / (1.0 - beta1 ** step)
    bias_correction2_sqrt = math.sqrt(1.0 - beta2 ** step)
    denom = np.sqrt(v) / dtype(bias_correction2_sqrt) + dtype(eps)
    p -= dtype(step_size) * m / denom        # evaluated as (step_size*m)/denom
