"""The primitive list: the whole contract between differentiable ops and a backend.

A backend is any module that defines every name below with the same meaning. Arrays are the
backend's own kind (NumPy ndarrays for the CPU backends). Shapes, axes and scalar arguments are
plain Python values. The ops in :mod:`minidl.ops` use nothing else, which is what lets one op
definition run on every device.
"""

ARRAY_PRIMITIVES = (
    # creation and transfer
    "from_numpy", "to_numpy", "zeros", "ones", "full", "zeros_like", "ones_like", "astype",
    "copy",
    # elementwise math
    "add", "sub", "mul", "div", "floor_divide", "remainder", "neg", "power", "exp", "log", "sqrt", "tanh", "sigmoid", "relu",
    "relu_backward", "abs", "sign", "maximum", "minimum", "where", "clip",
    "equal", "not_equal", "less", "less_equal", "greater", "greater_equal", "logical_not",
    # reductions
    "sum", "max", "min", "argmax", "argmin",
    # movement
    "reshape", "transpose", "broadcast_to", "getitem", "setitem", "index_add", "concatenate",
    "stack",
    # linear algebra
    "matmul",
)

KERNEL_PRIMITIVES = (
    "im2col", "col2im", "conv_output_size",
    "max_pool2d_forward", "max_pool2d_backward", "avg_pool2d_forward", "avg_pool2d_backward",
    "softmax", "log_softmax", "softmax_cross_entropy_forward", "softmax_cross_entropy_backward",
    "gelu_forward", "gelu_backward", "layer_norm_forward", "layer_norm_backward",
    "sgd_update", "adam_update",
)

ALL_PRIMITIVES = ARRAY_PRIMITIVES + KERNEL_PRIMITIVES
