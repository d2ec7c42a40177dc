"""Gradient buckets in GPU memory: many gradients packed into one flat buffer, and the reduced
sums divided back out into one array per parameter, without the values leaving the device.

Data-parallel training sums each bucket over the ranks with one collective
(:mod:`minidl.nn.parallel.device_buckets`); these are its two kernels. The NumPy reference is
the host bucket of :mod:`minidl.nn.parallel.buckets`, and the results equal it bit for bit:

* **pack**: ``bucket[offset_t + i] = grad_t[i] * weight`` (the plain copy when the weight is 1,
  as the host skips the product there). A lone product cannot be fused into an add, so it rounds
  as NumPy's does.
* **unpack**: ``out_t[i] = bucket[offset_t + i] / total_weight`` in the bucket's dtype (IEEE
  division is correctly rounded on both sides), into a new array per parameter: the bucket is
  reused by the next step, the gradients are the user's to keep. Without a divisor it copies
  (how rank 0's buffers, broadcast in one flat array, are handed back).

Each is one launch per :data:`TENSORS_PER_LAUNCH` gradients, found through a table of arrays as
the multi-tensor optimizer kernels find theirs.
"""

from __future__ import annotations

import numpy as np
from numba import cuda

from .device import DeviceArray, empty, launch

TENSORS_PER_LAUNCH = 32
"""Most gradients one launch handles. Their arrays travel in the launch's parameter block, which
CUDA limits to 4 KiB; numba passes a 1-D array as 7 words (56 bytes), plus two int64 entries of
the tables per gradient."""


@cuda.jit(device=True)
def _find(e, starts):
    # ``starts[t]``: where array t begins in the concatenation of this launch's arrays; a
    # thread finds its array by a scan of the few starts.
    t = 0
    while t + 1 < len(starts) and starts[t + 1] <= e:
        t += 1
    return t


@cuda.jit
def _pack(total, starts, offsets, grads, weight, scale, bucket):
    for e in range(cuda.grid(1), total, cuda.gridsize(1)):
        t = _find(e, starts)
        i = e - starts[t]
        value = grads[t][i]
        bucket[offsets[t] + i] = value * weight if scale else value


@cuda.jit
def _unpack(total, starts, offsets, outs, divisor, bucket):
    for e in range(cuda.grid(1), total, cuda.gridsize(1)):
        t = _find(e, starts)
        i = e - starts[t]
        outs[t][i] = bucket[offsets[t] + i] / divisor


@cuda.jit
def _unpack_copy(total, starts, offsets, outs, bucket):
    # (a kernel of its own: ``/`` of integers is a float in numba, and broadcast buffers may be
    # integers)
    for e in range(cuda.grid(1), total, cuda.gridsize(1)):
        t = _find(e, starts)
        i = e - starts[t]
        outs[t][i] = bucket[offsets[t] + i]


def _launches(arrays: list, offsets: list):
    """(total, starts, offsets, buffers) of each launch over the non-empty ``arrays``."""
    entries = [(array, int(offset)) for array, offset in zip(arrays, offsets) if array.size]
    for first in range(0, len(entries), TENSORS_PER_LAUNCH):
        chunk = entries[first:first + TENSORS_PER_LAUNCH]
        sizes = [array.size for array, _ in chunk]
        starts = tuple(int(start) for start in np.cumsum([0] + sizes[:-1]))
        yield (sum(sizes), starts, tuple(offset for _, offset in chunk),
               tuple(array.buffer[:array.size] for array, _ in chunk))


def _check_dtypes(bucket: DeviceArray, arrays: list, what: str) -> None:
    for array in arrays:
        if array.dtype != bucket.dtype:
            raise TypeError(f"{what}: a {array.dtype} gradient does not fit a {bucket.dtype} "
                            f"bucket")


def pack(bucket: DeviceArray, grads: list, offsets: list, weight) -> None:
    """Write each gradient (a :class:`DeviceArray` of the bucket's dtype) into the flat
    ``bucket`` at its offset, times ``weight`` unless it is 1; the rest of the bucket is left
    as it is."""
    _check_dtypes(bucket, grads, "pack")
    weight = bucket.dtype.type(weight)
    scale = bool(weight != 1)
    for total, starts, table_offsets, buffers in _launches(grads, offsets):
        blocks, threads = launch(total)
        _pack[blocks, threads](total, starts, table_offsets, buffers, weight, scale,
                               bucket.buffer)


def unpack(bucket: DeviceArray, shapes: list, offsets: list, divisor=None) -> list:
    """New arrays of ``shapes``, each read from the flat ``bucket`` at its offset and divided
    by ``divisor`` in the bucket's dtype (None: copied as they are)."""
    outs = [empty(shape, bucket.dtype) for shape in shapes]
    for total, starts, table_offsets, buffers in _launches(outs, offsets):
        blocks, threads = launch(total)
        if divisor is None:
            _unpack_copy[blocks, threads](total, starts, table_offsets, buffers, bucket.buffer)
        else:
            _unpack[blocks, threads](total, starts, table_offsets, buffers,
                                     bucket.dtype.type(divisor), bucket.buffer)
    return outs
