"""Weight initialisation, drawing from minidl's generators (the global one by default).

Samples are drawn on the tensor's device and written into it in place: nothing crosses to or
from the host.

The fan-based schemes keep the variance of activations roughly constant from layer to layer:
Kaiming (He) for ReLU-like nets scales by 1/fan_in, Xavier (Glorot) by 2/(fan_in + fan_out).
"""

from __future__ import annotations

import math
import threading
from contextlib import contextmanager

import numpy as np

from ..autograd.grad_mode import no_grad
from ..autograd.tensor import Tensor
from ..random import resolve

# ------------------------------------------------------------- building without initialising
#
# A model read from a file gets every weight from the file, so drawing random initial
# values first would waste time, move the global RNG and -- for a hostile file whose spec
# claims Linear(20000, 20000) -- allocate gigabytes before the file could be checked.
# Under ``skip_init()`` layers get placeholders instead: arrays with the right shape and
# dtype that take no memory (every stride is 0, all elements are one shared zero), and
# the init functions below leave tensors alone.  The loader then checks the placeholders'
# shapes against the file and replaces them with the file's arrays.

_skipping = threading.local()


class Placeholder(np.ndarray):
    """A read-only array of a shape and dtype that takes no memory: a stand-in for a weight
    that :meth:`Module.load_state_dict` with ``assign=True`` will replace."""


@contextmanager
def skip_init():
    """Within this block, layers are built with placeholders and the init functions draw
    nothing (the global RNG does not move).  For loaders that assign every weight."""
    previous = getattr(_skipping, "active", False)
    _skipping.active = True
    try:
        yield
    finally:
        _skipping.active = previous


def init_skipped() -> bool:
    """Whether this thread is inside :func:`skip_init`."""
    return getattr(_skipping, "active", False)


def new_storage(shape, dtype, fill=None) -> np.ndarray:
    """Storage for a new parameter or buffer: ``fill`` everywhere (uninitialised when None,
    for weights an init function fills next), or a :class:`Placeholder` under skip_init."""
    if init_skipped():
        return np.broadcast_to(np.zeros((), dtype), shape).view(Placeholder)
    return np.empty(shape, dtype) if fill is None else np.full(shape, fill, dtype)


# Initialising writes a parameter in place, which is not part of any graph (PyTorch's init
# functions also run under no_grad; in-place edits of leaves are refused otherwise).
@no_grad()
def _fill(tensor: Tensor, values) -> Tensor:
    """Write ``values`` (an array of the tensor's backend, drawn on its device) into it in place."""
    return tensor.copy_(Tensor._wrap(values, tensor.device))


def fan_in_and_fan_out(tensor: Tensor) -> tuple[int, int]:
    """For a weight (out, in, *kernel): fan_in = in·prod(kernel), fan_out = out·prod(kernel)."""
    if tensor.ndim < 2:
        raise ValueError(f"fan in/out need a tensor with at least 2 dimensions, got {tensor.shape}")
    receptive = math.prod(tensor.shape[2:])
    return tensor.shape[1] * receptive, tensor.shape[0] * receptive


def calculate_gain(nonlinearity: str, param: float | None = None) -> float:
    """The gain that keeps the variance through ``nonlinearity`` (PyTorch's table)."""
    if nonlinearity in ("linear", "conv2d", "sigmoid", "identity"):
        return 1.0
    if nonlinearity == "tanh":
        return 5.0 / 3
    if nonlinearity == "relu":
        return math.sqrt(2.0)
    if nonlinearity == "leaky_relu":
        slope = 0.01 if param is None else param
        return math.sqrt(2.0 / (1 + slope ** 2))
    raise ValueError(f"calculate_gain: unsupported nonlinearity {nonlinearity!r}")


def uniform_(tensor: Tensor, a: float = 0.0, b: float = 1.0, generator=None) -> Tensor:
    if init_skipped():
        return tensor
    return _fill(tensor, resolve(generator).uniform(a, b, tensor.shape, tensor.dtype,
                                                    device=tensor.device))


def normal_(tensor: Tensor, mean: float = 0.0, std: float = 1.0, generator=None) -> Tensor:
    if init_skipped():
        return tensor
    return _fill(tensor, resolve(generator).normal(mean, std, tensor.shape, tensor.dtype,
                                                   device=tensor.device))


@no_grad()
def constant_(tensor: Tensor, value: float) -> Tensor:
    return tensor if init_skipped() else tensor.fill_(value)


def zeros_(tensor: Tensor) -> Tensor:
    return constant_(tensor, 0)


def ones_(tensor: Tensor) -> Tensor:
    return constant_(tensor, 1)


def kaiming_uniform_(tensor: Tensor, a: float = 0.0, mode: str = "fan_in",
                     nonlinearity: str = "leaky_relu", generator=None) -> Tensor:
    """U(-bound, bound) with bound = gain·sqrt(3 / fan): variance gain² / fan."""
    fan_in, fan_out = fan_in_and_fan_out(tensor)
    fan = fan_in if mode == "fan_in" else fan_out
    bound = calculate_gain(nonlinearity, a) * math.sqrt(3.0 / fan) if fan else 0.0
    return uniform_(tensor, -bound, bound, generator)


def kaiming_normal_(tensor: Tensor, a: float = 0.0, mode: str = "fan_in",
                    nonlinearity: str = "leaky_relu", generator=None) -> Tensor:
    fan_in, fan_out = fan_in_and_fan_out(tensor)
    fan = fan_in if mode == "fan_in" else fan_out
    std = calculate_gain(nonlinearity, a) / math.sqrt(fan) if fan else 0.0
    return normal_(tensor, 0.0, std, generator)


def xavier_uniform_(tensor: Tensor, gain: float = 1.0, generator=None) -> Tensor:
    fan_in, fan_out = fan_in_and_fan_out(tensor)
    bound = gain * math.sqrt(6.0 / (fan_in + fan_out))
    return uniform_(tensor, -bound, bound, generator)


def xavier_normal_(tensor: Tensor, gain: float = 1.0, generator=None) -> Tensor:
    fan_in, fan_out = fan_in_and_fan_out(tensor)
    return normal_(tensor, 0.0, gain * math.sqrt(2.0 / (fan_in + fan_out)), generator)


def default_affine_init_(weight: Tensor, bias: Tensor | None, fan_in: int, generator=None):
    """PyTorch's Linear/Conv default: kaiming_uniform_(a=√5), i.e. U(±1/√fan_in) for the weight,
    and U(±1/√fan_in) for the bias."""
    kaiming_uniform_(weight, a=math.sqrt(5), generator=generator)
    if bias is not None:
        bound = 1.0 / math.sqrt(fan_in) if fan_in > 0 else 0.0
        uniform_(bias, -bound, bound, generator)
