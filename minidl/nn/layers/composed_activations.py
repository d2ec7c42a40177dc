"""Activation layers over :mod:`minidl.ops.composed_activations`: ReLU6, Hardtanh, SELU, CELU,
GLU, LogSigmoid, Softsign and Softmin. ``inplace=`` is accepted and ignored, as for the other
activations."""

from __future__ import annotations

from ...ops import composed_activations as ca
from ..module import Module
from ..registry import register_module
from .activation import _Pointwise


@register_module
class ReLU6(_Pointwise):
    """min(max(0, x), 6)."""

    function = staticmethod(ca.relu6)


@register_module
class SELU(_Pointwise):
    """scale·ELU(x, alpha) with the self-normalising constants."""

    function = staticmethod(ca.selu)


@register_module
class LogSigmoid(_Pointwise):
    """log σ(x), computed without overflow."""

    function = staticmethod(ca.logsigmoid)


@register_module
class Softsign(_Pointwise):
    """x / (1 + |x|)."""

    function = staticmethod(ca.softsign)


@register_module
class Hardtanh(Module):
    """x clipped to [min_val, max_val]."""

    def __init__(self, min_val: float = -1.0, max_val: float = 1.0, inplace: bool = False):
        super().__init__()
        if min_val > max_val:
            raise ValueError(f"Hardtanh: min_val ({min_val}) must not exceed max_val "
                             f"({max_val})")
        self.min_val, self.max_val = float(min_val), float(max_val)

    def forward(self, x):
        return ca.hardtanh(x, self.min_val, self.max_val)

    def get_config(self):
        return {"min_val": self.min_val, "max_val": self.max_val}


@register_module
class CELU(Module):
    """alpha·ELU(x / alpha)."""

    def __init__(self, alpha: float = 1.0, inplace: bool = False):
        super().__init__()
        if alpha == 0:
            raise ValueError("CELU: alpha must not be 0")
        self.alpha = float(alpha)

    def forward(self, x):
        return ca.celu(x, self.alpha)

    def get_config(self):
        return {"alpha": self.alpha}


class _AlongDim(Module):
    """An activation acting along one axis ``dim``."""

    function = None

    def __init__(self, dim: int = -1):
        super().__init__()
        self.dim = int(dim)

    def forward(self, x):
        return type(self).function(x, self.dim)

    def get_config(self):
        return {"dim": self.dim}


@register_module
class GLU(_AlongDim):
    """a·σ(b) for the halves a, b of the input along ``dim``."""

    function = staticmethod(ca.glu)


@register_module
class Softmin(_AlongDim):
    """softmax(-x) along ``dim``."""

    function = staticmethod(ca.softmin)

    def __init__(self, dim: int | None = None):
        if dim is None:
            raise ValueError("Softmin: give dim= (PyTorch's implicit choice of axis is "
                             "deprecated)")
        super().__init__(dim)
