"""2-D max and average pooling.

Max pooling's gradient flows only to the element that won each window (its position is kept from
the forward pass); average pooling's is spread evenly over the window, divided by the same count
the forward pass divided by.
"""

from __future__ import annotations

import numpy as np

from ..autograd.function import Function
from ..autograd.tensor import Tensor
from ..backend import composed
from .size_arguments import int_pair, pool_window
from .shape import cat


class MaxPool2dFunction(Function):
    def forward(self, x, kernel_size, stride, padding, dilation, ceil_mode):
        self.x_shape = x.shape
        out, self.argmax = self.backend.max_pool2d_forward(x, kernel_size, stride, padding,
                                                           dilation, ceil_mode)
        return out

    def backward(self, grad):
        return self.backend.max_pool2d_backward(grad, self.argmax, self.x_shape)

    def differentiable_backward(self, grad, output):
        return MaxPool2dGradFunction.apply(grad, argmax=self.argmax, x_shape=self.x_shape)


class AvgPool2dFunction(Function):
    def forward(self, x, kernel_size, stride, padding, ceil_mode, count_include_pad):
        self.x_shape = x.shape
        self.args = (kernel_size, stride, padding, ceil_mode, count_include_pad)
        return self.backend.avg_pool2d_forward(x, *self.args)

    def backward(self, grad):
        return self.backend.avg_pool2d_backward(grad, self.x_shape, *self.args)

    def differentiable_backward(self, grad, output):
        return AvgPool2dGradFunction.apply(grad, x_shape=self.x_shape, args=self.args)


class MaxPool2dGradFunction(Function):
    """Max pooling's backward as an op: each window's gradient routed to the cell that won it.

    Linear in the gradient, with the routing fixed by the forward's winners, so its second
    derivative in x is 0 and its adjoint is the gather of each window's winner, recorded as an
    indexing op (which is differentiable again, to any order)."""

    def forward(self, grad, argmax, x_shape):
        self.argmax, self.x_shape = argmax, x_shape
        return self.backend.max_pool2d_backward(grad, argmax, x_shape)

    def backward(self, grad):
        return self._gather(grad).data

    def differentiable_backward(self, grad, output):
        return self._gather(grad)

    def _gather(self, grad: Tensor) -> Tensor:
        """grad[n, c, winner of window (i, j)] for every window, 0 for windows in the padding."""
        be = self.backend
        if not isinstance(grad, Tensor):
            grad = Tensor._wrap(grad, self.parents[0].device)
        n, c, height, width = self.x_shape
        planes = n * c
        winners = be.reshape(self.argmax, (planes, -1 if planes else 0))
        has_cell = composed.greater_equal(be, winners, 0)
        plane = be.from_numpy(np.arange(planes, dtype=np.int64).reshape(planes, 1))
        picked = grad.reshape(planes, height * width)[plane, be.where(has_cell, winners, 0)]
        mask = Tensor._wrap(be.astype(has_cell, grad.dtype), grad.device)
        return (picked * mask).reshape(self.argmax.shape)


class AvgPool2dGradFunction(Function):
    """Average pooling's backward as an op: linear, and its adjoint is average pooling."""

    def forward(self, grad, x_shape, args):
        self.args = args
        return self.backend.avg_pool2d_backward(grad, x_shape, *args)

    def backward(self, grad):
        return self.backend.avg_pool2d_forward(grad, *self.args)

    def differentiable_backward(self, grad, output):
        return AvgPool2dFunction.apply(grad, **dict(zip(_AVG_POOL_ARGUMENTS, self.args)))


_AVG_POOL_ARGUMENTS = ("kernel_size", "stride", "padding", "ceil_mode", "count_include_pad")


def checked_pool_window(op, kernel_size, stride, padding) -> tuple:
    """A 2-D pooling window's ``(kernel_size, stride, padding)`` as pairs (:func:`pool_window`),
    refused with a ValueError naming ``op`` unless the windows are at least one pixel, step at
    least one pixel and are padded by at most half their size (PyTorch's limits)."""
    kernel_size, stride, padding = pool_window(op, kernel_size, stride, padding)
    if min(kernel_size) < 1 or min(stride) < 1:
        raise ValueError(f"{op}: kernel_size and stride must be >= 1, got {kernel_size}, {stride}")
    if padding[0] > kernel_size[0] // 2 or padding[1] > kernel_size[1] // 2:
        raise ValueError(f"{op}: padding {padding} must be at most half the kernel size "
                         f"{kernel_size}")
    return kernel_size, stride, padding


