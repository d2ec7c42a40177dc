"""1-D convolution and pooling over sequences (N, C, L), as their 2-D forms on an image of
height 1: the kernels, gradients and ONNX export of the 2-D ops serve both, and the reshapes on
either side are free (views of contiguous arrays).
"""

from __future__ import annotations

from ..autograd.tensor import Tensor
from . import conv, pool
from .size_arguments import single_int


def _as_image(op: str, x: Tensor) -> Tensor:
    if x.ndim != 3:
        raise ValueError(f"{op}: input must be 3-D (N, C, L), got shape {x.shape}")
    return x.reshape(x.shape[0], x.shape[1], 1, x.shape[2])


def _as_sequence(y: Tensor) -> Tensor:
    return y.reshape(y.shape[0], y.shape[1], y.shape[3])


def conv1d(x: Tensor, weight: Tensor, bias: Tensor | None = None, stride=1, padding=0,
           dilation=1, groups: int = 1) -> Tensor:
    """1-D cross-correlation of x (N, C, L) with weight (O, C/groups, k), as PyTorch.

    ``padding``: an int, or PyTorch's strings 'valid' (none) and 'same' (the output has the
    input's length; stride 1, the odd pixel of an even kernel's padding at the end)."""
    if weight.ndim != 3:
        raise ValueError(f"conv1d: weight must be 3-D (O, C/groups, k), got {weight.shape}")
    stride = single_int(stride, "conv1d", "stride")
    dilation = single_int(dilation, "conv1d", "dilation")
    padding = conv1d_padding(padding, stride, "conv1d")
    kernel = weight.reshape(weight.shape[0], weight.shape[1], 1, weight.shape[2])
    # a string goes to conv2d as it is: 'same' on an image of height 1 pads the length only
    return _as_sequence(conv.conv2d(_as_image("conv1d", x), kernel, bias, (1, stride),
                                    padding if isinstance(padding, str) else (0, padding),
                                    (1, dilation), groups))


def conv1d_padding(padding, stride: int, op: str):
    """``padding`` checked: a non-negative int, 'valid', or 'same' (with stride 1 only)."""
    if isinstance(padding, str):
        if padding not in ("same", "valid"):
            raise ValueError(f"{op}: padding must be an int, 'same' or 'valid', got {padding!r}")
        if padding == "same" and stride != 1:
            raise ValueError(f"{op}: padding='same' needs stride 1, got stride={stride}")
        return padding
    return single_int(padding, op, "padding")


def max_pool1d(x: Tensor, kernel_size, stride=None, padding=0, dilation=1,
               ceil_mode: bool = False) -> Tensor:
    """Max over windows of ``kernel_size`` steps along the last axis of (N, C, L)."""
    k = single_int(kernel_size, "max_pool1d", "kernel_size")
    s = k if stride is None else single_int(stride, "max_pool1d", "stride")
    return _as_sequence(pool.max_pool2d(
        _as_image("max_pool1d", x), (1, k), (1, s), (0, single_int(padding, "max_pool1d", "padding")),
        (1, single_int(dilation, "max_pool1d", "dilation")), ceil_mode))


def avg_pool1d(x: Tensor, kernel_size, stride=None, padding=0, ceil_mode: bool = False,
               count_include_pad: bool = True) -> Tensor:
    """Mean over windows of ``kernel_size`` steps along the last axis of (N, C, L)."""
    k = single_int(kernel_size, "avg_pool1d", "kernel_size")
    s = k if stride is None else single_int(stride, "avg_pool1d", "stride")
    return _as_sequence(pool.avg_pool2d(
        _as_image("avg_pool1d", x), (1, k), (1, s), (0, single_int(padding, "avg_pool1d", "padding")),
        ceil_mode, count_include_pad))
