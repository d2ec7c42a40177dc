"""Conv1d and ConvTranspose2d, with PyTorch's weight layouts, defaults and initialisation.

Conv1d's weight is (out, in/groups, k); ConvTranspose2d's is (in, out/groups, kh, kw) -- the
transpose of the convolution it inverts -- and its fan-in for initialisation is, as in PyTorch,
computed from that layout's second axis: out/groups·kh·kw.
"""

from __future__ import annotations

import numpy as np

from ...ops.conv1d import conv1d, conv1d_padding
from ...ops.size_arguments import int_pair, single_int
from ...ops.conv_transpose import conv_transpose2d, output_padding_for
from .. import init
from ..module import Module
from ..parameter import Parameter
from ..registry import register_module


def _check_groups(layer: str, in_channels: int, out_channels: int, groups: int) -> None:
    if groups < 1 or in_channels % groups or out_channels % groups:
        raise ValueError(f"{layer}: groups={groups} must divide in_channels={in_channels} and "
                         f"out_channels={out_channels}")


@register_module
class Conv1d(Module):
    """1-D convolution over (N, C, L)."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1, padding=0,
                 dilation=1, groups: int = 1, bias: bool = True, dtype=np.float32,
                 generator=None):
        super().__init__()
        _check_groups("Conv1d", in_channels, out_channels, groups)
        self.in_channels, self.out_channels, self.groups = in_channels, out_channels, groups
        self.kernel_size = single_int(kernel_size, "Conv1d", "kernel_size")
        self.stride = single_int(stride, "Conv1d", "stride")
        self.padding = conv1d_padding(padding, self.stride, "Conv1d")
        self.dilation = single_int(dilation, "Conv1d", "dilation")
        self.weight = Parameter(np.empty((out_channels, in_channels // groups,
                                          self.kernel_size), dtype))
        self.bias = Parameter(np.empty((out_channels,), dtype)) if bias else None
        init.default_affine_init_(self.weight, self.bias,
                                  in_channels // groups * self.kernel_size, generator)

    def forward(self, x):
        return conv1d(x, self.weight, self.bias, self.stride, self.padding, self.dilation,
                      self.groups)

    def get_config(self):
        return {"in_channels": self.in_channels, "out_channels": self.out_channels,
                "kernel_size": self.kernel_size, "stride": self.stride,
                "padding": self.padding, "dilation": self.dilation, "groups": self.groups,
                "bias": self.bias is not None, "dtype": str(self.weight.dtype)}


@register_module
class ConvTranspose2d(Module):
    """Transposed 2-D convolution (a learned upsampling) over (N, C, H, W)."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1, padding=0,
                 output_padding=0, groups: int = 1, bias: bool = True, dilation=1,
                 dtype=np.float32, generator=None):
        super().__init__()
        _check_groups("ConvTranspose2d", in_channels, out_channels, groups)
        self.in_channels, self.out_channels, self.groups = in_channels, out_channels, groups
        self.kernel_size = int_pair(kernel_size, "ConvTranspose2d", "kernel_size")
        self.stride = int_pair(stride, "ConvTranspose2d", "stride")
        self.padding = int_pair(padding, "ConvTranspose2d", "padding")
        self.output_padding = int_pair(output_padding, "ConvTranspose2d", "output_padding")
        self.dilation = int_pair(dilation, "ConvTranspose2d", "dilation")
        if any(o >= s for o, s in zip(self.output_padding, self.stride)):
            raise ValueError(f"ConvTranspose2d: output_padding {self.output_padding} must be "
                             f"smaller than stride {self.stride}")
        shape = (in_channels, out_channels // groups) + self.kernel_size
        self.weight = Parameter(np.empty(shape, dtype))
        self.bias = Parameter(np.empty((out_channels,), dtype)) if bias else None
        fan_in = out_channels // groups * self.kernel_size[0] * self.kernel_size[1]
        init.default_affine_init_(self.weight, self.bias, fan_in, generator)

    def forward(self, x, output_size=None):
        """The transposed convolution of x; ``output_size`` ((H, W) or (N, C, H, W)) picks one
        of the sizes a strided convolution maps back from, as in PyTorch (it overrides
        ``output_padding``)."""
        output_padding = self.output_padding if output_size is None else output_padding_for(
            "ConvTranspose2d", x.shape, output_size, self.kernel_size, self.stride,
            self.padding, self.dilation)
        return conv_transpose2d(x, self.weight, self.bias, self.stride, self.padding,
                                output_padding, self.groups, self.dilation)

    def get_config(self):
        return {"in_channels": self.in_channels, "out_channels": self.out_channels,
                "kernel_size": list(self.kernel_size), "stride": list(self.stride),
                "padding": list(self.padding), "output_padding": list(self.output_padding),
                "groups": self.groups, "bias": self.bias is not None,
                "dilation": list(self.dilation), "dtype": str(self.weight.dtype)}
