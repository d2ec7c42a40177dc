"""The caching allocator: GPU memory is asked of the driver once and then reused.

Why: every op makes new arrays, so a training step allocates and frees hundreds of buffers.
``cudaMalloc`` is slow (tens of microseconds, more than many small kernels take) and
``cudaFree`` synchronises the device: the host waits until every queued kernel has finished,
which throws away the asynchrony that keeps the GPU busy while Python prepares the next launch.
So, as PyTorch's CUDA caching allocator does, a buffer that is no longer used is not returned
to the driver: it goes into a pool, and the next request of the same rounded size takes it
back. After the first step of a training loop every step finds all it needs in the pool, and
the driver is not called at all.

How:

* **Size classes.** A request is rounded up (:func:`size_class`): to a multiple of 512 bytes up
  to 1 MiB, above that to one of four steps between consecutive powers of two (at most 25 %
  more than asked). The pool keeps a list of free blocks per class, so a lookup is one dict
  access, and arrays whose sizes differ by a few elements share blocks.
* **Ownership.** A block is handed out as a numba device array of exactly the requested
  elements, a view of the block. Everything that reads or writes the memory holds that view
  (a :class:`~.device.DeviceArray`, the reshapes sharing it, a kernel's argument), so the block
  is free exactly when the view is garbage collected; a ``weakref.finalize`` on the view then
  puts the block on a return queue. The finalizer only appends to a ``deque`` (atomic in
  CPython) and never takes a lock: garbage collection may run it in any thread, including in
  the middle of an allocation holding the pool's lock. Allocations drain the queue.
* **Streams.** Every kernel and copy of the backend runs on numba's default stream, which
  executes its work in order. A block freed by the host while a kernel that uses it is still
  queued is therefore safe to hand out at once: whatever next writes into it is queued behind
  that kernel. This is the allocator's one assumption; work put on other streams by hand must
  be synchronised (``numba.cuda.synchronize()``) before its arrays are dropped. (PyTorch makes
  the same bargain and offers ``record_stream`` for the exceptions.)
* **Out of memory.** Cached blocks of other sizes may be what stands between a request and the
  memory it needs: when the driver refuses, the cache is emptied and the request tried once
  more before the error reaches the user.

:func:`empty_cache` gives every cached block back to the driver; :func:`memory_allocated` and
:func:`memory_reserved` count bytes in use and held (in use plus cached), as ``torch.cuda``.
Setting ``MINIDL_NO_CUDA_MEMORY_CACHING=1`` turns the cache off (each freed block goes straight
back to the driver), which helps tools that look for out-of-bounds accesses per allocation.

On numba's CUDA simulator the same code runs: "device" buffers are NumPy arrays there, and the
counts of driver calls are what the tests check.
"""

from __future__ import annotations

import collections
import os
import threading
import weakref

import numpy as np
from numba import cuda

from .simulator import SIMULATED

SMALL_LIMIT = 1 << 20
"""Requests up to this many bytes are rounded to :data:`SMALL_STEP`; larger ones coarser."""
SMALL_STEP = 512
"""Granularity of small blocks (also keeps every block aligned for any dtype)."""
DIVISIONS = 4
"""Size classes between two consecutive powers of two, above :data:`SMALL_LIMIT`."""

_OUT_OF_MEMORY = 2  # CUDA_ERROR_OUT_OF_MEMORY, the driver's code for a refused cudaMalloc


