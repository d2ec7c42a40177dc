"""The two process-wide settings the Numba CPU backend makes, in one place, with one switch.

Both change how the whole process behaves, not just minidl, so they are listed here rather than
buried in a kernel module, applied once when the CPU backend is first used (the first op on a
CPU tensor) or its kernels load, always before Numba's threads start, never at ``import
minidl``, and skipped entirely with ``MINIDL_CPU_TUNING=0``:

* **OpenMP's threads spin briefly, then sleep** (``GOMP_SPINCOUNT`` for GNU OpenMP,
  ``KMP_BLOCKTIME`` for Intel's and LLVM's, unless the user set either or ``OMP_WAIT_POLICY``).
  A thread that sleeps between parallel regions takes long to wake on a virtual machine: a
  region of a few microseconds' work measured ~80 µs on a 2-core VM with threads waiting
  passively, against ~3 µs with threads that spun for the next region. A training step hands
  its threads a region every few microseconds (kernels, and the matrix products' parts, see
  :mod:`.product_parts`), so they spin for :data:`SPIN_COUNT` checks (about 0.4 ms measured
  here) after each one and sleep after that: an idle process, or one waiting on its data,
  leaves the cores alone, where OpenMP's own default spins ten times as long. The products'
  BLAS calls run one thread each on the same threads (OpenBLAS's own pool is held at one
  thread, :mod:`..threads`), so no second pool spins beside them. (Spinning for good was once
  measured 15x slower on an MLP step: OpenBLAS's threads and Numba's spun on two cores against
  each other.)
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

SPIN_COUNT = 30000
"""Checks an idle OpenMP thread makes for new work before it sleeps (``GOMP_SPINCOUNT``; OpenMP's
own default is 300000). Measured on a 2-core VM: 30000 checks kept an idle thread on its core
~0.4 ms, 100000 ~1.2 ms; a region handed over within that took ~3 µs at any of 3000-300000.
Longer spins keep the threads awake across longer serial stretches but take the core from the
other threads that want it (the products' Python workers, a data loader): at two threads,
medians of 4 alternating runs, 30000 / 100000 / 300000 checks gave LeNet 180 / 188 / 190
steps/s, attention 47.7 / 48.8 / 50.3, and CIFAR, whose convolutions use those workers, 25.9 /
24.7 / 20.8."""

applied: dict[str, object] = {}
"""What :func:`apply_process_settings` changed: ``{"GOMP_SPINCOUNT": "30000", "KMP_BLOCKTIME":
"1", "keep_freed_memory": True}``, or empty before the first call or when switched off."""


def tuning_enabled() -> bool:
    """False when the user switched the process-wide settings off with ``MINIDL_CPU_TUNING=0``."""
    return os.environ.get("MINIDL_CPU_TUNING", "1") != "0"


def apply_process_settings() -> dict:
    """Make both settings (once per process, unless switched off); returns :data:`applied`."""
    if applied or not tuning_enabled():
        return applied
    user_set = {"OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KMP_BLOCKTIME"} & set(os.environ)
    if not user_set:  # read when OpenMP starts: before any kernel
        os.environ["GOMP_SPINCOUNT"] = applied["GOMP_SPINCOUNT"] = str(SPIN_COUNT)
        os.environ["KMP_BLOCKTIME"] = applied["KMP_BLOCKTIME"] = "1"  # milliseconds
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
