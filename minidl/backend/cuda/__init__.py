"""The CUDA backend: every primitive of the contract as numba.cuda kernels on GPU memory.

Arrays live on the device from creation to the end (:class:`~.device.DeviceArray`); values
cross to the host only in ``to_numpy`` (and back in ``from_numpy``), plus the single-number
reads a few primitives need to raise their documented errors or to size their output
(``nonzero``). Checks that can wait (class targets, embedding indices) are made by the kernels
themselves and read at the next synchronisation. The kernels are grouped by concept:

* :mod:`.device`: the array type, launch shapes, the counted host crossings;
* :mod:`.deferred_checks`: input checks reported at the next synchronisation;
* :mod:`.elementwise`: one scalar definition per operation, broadcasting in the kernel templates;
* :mod:`.movement`: creation, casts, views, concatenation, indexing (one strided-copy kernel);
* :mod:`.lookup`: take, one_hot, nonzero;
* :mod:`.reduction`: sum/max/argmax as shared-memory tree reductions;
* :mod:`.matmul`: the tiled, batched GEMM (transposed operands read in place);
* :mod:`.conv_pool`, :mod:`.nn_kernels`, :mod:`.batch_norm`, :mod:`.rnn_kernels`,
  :mod:`.optim_kernels` (one-tensor and multi-tensor), :mod:`.random_kernels`;
* :mod:`.exact_math`: products rounded as the CPU rounds them (no fused multiply-add);
* :mod:`.allocator`: the caching allocator every buffer comes from.

It needs the ``numba-cuda`` package (``pip install minidl[cuda]``) and a CUDA GPU, or numba's CUDA
simulator (``NUMBA_ENABLE_CUDASIM=1``), which runs the same kernels in Python on the CPU: slowly,
but exactly enough to test them anywhere. Importing this package is what first touches CUDA;
``import minidl`` never does.
"""

from __future__ import annotations

import functools
import warnings

import numpy as np

from .. import composed, plan_steps
from ..primitives import Backend
from ..cuda_availability import require_cuda

require_cuda()

from numba import cuda  # noqa: E402  (after the availability check, which explains failures)

# Small tensors make small grids, and numba warns about each such launch; for a tensor library
# that is the normal case, not a mistake to report. Matched by message: numba-cuda raises its own
# NumbaPerformanceWarning class (numba.cuda.core.errors), not numba's. On a GPU numba-cuda
# highlights the message with terminal colour codes ("\x1b[1m"), which the pattern skips: a
# filter is matched from the message's first character.
warnings.filterwarnings("ignore", message=r"(\x1b\[[0-9;]*m)*Grid size \d+ will likely result "
                                          r"in GPU under-utilization")

from . import batch_norm, conv_pool, device, elementwise as ew, lookup  # noqa: E402
from . import matmul as gemm  # noqa: E402
from . import movement, nn_kernels, optim_kernels, random_kernels, reduction  # noqa: E402
from . import rnn_kernels  # noqa: E402


