"""2-D convolution as one matrix product per group: im2col, then BLAS.

im2col copies every receptive field of the whole batch into a column, so that with
K = C/g·kh·kw the convolution is one batched product per group: W (O/g × K) @ cols (K × N·OH·OW),
read as N blocks of OH·OW columns, one per image, and written straight into (N, O, OH, OW) (a
strided batched product: the batch stride and leading dimension do what a transposed copy
would). The gradients are products too: dW = dY @ colsᵀ (summing over every image and pixel at
once), dcols = Wᵀ @ dY, and col2im (im2col's adjoint) adds each column's gradient back onto the
input pixels it was copied from.
"""

from __future__ import annotations

import functools

from ..autograd.function import Function, ReadsInputsWhenRecorded
from ..autograd.tensor import Tensor
from ..backend.conv_arithmetic import conv_output_size
from ._util import check_bias_and_dtype
from .linalg import matmul
from .shape import cat
from .size_arguments import int_pair


@functools.lru_cache(maxsize=256)
def _output_size(in_hw: tuple, kernel_size: tuple, stride: tuple, padding: tuple,
                 dilation: tuple) -> tuple:
    """(out_h, out_w) of a convolution of an in_hw map (an error when either is empty).

    Remembered by geometry: a network calls each of its convolutions on the same sizes at every
    forward, and a cache hit is answered in C, without the two Python calls of computing it (a
    single sample's forward is bound by such calls). An error is raised again each time, never
    cached."""
    return tuple(conv_output_size(*axis) for axis in zip(in_hw, kernel_size, stride, padding,
                                                         dilation))


