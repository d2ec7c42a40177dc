"""When Numba is loaded: at the first kernel a process needs, and not for a small first forward.

Measured in a fresh process with every kernel already in Numba's on-disk cache (see the README):
importing Numba takes ~0.2 s, loading the *first* cached kernel ~0.14 s more (it starts LLVM and
the JIT target), and every further kernel 2-4 ms per signature. A process that builds a small
model and runs one forward pass (a command-line prediction, a test, an app's first answer) spent
most of its time there. So the backend loads in two steps:

* **Kernel modules are imported on first use.** Each Numba primitive of
  :class:`~minidl.backend.numba_cpu.NumbaCpuBackend` is a :class:`Kernel` attribute that imports
  its module (and so Numba) the first time it is looked up, then replaces itself with the kernel
  function. Within a module Numba loads each cached kernel on its first call only.
* **A few primitives have NumPy stand-ins.** ``im2col`` (a copy), ``max_pool2d_forward``
  (maxima and their positions), ``random_uniform`` (integer hashing and exact conversions) and
  the evaluation form of ``batch_norm_forward`` (the reference computes it in the kernel's
  rounding order) give the same values from the NumPy reference as from the kernel, which
  ``tests/backend/test_kernel_loading.py`` checks. Until the kernels are loaded, a call on less
  than :data:`SMALL_WORK` elements runs the reference, for the first :data:`STAND_IN_CALLS`
  such calls; anything bigger, any other kernel, or the call after those, loads Numba. Which of
  the two ran is therefore invisible in the results, and a process that keeps computing moves to
  the kernels after its first few small calls, as the reference is several times slower per call.

``MINIDL_NUMPY_STAND_INS=0`` switches the stand-ins off; :func:`load_kernels` loads everything
now (for a server that would rather pay at start-up than on its first request).

Loading from the cache is quick; compiling is not (the demo's first epoch waits ~40 s on two
cores while Numba compiles). So when a kernel module is first used and none of its kernels is
in Numba's on-disk cache yet -- a first run -- the process says so once on stderr, and never
when the cache is there.
"""

from __future__ import annotations

import functools
import importlib
import math
import os
import sys
import threading

import numpy as np

from ..reference import ReferenceBackend, product_threads
from .. import threads
from ..threads import (REGION_MIN_WORK, apply_to_numba, numba_thread_count, on_numba_threads,
                       threads_worth)
from .process_settings import apply_process_settings

SMALL_WORK = 1 << 15
"""Elements below which a stand-in runs NumPy (the reference stays under ~1 ms there)."""

STAND_IN_CALLS = 32
"""How many calls the stand-ins serve before the kernels load (a small model's first passes)."""

_KERNEL_MODULES = ("conv", "pool", "eval_kernels", "nn_kernels", "batch_norm", "row_threads",
                   "elementwise_threads", "optim_kernels", "random_kernels", "rnn_kernels",
                   "reduction_threads", "product_parts")
_lock = threading.Lock()
_state = {"loaded": False, "stand_in_calls": 0,
          "stand_ins": os.environ.get("MINIDL_NUMPY_STAND_INS", "1") != "0",
          "cache_checked": set(), "said_compiling": False}


def kernels_loaded() -> bool:
    """Whether the Numba kernel modules (and so Numba) have been imported in this process."""
    return _state["loaded"]


def load_kernels() -> None:
    """Import Numba and every kernel module now (each kernel still loads on its first call)."""
    if _state["loaded"]:
        return
    with _lock:
        for name in _KERNEL_MODULES:
            importlib.import_module(f"{__package__}.{name}")
        apply_process_settings()  # before Numba's threads can start: they read them once
        threads.numba_threads_may_start = True
        from . import product_parts
        if product_parts.gemm_functions():  # products' parts now go to Numba's threads
            product_threads.native_parts = product_parts
        # A thread given no count runs Numba's whole pool: its regions too wake only the
        # threads their work is worth (threads.threads_worth).
        import numba
        threads.NumbaThreadCount.whole_from = threads.whole_count_from(
            numba.config.NUMBA_NUM_THREADS)
        apply_to_numba()  # a thread count set before Numba was loaded
        _state["loaded"] = True