class CudaBackend(Backend):
    """numba.cuda device arrays; every primitive of :class:`~minidl.backend.primitives.Backend`."""

    name = "cuda"
    transfers = device.transfers

    def __init__(self, index: int = 0):
        self.index = index

    def on_device(self, index: int) -> "Backend":
        from ..cuda_availability import check_device_index
        check_device_index(index)
        if index == 0:
            return self
        return _BoundCudaBackend(index)

    # creation and transfer
    from_numpy = staticmethod(device.upload)
    to_numpy = staticmethod(device.download)
    zeros = staticmethod(movement.zeros)
    full = staticmethod(movement.full)
    astype = staticmethod(movement.astype)
    copy = staticmethod(movement.copy)

    # in place and memory
    assign_ = staticmethod(movement.assign_)
    setitem_ = staticmethod(movement.setitem_)
    owns_memory = staticmethod(movement.owns_memory)

    # elementwise math
    add = staticmethod(ew.arithmetic(ew.add, np.add))
    sub = staticmethod(ew.arithmetic(ew.sub, np.subtract))
    mul = staticmethod(ew.arithmetic(ew.mul, np.multiply))
    div = staticmethod(ew.arithmetic(ew.div, np.true_divide))
    power = staticmethod(ew.arithmetic(ew.power, np.power))
    math_function = staticmethod(ew.named_math_function)
    abs = staticmethod(ew.math_function(ew.absolute, np.abs))
    maximum = staticmethod(ew.arithmetic(ew.maximum, np.maximum))
    minimum = staticmethod(ew.arithmetic(ew.minimum, np.minimum))
    where = staticmethod(ew.where)
    equal = staticmethod(ew.comparison(ew.equal, np.equal))
    less = staticmethod(ew.comparison(ew.less, np.less))

    @staticmethod
    def floor_divide(a, b):
        dtype = ew.result_dtype(np.floor_divide, a, b)
        fn = ew.floor_divide_float if dtype.kind == "f" else ew.floor_divide_int
        return ew.binary(fn, a, b, dtype, dtype)

    @staticmethod
    def remainder(a, b):
        dtype = ew.result_dtype(np.remainder, a, b)
        fn = ew.remainder_float if dtype.kind == "f" else ew.remainder_int
        return ew.binary(fn, a, b, dtype, dtype)

    @staticmethod
    def sigmoid(a):
        return ew.unary(ew.sigmoid, a, a.dtype)

    @staticmethod
    def relu(a):
        return ew.unary(ew.relu, a, a.dtype)

    @staticmethod
    def relu_backward(grad, x):
        return ew.binary(ew.relu_backward, grad, movement.astype(x, grad.dtype), grad.dtype,
                         grad.dtype)

    # reductions
    sum = staticmethod(reduction.sum)
    max = staticmethod(reduction.max)
    argmax = staticmethod(reduction.argmax)

    # movement and indexing
    reshape = staticmethod(movement.reshape)
    transpose = staticmethod(movement.transpose)
    broadcast_to = staticmethod(movement.broadcast_to)
    getitem = staticmethod(movement.getitem)
    index_add = staticmethod(movement.index_add)
    take = staticmethod(lookup.take)
    one_hot = staticmethod(lookup.one_hot)
    nonzero = staticmethod(lookup.nonzero)
    concatenate = staticmethod(movement.concatenate)

    # linear algebra
    matmul = staticmethod(gemm.matmul)

    # random numbers
    random_uniform = staticmethod(random_kernels.random_uniform)
    random_normal = staticmethod(random_kernels.random_normal)

    # convolution and pooling kernels
    im2col = staticmethod(conv_pool.im2col)
    col2im = staticmethod(conv_pool.col2im)
    max_pool2d_forward = staticmethod(conv_pool.max_pool2d_forward)
    max_pool2d_backward = staticmethod(conv_pool.max_pool2d_backward)
    avg_pool2d_forward = staticmethod(conv_pool.avg_pool2d_forward)
    avg_pool2d_backward = staticmethod(conv_pool.avg_pool2d_backward)

    # neural-network kernels
    softmax = staticmethod(nn_kernels.softmax)
    log_softmax = staticmethod(nn_kernels.log_softmax)
    softmax_cross_entropy_forward = staticmethod(nn_kernels.softmax_cross_entropy_forward)
    softmax_cross_entropy_backward = staticmethod(nn_kernels.softmax_cross_entropy_backward)
    gelu_forward = staticmethod(nn_kernels.gelu_forward)
    gelu_backward = staticmethod(nn_kernels.gelu_backward)
    layer_norm_forward = staticmethod(nn_kernels.layer_norm_forward)
    layer_norm_backward = staticmethod(nn_kernels.layer_norm_backward)
    lstm_cell_forward = staticmethod(rnn_kernels.lstm_cell_forward)
    lstm_cell_backward = staticmethod(rnn_kernels.lstm_cell_backward)
    gru_cell_forward = staticmethod(rnn_kernels.gru_cell_forward)
    gru_cell_backward = staticmethod(rnn_kernels.gru_cell_backward)

    @staticmethod
    def softmax_backward(grad, out, axis):
        """Composed of this backend's reductions and elementwise kernels (backend/composed.py)."""
        return composed.softmax_backward(CudaBackend, grad, out, axis)

    batch_norm_forward = staticmethod(batch_norm.batch_norm_forward)
    batch_norm_backward = staticmethod(batch_norm.batch_norm_backward)
    running_average_ = staticmethod(batch_norm.running_average_)

    # optimizer kernels
    sgd_update = staticmethod(optim_kernels.sgd_update)
    adam_update = staticmethod(optim_kernels.adam_update)
    sgd_update_group = staticmethod(optim_kernels.sgd_update_group)
    adam_update_group = staticmethod(optim_kernels.adam_update_group)

    # md.compile's steps, composed of this backend's primitives (backend/plan_steps.py). Methods
    # rather than static: a step keeps the backend it was made by, and so runs on its GPU.
    def plan_conv2d(self, x_shape, weight, bias, stride, padding, dilation):
        """:meth:`Backend.plan_conv2d`, composed of this GPU's primitives."""
        return plan_steps.plan_conv2d(self, x_shape, weight, bias, stride, padding, dilation)

    def plan_max_pool2d(self, x_shape, dtype, kernel_size, stride, padding, dilation, ceil_mode):
        """:meth:`Backend.plan_max_pool2d`, composed of this GPU's primitives."""
        return plan_steps.plan_max_pool2d(self, x_shape, dtype, kernel_size, stride, padding,
                                          dilation, ceil_mode)

    def plan_linear(self, x_shape, weight, bias):
        """:meth:`Backend.plan_linear`, composed of this GPU's primitives."""
        return plan_steps.plan_linear(self, x_shape, weight, bias)


def _on_gpu(index, primitive):
    @functools.wraps(primitive)
    def bound(*args, **kwargs):
        with cuda.gpus[index]:
            return primitive(*args, **kwargs)
    return staticmethod(bound)


class _BoundCudaBackend(CudaBackend):
    """The CUDA backend for GPU ``index`` > 0: every primitive runs with that GPU current, so
    new arrays are allocated and kernels launched there."""

    def __init__(self, index: int):
        super().__init__(index)
        from ..primitives import ALL_PRIMITIVES
        for name in ALL_PRIMITIVES:
            if not name.startswith("plan_"):  # those are methods: bound to this instance
                setattr(self, name, _on_gpu(index, getattr(CudaBackend, name)).__func__)

    def on_device(self, index: int) -> "Backend":
        return CudaBackend().on_device(index)


__all__ = ["CudaBackend"]
