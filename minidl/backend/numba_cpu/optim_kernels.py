"""Optimizer updates as one fused Numba loop per step.

The NumPy reference (:mod:`minidl.backend.reference.optim_kernels`) makes a temporary array for
almost every operation of an Adam step and walks memory a dozen times. Here each parameter entry
is read once, updated in registers, and written once, and ``prange`` splits the entries over
large tensors' threads. The one-thread Adam loop vectorises as well as the threaded one (see
:func:`_adam_serial` for what that takes).

Determinism: each entry depends only on its own inputs, so no reduction order can change a result. ``fastmath`` stays off, so LLVM keeps the operations in the written
order and never fuses a multiply-add; with every scalar pre-rounded to the array dtype the results
equal the reference bit for bit.

The kernels are compiled on their first call (and cached on disk), never at import.
"""

from __future__ import annotations

import math

from numba import njit, prange

from ..reference.optim_kernels import flat_input, flat_view

__all__ = ["sgd_update", "adam_update"]


# Each update is written once, for one entry i, and looped over twice: on the calling thread, and
# with prange over Numba's threads. Entries are independent, so both loops give bitwise the same
# result.
PARALLEL_MIN_ELEMENTS = 1 << 16
"""Entries from which an update runs on Numba's threads. Below it, waking the threads (and,
inside a training step, fetching the gradients another core just wrote) costs more than the
second core saves: LeNet's 48k-entry weight among others (measured with pooling's and ReLU's
floors, see :data:`.elementwise.PARALLEL_MIN_WORK`). The one-thread loop vectorises as
well as the threaded one (30k entries: 18 against 17 us on one thread)."""


@njit(cache=True, inline="always")
def _sgd_entry(i, param, grad, buffer, lr, momentum, one_minus_dampening, weight_decay,
               use_weight_decay, use_momentum, nesterov, maximize, first_step):
    # Every scalar arrives already rounded to the array dtype, so no operation here is silently
    # widened to float64 (which would round differently from the reference).
    g = -grad[i] if maximize else grad[i]
    if use_weight_decay:
        g = g + weight_decay * param[i]
    if use_momentum:
        if first_step:
            b = g
        else:
            b = buffer[i] * momentum
            b = b + one_minus_dampening * g
        buffer[i] = b
        if nesterov:
            g = g + momentum * b
        else:
            g = b
    param[i] = param[i] - lr * g


@njit(cache=True)
def _sgd_serial(param, grad, buffer, lr, momentum, one_minus_dampening, weight_decay,
                use_weight_decay, use_momentum, nesterov, maximize, first_step):
    for i in range(param.shape[0]):
        _sgd_entry(i, param, grad, buffer, lr, momentum, one_minus_dampening, weight_decay,
                   use_weight_decay, use_momentum, nesterov, maximize, first_step)


@njit(cache=True, parallel=True)
def _sgd_parallel(param, grad, buffer, lr, momentum, one_minus_dampening, weight_decay,
                  use_weight_decay, use_momentum, nesterov, maximize, first_step):
    for i in prange(param.shape[0]):
        _sgd_entry(i, param, grad, buffer, lr, momentum, one_minus_dampening, weight_decay,
                   use_weight_decay, use_momentum, nesterov, maximize, first_step)


@njit(cache=True, inline="always")
def _adam_entry(i, param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, step_size,
                bias_correction2_sqrt, one_minus_beta1, beta2, one_minus_beta2, eps,
                weight_decay, decay_factor, coupled_decay, decoupled_decay, amsgrad, maximize):
    p = param[i]
    g = -grad[i] if maximize else grad[i]
    if decoupled_decay:
        p = p * decay_factor                      # AdamW: shrink the weight itself
    if coupled_decay:
        g = g + weight_decay * p                  # Adam: L2 penalty inside the gradient
    m = exp_avg[i]
    m = m + one_minus_beta1 * (g - m)             # running mean of g
    v = exp_avg_sq[i] * beta2
    v = v + one_minus_beta2 * g * g               # running mean of g*g
    exp_avg[i] = m
    exp_avg_sq[i] = v
    if amsgrad:
        v_max = max_exp_avg_sq[i]
        if v > v_max or v != v:                   # np.maximum semantics: NaN wins
            v_max = v
        max_exp_avg_sq[i] = v_max
        v = v_max
    denom = math.sqrt(v) / bias_correction2_sqrt + eps
    param[i] = p - step_size * m / denom


