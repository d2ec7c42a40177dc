"""How many threads the CPU backend computes with: ``md.set_num_threads`` / ``md.get_num_threads``.

Two pools share the budget. minidl's product threads (:mod:`.reference.product_threads`) cut each
large matrix product into parts (rows, images, heads) computed at once, each part one BLAS call on
one thread; Numba's pool runs the kernels marked ``parallel`` (optimizer updates, large
im2col/col2im, elementwise kernels) and, once they are loaded, the parts of the products whose BLAS
calls the CPU backend can make itself (:mod:`.numba_cpu.product_parts`). minidl's threads sleep
when idle; Numba's spin for a moment first (:mod:`.numba_cpu.process_settings`). OpenBLAS, the BLAS
in NumPy's wheels, is given one thread whatever the budget: its own workers spin on the cores for a
while after each threaded product, just when the Numba kernels that follow want those cores, so the
two pools took turns instead of working at once; and its threaded products sum in an order that
depends on its thread count, while a product cut here gives the same bits at any count. Measured at
2 threads on a busy 2-core machine (median step): LSTM language model 215 -> 169 ms, attention
block 32.0 -> 27.8 ms; holding OpenBLAS at one thread only while a product was cut (about a
microsecond per switch) gave 226 and 28.5 ms. PyTorch's ``torch.set_num_threads`` limits its one
intra-op pool; here the same call limits both. Nothing is imported or changed until the function is
called: until then NumPy's BLAS keeps its own threads, and the product threads take its count as
their budget.

BLAS's count is one setting for the whole process, but Numba keeps a count per calling thread
(a thread that never set one uses the whole pool). So a count set on the main thread is also
given to any other thread the first time that thread runs a kernel (:func:`follow_in_this_thread`,
which the CPU backend calls before each kernel): a model trained in a worker thread stays
within the budget instead of running Numba's full pool beside the product threads.
"""

from __future__ import annotations

import ctypes
import functools
import math
import os
import threading

# The symbol OpenBLAS exports to set its thread count, under each build's name mangling
# (NumPy's wheels bundle "scipy_openblas" with 64-bit integers and a suffix).
_OPENBLAS_SETTERS = ("scipy_openblas_set_num_threads64_", "openblas_set_num_threads64_",
                     "openblas_set_num_threads", "scipy_openblas_set_num_threads")
_OPENBLAS_GETTERS = ("scipy_openblas_get_num_threads64_", "openblas_get_num_threads64_",
                     "openblas_get_num_threads", "scipy_openblas_get_num_threads")

# False: set_num_threads gives OpenBLAS the count too, as before the product threads cut the
# plain products. With ``reference.array_ops.SPLIT_PLAIN_PRODUCTS = False`` beside it, that is
# the previous engine, for a benchmark comparing the two on one machine (flip both, then call
# set_num_threads).
OPENBLAS_AT_ONE_THREAD = True

_requested: int | None = None

blas_count_held: int | None = None
"""OpenBLAS's own count while a product holds it at one thread (it is then still the budget)."""

blas_keeps_its_pool = True
"""Whether OpenBLAS still has the thread count NumPy gave it: until :func:`set_num_threads` is
first called (read inline before every matrix product)."""

# Whether the CPU backend's loader has made the process-wide settings Numba's threads need
# (numba_cpu/process_settings.py): OpenMP reads its wait settings once, when its threads start,
# and telling Numba a thread count starts them. So before that, set_num_threads only records
# the count, even when the user's own code has imported Numba already; the loader gives it to
# Numba after the settings (else they would spin for OpenMP's own default time, see there).
numba_threads_may_start = False


class NumbaThreadCount(threading.local):
    """Whether this thread's Numba follows the latest :func:`set_num_threads`: ``wanted`` (one
    for the process, a class attribute) counts the calls to it, ``applied`` (per thread) is the
    ``wanted`` this thread last gave Numba. They differ in a thread that has not yet followed;
    a caller about to run kernels compares them inline (two attribute reads, no call), as
    :func:`follow_in_this_thread` does, and calls :func:`apply_to_numba` only then."""
    wanted = 0
    applied = 0
    whole_from = 0
    """The elements from which a kernel on this thread is worth all its threads (the count
    :func:`apply_to_numba` gave it, or Numba's whole pool; :func:`whole_count_from`); 0 where
    every parallel region is."""


numba_thread_count = NumbaThreadCount()


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


@functools.cache
def openblas_thread_count_functions():
    """OpenBLAS's (get, set) functions for its thread count, as ctypes functions (set takes a
    ``ctypes.c_int``), or None where NumPy uses another BLAS; looked up once."""
    for library in _loaded_openblas():
        getter = next((getattr(library, name) for name in _OPENBLAS_GETTERS
                       if hasattr(library, name)), None)
        setter = next((getattr(library, name) for name in _OPENBLAS_SETTERS
                       if hasattr(library, name)), None)
        if getter is not None and setter is not None:
            return getter, setter
    return None


def openblas_library_symbol(name: str) -> int | None:
    """The address of the function ``name`` in the OpenBLAS NumPy loaded, or None."""
    for library in _loaded_openblas():
        function = getattr(library, name, None)
        if function is not None:
            return ctypes.cast(function, ctypes.c_void_p).value
    return None


