"""Pooling layers: MaxPool2d, AvgPool2d, AdaptiveAvgPool2d."""

from __future__ import annotations

from ...ops.size_arguments import int_pair, pool_window
from ...ops.pool import (adaptive_avg_pool2d, avg_pool2d, checked_pool_window, max_pool2d,
                         max_pool2d_of_window)
from ..module import Module
from ..registry import register_module


@register_module
class MaxPool2d(Module):
    """The largest value of each window (as PyTorch's ``nn.MaxPool2d``).

    The window is checked once, here, and kept as pairs that every forward hands straight to
    the op without reading them again (that reading was a quarter of the Python functions a
    pooling layer's forward entered). A size assigned since in another form (an int, a list)
    is read and checked per call, as ``F.max_pool2d`` does.
    """

    def __init__(self, kernel_size, stride=None, padding=0, dilation=1, ceil_mode: bool = False):
        super().__init__()
        self.kernel_size, self.stride, self.padding = checked_pool_window(
            "MaxPool2d", kernel_size, stride, padding)
        self.dilation, self.ceil_mode = int_pair(dilation, "MaxPool2d", "dilation"), bool(ceil_mode)

    def forward(self, x):
        kernel_size, stride, padding, dilation = (self.kernel_size, self.stride, self.padding,
                                                  self.dilation)
        if type(kernel_size) is tuple and type(stride) is tuple and type(padding) is tuple \
                and type(dilation) is tuple:
            return max_pool2d_of_window(x, kernel_size, stride, padding, dilation,
                                        self.ceil_mode)
        return max_pool2d(x, kernel_size, stride, padding, dilation, self.ceil_mode)

    def get_config(self):
        return {"kernel_size": list(self.kernel_size), "stride": list(self.stride),
                "padding": list(self.padding), "dilation": list(self.dilation),
                "ceil_mode": self.ceil_mode}


@register_module
class AvgPool2d(Module):
    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode: bool = False,
                 count_include_pad: bool = True):
        super().__init__()
        self.kernel_size, self.stride, self.padding = pool_window(
            "AvgPool2d", kernel_size, stride, padding)
        self.ceil_mode, self.count_include_pad = bool(ceil_mode), bool(count_include_pad)

    def forward(self, x):
        return avg_pool2d(x, self.kernel_size, self.stride, self.padding, self.ceil_mode,
                          self.count_include_pad)

    def get_config(self):
        return {"kernel_size": list(self.kernel_size), "stride": list(self.stride),
                "padding": list(self.padding), "ceil_mode": self.ceil_mode,
                "count_include_pad": self.count_include_pad}


@register_module
class AdaptiveAvgPool2d(Module):
    """Average pooling to ``output_size`` (an int, or a pair whose ``None`` keeps that input
    size), with PyTorch's bins for sizes that do not divide the input."""

    def __init__(self, output_size):
        super().__init__()
        pair = (output_size, output_size) if output_size is None or isinstance(output_size, int) \
            else tuple(output_size)
        if len(pair) != 2 or not all(n is None or (isinstance(n, int) and n >= 1) for n in pair):
            raise ValueError(f"AdaptiveAvgPool2d: output_size must be a positive int or a pair "
                             f"of them (or None), got {output_size!r}")
        self.output_size = pair

    def forward(self, x):
        return adaptive_avg_pool2d(x, self.output_size)

    def get_config(self):
        return {"output_size": list(self.output_size)}
