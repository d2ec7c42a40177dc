"""Convolution as a matrix product: im2col and its adjoint col2im (plain NumPy).

A 2-D convolution of x (N, C, H, W) with a weight (O, C, kh, kw) is, for each output pixel, a dot
product between the weight and the C*kh*kw input values under the kernel window. im2col copies
every window into a column, so the whole convolution of the whole batch becomes ONE matrix
product (one large BLAS call instead of one small call per image)::

    out = weight.reshape(O, C*kh*kw) @ im2col(x)                # (O, N*OH*OW)

The columns are ordered image by image, then output pixel by pixel, so ``out`` reshapes to
(O, N, OH, OW) and one transpose gives the usual (N, O, OH, OW).

The backward pass needs the transpose of that copy: col2im scatters each column back into the
image, summing where windows overlap. It is the adjoint of im2col, <im2col(x), c> == <x, col2im(c)>,
which is exactly what the chain rule asks for: dx = col2im(weight^T @ d_out).

This reference loops in Python over the kh*kw kernel offsets only; each iteration moves a whole
strided slice of the image at once.
"""

from __future__ import annotations

import numpy as np

from ..conv_arithmetic import conv_output_size

__all__ = ["im2col", "col2im"]


def _output_hw(x_shape, kernel_size, stride, padding, dilation):
    _, _, height, width = x_shape
    out_h = conv_output_size(height, kernel_size[0], stride[0], padding[0], dilation[0])
    out_w = conv_output_size(width, kernel_size[1], stride[1], padding[1], dilation[1])
    return out_h, out_w


def im2col(x: np.ndarray, kernel_size, stride, padding, dilation) -> np.ndarray:
    """Unfold every kernel window of ``x`` (N, C, H, W) into a column.

    Returns cols of shape (C*kh*kw, N*OH*OW): rows ordered (c, i, j), matching a weight
    (O, C, kh, kw) reshaped to (O, C*kh*kw); columns ordered (n, oh, ow). Cells outside the image
    read as zero.
    """
    kh, kw = kernel_size
    sh, sw = stride
    ph, pw = padding
    dh, dw = dilation
    n, c, _, _ = x.shape
    out_h, out_w = _output_hw(x.shape, kernel_size, stride, padding, dilation)
    padded = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    cols = np.empty((c, kh, kw, n, out_h, out_w), dtype=x.dtype)
    for i in range(kh):
        for j in range(kw):
            # Kernel tap (i, j) reads padded rows i*dh, i*dh + sh, ... for the successive outputs.
            row0, col0 = i * dh, j * dw
            window = padded[
                :, :, row0 : row0 + sh * (out_h - 1) + 1 : sh, col0 : col0 + sw * (out_w - 1) + 1 : sw
            ]
            cols[:, i, j] = window.transpose(1, 0, 2, 3)  # (N, C, ...) -> (C, N, ...)
    return cols.reshape(c * kh * kw, n * out_h * out_w)


def col2im(cols: np.ndarray, x_shape, kernel_size, stride, padding, dilation) -> np.ndarray:
    """Adjoint of :func:`im2col`: add every column entry back to the image cell it was read from.

    ``cols`` has shape (C*kh*kw, N*OH*OW); the result has ``x_shape``. Cells covered by several
    windows receive the sum of their contributions; contributions that fell in the padding vanish.
    """
    kh, kw = kernel_size
    sh, sw = stride
    ph, pw = padding
    dh, dw = dilation
    n, c, height, width = x_shape
    out_h, out_w = _output_hw(x_shape, kernel_size, stride, padding, dilation)
    cols = cols.reshape(c, kh, kw, n, out_h, out_w)
    padded = np.zeros((n, c, height + 2 * ph, width + 2 * pw), dtype=cols.dtype)
    for i in range(kh):
        for j in range(kw):
            # Within one tap the strided targets are distinct, so += never collides with itself.
            row0, col0 = i * dh, j * dw
            padded[
                :, :, row0 : row0 + sh * (out_h - 1) + 1 : sh, col0 : col0 + sw * (out_w - 1) + 1 : sw
            ] += cols[:, i, j].transpose(1, 0, 2, 3)
    return np.ascontiguousarray(padded[:, :, ph : ph + height, pw : pw + width])
