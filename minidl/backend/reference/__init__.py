"""The plain-NumPy reference backend.

Every primitive here is the obvious NumPy version: slow where a loop is unavoidable, but easy to
check by eye. The Numba backend exposes the same names and is tested against this one.
"""

from .array_ops import *  # noqa: F401,F403
from .conv import *  # noqa: F401,F403
from .pool import *  # noqa: F401,F403
from .nn_kernels import *  # noqa: F401,F403
from .optim_kernels import *  # noqa: F401,F403

name = "cpu:numpy"