def size_class(nbytes: int) -> int:
    """The block size serving a request of ``nbytes``: small requests round up to a multiple
    of 512 bytes, larger ones to one of :data:`DIVISIONS` steps per power of two."""
    nbytes = max(int(nbytes), 1)
    if nbytes <= SMALL_LIMIT:
        return -(-nbytes // SMALL_STEP) * SMALL_STEP
    # Between 2^(k-1) and 2^k the steps are 2^k / (2 * DIVISIONS) apart: waste <= 1/DIVISIONS.
    step = (1 << (nbytes - 1).bit_length()) // (2 * DIVISIONS)
    return -(-nbytes // step) * step


def _is_out_of_memory(error: Exception) -> bool:
    return getattr(error, "code", None) == _OUT_OF_MEMORY or "OUT_OF_MEMORY" in str(error)


class CachingAllocator:
    """The pool of one GPU: hands out device arrays, takes their blocks back when the arrays
    are collected, and asks the driver only when no cached block of the size is free."""

    def __init__(self, caching: bool = True):
        self.caching = caching
        self._free: dict[int, list] = collections.defaultdict(list)  # size class -> blocks
        self._returned: collections.deque = collections.deque()  # (size, block), by finalizers
        self._lock = threading.Lock()
        self.allocated_bytes = 0  # in blocks handed out and not yet returned
        self.reserved_bytes = 0  # allocated plus cached: what the driver gave us
        self.peak_allocated_bytes = 0
        self.device_allocations = 0  # cudaMalloc calls
        self.device_frees = 0  # blocks given back to the driver
        self.requests = 0
        self.retries = 0  # requests that emptied the cache after the driver refused

    def allocate(self, count: int, dtype) -> "cuda.devicearray.DeviceNDArray":
        """A device array of ``count`` elements of ``dtype`` (contents undefined)."""
        dtype = np.dtype(dtype)
        size = size_class(count * dtype.itemsize)
        with self._lock:
            self._take_returned()
            self.requests += 1
            cached = self._free.get(size)
            block = cached.pop() if cached else None
            if block is None:
                block = self._device_malloc(size)
            self.allocated_bytes += size
            self.peak_allocated_bytes = max(self.peak_allocated_bytes, self.allocated_bytes)
        array = block.view(dtype)[:count]
        # The block comes back when the last holder of this view lets go of it.
        weakref.finalize(array, self._returned.append, (size, block)).atexit = False
        return array

    def _device_malloc(self, size: int):
        """A new block from the driver; on "out of memory", once more after emptying the
        cache (blocks of other sizes may be what fills the GPU)."""
        try:
            block = self._raw_allocate(size)
        except Exception as error:
            if not _is_out_of_memory(error):
                raise
            self.retries += 1
            self._release_cached()
            _free_deferred_now()
            block = self._raw_allocate(size)
        self.device_allocations += 1
        self.reserved_bytes += size
        return block

    @staticmethod
    def _raw_allocate(size: int):
        return cuda.device_array(size, np.uint8)

    def _take_returned(self) -> None:
        """Move the blocks the finalizers returned into the pool (caller holds the lock)."""
        while self._returned:
            size, block = self._returned.popleft()
            self.allocated_bytes -= size
            if self.caching:
                self._free[size].append(block)
            else:
                self.reserved_bytes -= size
                self.device_frees += 1

    def _release_cached(self) -> None:
        """Drop every cached block (caller holds the lock): numba frees each once unreferenced."""
        for blocks in self._free.values():
            self.reserved_bytes -= sum(_block_bytes(block) for block in blocks)
            self.device_frees += len(blocks)
        self._free.clear()

    def empty_cache(self) -> None:
        """Give every cached block back to the driver; blocks in use stay."""
        with self._lock:
            self._take_returned()
            self._release_cached()
        _free_deferred_now()

    def stats(self) -> dict:
        """Counters, under the names ``torch.cuda.memory_stats()`` uses for the same things."""
        with self._lock:
            self._take_returned()
            return {"allocated_bytes.all.current": self.allocated_bytes,
                    "allocated_bytes.all.peak": self.peak_allocated_bytes,
                    "reserved_bytes.all.current": self.reserved_bytes,
                    "allocation.all.allocated": self.requests,
                    "num_device_alloc": self.device_allocations,
                    "num_device_free": self.device_frees,
                    "num_alloc_retries": self.retries}

    def reset_peak(self) -> None:
        """Start the peak of allocated bytes again from the current amount."""
        with self._lock:
            self._take_returned()
            self.peak_allocated_bytes = self.allocated_bytes


def _block_bytes(block) -> int:
    return int(block.size)  # blocks are uint8 arrays: elements are bytes


def _free_deferred_now() -> None:
    """numba defers ``cudaFree`` of unreferenced memory and batches it; make it happen now, so
    the memory is really back with the driver (nothing to do on the simulator)."""
    if SIMULATED:
        return
    context = cuda.current_context()
    # numba queues device memory on its memory manager's list (an external memory manager
    # plugin may keep none), other resources on the context's.
    for owner in (getattr(context, "memory_manager", None), context):
        pending = getattr(owner, "deallocations", None)
        if pending is not None:
            pending.clear()


_allocators: dict[int, CachingAllocator] = {}
_allocators_lock = threading.Lock()


def current_device() -> int:
    """Index of the GPU that new arrays go to (numba's current device)."""
    return 0 if SIMULATED else cuda.get_current_device().id


def allocator(device: int | None = None) -> CachingAllocator:
    """The pool of GPU ``device`` (the current one by default); made on first use."""
    index = current_device() if device is None else int(device)
    pool = _allocators.get(index)
    if pool is None:
        with _allocators_lock:
            pool = _allocators.setdefault(
                index, CachingAllocator(os.environ.get("MINIDL_NO_CUDA_MEMORY_CACHING") != "1"))
    return pool


def allocate(count: int, dtype):
    """A device array of ``count`` elements of ``dtype`` on the current GPU, from its pool."""
    return allocator().allocate(count, dtype)


def known_allocators() -> dict[int, CachingAllocator]:
    """The pools made so far, by device index."""
    return dict(_allocators)
