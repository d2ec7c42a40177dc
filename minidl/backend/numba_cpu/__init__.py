"""The default CPU backend: the reference backend with Numba kernels where they pay.

Elementwise math, reductions and matrix products stay on NumPy (vectorised C and BLAS already run
them at memory or compute speed). Numba replaces the primitives that NumPy can only express with
Python loops or many temporary arrays: im2col/col2im, pooling, fused softmax-cross-entropy, GELU,
layer norm and the optimizer updates. Each kernel is jitted with ``cache=True`` and compiled on its
first call, never at import.
"""

from ..reference import *  # noqa: F401,F403
from .conv import *  # noqa: F401,F403
from .pool import *  # noqa: F401,F403
from .nn_kernels import *  # noqa: F401,F403
from .optim_kernels import *  # noqa: F401,F403

name = "cpu"
