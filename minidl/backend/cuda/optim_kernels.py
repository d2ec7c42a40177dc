"""SGD and Adam/AdamW updates, each one fused kernel over the flat parameter, or over a whole
parameter group at once (the multi-tensor forms: one launch instead of one per tensor).

An update is elementwise (each entry needs only its own gradient and state slots), so one
thread per entry reads everything once, does the whole step in registers and writes the
parameter and state back: one pass over memory instead of the half-dozen an op-by-op version
would make.

Bit-exactness. The reference (:mod:`minidl.backend.reference.optim_kernels`) fixes the order of
operations and rounds every intermediate to the parameter's dtype; the kernels do the same, with
hyperparameters rounded to the dtype on the host. One more thing is needed on a GPU: the CUDA
compiler contracts ``a * b + c`` into one fused multiply-add, which rounds once instead of twice
and so differs from the CPU in the last bit. Every product that feeds a sum therefore goes
through ``mul``, libdevice's ``fmul_rn``/``dmul_rn``, which the compiler never fuses. The result
equals the CPU reference bit for bit, so a run moved between devices resumes identically.
"""

from __future__ import annotations

import math

import numpy as np
from numba import cuda

from .device import launch
from .exact_math import exact_operations
from .movement import astype

_kernels: dict = {}


def _kernels_for(dtype):
    dtype = np.dtype(dtype)
    if dtype.kind != "f" or dtype.itemsize not in (4, 8):
        raise ValueError(f"the CUDA optimizer kernels update float32 or float64 parameters, "
                         f"got {dtype}")
    if dtype in _kernels:
        return _kernels[dtype]
    mul, sqrt = exact_operations(dtype)

    @cuda.jit(device=True)
    def sgd_entry(i, p, g, b, lr, momentum, dampening_complement, weight_decay, nesterov,
                  maximize, first_step):
        grad = -g[i] if maximize else g[i]
        if weight_decay != 0:
            grad = grad + mul(weight_decay, p[i])
        if momentum != 0:
            if first_step:
                buffer = grad
            else:
                buffer = mul(b[i], momentum)
                buffer = buffer + mul(dampening_complement, grad)
            b[i] = buffer
            grad = grad + mul(momentum, buffer) if nesterov else buffer
        p[i] = p[i] - mul(lr, grad)

    @cuda.jit(device=True)
    def adam_entry(i, p, g, m, v, v_max, amsgrad, lr_decay, weight_decay, decoupled, beta1_c,
                   beta2, beta2_c, step_size, bias_correction2_sqrt, eps, maximize):
        grad = -g[i] if maximize else g[i]
        param = p[i]
        if weight_decay != 0:
            if decoupled:
                param = mul(param, lr_decay)
            else:
                grad = grad + mul(weight_decay, param)
        moment = m[i] + mul(beta1_c, grad - m[i])
        second = mul(v[i], beta2)
        second = second + mul(mul(beta2_c, grad), grad)
        m[i] = moment
        v[i] = second
        if amsgrad:
            if second > v_max[i] or second != second:
                v_max[i] = second
            second = v_max[i]
        denom = sqrt(second) / bias_correction2_sqrt + eps
        p[i] = param - mul(step_size, moment) / denom

    @cuda.jit
    def sgd(count, p, g, b, lr, momentum, dampening_complement, weight_decay, nesterov,
            maximize, first_step):
        for i in range(cuda.grid(1), count, cuda.gridsize(1)):
            sgd_entry(i, p, g, b, lr, momentum, dampening_complement, weight_decay, nesterov,
                      maximize, first_step)

    @cuda.jit
    def adam(count, p, g, m, v, v_max, amsgrad, lr_decay, weight_decay, decoupled, beta1_c,
             beta2, beta2_c, step_size, bias_correction2_sqrt, eps, maximize):
        for i in range(cuda.grid(1), count, cuda.gridsize(1)):
            adam_entry(i, p, g, m, v, v_max, amsgrad, lr_decay, weight_decay, decoupled, beta1_c,
                       beta2, beta2_c, step_size, bias_correction2_sqrt, eps, maximize)

    # The multi-tensor forms: the arrays arrive as tuples (the launch's table of tensors) and
    # ``starts[t]`` is where tensor t begins in the concatenation of all of them; a thread takes
    # entries of that concatenation with a grid stride and finds its tensor by a scan of the
    # few starts. Every entry is updated by the same device function as above: same bits.
    @cuda.jit
    def sgd_group(total, starts, ps, gs, bs, lr, momentum, dampening_complement, weight_decay,
                  nesterov, maximize, first_step):
        for e in range(cuda.grid(1), total, cuda.gridsize(1)):
            t = 0
            while t + 1 < len(starts) and starts[t + 1] <= e:
                t += 1
            sgd_entry(e - starts[t], ps[t], gs[t], bs[t], lr, momentum, dampening_complement,
                      weight_decay, nesterov, maximize, first_step)

    @cuda.jit
    def adam_group(total, starts, ps, gs, ms, vs, v_maxes, amsgrad, lr_decay, weight_decay,
                   decoupled, beta1_c, beta2, beta2_c, step_size, bias_correction2_sqrt, eps,
                   maximize):
        for e in range(cuda.grid(1), total, cuda.gridsize(1)):
            t = 0
            while t + 1 < len(starts) and starts[t + 1] <= e:
                t += 1
            adam_entry(e - starts[t], ps[t], gs[t], ms[t], vs[t], v_maxes[t], amsgrad, lr_decay,
                       weight_decay, decoupled, beta1_c, beta2, beta2_c, step_size,
                       bias_correction2_sqrt, eps, maximize)

    _kernels[dtype] = (sgd, adam, sgd_group, adam_group)
    return _kernels[dtype]


