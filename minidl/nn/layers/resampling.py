"""Layers that change the length or size of their input: MaxPool1d, AvgPool1d,
AdaptiveMaxPool2d and Upsample."""

from __future__ import annotations

from ...ops.conv1d import avg_pool1d, max_pool1d
from ...ops.size_arguments import single_int
from ...ops.resample import adaptive_max_pool2d, interpolate
from ..module import Module
from ..registry import register_module


@register_module
class MaxPool1d(Module):
    """Max over windows along the last axis of (N, C, L)."""

    def __init__(self, kernel_size, stride=None, padding=0, dilation=1, ceil_mode: bool = False):
        super().__init__()
        self.kernel_size = single_int(kernel_size, "MaxPool1d", "kernel_size")
        self.stride = self.kernel_size if stride is None else single_int(stride, "MaxPool1d",
                                                                      "stride")
        self.padding = single_int(padding, "MaxPool1d", "padding")
        self.dilation = single_int(dilation, "MaxPool1d", "dilation")
        self.ceil_mode = bool(ceil_mode)

    def forward(self, x):
        return max_pool1d(x, self.kernel_size, self.stride, self.padding, self.dilation,
                          self.ceil_mode)

    def get_config(self):
        return {"kernel_size": self.kernel_size, "stride": self.stride, "padding": self.padding,
                "dilation": self.dilation, "ceil_mode": self.ceil_mode}


@register_module
class AvgPool1d(Module):
    """Mean over windows along the last axis of (N, C, L)."""

    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode: bool = False,
                 count_include_pad: bool = True):
        super().__init__()
        self.kernel_size = single_int(kernel_size, "AvgPool1d", "kernel_size")
        self.stride = self.kernel_size if stride is None else single_int(stride, "AvgPool1d",
                                                                      "stride")
        self.padding = single_int(padding, "AvgPool1d", "padding")
        self.ceil_mode, self.count_include_pad = bool(ceil_mode), bool(count_include_pad)

    def forward(self, x):
        return avg_pool1d(x, self.kernel_size, self.stride, self.padding, self.ceil_mode,
                          self.count_include_pad)

    def get_config(self):
        return {"kernel_size": self.kernel_size, "stride": self.stride, "padding": self.padding,
                "ceil_mode": self.ceil_mode, "count_include_pad": self.count_include_pad}


@register_module
class AdaptiveMaxPool2d(Module):
    """Max pooling to a fixed output size (windows as PyTorch's, also for uneven sizes)."""

    def __init__(self, output_size, return_indices: bool = False):
        super().__init__()
        if return_indices:
            raise ValueError("AdaptiveMaxPool2d: return_indices=True is not supported")
        sizes = output_size if isinstance(output_size, (tuple, list)) else (output_size,) * 2
        self.output_size = tuple(sizes)

    def forward(self, x):
        return adaptive_max_pool2d(x, self.output_size)

    def get_config(self):
        return {"output_size": list(self.output_size)}


@register_module
class Upsample(Module):
    """Resize the spatial axes by ``scale_factor`` or to ``size``; ``mode`` "nearest" or
    "bilinear" (with ``align_corners``), as PyTorch's ``nn.Upsample``."""

    def __init__(self, size=None, scale_factor=None, mode: str = "nearest",
                 align_corners: bool | None = None):
        super().__init__()
        if mode not in ("nearest", "bilinear"):
            raise ValueError(f"Upsample: mode must be 'nearest' or 'bilinear', got {mode!r}")
        if (size is None) == (scale_factor is None):
            raise ValueError("Upsample: give exactly one of size and scale_factor")
        if mode == "nearest" and align_corners is not None:
            raise ValueError("Upsample: align_corners only applies to mode='bilinear'")
        self.size = list(size) if isinstance(size, (tuple, list)) else size
        self.scale_factor = list(scale_factor) if isinstance(scale_factor, (tuple, list)) \
            else None if scale_factor is None else float(scale_factor)
        self.mode = mode
        self.align_corners = None if align_corners is None else bool(align_corners)

    def forward(self, x):
        return interpolate(x, self.size, self.scale_factor, self.mode, self.align_corners)

    def get_config(self):
        return {"size": self.size, "scale_factor": self.scale_factor, "mode": self.mode,
                "align_corners": self.align_corners}
