"""The Tensor's computing methods and operators (``x + y``, ``x @ w``, ``x.sum()``, ``x.to(...)``,
``x.add_(y)``, ``x[i] = v``), attached to :class:`~minidl.autograd.tensor.Tensor` from here.

A PyTorch-style method API makes Tensor and the ops need each other: every op builds Tensors, and
every method is an op. The ops floor sits above autograd, so the methods are installed from this
one module, when :mod:`minidl.ops` is imported (``import minidl`` does), and the autograd floor
never imports an op. Each method is the op itself (or a one-line adapter), so a method call costs
what the op's call costs.
"""

from __future__ import annotations

import numpy as np

from ..autograd import tracing
from ..autograd.grad_mode import is_grad_enabled
from ..autograd.inplace import bump_version, modify_in_place
from ..autograd.tensor import Tensor, device_and_dtype
from ..backend import canonical_device, composed
from . import elementwise as ew, linalg, nn_ops, reduction, shape


# -- conversions -----------------------------------------------------------------------------------

def to(self, device=None, dtype=None, non_blocking: bool = False) -> Tensor:
    """This tensor on ``device`` and/or as ``dtype``; differentiable, a no-op when unchanged.

    As PyTorch: ``x.to(other)`` takes another tensor's device and dtype, ``x.to(md.float64)``
    a dtype alone. ``non_blocking`` is accepted for PyTorch's signature and changes nothing:
    every copy and kernel of a device runs in order on its one stream, so a copy is never
    read before it is complete."""
    device, dtype = device_and_dtype(device, dtype)
    out = self
    if dtype is not None and np.dtype(dtype) != self.dtype:
        out = shape.cast(out, np.dtype(dtype))
    if device is not None and canonical_device(device) != self.device:
        out = shape.to_device(out, canonical_device(device))
    return out


def softmax(self, axis=-1, *, dim=None) -> Tensor:
    """Softmax along ``dim`` (PyTorch's name) or ``axis``."""
    return nn_ops.softmax(self, dim if dim is not None else axis)


def log_softmax(self, axis=-1, *, dim=None) -> Tensor:
    """Log-softmax along ``dim`` (PyTorch's name) or ``axis``."""
    return nn_ops.log_softmax(self, dim if dim is not None else axis)


def _reflected(function):
    return lambda self, other: function(other, self)


OUT_OF_PLACE = {
    "__add__": ew.add, "__radd__": _reflected(ew.add),
    "__sub__": ew.sub, "__rsub__": _reflected(ew.sub),
    "__mul__": ew.mul, "__rmul__": _reflected(ew.mul),
    "__truediv__": ew.div, "__rtruediv__": ew.reflected_div,
    "__floordiv__": ew.floor_divide, "__rfloordiv__": _reflected(ew.floor_divide),
    "__mod__": ew.remainder, "__rmod__": _reflected(ew.remainder),
    "__pow__": ew.pow, "__rpow__": _reflected(ew.pow),
    "__matmul__": linalg.matmul, "__rmatmul__": _reflected(linalg.matmul),
    "__neg__": ew.neg, "__abs__": ew.abs,
    "__eq__": ew.eq, "__ne__": ew.ne, "__lt__": ew.lt, "__le__": ew.le,
    "__gt__": ew.gt, "__ge__": ew.ge,
    "__getitem__": shape.getitem,
    "__and__": ew.logical_and, "__rand__": _reflected(ew.logical_and),
    "__or__": ew.logical_or, "__ror__": _reflected(ew.logical_or),
    "__invert__": ew.logical_not,
    "add": ew.add, "sub": ew.sub, "mul": ew.mul, "div": ew.div, "pow": ew.pow,
    "floor_divide": ew.floor_divide, "remainder": ew.remainder,
    "matmul": linalg.matmul, "neg": ew.neg, "abs": ew.abs,
    "exp": ew.exp, "log": ew.log, "sqrt": ew.sqrt, "tanh": ew.tanh, "sigmoid": ew.sigmoid,
    "relu": ew.relu, "gelu": ew.gelu, "clamp": ew.clamp, "clip": ew.clamp,
    "maximum": ew.maximum, "minimum": ew.minimum,
    "eq": ew.eq, "ne": ew.ne, "lt": ew.lt, "le": ew.le, "gt": ew.gt, "ge": ew.ge,
    "reshape": shape.reshape, "view": shape.reshape, "flatten": shape.flatten,
    "permute": shape.permute, "transpose": shape.transpose, "squeeze": shape.squeeze,
    "unsqueeze": shape.unsqueeze, "expand": shape.expand, "broadcast_to": shape.broadcast_to,
    "argmax": reduction.argmax, "argmin": reduction.argmin,
    # Reductions accept NumPy's ``axis`` and PyTorch's ``dim``; ``keepdim`` is PyTorch's spelling.
    **{name: getattr(reduction, name)
       for name in ("sum", "mean", "max", "min", "amax", "amin", "var", "std", "any", "all")},
    "softmax": softmax, "log_softmax": log_softmax,
    "to": to, "clone": shape.clone,
    "T": property(shape.transpose),
}


