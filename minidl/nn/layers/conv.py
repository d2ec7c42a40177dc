"""Conv2d: 2-D convolution with PyTorch's weight layout (out, in/groups, kh, kw) and init."""

from __future__ import annotations

import numpy as np

from ...ops.conv import conv2d, conv2d_of_pairs
from ...ops.size_arguments import int_pair
from .. import init
from ..module import Module, RegisteredAttribute
from ..parameter import Parameter
from ..registry import register_module


@register_module
class Conv2d(Module):
    """2-D convolution layer (cross-correlation, as PyTorch's ``nn.Conv2d``)."""

    weight, bias = RegisteredAttribute(), RegisteredAttribute()  # read once per forward

    def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1, padding=0,
                 dilation=1, groups: int = 1, bias: bool = True, dtype=np.float32,
                 generator=None):
        super().__init__()
        if groups < 1 or in_channels % groups or out_channels % groups:
            raise ValueError(f"Conv2d: groups={groups} must divide in_channels={in_channels} "
                             f"and out_channels={out_channels}")
        self.in_channels, self.out_channels, self.groups = in_channels, out_channels, groups
        self.kernel_size = int_pair(kernel_size, "Conv2d", "kernel_size")
        self.stride = int_pair(stride, "Conv2d", "stride")
        # PyTorch's 'same' and 'valid' are kept as strings (conv2d resolves them per input).
        self.padding = padding if padding in ("same", "valid") else \
            int_pair(padding, "Conv2d", "padding")
        if self.padding == "same" and self.stride != (1, 1):
            raise ValueError(f"Conv2d: padding='same' needs stride 1, got stride={self.stride}")
        self.dilation = int_pair(dilation, "Conv2d", "dilation")
        shape = (out_channels, in_channels // groups) + self.kernel_size
        self.weight = Parameter(init.new_storage(shape, dtype))
        self.bias = Parameter(init.new_storage((out_channels,), dtype)) if bias else None
        fan_in = (in_channels // groups) * self.kernel_size[0] * self.kernel_size[1]
        init.default_affine_init_(self.weight, self.bias, fan_in, generator)

    def forward(self, x):
        stride, padding, dilation = self.stride, self.padding, self.dilation
        if type(stride) is tuple and type(padding) is tuple and type(dilation) is tuple:
            # The pairs __init__ made: the op need not read them again.
            return conv2d_of_pairs(x, self.weight, self.bias, stride, padding, dilation,
                                   self.groups)
        # 'same' or 'valid' (conv2d resolves them per input), or sizes assigned since.
        return conv2d(x, self.weight, self.bias, stride, padding, dilation, self.groups)

    def get_config(self):
        return {"in_channels": self.in_channels, "out_channels": self.out_channels,
                "kernel_size": list(self.kernel_size), "stride": list(self.stride),
                "padding": self.padding if isinstance(self.padding, str) else list(self.padding),
                "dilation": list(self.dilation),
                "groups": self.groups, "bias": self.bias is not None,
                "dtype": str(self.weight.dtype)}
