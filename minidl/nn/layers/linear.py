"""Affine and reshaping layers: Linear, Identity, Flatten."""

from __future__ import annotations

import numpy as np

from ...ops.linalg import linear
from ...ops.shape import flatten
from .. import init
from ..module import Module, RegisteredAttribute
from ..parameter import Parameter
from ..registry import register_module


@register_module
class Linear(Module):
    """y = x Wᵀ + b with W of shape (out_features, in_features), PyTorch's layout and init."""

    weight, bias = RegisteredAttribute(), RegisteredAttribute()  # read once per forward

    def __init__(self, in_features: int, out_features: int, bias: bool = True,
                 dtype=np.float32, generator=None):
        super().__init__()
        if in_features < 0 or out_features < 0:
            raise ValueError(f"Linear: feature counts must be >= 0, got {in_features}, "
                             f"{out_features}")
        self.in_features, self.out_features = int(in_features), int(out_features)
        self.weight = Parameter(init.new_storage((out_features, in_features), dtype))
        self.bias = Parameter(init.new_storage((out_features,), dtype)) if bias else None
        init.default_affine_init_(self.weight, self.bias, in_features, generator)

    def forward(self, x):
        return linear(x, self.weight, self.bias)

    def get_config(self):
        return {"in_features": self.in_features, "out_features": self.out_features,
                "bias": self.bias is not None, "dtype": str(self.weight.dtype)}


@register_module
class Identity(Module):
    """Returns its input."""

    def forward(self, x):
        return x

    def get_config(self):
        return {}


@register_module
class Flatten(Module):
    """Merge axes ``start_dim`` .. ``end_dim`` into one (by default all but the batch axis)."""

    def __init__(self, start_dim: int = 1, end_dim: int = -1):
        super().__init__()
        self.start_dim, self.end_dim = int(start_dim), int(end_dim)

    def forward(self, x):
        return flatten(x, self.start_dim, self.end_dim)

    def get_config(self):
        return {"start_dim": self.start_dim, "end_dim": self.end_dim}


@register_module
class Unflatten(Module):
    """Split axis ``dim`` into ``unflattened_size`` (Flatten's inverse); one size may be -1."""

    def __init__(self, dim: int, unflattened_size):
        super().__init__()
        self.dim, self.unflattened_size = int(dim), [int(s) for s in unflattened_size]
        if not self.unflattened_size or sum(s == -1 for s in self.unflattened_size) > 1:
            raise ValueError(f"Unflatten: unflattened_size must be non-empty with at most one "
                             f"-1, got {unflattened_size!r}")

    def forward(self, x):
        dim = self.dim % x.ndim
        return x.reshape(*x.shape[:dim], *self.unflattened_size, *x.shape[dim + 1:])

    def get_config(self):
        return {"dim": self.dim, "unflattened_size": self.unflattened_size}
