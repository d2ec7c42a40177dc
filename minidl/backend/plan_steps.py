"""The ``plan_*`` primitives composed from the others, for a backend without buffers of its own.

A :class:`~minidl.backend.primitives.PlanStep` made here computes its op as the op's ``forward``
does, through the primitives of the backend ``be`` it was made for, so it runs on any device,
the opaque test backend included. It has no ``output`` buffer (the primitives allocate their
results) and saves a compiled plan the Python of the op and a ReLU step fused into it. A backend
that can write straight into buffers of its own (Numba's CPU backend, see
:mod:`minidl.backend.numba_cpu.plan_steps`) replaces these.

Each function takes the backend first; a backend binds one with
:class:`~minidl.backend.composed.OfTheBackendClass`.
"""

from __future__ import annotations

from .conv_arithmetic import conv_output_size
from .primitives import PlanStep


class _Composed(PlanStep):
    """A step computed by primitives of ``be``, a fused ReLU last."""

    def __init__(self, be):
        self.be, self.relu = be, False

    def fuse_relu(self) -> bool:
        self.relu = True
        return True

    def _finish(self, result):
        return self.be.relu(result) if self.relu else result


class ComposedConv2d(_Composed):
    """:meth:`Backend.plan_conv2d`: im2col, one matrix product, the bias, as the op computes."""

    def __init__(self, be, x_shape, weight, bias, stride, padding, dilation):
        super().__init__(be)
        n, out_channels, (kh, kw) = x_shape[0], weight.shape[0], weight.shape[2:]
        out_h = conv_output_size(x_shape[2], kh, stride[0], padding[0], dilation[0])
        out_w = conv_output_size(x_shape[3], kw, stride[1], padding[1], dilation[1])
        self.geometry = ((kh, kw), stride, padding, dilation)
        self.matrix = be.copy(be.reshape(weight, (out_channels, -1)))
        self.bias = None if bias is None else be.reshape(be.copy(bias), (1, out_channels, 1, 1))
        self.product_shape = (out_channels, n, out_h, out_w)

    def __call__(self, x):
        be = self.be
        product = be.reshape(be.matmul(self.matrix, be.im2col(x, *self.geometry)),
                             self.product_shape)  # (O, N, OH, OW)
        if product.shape[1] == 1:  # (O, 1, OH, OW) holds its values in (1, O, OH, OW) order
            result = be.reshape(product, (1,) + product.shape[:1] + product.shape[2:])
        else:
            result = be.copy(be.transpose(product, (1, 0, 2, 3)))
        return self._finish(result if self.bias is None else be.add(result, self.bias))


class ComposedMaxPool2d(_Composed):
    """:meth:`Backend.plan_max_pool2d`: ``max_pool2d_forward``, its argmax dropped."""

    def __init__(self, be, kernel_size, stride, padding, dilation, ceil_mode):
        super().__init__(be)
        self.geometry = (kernel_size, stride, padding, dilation, ceil_mode)

    def __call__(self, x):
        return self._finish(self.be.max_pool2d_forward(x, *self.geometry)[0])


class ComposedLinear(_Composed):
    """:meth:`Backend.plan_linear`: x @ weightᵀ (BLAS's transb, no transposed copy) + bias."""

    def __init__(self, be, weight, bias):
        super().__init__(be)
        self.weight = be.copy(weight)
        self.bias = None if bias is None else be.copy(bias)

    def __call__(self, x):
        result = self.be.matmul(x, self.weight, transpose_b=True)
        return self._finish(result if self.bias is None else self.be.add(result, self.bias))


def plan_conv2d(be, x_shape, weight, bias, stride, padding, dilation):
    """:meth:`Backend.plan_conv2d` composed of ``be``'s primitives."""
    return ComposedConv2d(be, x_shape, weight, bias, stride, padding, dilation)


def plan_max_pool2d(be, x_shape, dtype, kernel_size, stride, padding, dilation, ceil_mode):
    """:meth:`Backend.plan_max_pool2d` composed of ``be``'s primitives."""
    return ComposedMaxPool2d(be, kernel_size, stride, padding, dilation, ceil_mode)


def plan_linear(be, x_shape, weight, bias):
    """:meth:`Backend.plan_linear` composed of ``be``'s primitives."""
    return ComposedLinear(be, weight, bias)
