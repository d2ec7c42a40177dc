"""Gradient clipping: limit the gradients' overall norm, or each entry, before a step.

The norm of all gradients together is the p-norm of the per-parameter p-norms (for p = 2, the
norm of one long vector holding every gradient). Scaling every gradient by the same
``max_norm / norm`` keeps the update's direction and bounds its length, which is what makes
clipping safe against the occasional exploding batch. Everything is computed on the
gradients' device with backend primitives: the norm is a 0-d device array, and the scale is
applied as ``min(1, max_norm/(norm + 1e-6))``, so no value has to come to the host to decide
whether to clip.
"""

from __future__ import annotations

import math

from ...autograd.tensor import Tensor
from ...backend import composed


def _gradients(parameters) -> list:
    if isinstance(parameters, Tensor):
        parameters = [parameters]
    return [p.grad for p in parameters if p.grad is not None]


def _norm(be, array, norm_type: float):
    if math.isinf(norm_type):
        return be.max(be.abs(array)) if array.size else be.zeros((), array.dtype)
    return be.power(be.sum(be.power(be.abs(array), norm_type)), 1.0 / norm_type)


def clip_grad_norm_(parameters, max_norm: float, norm_type: float = 2.0,
                    error_if_nonfinite: bool = False, foreach=None) -> Tensor:
    """Scale the gradients of ``parameters`` in place so that their total ``norm_type``-norm is
    at most ``max_norm``; returns the total norm before clipping (a 0-d Tensor), as PyTorch.

    ``error_if_nonfinite=True`` raises when the norm is nan or inf (this reads the norm on the
    host). ``foreach`` is accepted for compatibility and ignored.
    """
    max_norm, norm_type = float(max_norm), float(norm_type)
    if not norm_type > 0:
        raise ValueError(f"clip_grad_norm_: norm_type must be > 0 (or inf), got {norm_type}")
    grads = _gradients(parameters)
    if not grads:
        return Tensor(0.0)
    devices = {g.device for g in grads}
    if len(devices) > 1:
        raise ValueError(f"clip_grad_norm_: gradients are on several devices {sorted(devices)}")
    be, device = grads[0].backend, grads[0].device
    dtype = grads[0].dtype
    norms = [be.astype(_norm(be, g.data, norm_type), dtype) for g in grads]
    stacked = composed.stack(be, norms, 0)
    total = be.max(stacked) if math.isinf(norm_type) else _norm(be, stacked, norm_type)
    if error_if_nonfinite:
        value = float(be.to_numpy(total))
        if not math.isfinite(value):
            raise RuntimeError(f"clip_grad_norm_: the total norm of order {norm_type} of the "
                               f"gradients is {value}; set error_if_nonfinite=False to clip "
                               f"anyway")
    scale = be.minimum(be.div(max_norm, be.add(total, 1e-6)), 1.0)
    for g in grads:
        be.assign_(g.data, be.mul(g.data, be.astype(scale, g.dtype)))
    return Tensor._wrap(total, device)


def clip_grad_value_(parameters, clip_value: float, foreach=None) -> None:
    """Clip every gradient entry of ``parameters`` to [-clip_value, clip_value], in place."""
    clip_value = float(clip_value)
    if clip_value < 0:
        raise ValueError(f"clip_grad_value_: clip_value must be >= 0, got {clip_value}")
    for g in _gradients(parameters):
        g.backend.assign_(g.data, composed.clip(g.backend, g.data, -clip_value, clip_value))
