"""``md.cuda``: is there a CUDA device, how many, and how much GPU memory minidl holds (as
``torch.cuda``).

Asking never compiles anything and never fails: without the ``numba-cuda`` package or a GPU the
answers are False and 0. Tensors go to a GPU with ``x.to("cuda:0")`` / ``x.cuda()``, modules with
``model.to("cuda")``; numba's CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``) counts as one device.

GPU memory comes from a caching allocator (:mod:`minidl.backend.cuda.allocator`): memory freed
by tensors is kept for the next ones instead of being returned to the driver, so
``memory_reserved()`` stays above ``memory_allocated()``; ``empty_cache()`` gives the unused
part back (to other processes on the GPU). The memory functions never start CUDA: before the
first tensor is put on a GPU they answer 0.
"""

from __future__ import annotations

import sys

__all__ = ["is_available", "device_count", "empty_cache", "memory_allocated", "memory_reserved",
           "max_memory_allocated", "reset_peak_memory_stats", "memory_stats", "synchronize",
           "set_device", "current_device", "manual_seed", "manual_seed_all"]

_ALLOCATOR = "minidl.backend.cuda.allocator"


def is_available() -> bool:
    """Whether tensors can be put on ``"cuda"``: numba-cuda is installed and finds a GPU (or
    runs its simulator)."""
    from .backend.cuda_availability import is_available as available
    return available()


def device_count() -> int:
    """The number of CUDA devices (``"cuda:0"`` ... ``"cuda:N-1"``); 0 without CUDA."""
    from .backend.cuda_availability import device_count as count
    return count()


def _device_index(device) -> int:
    """``None`` (the current GPU: :func:`current_device`), an index, ``"cuda"`` or
    ``"cuda:N"``."""
    if device is None:
        return current_device()
    if isinstance(device, int) and not isinstance(device, bool):
        return device
    from .backend import parse_device
    kind, index = parse_device(device)
    if kind != "cuda":
        raise ValueError(f"device must be a CUDA device ('cuda', 'cuda:N' or its index), "
                         f"got {device!r}")
    return index


def _pool(device):
    """The caching allocator of ``device``, or None while nothing was ever allocated there."""
    if _ALLOCATOR not in sys.modules:
        return None  # the CUDA backend was never used: nothing allocated, nothing to start
    return sys.modules[_ALLOCATOR].known_allocators().get(_device_index(device))


def empty_cache() -> None:
    """Give the GPU memory that minidl caches but no tensor uses back to the driver (memory
    held by live tensors stays)."""
    if _ALLOCATOR in sys.modules:
        for pool in sys.modules[_ALLOCATOR].known_allocators().values():
            pool.empty_cache()


def memory_stats(device=None) -> dict:
    """The allocator's counters for ``device``, with ``torch.cuda.memory_stats`` key names:
    ``allocated_bytes.all.current``/``.peak``, ``reserved_bytes.all.current``,
    ``allocation.all.allocated`` (requests), ``num_device_alloc``/``num_device_free`` (driver
    calls) and ``num_alloc_retries`` (requests that emptied the cache to succeed)."""
    pool = _pool(device)
    if pool is None:
        return {}
    return pool.stats()


def memory_allocated(device=None) -> int:
    """Bytes of GPU memory in use by tensors on ``device`` (counted in the allocator's rounded
    block sizes, as PyTorch counts them)."""
    return memory_stats(device).get("allocated_bytes.all.current", 0)


def max_memory_allocated(device=None) -> int:
    """The highest :func:`memory_allocated` since the start or
    :func:`reset_peak_memory_stats`."""
    return memory_stats(device).get("allocated_bytes.all.peak", 0)


def memory_reserved(device=None) -> int:
    """Bytes of GPU memory the allocator holds on ``device``: in use plus cached."""
    return memory_stats(device).get("reserved_bytes.all.current", 0)


def reset_peak_memory_stats(device=None) -> None:
    """Make :func:`max_memory_allocated` count from the current amount."""
    pool = _pool(device)
    if pool is not None:
        pool.reset_peak()


def synchronize(device=None) -> None:
    """Wait until every kernel queued on ``device`` (the current GPU by default) has finished,
    and raise any error that the device's own input checks found meanwhile (an out-of-range
    class target in ``cross_entropy``, as PyTorch's device-side asserts are raised at a
    synchronisation). Does nothing before CUDA is first used."""
    if _ALLOCATOR not in sys.modules:
        return  # nothing was ever queued
    from numba import cuda
    from .backend.cuda.deferred_checks import raise_pending
    index = _device_index(device)
    with cuda.gpus[index]:
        cuda.synchronize()
        raise_pending()


def set_device(device) -> None:
    """Make ``device`` (an index or "cuda:N") the current CUDA device: the one ``"cuda"``,
    ``x.cuda()`` and ``model.cuda()`` mean from now on. ``RuntimeError`` when there is no such
    device."""
    from .backend import set_current_index
    from .backend.cuda_availability import check_device_index
    index = _device_index(device)
    check_device_index(index)
    set_current_index("cuda", index)


def current_device() -> int:
    """The index of the current CUDA device (0 unless :func:`set_device` changed it)."""
    from .backend import current_index
    return current_index("cuda")


def manual_seed(seed: int) -> None:
    """Seed the random numbers drawn on CUDA devices. minidl draws the same stream on every
    device from one generator (a GPU's dropout mask equals the CPU's), so this is
    ``md.manual_seed(seed)``: it seeds the CPU's draws too."""
    from .random import manual_seed as seed_everything
    seed_everything(seed)


def manual_seed_all(seed: int) -> None:
    """Seed the random numbers of every CUDA device: :func:`manual_seed` (one generator)."""
    manual_seed(seed)
