"""Whether the CUDA backend runs on numba's simulator: the lowest fact of the backend.

The allocator, the launch shapes and a few kernels behave differently there (no driver to free
memory to, a handful of threads per block so the tests stay quick), so every module of the
backend may ask; this module imports nothing of minidl, so asking makes no import circle.
"""

from __future__ import annotations

from numba import cuda

SIMULATED = cuda.device_array.__module__.startswith("numba.cuda.simulator")
"""True on numba's CUDA simulator, which runs every GPU thread as a Python thread."""
