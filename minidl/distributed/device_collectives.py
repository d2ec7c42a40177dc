"""Summing and broadcasting flat buffers in GPU memory across the ranks: through NCCL, or
through MPI by way of the host.

Data-parallel training with the model on a GPU sums its gradient buckets here, and gives every
rank rank 0's buffers (:mod:`minidl.nn.parallel.device_buckets`). Two implementations of one
seam, a :class:`DeviceCollective`:

* :class:`NcclCollective`: NVIDIA's NCCL, reached through ``nccl4py`` (``pip install
  'minidl[nccl]'``), sums the buffer where it lies, GPU to GPU (NVLink, PCIe or the network),
  on a stream of its own fenced by events after the kernels that packed it and before the ones
  that read it: no host round trip, no wait for the host, and backward's kernels run meanwhile.
  The communicator is made once per device: rank 0 asks NCCL for a unique id, the MPI group
  carries its 128 bytes to the others, and every rank joins with it. NCCL sums in an order fixed
  by the ranks and the buffer's size, so the same buckets give the same bits every run.
* :class:`StagedMpiCollective`: without NCCL (or on numba's simulator) the buffer goes to the
  host in one copy, MPI sums it, and it comes back in one copy: two crossings per bucket rather
  than two per parameter.

Which one a job uses is decided by :func:`device_collective`: NCCL when ``nccl4py`` can be
imported, finds the NCCL library and the GPU is a real one, else staged through MPI;
``init_process_group("nccl")`` insists on NCCL and raises saying what is missing. CPU tensors
never come here: MPI sums them in place (:mod:`.collectives`).
"""

from __future__ import annotations

import contextlib

import numpy as np

from .agreement import check_same_on_all_ranks
from .collectives import broadcast, start_all_reduce, start_broadcast
from .process_group import (
    DistributedError, communicator, get_backend, get_rank, get_world_size,
)

NCCL_EXTRA_HINT = "install it with `pip install 'minidl[nccl]'` (the nccl4py package)"


class Pending:
    """A started collective: the MPI requests to wait for (none for NCCL, whose work is queued
    on the stream), then :meth:`result`, the device array holding what it computed."""

    def __init__(self, requests: list, result):
        self.requests = requests
        self._result = result

    def result(self):
        """The values (a :class:`~minidl.backend.cuda.device.DeviceArray`), once the requests
        are complete."""
        return self._result() if callable(self._result) else self._result


class DeviceCollective:
    """The seam: sum or broadcast a flat device array over the ranks. Every rank starts the same
    buffers (same sizes and dtypes) in the same order, after the ranks have met
    (:func:`~minidl.distributed.process_group.wait_for_all`)."""

    name = "abstract"

    def start(self, values) -> Pending:
        """Start summing ``values`` (a flat ``DeviceArray``) over the ranks."""
        raise NotImplementedError

    def start_broadcast(self, values, src: int = 0) -> Pending:
        """Start overwriting ``values`` (a flat ``DeviceArray``) with rank ``src``'s."""
        raise NotImplementedError


class StagedMpiCollective(DeviceCollective):
    """Through the host: one device-to-host copy, MPI's non-blocking all-reduce, and one
    host-to-device copy when the sum is complete."""

    name = "mpi"

    def __init__(self, device_index: int):
        self.device_index = device_index

    def start(self, values) -> Pending:
        return self._through_host(values, start_all_reduce)

    def start_broadcast(self, values, src: int = 0) -> Pending:
        return self._through_host(values, lambda host: start_broadcast(host, src))

    def _through_host(self, values, start_mpi) -> Pending:
        from ..backend.cuda.device import download, upload
        with _on_device(self.device_index):
            host = np.ascontiguousarray(download(values))
        request = start_mpi(host)

        def back_on_device():
            with _on_device(self.device_index):
                return upload(host)
        return Pending([request] if request is not None else [], back_on_device)