def _call_first(library, names, *args):
    for name in names:
        function = getattr(library, name, None)
        if function is not None:
            return function(*args)
    return None


def set_num_threads(count: int) -> None:
    """Compute with at most ``count`` threads: the matrix products' parts and Numba's parallel
    kernels. OpenBLAS itself is set to one thread (also for NumPy products outside minidl)."""
    global _requested, blas_keeps_its_pool
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise ValueError(f"set_num_threads: count must be a positive int, got {count!r}")
    _requested = count
    blas_keeps_its_pool = False
    NumbaThreadCount.wanted += 1
    # Numba (~0.2 s to import) is told now if minidl's kernels are loaded, else when they load.
    if numba_threads_may_start:
        apply_to_numba()
    for library in _loaded_openblas():
        _call_first(library, _OPENBLAS_SETTERS,  # why one: the module's docstring
                    ctypes.c_int(1 if OPENBLAS_AT_ONE_THREAD else count))


def apply_to_numba() -> None:
    """Give Numba the requested thread count (if any) for the calling thread; called when
    Numba is loaded, and by :func:`follow_in_this_thread`."""
    if _requested is not None:
        import numba
        count = min(_requested, numba.config.NUMBA_NUM_THREADS)
        numba.set_num_threads(count)
        numba_thread_count.whole_from = whole_count_from(count)
        numba_thread_count.applied = NumbaThreadCount.wanted


def follow_in_this_thread() -> None:
    """Before a Numba kernel: give this thread's Numba the current count, if it has not yet
    (one attribute read when it has)."""
    if numba_thread_count.applied != numba_thread_count.wanted:  # both 0 until a count is set
        apply_to_numba()


REGION_MIN_WORK = 1 << 18
"""Elements from which a parallel kernel is worth two threads: the kernels' own floors (conv,
pool, elementwise, reductions: ``PARALLEL_MIN_WORK``), below which they run serial code."""


def threads_worth(work: int) -> int:
    """How many threads a parallel region of ``work`` elements wakes: 2 at the kernels' floor
    for two, :data:`REGION_MIN_WORK`, then as the square root of the work, 4 at 4× the floor, 8
    at 16×, 16 at 64×.

    A region on t threads takes about W·c/t for its work plus t·w to start and join its threads
    (each thread is woken, and the region ends with its slowest), least at t = sqrt(W·c/w).
    Two threads first pay where W·c/2 > w, at the floor F = 2w/c, so t = sqrt(2W/F); this rule
    takes the next power up, sqrt(4W/F), to keep 2 at the floor. Waking the whole budget for
    every region is what made minidl's steps slower from 8 to 16 threads on a 16-core machine
    (the 16-core table in the README), where a LeNet-sized kernel's region woke sixteen
    threads for two threads' work. The cut of the work is the kernel's, fixed by the shape, so
    the count changes no result."""
    return max(2, math.isqrt(4 * work // REGION_MIN_WORK))


def whole_count_from(count: int) -> int:
    """The elements from which :func:`threads_worth` is ``count`` or more (4·work/floor >=
    count²); 0 for one or two threads, which every parallel region is worth."""
    return 0 if count <= 2 else (count * count * REGION_MIN_WORK + 3) // 4


def on_numba_threads(count: int, kernel, *args, **kwargs):
    """``kernel(*args, **kwargs)`` with this thread's Numba regions on at most ``count``
    threads, the thread's own count given back after (even when the kernel raises): the others
    stay out of its regions (asleep, or spinning for the next one). ``count`` 1 holds a
    ``parallel`` kernel to the calling thread: the same loop, the same bits, no other core
    woken. Nothing changes where ``count`` is the thread's whole count. Only called once the
    kernels (and so Numba) are loaded."""
    import numba  # in sys.modules already: the kernel is one of Numba's
    # Read, not remembered: the user's own code may have called numba.set_num_threads.
    whole = numba.get_num_threads()
    if count >= whole:
        return kernel(*args, **kwargs)
    numba.set_num_threads(max(1, count))  # per calling thread: other threads keep their count
    try:
        return kernel(*args, **kwargs)
    finally:
        numba.set_num_threads(whole)


def sized_for(kernel, work: int):
    """``kernel``, or, where ``work`` elements are worth fewer threads than this thread's whole
    count, ``kernel`` bound to run on as many as they are (:func:`on_numba_threads`): for a call
    site that knows its kernel's work (one attribute read where they are not)."""
    if REGION_MIN_WORK <= work < numba_thread_count.whole_from:
        return functools.partial(on_numba_threads, threads_worth(work), kernel)
    return kernel


def product_thread_budget() -> int:
    """How many threads a matrix product may be cut over: the count set by
    :func:`set_num_threads`, or else OpenBLAS's own; 1 where NumPy uses another BLAS, whose
    threads the product threads cannot hold back. Reads no file (called for every product)."""
    blas = openblas_thread_count_functions()
    if blas is None:
        return 1
    if _requested is not None:
        return _requested
    return blas_count_held or int(blas[0]())


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
