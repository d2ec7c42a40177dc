"""Products and square roots rounded as the CPU rounds them, for kernels that must equal it bit
for bit (the optimizer updates, the running statistics).

The CUDA compiler contracts ``a * b + c`` into one fused multiply-add, which rounds once instead
of twice and so differs from the CPU in the last bit. A product that feeds a sum therefore goes
through ``mul``, libdevice's ``fmul_rn``/``dmul_rn``, which the compiler never fuses; ``sqrt`` is
the correctly rounded ``fsqrt_rn``/``dsqrt_rn`` (NumPy's square root is correctly rounded too).
"""

from __future__ import annotations

import numpy as np
from numba import cuda
from numba.cuda import libdevice

from .device import SIMULATED

_operations: dict = {}


def exact_operations(dtype) -> tuple:
    """(mul, sqrt) device functions for float32 or float64 ``dtype``."""
    dtype = np.dtype(dtype)
    if dtype in _operations:
        return _operations[dtype]
    if SIMULATED:
        # The simulator computes with NumPy scalars, which never fuse; libdevice has no Python
        # implementation there.
        @cuda.jit(device=True)
        def mul(a, b):
            return a * b

        @cuda.jit(device=True)
        def sqrt(x):
            return np.sqrt(x)  # in the dtype, as the reference
    else:
        product = libdevice.fmul_rn if dtype.itemsize == 4 else libdevice.dmul_rn
        square_root = libdevice.fsqrt_rn if dtype.itemsize == 4 else libdevice.dsqrt_rn

        @cuda.jit(device=True)
        def mul(a, b):
            return product(a, b)

        @cuda.jit(device=True)
        def sqrt(x):
            return square_root(x)
    _operations[dtype] = (mul, sqrt)
    return mul, sqrt
