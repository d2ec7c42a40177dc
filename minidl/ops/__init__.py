"""Differentiable ops. Each op is a :class:`~minidl.autograd.function.Function` whose forward and
backward rules sit next to each other, computing through backend primitives only.

Modules by concept: ``elementwise`` (arithmetic, activations), ``math_functions`` (sin ... atanh,
erf, on the backend's ``math_function`` primitive), ``reduction`` (sum, mean, max),
``shape`` (reshape, transpose, indexing, cat/stack/where, casts), ``linalg`` (matmul), ``conv``
and ``pool`` (2-D convolution and pooling), ``nn_ops`` (softmax, losses, dropout, normalisation,
embedding); ``tensor_methods`` attaches them to Tensor as its methods and operators (``x + y``,
``x.sum()``, ``x.add_(y)``) when this package is imported; ``size_arguments`` reads the size
arguments (``kernel_size``, ``stride``, ...) that ops and the layers storing them share.

Op classes end in ``Function`` (``Conv2dFunction`` is the op, ``nn.Conv2d`` the layer that calls
it); the lower-case functions beside them (``conv2d``) are what layers and users call.
"""

from . import tensor_methods as _tensor_methods

_tensor_methods.install()