def _check_target(array, like, name):
    if array.shape != like.shape and array.size != like.size:
        raise ValueError(f"{name} has shape {array.shape}, expected {like.shape}")
    if array.dtype != like.dtype:
        raise ValueError(f"{name} must be {like.dtype} like the parameter, got {array.dtype}")


def _sgd_buffers(param, grad, momentum_buffer, momentum) -> tuple:
    """(param, grad, momentum buffer) device buffers for the kernel, checked."""
    grad = astype(grad, param.dtype)
    _check_target(grad, param, "grad")
    if momentum != 0:
        if momentum_buffer is None:
            raise ValueError("momentum_buffer is required when momentum != 0")
        _check_target(momentum_buffer, param, "momentum_buffer")
        return param.buffer, grad.buffer, momentum_buffer.buffer
    return param.buffer, grad.buffer, param.buffer  # (never touched without momentum)


def _sgd_settings(dtype, lr, momentum, dampening, weight_decay, nesterov, maximize,
                  first_step) -> tuple:
    of = dtype.type
    return (of(lr), of(momentum), of(1.0 - dampening), of(weight_decay), bool(nesterov),
            bool(maximize), bool(first_step))


def _adam_buffers(param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, amsgrad) -> tuple:
    """(param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq) device buffers, checked."""
    grad = astype(grad, param.dtype)
    for array, name in ((grad, "grad"), (exp_avg, "exp_avg"), (exp_avg_sq, "exp_avg_sq")):
        _check_target(array, param, name)
    if amsgrad:
        if max_exp_avg_sq is None:
            raise ValueError("max_exp_avg_sq is required when amsgrad is set")
        _check_target(max_exp_avg_sq, param, "max_exp_avg_sq")
        v_max = max_exp_avg_sq.buffer
    else:
        v_max = param.buffer  # never touched without amsgrad
    return param.buffer, grad.buffer, exp_avg.buffer, exp_avg_sq.buffer, v_max


def _adam_settings(dtype, step, lr, beta1, beta2, eps, weight_decay, decoupled_weight_decay,
                   amsgrad, maximize) -> tuple:
    of = dtype.type
    # The scalar factors in double precision, then rounded once to the dtype (as the reference).
    step_size = lr / (1.0 - beta1 ** step)
    bias_correction2_sqrt = math.sqrt(1.0 - beta2 ** step)
    return (bool(amsgrad), of(1.0 - lr * weight_decay), of(weight_decay),
            bool(decoupled_weight_decay), of(1.0 - beta1), of(beta2), of(1.0 - beta2),
            of(step_size), of(bias_correction2_sqrt), of(eps), bool(maximize))