# -- in place (the rules and the version counter are autograd/inplace.py's) ------------------------

def _scaled(other, alpha):
    return other if alpha == 1 else ew.mul(other, alpha)


def add_(self, other, alpha=1):
    """self += alpha * other, in place."""
    return modify_in_place(self, "add_", lambda a: ew.add(a, _scaled(other, alpha)), other)


def sub_(self, other, alpha=1):
    """self -= alpha * other, in place."""
    return modify_in_place(self, "sub_", lambda a: ew.sub(a, _scaled(other, alpha)), other)


def mul_(self, other):
    """self *= other, in place."""
    return modify_in_place(self, "mul_", lambda a: ew.mul(a, other), other)


def div_(self, other):
    """self /= other, in place."""
    return modify_in_place(self, "div_", lambda a: ew.div(a, other), other)


def floor_divide_(self, other):
    """self //= other, in place."""
    return modify_in_place(self, "floor_divide_", lambda a: ew.floor_divide(a, other), other)


def remainder_(self, other):
    """self %= other, in place."""
    return modify_in_place(self, "remainder_", lambda a: ew.remainder(a, other), other)


def pow_(self, exponent):
    """self **= exponent, in place."""
    return modify_in_place(self, "pow_", lambda a: ew.pow(a, exponent), exponent)


def clamp_(self, min=None, max=None):  # noqa: A002
    """Clip the values into [min, max], in place."""
    return modify_in_place(self, "clamp_", lambda a: ew.clamp(a, min, max))


def neg_(self):
    """self = -self, in place."""
    return modify_in_place(self, "neg_", ew.neg)


def fill_(self, value):
    """Set every element to ``value``, in place."""
    if isinstance(value, Tensor) or (is_grad_enabled() and self.requires_grad) or \
            tracing.active is not None:
        return modify_in_place(self, "fill_", lambda a: shape.full_like(a, value))
    # Nothing to record (a gradient buffer, an update under no_grad): write directly. As
    # in PyTorch the value is cast to the tensor's dtype (fill_(0.5) of integers is 0).
    composed.fill_(self.backend, self.data,
                   value.item() if isinstance(value, np.generic) else value)
    bump_version(self)
    return self


def zero_(self):
    """Set every element to zero, in place."""
    return fill_(self, 0)


def copy_(self, source):
    """Overwrite the values with ``source``'s (broadcast to this shape, cast to this dtype),
    in place; the gradient flows to ``source``, as in PyTorch."""
    if not isinstance(source, Tensor):
        source = Tensor(np.asarray(source), device=self.device)
    if source.device != self.device:
        source = source.to(self.device)

    def broadcast(a):
        try:  # the cast first: copy_ truncates floats into an integer tensor
            return shape.broadcast_to(source.to(dtype=a.dtype), a.shape)
        except ValueError:
            raise ValueError(f"copy_: source of shape {source.shape} cannot be broadcast to "
                             f"the tensor's shape {a.shape}") from None
    return modify_in_place(self, "copy_", broadcast, source)


def setitem(self, index, value):
    """``x[index] = value``, in place; differentiable in ``x``'s other elements and in
    ``value`` (see :func:`minidl.ops.shape.index_put`)."""
    modify_in_place(self, "setitem", lambda a: shape.index_put(a, index, value), value)


def index_put_(self, indices, values, accumulate: bool = False):
    """``self[indices] = values`` (or ``+=`` with ``accumulate``), in place."""
    return modify_in_place(self, "index_put_", lambda a: shape.index_put(
        a, indices, values, accumulate=accumulate), values)


def _operator(method):
    return lambda self, other: method(self, other)


IN_PLACE = {
    "add_": add_, "sub_": sub_, "mul_": mul_, "div_": div_, "floor_divide_": floor_divide_,
    "remainder_": remainder_, "pow_": pow_, "clamp_": clamp_,
    "clip_": clamp_, "neg_": neg_, "fill_": fill_, "zero_": zero_, "copy_": copy_,
    "__setitem__": setitem, "index_put_": index_put_,
    # x += y edits x in place, as in PyTorch (without these Python would rebind x to a new
    # tensor, and `param -= lr * param.grad` would silently stop updating the parameter).
    "__iadd__": _operator(add_), "__isub__": _operator(sub_), "__imul__": _operator(mul_),
    "__itruediv__": _operator(div_), "__ifloordiv__": _operator(floor_divide_),
    "__imod__": _operator(remainder_), "__ipow__": _operator(pow_),
}


def install() -> None:
    """Attach every method and operator above to Tensor (done once, by ``minidl.ops``)."""
    for name, method in {**OUT_OF_PLACE, **IN_PLACE}.items():
        setattr(Tensor, name, method)