# LLVM vectorises this loop (4x faster than the plain loop, as fast as the threaded one on one
# thread) only when two things are true. The division follows NumPy's error model: by default
# Numba checks every float division for a zero divisor to raise ZeroDivisionError, a branch per
# entry; NumPy's model (which parallel=True kernels use anyway) gives inf or NaN, as the reference
# does. And AMSGrad's store is hoisted out of the loop: a store made only under a flag blocks
# vectorising, so each value of the flag gets its own loop, with the flag a constant inside it.
@njit(cache=True, error_model="numpy")
def _adam_serial(param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, step_size,
                 bias_correction2_sqrt, one_minus_beta1, beta2, one_minus_beta2, eps, weight_decay,
                 decay_factor, coupled_decay, decoupled_decay, amsgrad, maximize):
    if amsgrad:
        for i in range(param.shape[0]):
            _adam_entry(i, param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, step_size,
                        bias_correction2_sqrt, one_minus_beta1, beta2, one_minus_beta2, eps,
                        weight_decay, decay_factor, coupled_decay, decoupled_decay, True,
                        maximize)
    else:
        for i in range(param.shape[0]):
            _adam_entry(i, param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, step_size,
                        bias_correction2_sqrt, one_minus_beta1, beta2, one_minus_beta2, eps,
                        weight_decay, decay_factor, coupled_decay, decoupled_decay, False,
                        maximize)


@njit(cache=True, parallel=True)
def _adam_parallel(param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, step_size,
                   bias_correction2_sqrt, one_minus_beta1, beta2, one_minus_beta2, eps,
                   weight_decay, decay_factor, coupled_decay, decoupled_decay, amsgrad, maximize):
    for i in prange(param.shape[0]):
        _adam_entry(i, param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, step_size,
                    bias_correction2_sqrt, one_minus_beta1, beta2, one_minus_beta2, eps,
                    weight_decay, decay_factor, coupled_decay, decoupled_decay, amsgrad,
                    maximize)


def sgd_update(param, grad, momentum_buffer, lr, momentum, dampening, weight_decay, nesterov,
               maximize, first_step):
    """One SGD step in place; same contract and rounding as the reference ``sgd_update``."""
    dtype = param.dtype.type
    p = flat_view(param, "param")
    g = flat_input(grad, param, "grad")
    use_momentum = momentum != 0
    if use_momentum:
        if momentum_buffer is None:
            raise ValueError("momentum_buffer is required when momentum != 0")
        b = flat_view(momentum_buffer, "momentum_buffer")
    else:
        b = p[:0]  # never read; keeps the kernel's argument types fixed
    kernel = _sgd_parallel if p.size >= PARALLEL_MIN_ELEMENTS else _sgd_serial
    kernel(p, g, b, dtype(lr), dtype(momentum), dtype(1.0 - dampening), dtype(weight_decay),
                weight_decay != 0, use_momentum, bool(nesterov), bool(maximize), bool(first_step))


def adam_update(param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, step, lr, beta1, beta2, eps,
                weight_decay, decoupled_weight_decay, amsgrad, maximize):
    """One Adam/AdamW step in place; same contract and rounding as the reference ``adam_update``."""
    dtype = param.dtype.type
    p = flat_view(param, "param")
    g = flat_input(grad, param, "grad")
    m = flat_view(exp_avg, "exp_avg")
    v = flat_view(exp_avg_sq, "exp_avg_sq")
    if amsgrad:
        if max_exp_avg_sq is None:
            raise ValueError("max_exp_avg_sq is required when amsgrad is set")
        v_max = flat_view(max_exp_avg_sq, "max_exp_avg_sq")
    else:
        v_max = p[:0]
    use_decay = weight_decay != 0
    step_size = lr / (1.0 - beta1 ** step)
    bias_correction2_sqrt = math.sqrt(1.0 - beta2 ** step)
    kernel = _adam_parallel if p.size >= PARALLEL_MIN_ELEMENTS else _adam_serial
    kernel(p, g, m, v, v_max, dtype(step_size), dtype(bias_correction2_sqrt),
                 dtype(1.0 - beta1), dtype(beta2), dtype(1.0 - beta2), dtype(eps),
                 dtype(weight_decay), dtype(1.0 - lr * weight_decay),
                 use_decay and not decoupled_weight_decay, use_decay and bool(decoupled_weight_decay),
                 bool(amsgrad), bool(maximize))
