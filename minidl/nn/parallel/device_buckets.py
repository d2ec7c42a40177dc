"""Gradient buckets of parameters on a GPU: packed, summed and unpacked where they lie.

A host bucket (:class:`~.buckets._Bucket`) of CUDA parameters would copy every gradient to the
host and every average back, two crossings per parameter and a wait for the device each time.
A :class:`DeviceBucket` keeps the values on the device instead:

1. **pack**: one kernel per 32 gradients copies them (times the rank's weight, unless 1) into the
   bucket's flat device buffer (kept from step to step); parameters without a gradient leave
   zeros.
2. **sum**: the device collective sums the buffer over the ranks
   (:func:`~minidl.distributed.device_collectives.device_collective`: NCCL on the GPU, or MPI
   through one host round trip per bucket).
3. **unpack**: one kernel per 32 gradients divides the sums by the ranks' total weight into a
   new gradient array per parameter (from the caching allocator: after the first step, no
   driver call).

What the host bucket carries after its values -- a presence flag per parameter and the rank's
weight -- is known on the host without looking at the device, so it travels as a small host
array summed by MPI beside the values: no read of the device decides which gradients exist.

:func:`broadcast_on_device` gives every rank rank 0's tensors (the parameters at wrap time,
BatchNorm's statistics at each training forward) the same way: packed into one flat array per
dtype, broadcast, and copied back out.

Same numbers: the pack multiplies and the unpack divides in the bucket's dtype exactly as the
host bucket does, and the layout (which parameters, in which order, at which offsets) depends
only on the model, so every rank sums the same buffers in the same order.
"""

from __future__ import annotations

import numpy as np

from ...autograd.tensor import Tensor
from ...distributed.collectives import start_all_reduce
from ...distributed.device_collectives import device_collective
from ...distributed.process_group import get_world_size, wait_for_all, wait_for_requests


class DeviceBucket:
    """Parameters of one dtype on one GPU whose gradients are summed as one flat device buffer."""

    def __init__(self, params: list, dtype: np.dtype):
        self.params = params
        self.dtype = np.dtype(dtype)
        self.device_index = params[0].backend.index
        self.sizes = [p.numel() for p in params]
        self.offsets = np.concatenate([[0], np.cumsum(self.sizes)]).astype(np.int64)
        # Presence flags, then the rank's weight: summed by MPI on the host.
        self.tail = np.zeros(len(params) + 1, self.dtype)
        # Made at wrap time, when every rank builds its buckets together; a group of one never
        # sums and so never needs one.
        self.collective = device_collective(self.device_index) if get_world_size() > 1 else None
        self.values = None
        self.pending = None

    @property
    def layout(self) -> str:
        """What this bucket moves, for the ranks' meeting to compare."""
        return f"{int(self.offsets[-1])} {self.dtype.str} on device"

    @property
    def host_array(self) -> np.ndarray:
        """The part summed by MPI on the host (flags and weight)."""
        return self.tail

    def pack(self, weight: float) -> None:
        """Gather the gradients, each times ``weight`` (the rank's share of a full batch),
        into the bucket's flat device buffer; note on the host which ones exist."""
        from ...backend.cuda import gradient_buckets
        from ...backend.cuda.device import empty
        from ...backend.cuda.movement import fill_
        grads, offsets = [], []
        for i, param in enumerate(self.params):
            self.tail[i] = param.grad is not None
            if param.grad is not None and weight != 0:
                # (an empty batch's gradient is a NaN mean, and weighs nothing)
                grad = param.grad
                if grad.device != param.device:  # a gradient the user put elsewhere by hand
                    grad = grad.to(param.device)
                grads.append(grad.data)
                offsets.append(int(self.offsets[i]))
        self.tail[-1] = weight
        with self._on_device():
            if self.values is None:
                self.values = empty((int(self.offsets[-1]),), self.dtype)
            if len(grads) < len(self.params):
                fill_(self.values, 0)  # what no gradient covers counts as zero
            gradient_buckets.pack(self.values, grads, offsets, weight)

    def start(self) -> list:
        """Start summing the flags and the buffer over the ranks; the MPI requests to wait for."""
        request = start_all_reduce(self.tail)
        return ([request] if request is not None else []) + self.start_values()

    def start_values(self) -> list:
        """Start summing the buffer alone (the flags were summed already); the MPI requests to
        wait for."""
        self.pending = self.collective.start(self.values)
        return self.pending.requests

    def unpack(self) -> None:
        """Divide the sums by the sum of the ranks' weights and give each parameter its part."""
        from ...backend.cuda import gradient_buckets
        present = [i for i in range(len(self.params)) if self.tail[i] != 0]
        with self._on_device():
            sums = self.pending.result()
            grads = gradient_buckets.unpack(sums, [self.params[i].shape for i in present],
                                            [self.offsets[i] for i in present], self.tail[-1])
        for param in self.params:
            param.grad = None
        for i, grad in zip(present, grads):
            self.params[i].grad = Tensor._wrap(grad, self.params[i].device)
        self.pending = None

    def _on_device(self):
        from numba import cuda
        return cuda.gpus[self.device_index]


def broadcast_on_device(tensors: list, src: int = 0) -> list:
    """Overwrite ``tensors`` (on GPUs, in the same order on every rank) with rank ``src``'s:
    one flat array per GPU and dtype, packed, broadcast by the device collective and unpacked.
    A collective. Returns the tensors it left alone (dtypes of fewer than 4 bytes, or bool,
    which the kernels do not take: the caller sends them through the host)."""
    from ...backend.cuda import gradient_buckets
    from ...backend.cuda.device import empty
    from numba import cuda
    groups: dict = {}
    left = []
    for tensor in tensors:
        if tensor.dtype.kind in "iuf" and tensor.dtype.itemsize >= 4:
            groups.setdefault((tensor.backend.index, tensor.dtype.str), []).append(tensor)
        else:
            left.append(tensor)
    for (index, _), group in groups.items():
        sizes = [t.numel() for t in group]
        offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        dtype = group[0].dtype
        with cuda.gpus[index]:
            flat = empty((int(offsets[-1]),), dtype)
            gradient_buckets.pack(flat, [t.data for t in group], offsets[:-1], 1)
        wait_for_all("broadcast", f"{int(offsets[-1])} {dtype.str} on device {src}")
        pending = device_collective(index).start_broadcast(flat, src)
        wait_for_requests(pending.requests, "broadcast")
        with cuda.gpus[index]:
            values = gradient_buckets.unpack(pending.result(), [t.shape for t in group],
                                             offsets[:-1])
        for tensor, value in zip(group, values):
            tensor.data = value
    return left
