"""Gradient buckets, and averaging them over the ranks while backward still runs.

Gradients travel in *buckets*: flat buffers of up to ``bucket_cap_mb`` megabytes filled with
parameters in reverse registration order, roughly the order in which backward produces them.
One all-reduce per bucket instead of one per parameter pays MPI's latency a few times instead
of hundreds. The layout depends only on the model, never on timing, so the same job reduces
the same bytes in the same order every run: reproducible.

**Overlap.** Backward visits a leaf only after every op that used it, so a parameter's
gradient is final the moment it is stored (the engine's gradient-ready hook). When the last
parameter of a bucket is ready, the bucket is packed and its sum started with a non-blocking
``Iallreduce`` -- but only in bucket order (bucket k after buckets 0..k-1), since every rank
must start the same collectives in the same order whatever the timing. Backward then goes on
computing the earlier layers' gradients while MPI moves the later ones; each new ready
gradient also lets MPI progress (a single-threaded MPI moves data only inside MPI calls). At
the end of backward the buckets not yet started (parameters without a gradient) start, and
all of them are waited for: the gradients are averaged when ``backward()`` returns, as
without overlap, and the sums are the same numbers in the same order, so the results are
bitwise those of the blocking all-reduce.

**On a GPU.** Parameters on a CUDA device go into device buckets (:mod:`.device_buckets`):
packed, summed (NCCL, or MPI through one host round trip per bucket) and unpacked on the device,
never one host copy per gradient. They keep this module's order and layout rules, so the ranks
still start the same sums in the same order.
"""

from __future__ import annotations

import numpy as np

from ...autograd.tensor import Tensor
from ...distributed.collectives import all_reduce_coalesced, start_all_reduce
from ...distributed.process_group import wait_for_all, wait_for_requests

WHAT = "gradient averaging"


class _Bucket:
    """Parameters whose gradients share one flat buffer (one dtype), plus a presence flag each."""

    def __init__(self, params: list, dtype: np.dtype):
        self.params = params
        self.dtype = dtype
        self.sizes = [p.numel() for p in params]
        self.offsets = np.concatenate([[0], np.cumsum(self.sizes)]).astype(np.int64)
        total = int(self.offsets[-1])
        # Flags after the values, then the rank's weight: one all-reduce also says how many
        # ranks had each gradient, and what the weights sum to.
        self.buffer = np.zeros(total + len(params) + 1, dtype)

    @property
    def layout(self) -> str:
        """What this bucket moves, for the ranks' meeting to compare."""
        return f"{self.buffer.size} {self.buffer.dtype.str}"

    @property
    def host_array(self) -> np.ndarray:
        """The array MPI sums on the host: here all of it."""
        return self.buffer

    def start(self) -> list:
        """Start summing the buffer over the ranks; the MPI requests to wait for."""
        request = start_all_reduce(self.buffer)
        return [request] if request is not None else []

    def pack(self, weight: float) -> None:
        """Copy the gradients into the buffer, each multiplied by ``weight`` (the rank's
        share of a full batch)."""
        values, flags = self.buffer[:self.offsets[-1]], self.buffer[self.offsets[-1]:-1]
        for i, param in enumerate(self.params):
            part = values[self.offsets[i]:self.offsets[i + 1]]
            if param.grad is None:
                part[...] = 0
                flags[i] = 0
                continue
            flags[i] = 1
            if weight == 0:
                part[...] = 0  # an empty batch: its gradient is a NaN mean, and weighs nothing
                continue
            grad = param.grad.numpy() if isinstance(param.grad, Tensor) else param.grad
            part[...] = np.ravel(grad)
            if weight != 1:  # full batches skip it: the plain average stays bit for bit
                part *= weight
        self.buffer[-1] = weight

    def unpack(self) -> None:
        """Divide the reduced sums by the sum of the ranks' weights and hand the gradients
        back to the parameters."""
        values, flags = self.buffer[:self.offsets[-1]], self.buffer[self.offsets[-1]:-1]
        values /= self.buffer[-1]
        for i, param in enumerate(self.params):
            if flags[i] == 0:
                param.grad = None
                continue
            grad = values[self.offsets[i]:self.offsets[i + 1]].reshape(param.shape).copy()
            param.grad = Tensor._wrap(param.backend.from_numpy(grad) if param.device != "cpu"
                                      else grad, param.device)


def _buckets(params: list, cap_bytes: float) -> list:
    """Group ``params`` (already in reduction order) into buckets of at most ``cap_bytes``
    of one dtype and one device each; a parameter larger than the cap gets a bucket of its own.
    Parameters on a GPU go into device buckets (:mod:`.device_buckets`), summed where they lie."""
    buckets, current, current_bytes = [], [], 0
    for param in params:
        nbytes = param.numel() * param.dtype.itemsize
        if current and (current_bytes + nbytes > cap_bytes or param.dtype != current[0].dtype
                        or param.device != current[0].device):
            buckets.append(_bucket(current))
            current, current_bytes = [], 0
        current.append(param)
        current_bytes += nbytes
    if current:
        buckets.append(_bucket(current))
    return buckets


def _bucket(params: list):
    if params[0].device == "cpu":
        return _Bucket(params, params[0].dtype)
    from .device_buckets import DeviceBucket  # only a model on a GPU needs the CUDA backend
    return DeviceBucket(params, params[0].dtype)


class GradientAverager:
    """Averages a model's gradients over the ranks, bucket by bucket, one backward at a time."""

    def __init__(self, buckets: list[_Bucket]):
        self.buckets = buckets
        self.bucket_of = {id(p): index for index, bucket in enumerate(buckets)
                          for p in bucket.params}
        self.layout = ";".join(bucket.layout for bucket in buckets)
        self.begin(1.0)

    def begin(self, weight: float) -> None:
        """Start a backward whose gradients weigh ``weight`` (the rank's share of a full batch)."""
        self.weight = weight
        self.ready = [0] * len(self.buckets)  # gradients ready in each bucket
        self.started = 0                      # buckets whose all-reduce has started, in order
        self.requests: list = []

    def gradient_ready(self, param) -> None:
        """``param``'s gradient is final: start every bucket that is complete, in order."""
        index = self.bucket_of.get(id(param))
        if index is None:
            return
        self.ready[index] += 1
        while self.started < len(self.buckets) and \
                self.ready[self.started] == len(self.buckets[self.started].params):
            self._start_next()
        if self.requests:
            from mpi4py import MPI
            MPI.Request.Testall(self.requests)  # lets MPI move the started buckets on

    def _start_next(self) -> None:
        if self.started == 0:
            wait_for_all(WHAT, self.layout)  # once per step: the ranks meet, timed
        bucket = self.buckets[self.started]
        bucket.pack(self.weight)
        self.requests.extend(bucket.start())
        self.started += 1

    def finish(self) -> None:
        """Start what is left, wait for every bucket, and hand the averages back."""
        while self.started < len(self.buckets):
            self._start_next()
        wait_for_requests(self.requests, WHAT)
        for bucket in self.buckets:
            bucket.unpack()
        self.begin(1.0)

    def average_now(self, weight: float) -> None:
        """Average every bucket at once, blocking (after backward, without overlap)."""
        for bucket in self.buckets:
            bucket.pack(weight)
        all_reduce_coalesced([bucket.host_array for bucket in self.buckets])
        # Device buckets sent only their flags and weight above; their values follow (the ranks
        # met in the coalesced all-reduce just now).
        requests = [request for bucket in self.buckets if not isinstance(bucket, _Bucket)
                    for request in bucket.start_values()]
        wait_for_requests(requests, WHAT)
        for bucket in self.buckets:
            bucket.unpack()
