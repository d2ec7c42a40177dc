"""The ``plan_*`` primitives on preallocated NumPy buffers: ``md.compile``'s steps on the CPU.

An op's ``forward`` allocates its result, and the primitives under it allocate their
temporaries: im2col's column matrix, the product, the product plus the bias, the ReLU of that.
At batch 1 a small CNN spends more time in those calls than in arithmetic. But a compiled plan
knows every shape when it is built, so here its common steps own their memory and write into it:

* **Convolution** (groups 1) is two copies and one BLAS call into buffers made once. The input
  is copied into the interior of a zero-bordered buffer (the padding, written once). Then im2col
  needs no bounds tests: the column row of tap (c, i, j) is the padded images read from offset
  c·Hp·Wp + i·dh·Wp + j·dw with steps (C·Hp·Wp, sh·Wp, sw) over (image, row, column), a strided
  view, and all rows are one ``copyto`` of a 6-D view. With stride 1 each output row is computed
  over the whole padded width Wp instead of OW, so that a column row is *one* contiguous run of
  OH·Wp cells rather than OH runs of OW; the Wp - OW extra columns are garbage the next step
  never reads (it reads the output through a view that drops them). The bias rides in the
  product: the column matrix has a last row of ones and the weight matrix a last column of
  biases, so [W | b] @ [cols; 1] = W @ cols + b with no extra pass. A fused ReLU is one in-place
  ``maximum``.
* **Max pooling** (and a ReLU after it) is one Numba call with no argmax, into its buffer
  (:mod:`.eval_kernels`).
* **Linear** on a batch of vectors is one ``dot`` into its buffer and an in-place bias add.

Why a prepared step and not an ``out=`` argument on im2col and matmul: the strided view above is
built once per plan (building it costs more than the copy it drives at batch 1), and the padded
buffer it reads is state a stateless primitive cannot keep. Measured at batch 1 (loaded machine),
the Numba im2col kernel writing into a given buffer took 1.25-2x the time of this copy. A direct
Numba convolution (no im2col) was tried and measured 3-10x slower than this at batch 1: its inner
loops over 14-28 output columns are too short for its loop overhead, while BLAS does the
arithmetic of both layers in ~8 µs. Other dtypes (float16: no BLAS) get the composed steps
(:mod:`minidl.backend.plan_steps`).
"""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import as_strided

from .. import plan_steps as composed_steps
from ..conv_arithmetic import conv_output_size
from ..primitives import PlanStep
from ..reference.pool import pool_output_size
from .loading import load_kernels

_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))  # BLAS's


class _Buffered(PlanStep):
    """A step whose ``output`` is a NumPy array (a reshape is a view when it shares memory) and
    whose ``relu`` flag applies a ReLU in place before the call returns."""

    def fuse_relu(self) -> bool:
        self.relu = True
        return True

    def output_view(self, shape):
        view = self.output.reshape(shape)
        return view if np.shares_memory(view, self.output) else None


class Convolution(_Buffered):
    """:meth:`Backend.plan_conv2d` as a padded copy, one strided copy and one BLAS product."""

    def __init__(self, x_shape, weight, bias, stride, padding, dilation):
        n, channels, height, width = x_shape
        dtype = weight.dtype
        out_channels, _, kh, kw = weight.shape
        (sh, sw), (ph, pw), (dh, dw) = stride, padding, dilation
        hp, wp = height + 2 * ph, width + 2 * pw
        out_h = conv_output_size(height, kh, sh, ph, dh)
        out_w = conv_output_size(width, kw, sw, pw, dw)
        # Stride 1: each output row spans the padded width (one contiguous run per column row).
        row = wp if (sh, sw) == (1, 1) else out_w
        # Slack after the image: the last rows' unused columns read a little past its end.
        padded = np.zeros(n * channels * hp * wp + (kh * dh + 1) * wp + kw * dw, dtype)
        self.interior = padded[:n * channels * hp * wp].reshape(n, channels, hp, wp)[
            :, :, ph:ph + height, pw:pw + width]
        k = channels * kh * kw
        self.cols = np.empty((k + 1, n * out_h * row), dtype)
        self.cols[k] = 1  # the row of ones that carries the bias through the product
        item = padded.itemsize
        self.taps = as_strided(
            padded, shape=(channels, kh, kw, n, out_h, row),
            strides=(hp * wp * item, dh * wp * item, dw * item, channels * hp * wp * item,
                     sh * wp * item, sw * item), writeable=False)
        self.cols_taps = self.cols[:k].reshape(channels, kh, kw, n, out_h, row)
        if bias is None:
            bias = np.zeros(out_channels, dtype)
        self.matrix = np.concatenate([weight.reshape(out_channels, k), bias.reshape(-1, 1)], 1)
        self.out = np.empty((out_channels, n * out_h * row), dtype)
        # (O, N, OH, row) seen as (N, O, OH, OW): no copy, the unused columns dropped.
        self.output = self.out.reshape(out_channels, n, out_h, row).transpose(
            1, 0, 2, 3)[:, :, :, :out_w]
        # One image: the output with its unused columns is contiguous, (1, O, OH, row).
        self.rows = self.out.reshape(1, out_channels, out_h, row) if n == 1 else None
        self.relu, self.copy_input = False, True

    def follow(self, previous, sole_reader) -> None:
        # A pool before this convolution writes its maxima straight into the padded input
        # buffer (not its own output, which only this step read), and no input is copied.
        if isinstance(previous, MaxPool) and sole_reader:
            previous.out = self.interior
            self.copy_input = False

    def __call__(self, x):
        if self.copy_input:
            np.copyto(self.interior, x)
        np.copyto(self.cols_taps, self.taps)
        np.dot(self.matrix, self.cols, out=self.out)
        if self.relu:
            np.maximum(self.out, 0, out=self.out)
        return self.output