def _not_images(op, x) -> ValueError:
    return ValueError(f"{op}: input must be 4-D (N, C, H, W), got shape {x.shape}")


def max_pool2d(x: Tensor, kernel_size, stride=None, padding=0, dilation=1,
               ceil_mode: bool = False) -> Tensor:
    """The largest value of each window of x (N, C, H, W), as PyTorch's ``F.max_pool2d``."""
    kernel_size, stride, padding = checked_pool_window("max_pool2d", kernel_size, stride, padding)
    return max_pool2d_of_window(x, kernel_size, stride, padding,
                                int_pair(dilation, "max_pool2d", "dilation"), bool(ceil_mode))


def max_pool2d_of_window(x: Tensor, kernel_size: tuple, stride: tuple, padding: tuple,
                         dilation: tuple, ceil_mode: bool) -> Tensor:
    """:func:`max_pool2d` of a window already checked: pairs from :func:`checked_pool_window`,
    a dilation pair, a bool. A MaxPool2d layer checks its window once, when it is built, and
    calls this on every forward, so only the input is checked per call."""
    if len(x.data.shape) != 4:  # x.ndim, without its call (per pooling layer call)
        raise _not_images("max_pool2d", x)
    return MaxPool2dFunction.apply(x, kernel_size=kernel_size, stride=stride, padding=padding,
                                   dilation=dilation, ceil_mode=ceil_mode)


def avg_pool2d(x: Tensor, kernel_size, stride=None, padding=0, ceil_mode: bool = False,
               count_include_pad: bool = True) -> Tensor:
    if len(x.data.shape) != 4:
        raise _not_images("avg_pool2d", x)
    kernel_size, stride, padding = checked_pool_window("avg_pool2d", kernel_size, stride, padding)
    return AvgPool2dFunction.apply(x, kernel_size=kernel_size, stride=stride, padding=padding,
                           ceil_mode=bool(ceil_mode), count_include_pad=bool(count_include_pad))


def adaptive_avg_pool2d(x: Tensor, output_size) -> Tensor:
    """Average pooling to a fixed output size (``None`` in a position keeps that input size).

    Output cell i of an axis of length L averages input positions floor(i·L/n) up to
    ceil((i+1)·L/n), PyTorch's bins: equal windows when n divides L (then this is one
    avg_pool2d), otherwise windows of two neighbouring sizes that may overlap.
    """
    if x.ndim != 4:
        raise ValueError(f"adaptive_avg_pool2d: input must be 4-D (N, C, H, W), got shape "
                         f"{x.shape}")
    pair = (output_size, output_size) if output_size is None or isinstance(output_size, int) \
        else tuple(output_size)
    h, w = x.shape[2:]
    out_h, out_w = (h if pair[0] is None else pair[0]), (w if pair[1] is None else pair[1])
    out_h, out_w = int_pair((out_h, out_w), "adaptive_avg_pool2d", "output_size")
    if min(out_h, out_w) < 1:
        raise ValueError(f"adaptive_avg_pool2d: output_size must be positive, got {output_size}")
    if h % out_h == 0 and w % out_w == 0:
        return avg_pool2d(x, (h // out_h, w // out_w))
    # A mean over a rectangle of bins is the mean over its rows of the means over its columns,
    # so the two axes are pooled one after the other.
    return _adaptive_mean_along(_adaptive_mean_along(x, 2, out_h), 3, out_w)


def _adaptive_mean_along(x: Tensor, axis: int, size: int) -> Tensor:
    length = x.shape[axis]
    if length == size:
        return x
    cells = []
    for i in range(size):
        start, stop = (i * length) // size, -((-(i + 1) * length) // size)
        index = [slice(None)] * x.ndim
        index[axis] = slice(start, stop)
        cells.append(x[tuple(index)].mean(axis=axis, keepdims=True))
    return cat(cells, axis=axis)