class NcclCollective(DeviceCollective):
    """NCCL's in-place all-reduce and broadcast over a communicator of every rank's GPU
    ``device_index`` (one per rank), on a stream of their own.

    Streams: the backend's kernels all run on the default stream, in order. A collective queued
    there would wait for every kernel before it and hold up every kernel after it, so backward
    could not compute the earlier layers' gradients while the later ones travel. Each
    collective therefore runs on this communicator's own stream, fenced by two events: the
    stream waits for an event recorded on the default stream after the pack, and the default
    stream waits (on the GPU: the host never blocks) for an event recorded after the collective,
    just before the unpack reads the result. Between the two, backward's kernels and NCCL run
    side by side. The buffers the collective touches stay referenced until after that wait, so
    the caching allocator's default-stream rule still holds.
    """

    name = "nccl"

    def __init__(self, device_index: int):
        nccl = import_nccl()
        self.device_index = device_index
        self.nccl = nccl
        # Rank 0 makes the id; the MPI group hands it to every rank (a collective).
        if get_rank() == 0:
            unique_id = np.frombuffer(bytes(nccl.get_unique_id()), np.uint8).copy()
        else:
            unique_id = np.zeros(len(bytes(nccl.get_unique_id(empty=True))), np.uint8)
        broadcast(unique_id, src=0)
        from numba import cuda
        with _on_device(device_index):
            self.comm = nccl.Communicator.init(get_world_size(), get_rank(),
                                               nccl.UniqueId.from_bytes(unique_id.tobytes()))
            self.stream = cuda.stream()

    def start(self, values) -> Pending:
        return self._on_own_stream(values, lambda flat: self.comm.allreduce(
            flat, flat, self.nccl.NcclRedOp.SUM, stream=self.stream))

    def start_broadcast(self, values, src: int = 0) -> Pending:
        # In place: the same buffer as source and destination.
        return self._on_own_stream(values, lambda flat: self.comm.broadcast(
            flat, flat, src, stream=self.stream))

    def _on_own_stream(self, values, collective) -> Pending:
        from numba import cuda
        flat = values.buffer[:values.size]
        with _on_device(self.device_index):
            packed = cuda.event(timing=False)
            packed.record(cuda.default_stream())
            packed.wait(self.stream)
            collective(flat)
            done = cuda.event(timing=False)
            done.record(self.stream)

        def after_the_collective():
            with _on_device(self.device_index):
                done.wait(cuda.default_stream())  # the GPU waits, the host goes on
            return values
        return Pending([], after_the_collective)


def import_nccl():
    """``nccl.core`` from nccl4py, or ``DistributedError`` saying how to install it."""
    try:
        import nccl.core as nccl
    except ImportError as exc:
        raise DistributedError(f"NCCL was asked for but nccl4py is not installed; "
                               f"{NCCL_EXTRA_HINT}") from exc
    return nccl


def nccl_problem() -> str | None:
    """Why NCCL cannot carry CUDA tensors here, or None when it can: nccl4py imports, finds the
    NCCL library, and the GPU is a real one (numba's simulator has no device memory NCCL could
    reach)."""
    from ..backend.cuda.simulator import SIMULATED
    if SIMULATED:
        return "CUDA runs on numba's simulator (NUMBA_ENABLE_CUDASIM=1), which NCCL cannot reach"
    try:
        import nccl.core as nccl
    except ImportError:
        return f"nccl4py is not installed; {NCCL_EXTRA_HINT}"
    try:
        nccl.get_version()  # loads libnccl, which nccl4py's cu12/cu13 extras bring
    except Exception as exc:  # nccl4py raises its loader's own error types
        return f"nccl4py cannot load the NCCL library ({exc}); {NCCL_EXTRA_HINT}"
    return None


def nccl_available() -> bool:
    """Whether NCCL can carry CUDA tensors here (:func:`nccl_problem` finds nothing)."""
    return nccl_problem() is None


_collectives: dict = {}  # device index -> (the MPI communicator it was made in, collective)


def device_collective(device_index: int) -> DeviceCollective:
    """The collective that sums this rank's buffers on GPU ``device_index``: made once per device
    and process group, a collective call the first time (every rank asks for its own device
    together)."""
    group = communicator()
    made = _collectives.get(device_index)
    if made is not None and made[0] is group:
        return made[1]
    problem = nccl_problem()
    # Every rank must take the same road, or their collectives would never meet.
    check_same_on_all_ranks("the device collective", {"nccl": problem is None})
    if problem is not None and get_backend() == "nccl":
        raise DistributedError(f"init_process_group('nccl'): {problem}")
    available = problem is None
    collective = (NcclCollective if available else StagedMpiCollective)(device_index)
    _collectives[device_index] = (group, collective)
    return collective


@contextlib.contextmanager
def _on_device(index: int):
    """Make GPU ``index`` current while the block runs (numba's context for that device)."""
    from numba import cuda
    with cuda.gpus[index]:
        yield
