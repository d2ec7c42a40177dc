"""The two process-wide settings the Numba CPU backend makes, in one place, with one switch.

Both change how the whole process behaves, not just minidl, so they are listed here rather than
buried in a kernel module, applied once when the CPU backend is first used (the first op on a
CPU tensor) or its kernels load, always before Numba's threads start, never at ``import
minidl``, and skipped entirely with ``MINIDL_CPU_TUNING=0``:

* **OpenMP waits passively** (``OMP_WAIT_POLICY=PASSIVE``, unless the user already set it). The
  matrix products own the cores (BLAS runs its own thread pool). Two thread pools on few cores
  fight: Numba's OpenMP workers spin while they wait, starving the BLAS workers, and an MLP step
  measured 15x slower with both pools spinning on two cores. Sleeping between parallel regions
  costs a few microseconds of wake-up instead.
* **glibc keeps freed memory** (:func:`keep_freed_memory`), so a training step reuses the
  previous step's pages instead of faulting in fresh ones.

:data:`applied` records what was done, for a user (or a test) to check.
"""

from __future__ import annotations

import ctypes
import os
import sys

# glibc's mallopt() parameter numbers (malloc.h).
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3

applied: dict[str, object] = {}
"""What :func:`apply_process_settings` changed: ``{"OMP_WAIT_POLICY": "PASSIVE",
"keep_freed_memory": True}``, or empty before the first call or when switched off."""


def tuning_enabled() -> bool:
    """False when the user switched the process-wide settings off with ``MINIDL_CPU_TUNING=0``."""
    return os.environ.get("MINIDL_CPU_TUNING", "1") != "0"


def apply_process_settings() -> dict:
    """Make both settings (once per process, unless switched off); returns :data:`applied`."""
    if applied or not tuning_enabled():
        return applied
    if "OMP_WAIT_POLICY" not in os.environ:
        os.environ["OMP_WAIT_POLICY"] = "PASSIVE"  # read when OpenMP starts: before any kernel
        applied["OMP_WAIT_POLICY"] = "PASSIVE"
    applied["keep_freed_memory"] = keep_freed_memory()
    return applied


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
