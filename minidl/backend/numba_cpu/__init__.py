"""The default CPU backend: the reference backend with Numba kernels where they pay.

Elementwise math, reductions and matrix products stay on NumPy (vectorised C and BLAS already run
them at memory or compute speed). Numba replaces the primitives that NumPy can only express with
Python loops or many temporary arrays: im2col/col2im, pooling, fused softmax-cross-entropy, GELU,
layer norm and the optimizer updates. Each kernel is jitted with ``cache=True`` and compiled on its
first call, never at import.

Threads: the matrix products own the cores (BLAS runs its own thread pool), so most kernels run
on the calling thread. Two thread pools on few cores fight: Numba's OpenMP workers spin while they
wait, starving the BLAS workers, and an MLP step measured 15x slower with both pools spinning on
two cores. So OpenMP is asked to sleep rather than spin between parallel regions (unless the user
chose otherwise), and only the optimizer updates and large im2col/col2im use Numba threads.
"""

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from ..reference import *  # noqa: F401,F403,E402
from .conv import *  # noqa: F401,F403,E402
from .pool import *  # noqa: F401,F403,E402
from .nn_kernels import *  # noqa: F401,F403,E402
from .optim_kernels import *  # noqa: F401,F403,E402

name = "cpu"