def sgd_update(param, grad, momentum_buffer, lr, momentum, dampening, weight_decay, nesterov,
               maximize, first_step):
    sgd = _kernels_for(param.dtype)[0]
    buffers = _sgd_buffers(param, grad, momentum_buffer, momentum)
    if param.size:
        blocks, threads = launch(param.size)
        sgd[blocks, threads](param.size, *buffers,
                             *_sgd_settings(param.dtype, lr, momentum, dampening, weight_decay,
                                            nesterov, maximize, first_step))


def adam_update(param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, step, lr, beta1, beta2, eps,
                weight_decay, decoupled_weight_decay, amsgrad, maximize):
    adam = _kernels_for(param.dtype)[1]
    buffers = _adam_buffers(param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, amsgrad)
    if param.size:
        blocks, threads = launch(param.size)
        adam[blocks, threads](param.size, *buffers,
                              *_adam_settings(param.dtype, step, lr, beta1, beta2, eps,
                                              weight_decay, decoupled_weight_decay, amsgrad,
                                              maximize))


# -- multi-tensor launches -------------------------------------------------------------------------

TENSORS_PER_LAUNCH = 12
"""Most tensors one multi-tensor launch updates. Their arrays travel in the launch's parameter
block, which CUDA limits to 4 KiB; numba passes a 1-D array as 7 words (56 bytes), so Adam's
five arrays per tensor fit 12 tensors with room for the rest (as PyTorch's multi_tensor_apply,
larger groups take one launch per 12 tensors)."""


def _launch_groups(entries):
    """``entries`` (param, buffers) split into launches: one dtype each (a tuple of arrays has
    one type), at most :data:`TENSORS_PER_LAUNCH` tensors, empty tensors left out."""
    by_dtype: dict = {}
    for param, buffers in entries:
        if param.size:
            by_dtype.setdefault(param.dtype, []).append((param, buffers))
    for dtype, members in by_dtype.items():
        for first in range(0, len(members), TENSORS_PER_LAUNCH):
            chunk = members[first:first + TENSORS_PER_LAUNCH]
            starts, total = [], 0
            for param, _ in chunk:
                starts.append(total)
                total += param.size
            # One tuple per argument position: (all params), (all grads), ...
            arrays = tuple(tuple(column) for column in zip(*(buffers for _, buffers in chunk)))
            yield dtype, total, tuple(starts), arrays


def _check_lengths(params, *sequences):
    for sequence in sequences:
        if len(sequence) != len(params):
            raise ValueError(f"a group update needs one entry per parameter: got "
                             f"{len(params)} parameters and {len(sequence)} entries")


def sgd_update_group(params, grads, momentum_buffers, lr, momentum, dampening, weight_decay,
                     nesterov, maximize, first_step):
    _check_lengths(params, grads, momentum_buffers)
    entries = [(param, _sgd_buffers(param, grad, buffer, momentum))
               for param, grad, buffer in zip(params, grads, momentum_buffers)]
    for dtype, total, starts, arrays in _launch_groups(entries):
        blocks, threads = launch(total)
        _kernels_for(dtype)[2][blocks, threads](
            total, starts, *arrays, *_sgd_settings(dtype, lr, momentum, dampening, weight_decay,
                                                   nesterov, maximize, first_step))


def adam_update_group(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, step, lr, beta1,
                      beta2, eps, weight_decay, decoupled_weight_decay, amsgrad, maximize):
    _check_lengths(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs)
    entries = [(param, _adam_buffers(param, grad, m, v, v_max, amsgrad))
               for param, grad, m, v, v_max in zip(params, grads, exp_avgs, exp_avg_sqs,
                                                   max_exp_avg_sqs)]
    for dtype, total, starts, arrays in _launch_groups(entries):
        blocks, threads = launch(total)
        _kernels_for(dtype)[3][blocks, threads](
            total, starts, *arrays, *_adam_settings(dtype, step, lr, beta1, beta2, eps,
                                                    weight_decay, decoupled_weight_decay,
                                                    amsgrad, maximize))