class Conv2dFunction(ReadsInputsWhenRecorded, Function):
    def forward(self, x, weight, bias=None, *, stride, padding, dilation, groups):
        be = self.backend
        n = x.shape[0]
        out_channels, _, kh, kw = weight.shape
        self.geometry = ((kh, kw), stride, padding, dilation)
        self.x_shape, self.groups, self.weight = x.shape, groups, weight
        self.out_hw = out_h, out_w = _output_size(x.shape[2:], *self.geometry)
        cols = be.im2col(x, *self.geometry)                     # (C·kh·kw, N·L)
        # Input channels are the slowest-varying part of a column row, so each group's rows
        # form one block, and image i's columns are the i-th block of L: (g, C/g·kh·kw, N, L).
        blocks = (groups, cols.shape[0] // groups, n, out_h * out_w)
        if n == 1 and groups == 1:
            # One image, one group (single-sample inference): Y = W (O × K) @ cols (K × L), a
            # plain 2-D product, which the batched form below also comes down to (the same
            # GEMM, so the same bits), without its axis bookkeeping on every call.
            out = be.matmul(be.reshape(weight, (out_channels, cols.shape[0])), cols)
            if True in self.needs_input_grad:  # recorded: backward reads the blocks
                self.cols = be.reshape(cols, blocks)
        else:
            self.cols = be.reshape(cols, blocks)
            # Y[i] = W_g @ (image i's columns), the batch read from the columns in place (a
            # batch stride of L, a leading dimension of N·L) and written straight into
            # (N, O, L).
            out = be.matmul(self._weight_blocks(), self.cols, b_axes=(0, 2, 1, 3),
                            out_axes=(1, 0, 2, 3))              # (N, g, O/g, L)
        out = be.reshape(out, (n, out_channels, out_h, out_w))
        return out if bias is None else be.add(out, be.reshape(bias, (1, -1, 1, 1)))

    def _weight_blocks(self):
        """The weight as one (O/g × C/g·kh·kw) matrix per group, shared by every image."""
        out_channels = self.weight.shape[0]
        return self.backend.reshape(self.weight,
                                    (self.groups, 1, out_channels // self.groups, -1))

    def backward(self, grad):
        be = self.backend
        n, out_channels = grad.shape[:2]
        pixels = self.out_hw[0] * self.out_hw[1]
        g = be.reshape(grad, (n, self.groups, out_channels // self.groups, pixels))
        # dWᵀ = Σ_i cols[i] @ dY[i]ᵀ, (K × L) @ (L × O/g) summed over the images (one sum over
        # the long N·L axis), written transposed as dW. Both orders sum over N·L, but BLAS
        # blocks it better with the many-row cols on the left: on LeNet's convolutions this
        # order measured ~2x faster than dY @ colsᵀ.
        grad_weight = be.matmul(self.cols, g, a_axes=(0, 2, 1, 3), b_axes=(1, 0, 3, 2),
                                sum_axis=1, out_axes=(0, 2, 1))
        grad_weight = be.reshape(grad_weight, self.weight.shape)
        grad_x = None
        if self.needs_input_grad[0]:  # a network's first layer needs no input gradient
            # dcols[i] = W_gᵀ @ dY[i], written into the columns' own (g, K/g, N, L) layout.
            grad_cols = be.matmul(self._weight_blocks(), g, transpose_a=True,
                                  b_axes=(1, 0, 2, 3), out_axes=(0, 2, 1, 3))
            grad_cols = be.reshape(grad_cols, (grad_cols.shape[0] * grad_cols.shape[1],
                                               n * pixels))
            grad_x = be.col2im(grad_cols, self.x_shape, *self.geometry)
        grad_bias = be.sum(grad, axis=(0, 2, 3)) if len(self.parents) == 3 else None
        return grad_x, grad_weight, grad_bias

    def differentiable_backward(self, grad, output):
        # backward's products on Tensors, with im2col/col2im as ops of their own (each the
        # other's adjoint), so every step is recorded: d(dW)/dx flows through im2col, d(dx)/dW
        # through the product before col2im.
        x, weight = self.parents[:2]
        n, out_channels = grad.shape[:2]
        columns = n * self.out_hw[0] * self.out_hw[1]
        g = grad.permute(1, 0, 2, 3).reshape(self.groups, out_channels // self.groups, columns)
        cols = Im2colFunction.apply(x, geometry=self.geometry)
        cols = cols.reshape(self.groups, cols.shape[0] // self.groups, columns)
        grad_weight = matmul(cols, g.permute(0, 2, 1)).permute(0, 2, 1).reshape(weight.shape)
        grad_x = None
        if self.needs_input_grad[0]:
            w = weight.reshape(self.groups, out_channels // self.groups, -1)
            grad_cols = matmul(w.permute(0, 2, 1), g).reshape(cols.shape[0] * cols.shape[1],
                                                              columns)
            grad_x = Col2imFunction.apply(grad_cols, x_shape=self.x_shape,
                                          geometry=self.geometry)
        grad_bias = grad.sum(axis=(0, 2, 3)) if len(self.parents) == 3 else None
        return grad_x, grad_weight, grad_bias


class Im2colFunction(Function):
    """im2col as an op (for recorded convolution gradients): linear, its adjoint is col2im."""

    def forward(self, x, geometry):
        self.x_shape, self.geometry = x.shape, geometry
        return self.backend.im2col(x, *geometry)

    def backward(self, grad):
        return self.backend.col2im(grad, self.x_shape, *self.geometry)

    def differentiable_backward(self, grad, output):
        return Col2imFunction.apply(grad, x_shape=self.x_shape, geometry=self.geometry)


class Col2imFunction(Function):
    """col2im as an op: linear, its adjoint is im2col."""

    def forward(self, cols, x_shape, geometry):
        self.geometry = geometry
        return self.backend.col2im(cols, x_shape, *geometry)

    def backward(self, grad):
        return self.backend.im2col(grad, *self.geometry)

    def differentiable_backward(self, grad, output):
        return Im2colFunction.apply(grad, geometry=self.geometry)


def _same_padding(x: Tensor, weight: Tensor, stride, dilation) -> tuple[Tensor, tuple]:
    """padding='same': the output keeps the input's size (stride 1 only, as in PyTorch).

    A kernel spans dilation·(k-1) + 1 pixels, so dilation·(k-1) pixels of padding are needed in
    all; half on each side, and where that total is odd PyTorch puts the extra pixel at the end
    (bottom, right). The symmetric part goes to the convolution; the extra row or column is
    added here as zeros.
    """
    if stride != (1, 1):
        raise ValueError(f"conv2d: padding='same' needs stride 1, got stride={stride}")
    totals = [d * (k - 1) for d, k in zip(dilation, weight.shape[2:])]
    for axis, total in ((2, totals[0]), (3, totals[1])):
        if total % 2:
            shape = list(x.shape)
            shape[axis] = 1
            zeros = Tensor._wrap(x.backend.zeros(tuple(shape), x.dtype), x.device)
            x = cat([x, zeros], axis=axis)
    return x, (totals[0] // 2, totals[1] // 2)


def conv2d(x: Tensor, weight: Tensor, bias: Tensor | None = None, stride=1, padding=0,
           dilation=1, groups: int = 1) -> Tensor:
    """2-D cross-correlation of x (N, C, H, W) with weight (O, C/groups, kh, kw), as PyTorch.

    ``padding``: an int, a pair, or PyTorch's strings 'valid' (none) and 'same' (the output has
    the input's size; stride 1)."""
    stride = int_pair(stride, "conv2d", "stride")
    dilation = int_pair(dilation, "conv2d", "dilation")
    if isinstance(padding, str):
        if padding not in ("same", "valid"):
            raise ValueError(f"conv2d: padding must be an int, a pair, 'same' or 'valid', got "
                             f"{padding!r}")
        if padding == "same" and x.ndim == 4 and weight.ndim == 4:
            x, padding = _same_padding(x, weight, stride, dilation)
        else:
            padding = 0
    padding = int_pair(padding, "conv2d", "padding")
    return conv2d_of_pairs(x, weight, bias, stride, padding, dilation, groups)


def conv2d_of_pairs(x: Tensor, weight: Tensor, bias: Tensor | None, stride: tuple,
                    padding: tuple, dilation: tuple, groups: int) -> Tensor:
    """:func:`conv2d` with stride, padding and dilation already pairs of ints (what
    :func:`~minidl.ops.size_arguments.int_pair` makes of them). A Conv2d layer makes its pairs
    once, when it is built, and calls this on every forward; the tensors and the pairs' ranges
    are still checked per call."""
    x_shape, w_shape = tuple(x.data.shape), tuple(weight.data.shape)  # Tensor.shape, uncalled
    if len(x_shape) != 4:
        raise ValueError(f"conv2d: input must be 4-D (N, C, H, W), got shape {x_shape}")
    if len(w_shape) != 4:
        raise ValueError(f"conv2d: weight must be 4-D (O, C/groups, kh, kw), got {w_shape}")
    if groups < 1 or x_shape[1] % groups or w_shape[0] % groups:
        raise ValueError(f"conv2d: groups={groups} must divide the input channels "
                         f"({x_shape[1]}) and output channels ({w_shape[0]})")
    if w_shape[1] * groups != x_shape[1]:
        raise ValueError(f"conv2d: input of shape {x_shape} has {x_shape[1]} channels, weight "
                         f"of shape {w_shape} expects {w_shape[1] * groups}")
    # Pair by pair rather than min() of each: three C calls fewer on every convolution.
    if stride[0] < 1 or stride[1] < 1 or dilation[0] < 1 or dilation[1] < 1 \
            or padding[0] < 0 or padding[1] < 0:
        raise ValueError(f"conv2d: stride and dilation must be >= 1 and padding >= 0, got "
                         f"stride={stride}, dilation={dilation}, padding={padding}")
    check_bias_and_dtype("conv2d", x, weight, bias)
    inputs = (x, weight) if bias is None else (x, weight, bias)
    return Conv2dFunction.apply(*inputs, stride=stride, padding=padding, dilation=dilation,
                                groups=groups)