class MaxPool(_Buffered):
    """:meth:`Backend.plan_max_pool2d` as one Numba call writing the maxima into a buffer."""

    def __init__(self, x_shape, dtype, kernel_size, stride, padding, dilation, ceil_mode):
        from . import eval_kernels  # Numba: when a plan is built
        (n, channels, height, width), (kh, kw) = x_shape, kernel_size
        geometry = (kh, kw) + tuple(stride) + tuple(padding) + tuple(dilation)
        shape = (n, channels, pool_output_size(height, kh, stride[0], padding[0], dilation[0],
                                               ceil_mode),
                 pool_output_size(width, kw, stride[1], padding[1], dilation[1], ceil_mode))
        if geometry == (2, 2, 2, 2, 0, 0, 1, 1) and 2 * shape[2] <= height and \
                2 * shape[3] <= width:
            self.kernel, self.args = eval_kernels.max_pool2x2_values_, ()
        else:
            self.kernel = eval_kernels.max_pool2d_values_
            self.args = (np.empty(shape, np.int64), tuple(int(v) for v in geometry))
        self.out = self.output = np.empty(shape, dtype)
        self.relu, self.source = False, None

    def follow(self, previous, sole_reader) -> None:
        # Read a convolution's output rows whole, unused columns and all: the 2x2 kernel never
        # reaches them (it reads columns < 2·OW <= OW_conv), and a contiguous input runs ~2.5x
        # faster than the strided view that hides them.
        if isinstance(previous, Convolution) and self.args == () and previous.rows is not None:
            self.source = previous.rows

    def __call__(self, x):
        self.kernel(x if self.source is None else self.source, self.out, *self.args, self.relu)
        return self.output


class Linear(_Buffered):
    """:meth:`Backend.plan_linear` as one ``dot`` into a buffer and an in-place bias add."""

    def __init__(self, x_shape, weight, bias):
        self.weight_t = np.array(weight.T, order="C")  # a copy: the weights as prepared
        self.bias = None if bias is None else bias.copy()
        self.output = np.empty((x_shape[0], weight.shape[0]), weight.dtype)
        self.relu = False

    def __call__(self, x):
        np.dot(x, self.weight_t, out=self.output)
        if self.bias is not None:
            np.add(self.output, self.bias, out=self.output)
        if self.relu:
            np.maximum(self.output, 0, out=self.output)
        return self.output


def _blas_floats(*arrays) -> bool:
    """Every array has one dtype, and BLAS multiplies it."""
    dtype = arrays[0].dtype
    return dtype in _FLOATS and all(a is None or a.dtype == dtype for a in arrays)


def plan_conv2d(be, x_shape, weight, bias, stride, padding, dilation):
    """:meth:`Backend.plan_conv2d` of ``be`` (Numba's CPU backend): composed for a dtype BLAS
    does not multiply."""
    if not _blas_floats(weight, bias):
        return composed_steps.plan_conv2d(be, x_shape, weight, bias, stride, padding, dilation)
    load_kernels()  # a plan's other steps will call kernels too: load them all now
    return Convolution(x_shape, weight, bias, stride, padding, dilation)


def plan_max_pool2d(be, x_shape, dtype, kernel_size, stride, padding, dilation, ceil_mode):
    """:meth:`Backend.plan_max_pool2d` of ``be`` (Numba's CPU backend)."""
    if np.dtype(dtype) not in _FLOATS:
        return composed_steps.plan_max_pool2d(be, x_shape, dtype, kernel_size,
                                              stride, padding, dilation, ceil_mode)
    load_kernels()
    return MaxPool(x_shape, np.dtype(dtype), kernel_size, stride, padding, dilation, ceil_mode)


def plan_linear(be, x_shape, weight, bias):
    """:meth:`Backend.plan_linear` of ``be`` (Numba's CPU backend)."""
    if not _blas_floats(weight, bias):
        return composed_steps.plan_linear(be, x_shape, weight, bias)
    load_kernels()
    return Linear(x_shape, weight, bias)