# Kernel modules whose primitives compute values from their inputs and return new arrays (the
# optimizer updates write in place, the random ones take a dtype rather than arrays).
_HALF_THROUGH_FLOAT32 = {"conv", "pool", "nn_kernels", "batch_norm", "rnn_kernels"}
_FLOAT16, _FLOAT32, _FLOAT64 = np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64)


def _kernel(module: str, name: str):
    """Kernel ``name`` of ``module``, taking float16 as :func:`half_through_float32` where the
    module computes values. Remembered once made: primitives that choose a kernel per call
    (serial or threaded) ask on every call, and importing and wrapping again cost microseconds."""
    function = _kernels_made.get((module, name))
    if function is None or module not in _state["cache_checked"]:
        function = _loaded_kernel(module, name)
        if module in _HALF_THROUGH_FLOAT32:
            function = half_through_float32(function)
        _kernels_made[(module, name)] = function
    return function


_kernels_made: dict = {}  # (module, name) -> what _kernel returned


def _loaded_kernel(module: str, name: str):
    """The function ``name`` of kernel module ``module``, loading the kernels (and saying once
    that they compile, on a first run) if this is the first."""
    load_kernels()
    kernel_module = importlib.import_module(f"{__package__}.{module}")
    if module not in _state["cache_checked"]:
        _state["cache_checked"].add(module)
        if not _state["said_compiling"] and not_cached(kernel_module):
            _state["said_compiling"] = True
            print("minidl: compiling kernels (first run only; later runs load them from "
                  "Numba's cache)...", file=sys.stderr, flush=True)
    return getattr(kernel_module, name)


def not_cached(kernel_module) -> bool:
    """Whether none of ``kernel_module``'s Numba kernels has an entry in Numba's on-disk cache
    (the index file its cache locator names): their first calls will compile, which takes
    seconds per kernel. A module with some kernels cached counts as cached (a kernel it holds
    that a program never calls is never compiled)."""
    from numba.core.dispatcher import Dispatcher
    index_paths = []
    for value in vars(kernel_module).values():
        cache = getattr(value, "_cache", None) if isinstance(value, Dispatcher) else None
        index_path = getattr(getattr(cache, "_cache_file", None), "_index_path", None)
        if index_path is not None:  # None: a kernel without cache=True, or another Numba
            index_paths.append(index_path)
    return bool(index_paths) and not any(os.path.exists(p) for p in index_paths)


def half_through_float32(function):
    """``function`` (a kernel) taking float16 arrays too: Numba has no float16 arithmetic, so
    float16 inputs are widened to float32 and the float32 results rounded back to float16 once,
    which is what PyTorch's CPU kernels do for half precision (they accumulate in float32).
    Whether to widen is read from the first argument, the array the primitive computes on."""
    @functools.wraps(function)
    def kernel(*args):
        if getattr(args[0], "dtype", None) != _FLOAT16:
            return function(*args)
        return _through_float32(function, args)
    return kernel


def _through_float32(function, args):
    """``function(*args)`` with float16 arrays widened to float32, its result rounded back."""
    widened = [a.astype(_FLOAT32) if getattr(a, "dtype", None) == _FLOAT16 else a for a in args]
    return _round_to_half(function(*widened))


def _round_to_half(result):
    if isinstance(result, tuple):
        return tuple(_round_to_half(r) for r in result)
    if isinstance(result, np.ndarray) and result.dtype == _FLOAT32:
        return result.astype(_FLOAT16)
    return result


class Kernel:
    """A backend attribute bound to ``module.name`` (a kernel module of this package) on first
    use. Before the kernels are loaded, a primitive with a stand-in (below) answers with it."""

    def __init__(self, module: str, stand_in=None):
        self.module, self.stand_in = module, stand_in

    def __set_name__(self, owner, name):
        self.name = name

    def __get__(self, instance, owner):
        if self.stand_in is not None and not _state["loaded"] and _state["stand_ins"]:
            return self.stand_in
        function = bound_kernel(_loaded_kernel(self.module, self.name),
                                self.module in _HALF_THROUGH_FLOAT32)
        setattr(owner, self.name, staticmethod(function))  # later lookups skip this descriptor
        return function


