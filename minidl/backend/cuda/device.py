"""Device arrays, launch shapes and the host<->device crossings of the CUDA backend.

A :class:`DeviceArray` is what the CUDA backend hands to the ops: the contract's metadata
(``shape``, ``dtype``, ``ndim``, ``size``) kept on the host, plus ``buffer``, a flat C-ordered
numba device array holding the values. Every array the backend makes is contiguous; a reshape
shares its buffer (and is then not its ``owner``), everything else gets a new buffer. Keeping
one layout means every kernel indexes a flat buffer, and strided views (transpose, slices,
broadcasts) are described to a copy kernel by an offset and a tuple of strides instead.

Kernels see shapes and strides as tuples of :data:`MAX_DIMS` ints, padded at the front with
size-1, stride-0 axes, so one compiled kernel serves arrays of any rank up to that.

Every copy between host and device goes through :func:`upload` and :func:`download`, which count
them in :data:`transfers`: the tests prove that training moves nothing but what the user asks
for. Reads of a single flag that a primitive needs to raise its documented errors are counted
apart, as ``checks``; checks done on the device and read at the next copy to the host
(:mod:`.deferred_checks`) as ``deferred_checks``: they ride on a wait that happens anyway.
"""

from __future__ import annotations

import math

import numpy as np
from numba import cuda

from .allocator import allocate
from .deferred_checks import raise_pending
from .simulator import SIMULATED
from .transfers import transfers

MAX_DIMS = 8
"""Highest rank a CUDA array may have: kernels take shapes as fixed-length tuples."""


# Threads per block. A real GPU wants hundreds of threads per block to hide memory latency; the
# simulator runs each thread as a Python thread, so there a handful keeps the tests quick. The
# kernels are the same either way: they loop over their work with a grid stride, so any launch
# shape gives the same result.
THREADS = 8 if SIMULATED else 256
MAX_BLOCKS = 4 if SIMULATED else 4096



class DeviceArray:
    """A C-ordered array in GPU memory: host-side metadata and a flat numba device buffer."""

    __slots__ = ("buffer", "shape", "dtype", "ndim", "size", "owner", "__weakref__")

    def __init__(self, buffer, shape, dtype, owner: bool = True):
        self.buffer = buffer
        self.shape = tuple(int(n) for n in shape)
        self.dtype = np.dtype(dtype)
        self.ndim = len(self.shape)
        self.size = math.prod(self.shape)
        self.owner = owner

    def __repr__(self) -> str:
        return f"DeviceArray(shape={self.shape}, dtype={self.dtype})"


def check_rank(shape) -> None:
    if len(shape) > MAX_DIMS:
        raise ValueError(f"the CUDA backend handles arrays of up to {MAX_DIMS} dimensions, "
                         f"got shape {tuple(shape)}")


def empty(shape, dtype) -> DeviceArray:
    """A new uninitialised array from the caching allocator (its buffer holds at least one
    element, so kernels always get a valid pointer)."""
    shape = tuple(int(n) for n in shape)
    check_rank(shape)
    dtype = np.dtype(dtype)
    return DeviceArray(allocate(max(math.prod(shape), 1), dtype), shape, dtype)


def upload(array) -> DeviceArray:
    """The one host-to-device copy."""
    host = np.asarray(array, order="C")  # (ascontiguousarray would make 0-d arrays 1-d)
    check_rank(host.shape)
    transfers["from_numpy"] += 1
    flat = host.reshape(-1) if host.size else np.zeros(1, host.dtype)
    buffer = allocate(flat.size, host.dtype)
    buffer.copy_to_device(flat)
    return DeviceArray(buffer, host.shape, host.dtype)


def download(array: DeviceArray) -> np.ndarray:
    """The one device-to-host copy; first raises what the device's pending checks found."""
    raise_pending()
    transfers["to_numpy"] += 1
    host = array.buffer.copy_to_host()
    return host[:array.size].reshape(array.shape)


def read_flag(buffer) -> int:
    """One int read back from the device, for a primitive that must raise on bad input."""
    raise_pending()
    transfers["checks"] += 1
    return int(buffer.copy_to_host()[0])


def launch(count: int) -> tuple[int, int]:
    """(blocks, threads) for ``count`` independent work items handled with a grid stride."""
    blocks = min(MAX_BLOCKS, max(1, -(-count // THREADS)))
    return blocks, THREADS


def contiguous_strides(shape) -> tuple:
    """Element strides of a C-ordered array of ``shape``."""
    strides, step = [], 1
    for n in reversed(shape):
        strides.append(step)
        step *= n
    return tuple(reversed(strides))


def padded(values, fill: int) -> tuple:
    """``values`` as a :data:`MAX_DIMS`-tuple, ``fill`` in front: the form kernels take."""
    values = tuple(int(v) for v in values)
    check_rank(values)
    return (fill,) * (MAX_DIMS - len(values)) + values


def broadcast_strides(shape, target) -> tuple:
    """Strides reading an array of ``shape`` as if broadcast to ``target``: 0 along every axis
    it is stretched over (NumPy's rule, so ``ValueError`` when the shapes do not broadcast)."""
    shape, target = tuple(shape), tuple(target)
    if len(shape) > len(target):
        raise ValueError(f"cannot broadcast shape {shape} to {target}")
    own = contiguous_strides(shape)
    lead = len(target) - len(shape)
    strides = [0] * lead
    for n, stride, want in zip(shape, own, target[lead:]):
        if n == want:
            strides.append(stride if n != 1 else 0)
        elif n == 1:
            strides.append(0)
        else:
            raise ValueError(f"shapes {shape} and {target} do not broadcast")
    return tuple(strides)


@cuda.jit(device=True)
def strided_offset(flat, shape, strides, offset):
    """Position in a buffer of element ``flat`` (C order over ``shape``) of a strided view."""
    for axis in range(len(shape) - 1, -1, -1):
        size = shape[axis]
        offset += (flat % size) * strides[axis]
        flat //= size
    return offset
