"""Activation layers: ReLU, GELU, Tanh, Sigmoid, Softmax, LogSoftmax."""

from __future__ import annotations

from ...ops import elementwise, nn_ops
from ..module import Module
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
