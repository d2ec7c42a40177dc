"""Padding layers (ZeroPad2d, ConstantPad2d, ReflectionPad2d, ReplicationPad2d) and
PixelShuffle, over :mod:`minidl.ops.padding`."""

from __future__ import annotations

from ...ops.padding import pad, pixel_shuffle
from ..module import Module
from ..registry import register_module


def _four_sides(padding, layer: str) -> tuple:
    """An int (every side) or (left, right, top, bottom), as PyTorch's 2-d padding layers."""
    if isinstance(padding, int) and not isinstance(padding, bool):
        return (padding,) * 4
    sides = tuple(padding)
    if len(sides) != 4 or not all(isinstance(s, int) and not isinstance(s, bool)
                                  for s in sides):
        raise ValueError(f"{layer}: padding must be an int or (left, right, top, bottom), got "
                         f"{padding!r}")
    return sides


class _Pad2d(Module):
    mode = "constant"

    def __init__(self, padding):
        super().__init__()
        self.padding = list(_four_sides(padding, type(self).__name__))

    def forward(self, x):
        return pad(x, self.padding, self.mode, getattr(self, "value", 0.0))

    def get_config(self):
        return {"padding": self.padding}


@register_module
class ZeroPad2d(_Pad2d):
    """Zeros around the last two axes."""


@register_module
class ConstantPad2d(_Pad2d):
    """``value`` around the last two axes."""

    def __init__(self, padding, value: float):
        super().__init__(padding)
        self.value = float(value)

    def get_config(self):
        return {"padding": self.padding, "value": self.value}


@register_module
class ReflectionPad2d(_Pad2d):
    """The image mirrored at its edges (the edge itself not repeated)."""

    mode = "reflect"


@register_module
class ReplicationPad2d(_Pad2d):
    """The edge pixels repeated outwards."""

    mode = "replicate"


@register_module
class PixelShuffle(Module):
    """(N, C·r², H, W) -> (N, C, H·r, W·r)."""

    def __init__(self, upscale_factor: int):
        super().__init__()
        self.upscale_factor = int(upscale_factor)

    def forward(self, x):
        return pixel_shuffle(x, self.upscale_factor)

    def get_config(self):
        return {"upscale_factor": self.upscale_factor}
