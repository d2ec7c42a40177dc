"""The CUDA backend's caching allocator: blocks are reused instead of asked of the driver again.

Freed buffers return to a pool keyed by rounded size and serve the next request of that size;
a view keeps its block alive; ``md.cuda.empty_cache`` gives cached blocks back; a refused
allocation empties the cache and tries again; after the first step, training asks the driver
for nothing, and computes exactly what it computes without the cache.
"""

from __future__ import annotations

import gc
import sys
from pathlib import Path

import numpy as np
import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from cuda_helpers import backend, requires_cuda  # noqa: E402

import minidl as md  # noqa: E402

pytestmark = requires_cuda


def allocator_module():
    from minidl.backend.cuda import allocator
    return allocator


@pytest.mark.parametrize("nbytes, expected", [(1, 512), (512, 512), (513, 1024),
                                              (1 << 20, 1 << 20), ((1 << 20) + 1, 5 << 18),
                                              (3 << 20, 3 << 20), ((3 << 20) + 1, 7 << 19)])
def test_size_classes_round_small_requests_to_512_bytes_and_large_ones_to_quarter_steps(
        nbytes, expected):
    assert allocator_module().size_class(nbytes) == expected


def test_size_classes_never_waste_more_than_a_quarter_above_a_mebibyte():
    size_class = allocator_module().size_class
    for nbytes in np.unique(np.geomspace(1 << 20, 1 << 32, 2000).astype(np.int64)):
        block = size_class(int(nbytes))
        assert nbytes <= block <= nbytes * 1.25, nbytes


def test_a_freed_block_serves_the_next_request_of_its_size():
    pool = allocator_module().CachingAllocator()
    first = pool.allocate(100, np.float32)  # 400 bytes: a 512-byte block
    assert first.shape == (100,) and first.dtype == np.float32
    assert pool.stats()["num_device_alloc"] == 1 and pool.allocated_bytes == 512
    second = pool.allocate(100, np.float32)  # the first is still alive: a new block
    assert pool.stats()["num_device_alloc"] == 2
    del first, second
    assert pool.stats()["allocated_bytes.all.current"] == 0
    assert pool.stats()["reserved_bytes.all.current"] == 1024
    again = pool.allocate(64, np.float64)  # 512 bytes, another dtype: a cached block
    stats = pool.stats()
    assert stats["num_device_alloc"] == 2 and stats["allocation.all.allocated"] == 3
    assert stats["allocated_bytes.all.current"] == 512
    assert stats["allocated_bytes.all.peak"] == 1024
    assert again.shape == (64,) and again.dtype == np.float64
    pool.allocate(1000, np.float32)  # 4000 bytes: no cached block of that class
    assert pool.stats()["num_device_alloc"] == 3


def test_a_view_keeps_its_block_from_being_reused():
    b = backend()
    values = np.arange(12, dtype=np.float32)
    x = b.from_numpy(values)
    view = b.reshape(x, (3, 4))
    before = md.cuda.memory_allocated()
    del x  # the reshape shares the buffer: the block must stay with it
    gc.collect()
    assert md.cuda.memory_allocated() == before
    others = [b.full((12,), -1.0, np.float32) for _ in range(3)]  # same size class
    np.testing.assert_array_equal(b.to_numpy(view), values.reshape(3, 4))
    assert all((b.to_numpy(o) == -1).all() for o in others)


def test_memory_counts_and_empty_cache_as_torch_cuda():
    b = backend()
    gc.collect()
    start = md.cuda.memory_allocated()
    x = b.zeros((1000,), np.float32)  # 4000 bytes: a 4096-byte block
    assert md.cuda.memory_allocated() == start + 4096
    assert md.cuda.memory_allocated("cuda:0") == md.cuda.memory_allocated(0)
    assert md.cuda.max_memory_allocated() >= start + 4096
    del x
    assert md.cuda.memory_allocated() == start
    assert md.cuda.memory_reserved() >= start + 4096  # kept for the next request
    frees = md.cuda.memory_stats()["num_device_free"]
    md.cuda.empty_cache()
    assert md.cuda.memory_reserved() == md.cuda.memory_allocated() == start
    assert md.cuda.memory_stats()["num_device_free"] > frees
    md.cuda.reset_peak_memory_stats()
    assert md.cuda.max_memory_allocated() == start
    with pytest.raises(ValueError, match="CUDA device"):
        md.cuda.memory_allocated("cpu")


