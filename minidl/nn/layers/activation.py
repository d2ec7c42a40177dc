"""Activation layers: ReLU, GELU, Tanh, Sigmoid, Softmax, LogSoftmax, LeakyReLU, ELU, Softplus,
SiLU, Mish, Hardsigmoid, Hardswish and PReLU.

``inplace=`` is accepted for PyTorch compatibility and ignored: minidl ops always make a new
array, which autograd needs anyway.
"""

from __future__ import annotations

import numpy as np

from ...ops import activations, elementwise, nn_ops
from ..module import Module
from ..parameter import Parameter
from ..registry import register_module


@register_module
class ReLU(Module):
    def forward(self, x):
        return elementwise.relu(x)

    def get_config(self):
        return {}


@register_module
class GELU(Module):
    """x·Φ(x); ``approximate="tanh"`` uses PyTorch's tanh approximation."""

    def __init__(self, approximate: str = "none"):
        super().__init__()
        if approximate not in ("none", "tanh"):
            raise ValueError(f"GELU: approximate must be 'none' or 'tanh', got {approximate!r}")
        self.approximate = approximate

    def forward(self, x):
        return elementwise.gelu(x, self.approximate)

    def get_config(self):
        return {"approximate": self.approximate}


@register_module
class Tanh(Module):
    def forward(self, x):
        return elementwise.tanh(x)

    def get_config(self):
        return {}


@register_module
class Sigmoid(Module):
    def forward(self, x):
        return elementwise.sigmoid(x)

    def get_config(self):
        return {}


@register_module
class Softmax(Module):
    def __init__(self, dim: int = -1):
        super().__init__()
        self.dim = int(dim)

    def forward(self, x):
        return nn_ops.softmax(x, self.dim)

    def get_config(self):
        return {"dim": self.dim}


@register_module
class LogSoftmax(Module):
    def __init__(self, dim: int = -1):
        super().__init__()
        self.dim = int(dim)

    def forward(self, x):
        return nn_ops.log_softmax(x, self.dim)

    def get_config(self):
        return {"dim": self.dim}


@register_module
class LeakyReLU(Module):
    """max(0, x) + negative_slope·min(0, x)."""

    def __init__(self, negative_slope: float = 0.01, inplace: bool = False):
        super().__init__()
        self.negative_slope = float(negative_slope)

    def forward(self, x):
        return activations.leaky_relu(x, self.negative_slope)

    def get_config(self):
        return {"negative_slope": self.negative_slope}


@register_module
class ELU(Module):
    """x for x > 0, alpha·(exp(x) - 1) otherwise."""

    def __init__(self, alpha: float = 1.0, inplace: bool = False):
        super().__init__()
        self.alpha = float(alpha)

    def forward(self, x):
        return activations.elu(x, self.alpha)

    def get_config(self):
        return {"alpha": self.alpha}


@register_module
class Softplus(Module):
    """log(1 + exp(beta·x)) / beta, linear where beta·x > threshold."""

    def __init__(self, beta: float = 1.0, threshold: float = 20.0):
        super().__init__()
        if not beta > 0:
            raise ValueError(f"Softplus: beta must be > 0, got {beta!r}")
        self.beta, self.threshold = float(beta), float(threshold)

    def forward(self, x):
        return activations.softplus(x, self.beta, self.threshold)

    def get_config(self):
        return {"beta": self.beta, "threshold": self.threshold}


class _Pointwise(Module):
    """An activation without arguments: ``function`` applied to the input."""

    function = None

    def __init__(self, inplace: bool = False):
        super().__init__()

    def forward(self, x):
        return type(self).function(x)

    def get_config(self):
        return {}


@register_module
class SiLU(_Pointwise):
    """x·sigmoid(x)."""

    function = staticmethod(activations.silu)


@register_module
class Mish(_Pointwise):
    """x·tanh(softplus(x))."""

    function = staticmethod(activations.mish)


@register_module
class Hardsigmoid(_Pointwise):
    """clip(x/6 + 1/2, 0, 1)."""

    function = staticmethod(activations.hardsigmoid)


@register_module
class Hardswish(_Pointwise):
    """x·hardsigmoid(x)."""

    function = staticmethod(activations.hardswish)


@register_module
class PReLU(Module):
    """LeakyReLU with a learned slope: ``num_parameters`` is 1 (shared) or the channel count
    (axis 1); the slope starts at ``init``. Its parameter is ``weight``, shape (num_parameters,),
    as in PyTorch."""

    def __init__(self, num_parameters: int = 1, init: float = 0.25, dtype=np.float32):
        super().__init__()
        if isinstance(num_parameters, bool) or not isinstance(num_parameters, int) \
                or num_parameters < 1:
            raise ValueError(f"PReLU: num_parameters must be an int >= 1, got {num_parameters!r}")
        self.num_parameters, self.init = num_parameters, float(init)
        self.weight = Parameter(np.full((num_parameters,), init, dtype))

    def forward(self, x):
        return activations.prelu(x, self.weight)

    def get_config(self):
        return {"num_parameters": self.num_parameters, "init": self.init,
                "dtype": str(self.weight.dtype)}
