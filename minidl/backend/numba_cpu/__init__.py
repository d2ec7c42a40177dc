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

Memory: see :func:`keep_freed_memory` — a training step allocates and frees the same large arrays
every step, and by default glibc hands them back to the kernel only to fault them in again.
"""

import ctypes
import os
import sys

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

# glibc's mallopt() parameter numbers (malloc.h).
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3


def keep_freed_memory(mmap_threshold: int = 64 << 20, trim_threshold: int = 256 << 20) -> bool:
    """Ask glibc to keep freed blocks for reuse instead of returning them to the kernel.

    A training step allocates the same few-megabyte arrays every step (im2col columns, conv
    outputs, their gradients) and frees them when the step ends. By default glibc serves large
    blocks with mmap() and gives freed memory back (munmap, or trimming the heap top), so the next
    step touches fresh pages: every 4 KiB page costs a page fault and the kernel zeroing it. A
    LeNet step measured ~3000 faults and ~5 ms of its ~15 ms in them. With blocks up to
    ``mmap_threshold`` served from the heap and up to ``trim_threshold`` bytes of free heap top
    kept, the second step reuses the first step's pages and faults drop to ~0. The cost is that
    the process keeps its peak working set (capped by ``trim_threshold`` at the heap top) after
    the arrays die. (PyTorch users get the same effect from jemalloc or tcmalloc.)

    Skipped when the user set glibc's own MALLOC_*_THRESHOLD_ variables, on non-glibc systems,
    and when MINIDL_KEEP_FREED_MEMORY=0. Returns whether the setting was applied.
    """
    if os.environ.get("MINIDL_KEEP_FREED_MEMORY", "1") == "0" or not sys.platform.startswith("linux"):
        return False
    if "MALLOC_MMAP_THRESHOLD_" in os.environ or "MALLOC_TRIM_THRESHOLD_" in os.environ:
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False  # musl and other libcs have no mallopt
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    return bool(mallopt(_M_MMAP_THRESHOLD, mmap_threshold)) and bool(
        mallopt(_M_TRIM_THRESHOLD, trim_threshold))


# Applied when this backend is first used (the backend is imported lazily, on the first op).
keep_freed_memory()

from ..reference import *  # noqa: F401,F403,E402
from .conv import *  # noqa: F401,F403,E402
from .pool import *  # noqa: F401,F403,E402
from .nn_kernels import *  # noqa: F401,F403,E402
from .optim_kernels import *  # noqa: F401,F403,E402

name = "cpu"
