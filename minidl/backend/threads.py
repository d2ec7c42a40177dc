"""How many threads the CPU backend computes with: ``md.set_num_threads`` / ``md.get_num_threads``.

Three kinds of threads share the budget. Large matrix products are cut into parts computed at
once on minidl's own product threads (:mod:`.reference.product_threads`), each part one BLAS
call with OpenBLAS held at one thread meanwhile; Numba's pool runs the kernels marked
``parallel`` (optimizer updates, large im2col/col2im, elementwise kernels); OpenBLAS's own pool
(in NumPy's wheels) computes only the products too small to cut, which it threads itself when
they are large enough. Why not leave every product to OpenBLAS: its idle workers spin on the
cores after a threaded product, just when Numba's kernels want them, while minidl's product
threads and Numba's pool both sleep when idle. PyTorch's ``torch.set_num_threads`` limits its
one intra-op pool; here the same call limits all three. Nothing is imported or changed until
the function is called.

BLAS's count is one setting for the whole process, but Numba keeps a count per calling thread
(a thread that never set one uses the whole pool). So a count set on the main thread is also
given to any other thread the first time that thread runs a kernel (:func:`follow_in_this_thread`,
which the CPU backend calls before each kernel): a model trained in a worker thread stays
within the budget instead of running Numba's full pool beside BLAS's threads.
"""

from __future__ import annotations

import ctypes
import os
import sys
import threading

# The symbol OpenBLAS exports to set its thread count, under each build's name mangling
# (NumPy's wheels bundle "scipy_openblas" with 64-bit integers and a suffix).
_OPENBLAS_SETTERS = ("scipy_openblas_set_num_threads64_", "openblas_set_num_threads64_",
                     "openblas_set_num_threads", "scipy_openblas_set_num_threads")
_OPENBLAS_GETTERS = ("scipy_openblas_get_num_threads64_", "openblas_get_num_threads64_",
                     "openblas_get_num_threads", "scipy_openblas_get_num_threads")

_requested: int | None = None
_setting = 0  # bumped by each set_num_threads: a thread that applied an older one applies again
_this_thread = threading.local()  # .setting: the _setting this thread last gave Numba


def _loaded_openblas() -> list:
    """The OpenBLAS libraries loaded in this process (Linux: listed in /proc/self/maps)."""
    import numpy  # noqa: F401  (loads NumPy's BLAS)
    try:
        with open("/proc/self/maps") as maps:
            paths = {line.split()[-1] for line in maps if "openblas" in line.lower()}
    except OSError:
        return []
    libraries = []
    for path in sorted(paths):
        if os.path.isfile(path):
            try:
                libraries.append(ctypes.CDLL(path))  # the loaded copy: same handle
            except OSError:
                continue
    return libraries


def openblas_thread_count_functions():
    """OpenBLAS's (get, set) functions for its thread count, as ctypes functions (set takes a
    ``ctypes.c_int``), or None where NumPy uses another BLAS. Setting it costs about a
    microsecond while the count stays within the threads OpenBLAS has already started, so the
    product threads hold it at one for each split product and give it back after."""
    for library in _loaded_openblas():
        getter = next((getattr(library, name) for name in _OPENBLAS_GETTERS
                       if hasattr(library, name)), None)
        setter = next((getattr(library, name) for name in _OPENBLAS_SETTERS
                       if hasattr(library, name)), None)
        if getter is not None and setter is not None:
            return getter, setter
    return None


def _call_first(library, names, *args):
    for name in names:
        function = getattr(library, name, None)
        if function is not None:
            return function(*args)
    return None


def set_num_threads(count: int) -> None:
    """Compute with at most ``count`` threads: NumPy's BLAS pool and Numba's parallel kernels."""
    global _requested, _setting
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise ValueError(f"set_num_threads: count must be a positive int, got {count!r}")
    _requested = count
    _setting += 1
    # Numba (~0.2 s to import) is told now if it is loaded, else when the kernels load.
    if "numba" in sys.modules:
        apply_to_numba()
    for library in _loaded_openblas():
        _call_first(library, _OPENBLAS_SETTERS, ctypes.c_int(count))


def apply_to_numba() -> None:
    """Give Numba the requested thread count (if any) for the calling thread; called when
    Numba is loaded, and by :func:`follow_in_this_thread`."""
    if _requested is not None:
        import numba
        numba.set_num_threads(min(_requested, numba.config.NUMBA_NUM_THREADS))
        _this_thread.setting = _setting


def follow_in_this_thread() -> None:
    """Before a Numba kernel: give this thread's Numba the current count, if it has not yet
    (one attribute read when it has)."""
    if _requested is not None and getattr(_this_thread, "setting", None) != _setting:
        apply_to_numba()


def get_num_threads() -> int:
    """The thread count set by :func:`set_num_threads`, or else the BLAS pool's (the larger
    pool by default)."""
    if _requested is not None:
        return _requested
    for library in _loaded_openblas():
        found = _call_first(library, _OPENBLAS_GETTERS)
        if found:
            return int(found)
    try:
        return len(os.sched_getaffinity(0))  # the cores this process may use (taskset, cgroups)
    except AttributeError:
        return os.cpu_count() or 1
