"""Per-sample normalisation layers: GroupNorm, InstanceNorm1d, InstanceNorm2d.

Parameter and buffer names, shapes and defaults are PyTorch's: GroupNorm has ``weight`` and
``bias`` of shape (num_channels,); instance norms are not affine and keep no running statistics
unless asked (then ``running_mean``, ``running_var``, ``num_batches_tracked`` as batch norm).
"""

from __future__ import annotations

import numpy as np

from ...ops.instance_norms import group_norm, instance_norm
from ..module import Module
from ..parameter import Parameter
from ..registry import register_module
from .normalization import _BatchNorm


@register_module
class GroupNorm(Module):
    """Normalise each sample's channels in ``num_groups`` groups, then scale and shift each
    channel."""

    def __init__(self, num_groups: int, num_channels: int, eps: float = 1e-5,
                 affine: bool = True, dtype=np.float32):
        super().__init__()
        if num_groups < 1 or num_channels % num_groups:
            raise ValueError(f"GroupNorm: num_groups={num_groups} must divide "
                             f"num_channels={num_channels}")
        self.num_groups, self.num_channels = int(num_groups), int(num_channels)
        self.eps, self.affine = float(eps), bool(affine)
        self.dtype = np.dtype(dtype)
        if affine:
            self.weight = Parameter(np.ones(num_channels, dtype))
            self.bias = Parameter(np.zeros(num_channels, dtype))
        else:
            self.weight = self.bias = None

    def forward(self, x):
        if x.ndim < 2 or x.shape[1] != self.num_channels:
            raise ValueError(f"GroupNorm: expected {self.num_channels} channels (axis 1), got "
                             f"input of shape {x.shape}")
        return group_norm(x, self.num_groups, self.weight, self.bias, self.eps)

    def get_config(self):
        return {"num_groups": self.num_groups, "num_channels": self.num_channels,
                "eps": self.eps, "affine": self.affine, "dtype": str(self.dtype)}


class _InstanceNorm(_BatchNorm):
    """Batch norm's parameters and buffers, with statistics taken per sample."""

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float | None = 0.1,
                 affine: bool = False, track_running_stats: bool = False, dtype=np.float32):
        super().__init__(num_features, eps, momentum, affine, track_running_stats, dtype)

    def forward(self, x):
        if x.ndim != self.expected_dims[0] or x.shape[1] != self.num_features:
            raise ValueError(f"{type(self).__name__}: expected a {self.expected_dims[0]}-D "
                             f"input with {self.num_features} channels, got shape {x.shape}")
        use_input_stats = self.training or not self.track_running_stats
        # As in PyTorch, num_batches_tracked is kept for state_dict compatibility but never
        # counts, and momentum=None means the running statistics stay where they are.
        return instance_norm(x, self.running_mean, self.running_var, self.weight, self.bias,
                             use_input_stats, self.momentum or 0.0, self.eps)


@register_module
class InstanceNorm1d(_InstanceNorm):
    """Instance norm over (N, C, L) inputs."""
    expected_dims = (3,)


@register_module
class InstanceNorm2d(_InstanceNorm):
    """Instance norm over (N, C, H, W) inputs."""
    expected_dims = (4,)
