"""2-D convolution as one matrix product per group: im2col, then BLAS.

im2col copies every receptive field of the whole batch into a column, so that with
K = C/g·kh·kw the convolution is one product per group: W (O/g × K) @ cols (K × N·OH·OW). One
large product keeps BLAS busy where a product per image would be dominated by call overhead.
The gradients are products too: dW = dY @ colsᵀ (summing over every image and pixel at once),
dcols = Wᵀ @ dY, and col2im (im2col's adjoint) adds each column's gradient back onto the input
pixels it was copied from.
"""

from __future__ import annotations

from ..autograd.function import Function, ReadsInputsWhenRecorded
from ..autograd.tensor import Tensor
from ..backend.conv_arithmetic import conv_output_size
from ._util import check_bias_and_dtype
from .linalg import matmul
from .shape import cat
from .size_arguments import int_pair


# Output pixels per image from which one product per image beats one product for the batch
# plus a transpose copy (batch 64, one thread: LeNet's 28×28 maps 3x faster and 10×10 1.3x,
# CIFAR's 32×32 1.6x and 16×16 ~5%; 8×8 maps with 576-long columns ~5% slower).
_PER_IMAGE_MIN_PIXELS = 100


class Conv2dFunction(ReadsInputsWhenRecorded, Function):
    def forward(self, x, weight, bias=None, *, stride, padding, dilation, groups):
        be = self.backend
        n = x.shape[0]
        out_channels, _, kh, kw = weight.shape
        self.geometry = ((kh, kw), stride, padding, dilation)
        self.x_shape, self.groups, self.weight = x.shape, groups, weight
        out_h = conv_output_size(x.shape[2], kh, stride[0], padding[0], dilation[0])
        out_w = conv_output_size(x.shape[3], kw, stride[1], padding[1], dilation[1])
        self.out_hw = (out_h, out_w)
        columns = n * out_h * out_w
        cols = be.im2col(x, *self.geometry)                     # (C·kh·kw, N·L)
        # Input channels are the slowest-varying part of a column row, so each group's rows
        # form one contiguous block: (g, C/g·kh·kw, N·L).
        self.cols = be.reshape(cols, (groups, cols.shape[0] // groups, columns))
        w = be.reshape(weight, (groups, out_channels // groups, -1))
        if groups == 1 and n > 1 and out_h * out_w >= _PER_IMAGE_MIN_PIXELS:
            # W @ (the columns of image i), one product per image, written straight into
            # (N, O, OH, OW): no transpose copy after, and a few-channel first layer (K = 27)
            # runs at BLAS speed where one (O × 27) @ (27 × N·L) product does not.
            per_image = be.transpose(be.reshape(cols, (cols.shape[0], n, out_h * out_w)),
                                     (1, 0, 2))                 # (N, K, L), a view
            out = be.reshape(be.matmul(be.reshape(weight, (out_channels, -1)), per_image),
                             (n, out_channels, out_h, out_w))
        else:
            out = be.reshape(be.matmul(w, self.cols), (out_channels, n, out_h, out_w))
            if n == 1:  # (O, 1, OH, OW) holds its values in (1, O, OH, OW) order already
                out = be.reshape(out, (1, out_channels, out_h, out_w))
            else:
                out = be.copy(be.transpose(out, (1, 0, 2, 3)))  # (N, O, OH, OW)
        return out if bias is None else be.add(out, be.reshape(bias, (1, -1, 1, 1)))

    def backward(self, grad):
        be = self.backend
        n, out_channels = grad.shape[:2]
        columns = n * self.out_hw[0] * self.out_hw[1]
        # dY as (g, O/g, N·L), the layout of the forward product's output.
        g = be.reshape(be.transpose(grad, (1, 0, 2, 3)),
                       (self.groups, out_channels // self.groups, columns))
        # dWᵀ = cols @ dYᵀ, (K × N·L) @ (N·L × O/g), transposed at the end (K·O/g numbers). Both
        # orders sum over the long N·L axis, but BLAS blocks it better with the many-row cols on
        # the left: on LeNet's convolutions this order measured ~2x faster than dY @ colsᵀ.
        grad_weight_t = be.matmul(self.cols, g, transpose_b=True)   # Σ over all columns
        grad_weight = be.reshape(be.transpose(grad_weight_t, (0, 2, 1)), self.weight.shape)
        grad_x = None
        if self.needs_input_grad[0]:  # a network's first layer needs no input gradient
            w = be.reshape(self.weight, (self.groups, out_channels // self.groups, -1))
            grad_cols = be.matmul(w, g, transpose_a=True)        # (g, C/g·kh·kw, N·L)
            grad_cols = be.reshape(grad_cols, (self.cols.shape[0] * self.cols.shape[1], columns))
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
    x_shape, w_shape = x.shape, weight.shape  # read once: each read is a call, per conv
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
    if min(stride) < 1 or min(dilation) < 1 or min(padding) < 0:
        raise ValueError(f"conv2d: stride and dilation must be >= 1 and padding >= 0, got "
                         f"stride={stride}, dilation={dilation}, padding={padding}")
    check_bias_and_dtype("conv2d", x, weight, bias)
    inputs = (x, weight) if bias is None else (x, weight, bias)
    return Conv2dFunction.apply(*inputs, stride=stride, padding=padding, dilation=dilation,
                                groups=groups)
