"""The plain-NumPy reference backend.

Every primitive here is the obvious NumPy version: slow where a loop is unavoidable, but easy to
check by eye. The Numba backend extends this class, replacing the kernels that pay, and is tested
against it.
"""

from .. import composed, plan_steps
from ..primitives import Backend
from . import array_ops, conv, nn_kernels, optim_kernels, pool, random_kernels, rnn_kernels


class ReferenceBackend(Backend):
    """NumPy arrays on the host; every primitive of :class:`~minidl.backend.primitives.Backend`."""

    name = "numpy"

    # creation and transfer
    from_numpy = staticmethod(array_ops.from_numpy)
    to_numpy = staticmethod(array_ops.to_numpy)
    zeros = staticmethod(array_ops.zeros)
    ones = staticmethod(array_ops.ones)
    full = staticmethod(array_ops.full)
    zeros_like = staticmethod(array_ops.zeros_like)
    ones_like = staticmethod(array_ops.ones_like)
    astype = staticmethod(array_ops.astype)
    copy = staticmethod(array_ops.copy)

    # in place and memory
    fill_ = staticmethod(array_ops.fill_)
    assign_ = staticmethod(array_ops.assign_)
    setitem_ = staticmethod(array_ops.setitem_)
    owns_memory = staticmethod(array_ops.owns_memory)

    # elementwise math
    add = staticmethod(array_ops.add)
    sub = staticmethod(array_ops.sub)
    mul = staticmethod(array_ops.mul)
    div = staticmethod(array_ops.div)
    floor_divide = staticmethod(array_ops.floor_divide)
    remainder = staticmethod(array_ops.remainder)
    neg = staticmethod(array_ops.neg)
    power = staticmethod(array_ops.power)
    exp = staticmethod(array_ops.exp)
    log = staticmethod(array_ops.log)
    sqrt = staticmethod(array_ops.sqrt)
    tanh = staticmethod(array_ops.tanh)
    math_function = staticmethod(array_ops.math_function)
    sigmoid = staticmethod(array_ops.sigmoid)
    relu = staticmethod(array_ops.relu)
    relu_backward = staticmethod(array_ops.relu_backward)
    abs = staticmethod(array_ops.abs)
    sign = staticmethod(array_ops.sign)
    maximum = staticmethod(array_ops.maximum)
    minimum = staticmethod(array_ops.minimum)
    where = staticmethod(array_ops.where)
    clip = staticmethod(array_ops.clip)
    equal = staticmethod(array_ops.equal)
    not_equal = staticmethod(array_ops.not_equal)
    less = staticmethod(array_ops.less)
    less_equal = staticmethod(array_ops.less_equal)
    greater = staticmethod(array_ops.greater)
    greater_equal = staticmethod(array_ops.greater_equal)
    logical_not = staticmethod(array_ops.logical_not)
    logical_and = staticmethod(array_ops.logical_and)
    logical_or = staticmethod(array_ops.logical_or)

    # reductions
    sum = staticmethod(array_ops.sum)
    max = staticmethod(array_ops.max)
    min = staticmethod(array_ops.min)
    argmax = staticmethod(array_ops.argmax)
    argmin = staticmethod(array_ops.argmin)

    # movement and indexing
    reshape = staticmethod(array_ops.reshape)
    transpose = staticmethod(array_ops.transpose)
    broadcast_to = staticmethod(array_ops.broadcast_to)
    getitem = staticmethod(array_ops.getitem)
    index_add = staticmethod(array_ops.index_add)
    take = staticmethod(array_ops.take)
    one_hot = staticmethod(array_ops.one_hot)
    nonzero = staticmethod(array_ops.nonzero)
    concatenate = staticmethod(array_ops.concatenate)
    stack = staticmethod(array_ops.stack)

    # linear algebra
    matmul = staticmethod(array_ops.matmul)

    # random numbers
    random_uniform = staticmethod(random_kernels.random_uniform)
    random_normal = staticmethod(random_kernels.random_normal)

    # convolution and pooling kernels
    im2col = staticmethod(conv.im2col)
    col2im = staticmethod(conv.col2im)
    max_pool2d_forward = staticmethod(pool.max_pool2d_forward)
    max_pool2d_backward = staticmethod(pool.max_pool2d_backward)
    avg_pool2d_forward = staticmethod(pool.avg_pool2d_forward)
    avg_pool2d_backward = staticmethod(pool.avg_pool2d_backward)

    # neural-network kernels
    softmax = staticmethod(nn_kernels.softmax)
    softmax_backward = staticmethod(nn_kernels.softmax_backward)
    log_softmax = staticmethod(nn_kernels.log_softmax)
    softmax_cross_entropy_forward = staticmethod(nn_kernels.softmax_cross_entropy_forward)
    softmax_cross_entropy_backward = staticmethod(nn_kernels.softmax_cross_entropy_backward)
    gelu_forward = staticmethod(nn_kernels.gelu_forward)
    gelu_backward = staticmethod(nn_kernels.gelu_backward)
    layer_norm_forward = staticmethod(nn_kernels.layer_norm_forward)
    layer_norm_backward = staticmethod(nn_kernels.layer_norm_backward)
    batch_norm_forward = staticmethod(nn_kernels.batch_norm_forward)
    batch_norm_backward = staticmethod(nn_kernels.batch_norm_backward)
    running_average_ = composed.OfTheBackendClass(composed.running_average_, "running_average_")

    # recurrent cells
    lstm_cell_forward = staticmethod(rnn_kernels.lstm_cell_forward)
    lstm_cell_backward = staticmethod(rnn_kernels.lstm_cell_backward)
    gru_cell_forward = staticmethod(rnn_kernels.gru_cell_forward)
    gru_cell_backward = staticmethod(rnn_kernels.gru_cell_backward)

    # optimizer kernels
    sgd_update = staticmethod(optim_kernels.sgd_update)
    adam_update = staticmethod(optim_kernels.adam_update)
    # On the host a loop costs nothing a fused launch would save.
    sgd_update_group = composed.OfTheBackendClass(composed.sgd_update_group, "sgd_update_group")
    adam_update_group = composed.OfTheBackendClass(composed.adam_update_group,
                                                   "adam_update_group")

    # compiled inference (md.compile): the op's own primitives, copied into the step's buffer
    plan_conv2d = composed.OfTheBackendClass(plan_steps.plan_conv2d, "plan_conv2d")
    plan_max_pool2d = composed.OfTheBackendClass(plan_steps.plan_max_pool2d, "plan_max_pool2d")
    plan_linear = composed.OfTheBackendClass(plan_steps.plan_linear, "plan_linear")
