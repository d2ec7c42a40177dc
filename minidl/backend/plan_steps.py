"""The ``plan_*`` primitives composed from the others, for a backend without buffers of its own.

A :class:`~minidl.backend.primitives.PlanStep` made here computes its op exactly as the op's
``forward`` does, through the backend ``be`` it was made for, and then copies the result into
its ``output`` (made once). So it runs on any device, the opaque test backend included, and it
saves a compiled plan nothing but the Python of the op; the copy is the price of the fixed
buffer. A backend that can write straight into plan buffers (Numba's CPU backend, see
:mod:`minidl.backend.numba_cpu.plan_steps`) replaces these.

Each function takes the backend first; a backend binds one with
:class:`~minidl.backend.composed.OfTheBackendClass`.
"""

from __future__ import annotations

from .conv_arithmetic import conv_output_size
from .primitives import PlanStep


class _Composed(PlanStep):
    """A step computed by primitives of ``be`` and copied into ``output``."""

    def __init__(self, be, output):
        self.be, self.output, self.relu = be, output, False

    def fuse_relu(self) -> bool:
        self.relu = True
        return True

    def _store(self, result) -> None:
        if self.relu:
            result = self.be.relu(result)
        self.be.assign_(self.output, result)


class ComposedConv2d(_Composed):
    """:meth:`Backend.plan_conv2d`: im2col, one matrix product, the bias, as the op computes."""

    def __init__(self, be, x_shape, weight, bias, stride, padding, dilation):
        n, out_channels, (kh, kw) = x_shape[0], weight.shape[0], weight.shape[2:]
        out_h = conv_output_size(x_shape[2], kh, stride[0], padding[0], dilation[0])
        out_w = conv_output_size(x_shape[3], kw, stride[1], padding[1], dilation[1])
        super().__init__(be, be.zeros((n, out_channels, out_h, out_w), weight.dtype))
        self.geometry = ((kh, kw), stride, padding, dilation)
        self.matrix = be.copy(be.reshape(weight, (out_channels, -1)))
        self.bias = None if bias is None else be.reshape(be.copy(bias), (1, out_channels, 1, 1))
        self.product_shape = (out_channels, n, out_h, out_w)

    def __call__(self, x) -> None:
        be = self.be
        product = be.matmul(self.matrix, be.im2col(x, *self.geometry))  # (O, N·OH·OW)
        result = be.transpose(be.reshape(product, self.product_shape), (1, 0, 2, 3))
        self._store(result if self.bias is None else be.add(result, self.bias))


class ComposedMaxPool2d(_Composed):
    """:meth:`Backend.plan_max_pool2d`: ``max_pool2d_forward``, its argmax dropped."""

    def __init__(self, be, x_shape, dtype, kernel_size, stride, padding, dilation, ceil_mode):
        self.geometry = (kernel_size, stride, padding, dilation, ceil_mode)
        # The pool of zeros is an array of the result's shape: the buffer, with no arithmetic
        # on output sizes repeated here.
        output, _ = be.max_pool2d_forward(be.zeros(x_shape, dtype), *self.geometry)
        super().__init__(be, output)

    def __call__(self, x) -> None:
        self._store(self.be.max_pool2d_forward(x, *self.geometry)[0])


class ComposedLinear(_Composed):
    """:meth:`Backend.plan_linear`: x @ weightᵀ (BLAS's transb, no transposed copy) + bias."""

    def __init__(self, be, x_shape, weight, bias):
        super().__init__(be, be.zeros((x_shape[0], weight.shape[0]), weight.dtype))
        self.weight = be.copy(weight)
        self.bias = None if bias is None else be.copy(bias)

    def __call__(self, x) -> None:
        result = self.be.matmul(x, self.weight, transpose_b=True)
        self._store(result if self.bias is None else self.be.add(result, self.bias))


def plan_conv2d(be, x_shape, weight, bias, stride, padding, dilation):
    """:meth:`Backend.plan_conv2d` composed of ``be``'s primitives."""
    return ComposedConv2d(be, x_shape, weight, bias, stride, padding, dilation)


def plan_max_pool2d(be, x_shape, dtype, kernel_size, stride, padding, dilation, ceil_mode):
    """:meth:`Backend.plan_max_pool2d` composed of ``be``'s primitives."""
    return ComposedMaxPool2d(be, x_shape, dtype, kernel_size, stride, padding, dilation,
                             ceil_mode)


def plan_linear(be, x_shape, weight, bias):
    """:meth:`Backend.plan_linear` composed of ``be``'s primitives."""
    return ComposedLinear(be, x_shape, weight, bias)