class OutOfMemory(Exception):
    code = 2  # CUDA_ERROR_OUT_OF_MEMORY, as numba's CudaAPIError carries it


def test_a_refused_allocation_empties_the_cache_and_tries_again():
    class SmallGPU(allocator_module().CachingAllocator):
        capacity = 2048

        def _raw_allocate(self, size):
            if self.reserved_bytes + size > self.capacity:
                raise OutOfMemory("CUDA_ERROR_OUT_OF_MEMORY")
            return super()._raw_allocate(size)

    pool = SmallGPU()
    cached = [pool.allocate(128, np.float32) for _ in range(2)]  # 2 x 512 bytes
    del cached  # cached, not freed: 1024 of the 2048 bytes are held
    big = pool.allocate(384, np.float32)  # 1536 bytes: only fits once the cache is gone
    assert big.shape == (384,)
    stats = pool.stats()
    assert stats["num_alloc_retries"] == 1 and stats["num_device_free"] == 2
    assert stats["reserved_bytes.all.current"] == stats["allocated_bytes.all.current"] == 1536
    with pytest.raises(OutOfMemory):  # still too big with nothing cached: the error stands
        pool.allocate(1024, np.float32)


def test_without_caching_every_freed_block_goes_back_to_the_driver(monkeypatch):
    module = allocator_module()
    monkeypatch.setenv("MINIDL_NO_CUDA_MEMORY_CACHING", "1")  # read when a GPU's pool is made
    monkeypatch.setattr(module, "_allocators", {})
    pool = module.allocator(0)
    assert pool.caching is False and module.allocator(0) is pool
    for _ in range(3):
        pool.allocate(10, np.int64)
    stats = pool.stats()
    assert stats["num_device_alloc"] == 3 and stats["num_device_free"] == 3
    assert stats["reserved_bytes.all.current"] == 0


# -- training --------------------------------------------------------------------------------------

def train(steps):
    """Losses, parameters and driver allocations per step of a small network on the GPU."""
    from minidl import nn, optim
    md.manual_seed(2)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3)).to("cuda")
    opt = optim.Adam(model.parameters(), lr=0.01)
    rng = np.random.default_rng(0)
    x = md.tensor(rng.standard_normal((5, 4)).astype(np.float32)).to("cuda")
    y = md.tensor(rng.standard_normal((5, 3)).astype(np.float32)).to("cuda")
    losses, driver_calls = [], []
    for _ in range(steps):
        before = md.cuda.memory_stats()["num_device_alloc"]
        opt.zero_grad()
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        opt.step()
        losses.append(loss.item())
        driver_calls.append(md.cuda.memory_stats()["num_device_alloc"] - before)
    return losses, model.state_dict(), driver_calls


def test_training_steps_reuse_cached_blocks_and_compute_exactly_the_same():
    pool = allocator_module().allocator()
    losses, state, driver_calls = train(4)
    # The first step fills the pool, and so does the second: it runs while the first step's
    # graph is still held by ``loss`` and makes Adam's moments. From then on every step finds
    # all its buffers in the pool.
    assert driver_calls[0] > 0 and driver_calls[2:] == [0, 0], driver_calls
    pool.caching = False
    try:
        uncached_losses, uncached_state, uncached_calls = train(4)
    finally:
        pool.caching = True
    assert min(uncached_calls) > 0  # without the cache each step asks the driver again
    assert losses == uncached_losses
    for name, value in state.items():
        np.testing.assert_array_equal(value, uncached_state[name], err_msg=name)
