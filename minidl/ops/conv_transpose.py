"""2-D transposed convolution: the gradient of a convolution with respect to its input, used
as a layer that upsamples.

A convolution gathers each output pixel from a window of input pixels (im2col, then a product);
its transpose scatters each input pixel into a window of output pixels: one product
Wᵀ (C_out/g·kh·kw × C_in/g) @ X (C_in/g × N·H·W) per group, then col2im adds every column's
values onto the output pixels of its window. The backward pass is therefore an ordinary
convolution: im2col of the output gradient, dX = W @ dcols and dW = X @ dcolsᵀ.

Output size per axis: (in - 1)·stride - 2·padding + dilation·(kernel - 1) + output_padding + 1.
"""

from __future__ import annotations

from ..autograd.function import Function
from ..autograd.tensor import Tensor
from ._util import check_bias_and_dtype
from .sizes import int_pair


def transposed_output_size(size, kernel, stride, padding, dilation, output_padding) -> int:
    """Length of one output axis of a transposed convolution."""
    return (size - 1) * stride - 2 * padding + dilation * (kernel - 1) + output_padding + 1


class ConvTranspose2dFunction(Function):
    def forward(self, x, weight, bias=None, *, stride, padding, output_padding, dilation, groups):
        be = self.backend
        n, in_channels, h, w = x.shape
        _, out_per_group, kh, kw = weight.shape
        self.geometry = ((kh, kw), stride, padding, dilation)
        self.groups, self.weight, self.x_shape = groups, weight, x.shape
        out_hw = tuple(transposed_output_size(size, k, s, p, d, o) for size, k, s, p, d, o in
                       zip((h, w), (kh, kw), stride, padding, dilation, output_padding))
        # X as (g, C_in/g, N·H·W): channels first, then one column per input pixel.
        xm = be.reshape(be.transpose(x, (1, 0, 2, 3)), (groups, in_channels // groups, n * h * w))
        self.xm = xm
        wm = be.reshape(weight, (groups, in_channels // groups, out_per_group * kh * kw))
        cols = be.matmul(wm, xm, transpose_a=True)        # (g, C_out/g·kh·kw, N·H·W)
        cols = be.reshape(cols, (groups * out_per_group * kh * kw, n * h * w))
        out = be.col2im(cols, (n, groups * out_per_group) + out_hw, *self.geometry)
        return out if bias is None else be.add(out, be.reshape(bias, (1, -1, 1, 1)))

    def backward(self, grad):
        be = self.backend
        n, in_channels, h, w = self.x_shape
        g = self.groups
        gcols = be.im2col(grad, *self.geometry)                  # (C_out·kh·kw, N·H·W)
        gcols = be.reshape(gcols, (g, gcols.shape[0] // g, n * h * w))
        wm = be.reshape(self.weight, (g, in_channels // g, -1))
        grad_x = None
        if self.needs_input_grad[0]:
            grad_x = be.reshape(be.matmul(wm, gcols), (in_channels, n, h, w))
            grad_x = be.copy(be.transpose(grad_x, (1, 0, 2, 3)))
        grad_weight = be.reshape(be.matmul(self.xm, gcols, transpose_b=True),
                                 self.weight.shape)
        grad_bias = be.sum(grad, axis=(0, 2, 3)) if len(self.parents) == 3 else None
        return grad_x, grad_weight, grad_bias


def conv_transpose2d(x: Tensor, weight: Tensor, bias: Tensor | None = None, stride=1,
                     padding=0, output_padding=0, groups: int = 1, dilation=1) -> Tensor:
    """Transposed 2-D convolution of x (N, C_in, H, W) with weight (C_in, C_out/groups, kh, kw),
    as PyTorch's ``conv_transpose2d`` (same argument order)."""
    op = "conv_transpose2d"
    stride, padding = int_pair(stride, op, "stride"), int_pair(padding, op, "padding")
    output_padding = int_pair(output_padding, op, "output_padding")
    dilation = int_pair(dilation, op, "dilation")
    if x.ndim != 4 or weight.ndim != 4:
        raise ValueError(f"conv_transpose2d: input and weight must be 4-D, got shapes {x.shape} "
                         f"and {weight.shape}")
    if groups < 1 or x.shape[1] % groups or weight.shape[0] != x.shape[1]:
        raise ValueError(f"conv_transpose2d: input of shape {x.shape} does not fit weight of "
                         f"shape {weight.shape} with groups={groups} (weight is "
                         f"(C_in, C_out/groups, kh, kw))")
    if min(stride) < 1 or min(dilation) < 1 or min(padding) < 0 or min(output_padding) < 0:
        raise ValueError(f"conv_transpose2d: stride and dilation must be >= 1, padding and "
                         f"output_padding >= 0, got stride={stride}, dilation={dilation}, "
                         f"padding={padding}, output_padding={output_padding}")
    if any(o >= s for o, s in zip(output_padding, stride)):
        raise ValueError(f"conv_transpose2d: output_padding {output_padding} must be smaller "
                         f"than stride {stride}")
    if bias is not None and bias.shape != (weight.shape[1] * groups,):
        raise ValueError(f"conv_transpose2d: bias has shape {bias.shape}, expected "
                         f"({weight.shape[1] * groups},)")
    check_bias_and_dtype("conv_transpose2d", x, weight, None)
    for size, k, s, p, d, o in zip(x.shape[2:], weight.shape[2:], stride, padding, dilation,
                                   output_padding):
        if transposed_output_size(size, k, s, p, d, o) < 1:
            raise ValueError(f"conv_transpose2d: padding {padding} leaves an empty output for "
                             f"input of shape {x.shape}")
    inputs = (x, weight) if bias is None else (x, weight, bias)
    return ConvTranspose2dFunction.apply(*inputs, stride=stride, padding=padding,
                                 output_padding=output_padding, dilation=dilation, groups=groups)
