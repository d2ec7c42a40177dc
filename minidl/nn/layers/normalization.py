"""Normalisation layers: BatchNorm1d, BatchNorm2d, LayerNorm."""

from __future__ import annotations

import numpy as np

from ...autograd.tensor import Tensor
from ...ops.nn_ops import batch_norm, layer_norm
from .. import init
from ..module import Module, RegisteredAttribute
from ..parameter import Parameter
from ..registry import register_module


class _BatchNorm(Module):
    """Shared by BatchNorm1d/2d: per-channel scale and shift, running statistics as buffers.

    Buffers and their names follow PyTorch (``running_mean``, ``running_var``,
    ``num_batches_tracked``), so state_dicts are interchangeable.
    """

    expected_dims: tuple = ()
    # Read on every forward (module.py says why these are declared).
    weight, bias = RegisteredAttribute(), RegisteredAttribute()
    running_mean, running_var = RegisteredAttribute(), RegisteredAttribute()
    num_batches_tracked = RegisteredAttribute()

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float | None = 0.1,
                 affine: bool = True, track_running_stats: bool = True, dtype=np.float32):
        super().__init__()
        self.num_features, self.eps, self.momentum = int(num_features), float(eps), momentum
        self.affine, self.track_running_stats = bool(affine), bool(track_running_stats)
        if affine:
            self.weight = Parameter(init.new_storage(num_features, dtype, fill=1))
            self.bias = Parameter(init.new_storage(num_features, dtype, fill=0))
        else:
            self.weight = self.bias = None
        if track_running_stats:
            self.register_buffer("running_mean", Tensor(init.new_storage(num_features, dtype, fill=0)))
            self.register_buffer("running_var", Tensor(init.new_storage(num_features, dtype, fill=1)))
            self.register_buffer("num_batches_tracked", Tensor(init.new_storage((), np.int64, fill=0)))
        else:
            self.running_mean = self.running_var = self.num_batches_tracked = None

    def forward(self, x):
        shape = x.data.shape  # x.shape without its call (every forward reads it)
        if len(shape) not in self.expected_dims:
            raise ValueError(f"{type(self).__name__}: expected a {' or '.join(map(str, self.expected_dims))}-D "
                             f"input, got shape {x.shape}")
        if shape[1] != self.num_features:
            raise ValueError(f"{type(self).__name__}: expected {self.num_features} channels, "
                             f"got input of shape {x.shape}")
        use_batch_stats = self.training or not self.track_running_stats
        momentum = self.momentum
        if self.training and self.track_running_stats:
            tracked = self.num_batches_tracked
            tracked.backend.assign_(tracked.data, tracked.backend.add(tracked.data, 1))
            if momentum is None:  # cumulative moving average, as PyTorch
                momentum = 1.0 / float(self.num_batches_tracked.item())
        # Without tracked statistics the running tensors are None and batch statistics are used
        # in both modes; with them, batch_norm updates them in training and uses them in eval.
        return batch_norm(x, self.running_mean, self.running_var, self.weight, self.bias,
                          use_batch_stats, momentum or 0.0, self.eps)

    def get_config(self):
        return {"num_features": self.num_features, "eps": self.eps, "momentum": self.momentum,
                "affine": self.affine, "track_running_stats": self.track_running_stats,
                "dtype": str(self.weight.dtype if self.weight is not None
                             else self.running_mean.dtype if self.running_mean is not None
                             else "float32")}


@register_module
class BatchNorm1d(_BatchNorm):
    """Batch norm over (N, C) or (N, C, L) inputs."""
    expected_dims = (2, 3)


@register_module
class BatchNorm2d(_BatchNorm):
    """Batch norm over (N, C, H, W) inputs."""
    expected_dims = (4,)


@register_module
class LayerNorm(Module):
    """Normalise over the trailing ``normalized_shape`` axes, then scale and shift."""

    def __init__(self, normalized_shape, eps: float = 1e-5, elementwise_affine: bool = True,
                 bias: bool = True, dtype=np.float32):
        super().__init__()
        shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
        self.normalized_shape, self.eps = tuple(int(n) for n in shape), float(eps)
        self.elementwise_affine = bool(elementwise_affine)
        if elementwise_affine:
            self.weight = Parameter(init.new_storage(self.normalized_shape, dtype, fill=1))
            self.bias = Parameter(init.new_storage(self.normalized_shape, dtype, fill=0)) if bias else None
        else:
            self.weight = self.bias = None

    def forward(self, x):
        bias = self.bias
        if self.weight is not None and bias is None:
            bias = Tensor(np.zeros(self.normalized_shape, self.weight.dtype), device=x.device)
        return layer_norm(x, self.normalized_shape, self.weight, bias, self.eps)

    def get_config(self):
        return {"normalized_shape": list(self.normalized_shape), "eps": self.eps,
                "elementwise_affine": self.elementwise_affine, "bias": self.bias is not None,
                "dtype": str(self.weight.dtype) if self.weight is not None else "float32"}
