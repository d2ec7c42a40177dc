"""2-D max and average pooling (plain NumPy), with PyTorch's output sizes and divisors.

Both poolings slide a kh*kw window over every (n, c) plane. The reference loops in Python over the
kh*kw window taps only; each tap is one strided slice of the whole (N, C) batch, so the loop is
short and every line can be checked against the definition.

Output size (per axis, as torch.nn.MaxPool2d / AvgPool2d)::

    span = dilation*(kernel-1) + 1
    out  = floor_or_ceil((size + 2*padding - span) / stride) + 1
    # ceil_mode may add one window at the end; it is dropped again if it would start past the
    # input and its left padding, i.e. in the right padding only:
    if ceil_mode and (out-1)*stride >= size + padding: out -= 1
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "pool_output_size",
    "max_pool2d_forward",
    "max_pool2d_backward",
    "avg_pool2d_forward",
    "avg_pool2d_backward",
]


def pool_output_size(size: int, kernel: int, stride: int, padding: int, dilation: int, ceil_mode: bool) -> int:
    """Number of pooling windows along one axis, following PyTorch's rule (see module docstring)."""
    if padding < 0 or 2 * padding > kernel:
        raise ValueError(f"pool padding {padding} must be between 0 and half the kernel size {kernel}")
    span = dilation * (kernel - 1) + 1
    room = size + 2 * padding - span
    # -(-a // b) is ceil(a / b) for a positive divisor, exact in integers.
    out = (-(-room // stride) if ceil_mode else room // stride) + 1
    if ceil_mode and (out - 1) * stride >= size + padding:
        out -= 1
    if out <= 0:
        raise ValueError(
            f"pooling output would be empty: input size {size}, kernel {kernel}, stride {stride}, "
            f"padding {padding}, dilation {dilation} give output size {out}"
        )
    return out


def _pad_for_windows(x, out_hw, kernel_size, stride, padding, dilation, fill):
    """Pad ``x`` with ``fill`` so every window tap, even of a ceil_mode window, is a valid index.

    Returns the padded array; tap (i, j) of window (oh, ow) sits at padded index
    (oh*sh + i*dh, ow*sw + j*dw).
    """
    height, width = x.shape[2:]
    extents = []
    for size, out, k, s, p, d in zip((height, width), out_hw, kernel_size, stride, padding, dilation):
        needed = (out - 1) * s + d * (k - 1) + 1  # padded length the last window reaches
        extents.append((p, max(p, needed - size - p)))
    return np.pad(x, ((0, 0), (0, 0), extents[0], extents[1]), constant_values=fill)


def _tap_slice(start, out, stride):
    return slice(start, start + stride * (out - 1) + 1, stride)


def max_pool2d_forward(x: np.ndarray, kernel_size, stride, padding, dilation, ceil_mode):
    """Max over every window of ``x`` (N, C, H, W); padding counts as -inf.

    Returns ``(out, argmax)``: out (N, C, OH, OW) in x's dtype and argmax int64 (N, C, OH, OW), the
    flat index ``h*W + w`` of the chosen cell in its input plane. Ties keep the first cell in
    row-major window order, and a NaN wins over any number, as in PyTorch. A dilated window can
    miss the image entirely (every tap in the padding): its output is -inf and its argmax -1.
    """
    kh, kw = kernel_size
    sh, sw = stride
    ph, pw = padding
    dh, dw = dilation
    n, c, height, width = x.shape
    out_h = pool_output_size(height, kh, sh, ph, dh, ceil_mode)
    out_w = pool_output_size(width, kw, sw, pw, dw, ceil_mode)
    padded = _pad_for_windows(x, (out_h, out_w), kernel_size, stride, padding, dilation, -np.inf)

    # Input row/column read by tap i of every window: oh*sh - ph + i*dh. Out-of-image taps are
    # skipped, so the running argmax always names a real cell.
    window_rows = np.arange(out_h) * sh - ph
    window_cols = np.arange(out_w) * sw - pw
    best = np.full((n, c, out_h, out_w), -np.inf, dtype=x.dtype)
    argmax = np.full((n, c, out_h, out_w), -1, dtype=np.int64)
    for i in range(kh):
        rows = window_rows + i * dh
        for j in range(kw):
            cols = window_cols + j * dw
            inside = ((rows >= 0) & (rows < height))[:, None] & ((cols >= 0) & (cols < width))[None, :]
            values = padded[:, :, _tap_slice(i * dh, out_h, sh), _tap_slice(j * dw, out_w, sw)]
            # The first in-image tap always claims the window (so an all -inf window still points
            # at a real cell); later taps win only if strictly larger or NaN.
            unclaimed = argmax < 0
            take = inside & (unclaimed | (values > best) | np.isnan(values))
            best = np.where(take, values, best)
            argmax = np.where(take, rows[:, None] * width + cols[None, :], argmax)
    return best, argmax


def max_pool2d_backward(grad_out: np.ndarray, argmax: np.ndarray, x_shape) -> np.ndarray:
    """Route each window's gradient to the cell that won its max (summed where cells win twice).

    Windows whose argmax is -1 (entirely in the padding) have no input cell and pass nothing on.
    """
    n, c, height, width = x_shape
    planes = n * c
    plane_size = height * width
    argmax = argmax.reshape(planes, -1 if planes else 0)
    # Give every plane its own block of indices, then one bincount does the scatter-add.
    flat = np.arange(planes, dtype=np.int64)[:, None] * plane_size + argmax
    has_cell = argmax >= 0
    dx = np.bincount(flat[has_cell], weights=grad_out.reshape(argmax.shape)[has_cell], minlength=planes * plane_size)
    return dx.astype(grad_out.dtype, copy=False).reshape(x_shape)


def _avg_divisors(size, out, kernel, stride, padding, count_include_pad):
    """Per-window divisor along one axis, as PyTorch counts it.

    count_include_pad counts the window's cells inside the padded input (a ceil_mode window that
    runs past the right padding is clipped there); otherwise only cells inside the image count.
    The 2-D divisor is the product of the two axes' counts.
    """
    start = np.arange(out) * stride - padding
    end = np.minimum(start + kernel, size + padding)
    if count_include_pad:
        return end - start
    return np.minimum(end, size) - np.maximum(start, 0)


def _avg_pool_geometry(x_shape, kernel_size, stride, padding, ceil_mode, count_include_pad):
    height, width = x_shape[2:]
    out_h = pool_output_size(height, kernel_size[0], stride[0], padding[0], 1, ceil_mode)
    out_w = pool_output_size(width, kernel_size[1], stride[1], padding[1], 1, ceil_mode)
    div_h = _avg_divisors(height, out_h, kernel_size[0], stride[0], padding[0], count_include_pad)
    div_w = _avg_divisors(width, out_w, kernel_size[1], stride[1], padding[1], count_include_pad)
    return out_h, out_w, div_h[:, None] * div_w[None, :]


def avg_pool2d_forward(x: np.ndarray, kernel_size, stride, padding, ceil_mode, count_include_pad) -> np.ndarray:
    """Mean over every window of ``x`` (N, C, H, W), with PyTorch's divisor (see _avg_divisors)."""
    out_h, out_w, divisor = _avg_pool_geometry(x.shape, kernel_size, stride, padding, ceil_mode, count_include_pad)
    padded = _pad_for_windows(x, (out_h, out_w), kernel_size, stride, padding, (1, 1), 0)
    total = np.zeros(x.shape[:2] + (out_h, out_w), dtype=x.dtype)
    for i in range(kernel_size[0]):
        for j in range(kernel_size[1]):
            total += padded[:, :, _tap_slice(i, out_h, stride[0]), _tap_slice(j, out_w, stride[1])]
    return total / divisor.astype(x.dtype)


def avg_pool2d_backward(grad_out: np.ndarray, x_shape, kernel_size, stride, padding, ceil_mode, count_include_pad):
    """Every cell of a window receives the window's gradient divided by the window's divisor."""
    n, c, height, width = x_shape
    out_h, out_w, divisor = _avg_pool_geometry(x_shape, kernel_size, stride, padding, ceil_mode, count_include_pad)
    share = grad_out / divisor.astype(grad_out.dtype)
    ph, pw = padding
    padded = np.zeros(
        (n, c, max(height + 2 * ph, (out_h - 1) * stride[0] + kernel_size[0]),
         max(width + 2 * pw, (out_w - 1) * stride[1] + kernel_size[1])),
        dtype=grad_out.dtype,
    )
    for i in range(kernel_size[0]):
        for j in range(kernel_size[1]):
            padded[:, :, _tap_slice(i, out_h, stride[0]), _tap_slice(j, out_w, stride[1])] += share
    return np.ascontiguousarray(padded[:, :, ph : ph + height, pw : pw + width])
