"""SGD and Adam/AdamW updates, each one fused kernel over the flat parameter.

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
from numba.cuda import libdevice

from .device import SIMULATED, launch
from .movement import astype

_kernels: dict = {}


def _kernels_for(dtype):
    dtype = np.dtype(dtype)
    if dtype.kind != "f" or dtype.itemsize not in (4, 8):
        raise ValueError(f"the CUDA optimizer kernels update float32 or float64 parameters, "
                         f"got {dtype}")
    if dtype in _kernels:
        return _kernels[dtype]
    if SIMULATED:
        # The simulator computes with NumPy scalars, which never fuse; libdevice has no Python
        # implementation there.
        @cuda.jit(device=True)
        def mul(a, b):
            return a * b

        @cuda.jit(device=True)
        def sqrt(x):
            return np.sqrt(x)  # in the dtype, as the reference
    else:
        product = libdevice.fmul_rn if dtype.itemsize == 4 else libdevice.dmul_rn
        square_root = libdevice.fsqrt_rn if dtype.itemsize == 4 else libdevice.dsqrt_rn

        @cuda.jit(device=True)
        def mul(a, b):
            return product(a, b)

        @cuda.jit(device=True)
        def sqrt(x):
            return square_root(x)

    @cuda.jit
    def sgd(count, p, g, b, lr, momentum, dampening_complement, weight_decay, nesterov,
            maximize, first_step):
        for i in range(cuda.grid(1), count, cuda.gridsize(1)):
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

    @cuda.jit
    def adam(count, p, g, m, v, v_max, amsgrad, lr_decay, weight_decay, decoupled, beta1_c,
             beta2, beta2_c, step_size, bias_correction2_sqrt, eps, maximize):
        for i in range(cuda.grid(1), count, cuda.gridsize(1)):
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

    _kernels[dtype] = (sgd, adam)
    return _kernels[dtype]


def _check_target(array, like, name):
    if array.shape != like.shape and array.size != like.size:
        raise ValueError(f"{name} has shape {array.shape}, expected {like.shape}")
    if array.dtype != like.dtype:
        raise ValueError(f"{name} must be {like.dtype} like the parameter, got {array.dtype}")


def sgd_update(param, grad, momentum_buffer, lr, momentum, dampening, weight_decay, nesterov,
               maximize, first_step):
    sgd, _ = _kernels_for(param.dtype)
    of = param.dtype.type
    grad = astype(grad, param.dtype)
    _check_target(grad, param, "grad")
    if momentum != 0:
        if momentum_buffer is None:
            raise ValueError("momentum_buffer is required when momentum != 0")
        _check_target(momentum_buffer, param, "momentum_buffer")
        buffer = momentum_buffer.buffer
    else:
        buffer = param.buffer  # never touched without momentum
    if param.size:
        blocks, threads = launch(param.size)
        sgd[blocks, threads](param.size, param.buffer, grad.buffer, buffer, of(lr), of(momentum),
                             of(1.0 - dampening), of(weight_decay), bool(nesterov),
                             bool(maximize), bool(first_step))


def adam_update(param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, step, lr, beta1, beta2, eps,
                weight_decay, decoupled_weight_decay, amsgrad, maximize):
    _, adam = _kernels_for(param.dtype)
    of = param.dtype.type
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
    # The scalar factors in double precision, then rounded once to the dtype (as the reference).
    step_size = lr / (1.0 - beta1 ** step)
    bias_correction2_sqrt = math.sqrt(1.0 - beta2 ** step)
    if param.size:
        blocks, threads = launch(param.size)
        adam[blocks, threads](param.size, param.buffer, grad.buffer, exp_avg.buffer,
                              exp_avg_sq.buffer, v_max, bool(amsgrad), of(1.0 - lr * weight_decay),
                              of(weight_decay), bool(decoupled_weight_decay), of(1.0 - beta1),
                              of(beta2), of(1.0 - beta2), of(step_size),
                              of(bias_correction2_sqrt), of(eps), bool(maximize))
