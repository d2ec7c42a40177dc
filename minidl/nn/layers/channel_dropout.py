"""Dropout1d and Dropout2d: whole channels dropped (see :mod:`minidl.ops.channel_dropout`)."""

from __future__ import annotations

from ...ops.channel_dropout import channel_dropout
from ..module import Module
from ..registry import register_module


class _ChannelDropout(Module):
    spatial_axes = 1

    def __init__(self, p: float = 0.5, inplace: bool = False, generator=None):
        super().__init__()
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"{type(self).__name__}: p must be in [0, 1], got {p}")
        self.p, self.generator = float(p), generator

    def forward(self, x):
        return channel_dropout(x, self.p, self.training, self.spatial_axes, self.generator)

    def get_config(self):
        return {"p": self.p}


@register_module
class Dropout1d(_ChannelDropout):
    """Zero whole channels of (N, C, L) or (C, L) inputs with probability ``p`` in training."""

    spatial_axes = 1


@register_module
class Dropout2d(_ChannelDropout):
    """Zero whole channels of (N, C, H, W) or (C, H, W) inputs with probability ``p`` in
    training."""

    spatial_axes = 2