def bound_kernel(function, half_through_float32: bool):
    """``function`` (a kernel) as the backend calls it: giving its calling thread
    ``md.set_num_threads``'s count first (Numba's count is per thread, see :mod:`..threads`)
    and, for the modules that compute values, taking float16 through float32 (as
    :func:`half_through_float32`). One wrapper per binding, decided once here: a kernel is
    called per op, and each layer of wrapping is one more Python call on every one (so the
    thread check is :func:`~minidl.backend.threads.follow_in_this_thread`'s, inline)."""
    if not half_through_float32:
        @functools.wraps(function)
        def kernel(*args, **kwargs):
            if numba_thread_count.applied != numba_thread_count.wanted:
                apply_to_numba()
            if REGION_MIN_WORK <= getattr(args[0] if args else None, "size", 0) \
                    < numba_thread_count.whole_from:
                return on_numba_threads(threads_worth(args[0].size), function, *args, **kwargs)
            return function(*args, **kwargs)
        return kernel

    @functools.wraps(function)
    def kernel_taking_half(*args):
        if numba_thread_count.applied != numba_thread_count.wanted:
            apply_to_numba()
        dtype = getattr(args[0], "dtype", None)
        # float32 and float64 answered by identity (NumPy's dtypes of native floats are single
        # objects), before the slower comparison that any other dtype takes
        if dtype is _FLOAT32 or dtype is _FLOAT64 or dtype != _FLOAT16:
            if REGION_MIN_WORK <= getattr(args[0], "size", 0) < numba_thread_count.whole_from:
                return on_numba_threads(threads_worth(args[0].size), function, *args)
            return function(*args)
        return _through_float32(kernel_taking_half, args)  # widened, then as above
    return kernel_taking_half


def _numpy_serves(work: int) -> bool:
    """Whether this call runs the NumPy reference (counting it if so)."""
    if _state["loaded"] or work >= SMALL_WORK or _state["stand_in_calls"] >= STAND_IN_CALLS:
        return False
    _state["stand_in_calls"] += 1
    return True


# -- the stand-ins: the contract's signatures, the reference for small work, else the kernel ------

def im2col(x, kernel_size, stride, padding, dilation):
    """:meth:`Backend.im2col`: the reference for a small first call, else the Numba kernel."""
    work = x.size * kernel_size[0] * kernel_size[1]
    if _numpy_serves(work):
        return ReferenceBackend.im2col(x, kernel_size, stride, padding, dilation)
    return threads.sized_for(_kernel("conv", "im2col"), work)(x, kernel_size, stride, padding,
                                                              dilation)


def max_pool2d_forward(x, kernel_size, stride, padding, dilation, ceil_mode):
    """:meth:`Backend.max_pool2d_forward`: the reference for a small first call, else Numba."""
    if _numpy_serves(x.size):
        return ReferenceBackend.max_pool2d_forward(x, kernel_size, stride, padding, dilation,
                                                   ceil_mode)
    return threads.sized_for(_kernel("pool", "max_pool2d_forward"), x.size)(
        x, kernel_size, stride, padding, dilation, ceil_mode)


def batch_norm_forward(x, weight, bias, mean, var, eps):
    """:meth:`Backend.batch_norm_forward`: with given statistics (evaluation) the reference for
    a small first call; batch statistics always run the kernel (its sums run in another order)."""
    if mean is not None and _numpy_serves(x.size):
        return ReferenceBackend.batch_norm_forward(x, weight, bias, mean, var, eps)
    return threads.sized_for(_kernel("batch_norm", "batch_norm_forward"), x.size)(
        x, weight, bias, mean, var, eps)


def random_uniform(shape, dtype, key, counter):
    """:meth:`Backend.random_uniform`: the reference for a small first draw, else Numba."""
    work = math.prod(shape)
    if _numpy_serves(work):
        return ReferenceBackend.random_uniform(shape, dtype, key, counter)
    return threads.sized_for(_kernel("random_kernels", "random_uniform"), work)(
        shape, dtype, key, counter)
