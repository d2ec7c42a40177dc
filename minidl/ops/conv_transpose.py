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

from ..autograd.function import Function, ReadsInputsWhenRecorded
from ..autograd.tensor import Tensor
from ._util import check_bias_and_dtype
from .linalg import matmul
from .size_arguments import int_pair


def transposed_output_size(size, kernel, stride, padding, dilation, output_padding) -> int:
    """Length of one output axis of a transposed convolution."""
    return (size - 1) * stride - 2 * padding + dilation * (kernel - 1) + output_padding + 1


def output_padding_for(op: str, x_shape, output_size, kernel_size, stride, padding,
                       dilation) -> tuple[int, int]:
    """The output_padding that makes a transposed convolution of an input of ``x_shape``
    produce ``output_size`` (H, W), or (N, C, H, W) of which the last two count, as PyTorch's
    ``ConvTranspose2d.forward(x, output_size)``. Several sizes map to one input size under a
    stride, so the smallest output is widened by up to stride - 1."""
    sizes = tuple(int(s) for s in output_size)
    if len(sizes) == 4:
        sizes = sizes[2:]
    if len(sizes) != 2:
        raise ValueError(f"{op}: output_size must have 2 or 4 elements (H, W or N, C, H, W), "
                         f"got {output_size!r}")
    padding_out = []
    for axis, (size, want, k, s, p, d) in enumerate(zip(x_shape[2:], sizes, kernel_size, stride,
                                                       padding, dilation)):
        smallest = transposed_output_size(size, k, s, p, d, 0)
        if not smallest <= want <= smallest + s - 1:
            raise ValueError(f"{op}: requested an output size of {sizes}, but valid sizes along "
                             f"axis {axis + 2} for an input of shape {tuple(x_shape)} range "
                             f"from {smallest} to {smallest + s - 1}")
        padding_out.append(want - smallest)
    return tuple(padding_out)


class ConvTranspose2dFunction(ReadsInputsWhenRecorded, Function):
    def forward(self, x, weight, bias=None, *, stride, padding, output_padding, dilation, groups):
        be = self.backend
        n, in_channels, h, w = x.shape
        _, out_per_group, kh, kw = weight.shape
        self.geometry = ((kh, kw), stride, padding, dilation)
        self.groups, self.weight, self.x, self.x_shape = groups, weight, x, x.shape
        out_hw = tuple(transposed_output_size(size, k, s, p, d, o) for size, k, s, p, d, o in
                       zip((h, w), (kh, kw), stride, padding, dilation, output_padding))
        # cols[:, image i] = W_gᵀ @ X[i] (C_out/g·kh·kw × H·W per group), each image's product
        # written into its block of the columns' (g, C_out/g·kh·kw, N, H·W) layout: the images
        # are read in place as a batch, with no channels-first copy of X.
        cols = be.matmul(self._weight_blocks(), self._images(x), transpose_a=True,
                         b_axes=(1, 0, 2, 3), out_axes=(0, 2, 1, 3))
        cols = be.reshape(cols, (groups * out_per_group * kh * kw, n * h * w))
        out = be.col2im(cols, (n, groups * out_per_group) + out_hw, *self.geometry)
        return out if bias is None else be.add(out, be.reshape(bias, (1, -1, 1, 1)))

    def _weight_blocks(self):
        """The weight as one (C_in/g × C_out/g·kh·kw) matrix per group, shared by every image."""
        in_channels = self.weight.shape[0]
        return self.backend.reshape(self.weight, (self.groups, 1, in_channels // self.groups, -1))

    def _images(self, x):
        """(N, C, H, W) as (N, g, C/g, H·W): per image and group, a matrix of channels × pixels."""
        n, channels, h, w = x.shape
        return self.backend.reshape(x, (n, self.groups, channels // self.groups, h * w))

    def backward(self, grad):
        be = self.backend
        n, in_channels, h, w = self.x_shape
        g = self.groups
        gcols = be.im2col(grad, *self.geometry)                  # (C_out·kh·kw, N·H·W)
        gcols = be.reshape(gcols, (g, gcols.shape[0] // g, n, h * w))
        grad_x = None
        if self.needs_input_grad[0]:
            # dX[i] = W_g @ dcols[:, image i], written straight into (N, C_in, H, W).
            grad_x = be.matmul(self._weight_blocks(), gcols, b_axes=(0, 2, 1, 3),
                               out_axes=(1, 0, 2, 3))
            grad_x = be.reshape(grad_x, self.x_shape)
        # dW = Σ_i X[i] @ dcols[:, image i]ᵀ per group, summed over the images in the product.
        grad_weight = be.matmul(self._images(self.x), gcols, a_axes=(1, 0, 2, 3),
                                b_axes=(0, 2, 3, 1), sum_axis=1)
        grad_weight = be.reshape(grad_weight, self.weight.shape)
        grad_bias = be.sum(grad, axis=(0, 2, 3)) if len(self.parents) == 3 else None
        return grad_x, grad_weight, grad_bias

    def differentiable_backward(self, grad, output):
        # backward's products on Tensors, im2col recorded (see Conv2dFunction's).
        from .conv import Im2colFunction
        x, weight = self.parents[:2]
        n, in_channels, h, w = self.x_shape
        g = self.groups
        gcols = Im2colFunction.apply(grad, geometry=self.geometry)
        gcols = gcols.reshape(g, gcols.shape[0] // g, n * h * w)
        wm = weight.reshape(g, in_channels // g, -1)
        grad_x = None
        if self.needs_input_grad[0]:
            grad_x = matmul(wm, gcols).reshape(in_channels, n, h, w).permute(1, 0, 2, 3)
        xm = x.permute(1, 0, 2, 3).reshape(g, in_channels // g, n * h * w)
        grad_weight = matmul(xm, gcols.permute(0, 2, 1)).reshape(weight.shape)
        grad_bias = grad.sum(axis=(0, 2, 3)) if len(self.parents) == 3 else None
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
