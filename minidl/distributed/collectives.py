"""Collectives on Tensors and NumPy arrays: all_reduce, broadcast, all_gather, barrier.

They follow PyTorch's ``torch.distributed``: every rank calls the same collective in the same
order with same-shaped data, and ``all_reduce``/``broadcast`` work *in place*. In a group of
one they return at once and change nothing. Under MPI each call first meets the other ranks
(:func:`~minidl.distributed.process_group.wait_for_all`, which times out instead of hanging)
and then runs the matching blocking MPI collective on the array's own memory.

Plain-data variants (``*_object``) move msgpack-able values (states, file names, checksums):
msgpack rather than pickle, so a message can never run code in the receiver.
"""

from __future__ import annotations

import msgpack
import numpy as np

from .process_group import DistributedError, communicator, get_world_size, wait_for_all


class ReduceOp:
    """How ``all_reduce`` combines the ranks' values (PyTorch's names)."""

    SUM = "sum"
    PRODUCT = "product"
    MIN = "min"
    MAX = "max"
    AVG = "avg"

    ALL = (SUM, PRODUCT, MIN, MAX, AVG)


def _mpi_op(op: str):
    from mpi4py import MPI
    return {ReduceOp.SUM: MPI.SUM, ReduceOp.AVG: MPI.SUM, ReduceOp.PRODUCT: MPI.PROD,
            ReduceOp.MIN: MPI.MIN, ReduceOp.MAX: MPI.MAX}[op]


class _HostBuffer:
    """A contiguous NumPy array holding a tensor's or array's values, and how to put them back.

    CPU tensors and contiguous arrays lend their own memory (no copy); anything else (a device
    tensor, a strided view, float16 or bool, which MPI has no standard type for) goes through a
    contiguous copy that ``store()`` writes back.
    """

    def __init__(self, value, name: str):
        from ..autograd.tensor import Tensor
        self.tensor = value if isinstance(value, Tensor) else None
        if self.tensor is None and not isinstance(value, np.ndarray):
            raise TypeError(f"{name}: expected a Tensor or a NumPy array, got "
                            f"{type(value).__name__}")
        self.target = self.tensor.numpy() if self.tensor is not None else value
        on_cpu = self.tensor is None or self.tensor.device == "cpu"
        wire_dtype = {"f2": np.float32, "b1": np.uint8}.get(self.target.dtype.str[1:])
        if on_cpu and wire_dtype is None and self.target.flags.c_contiguous:
            self.array = self.target
        else:
            self.array = np.array(self.target, dtype=wire_dtype or self.target.dtype, order="C")
        self.copied = self.array is not self.target

    def store(self) -> None:
        if not self.copied:
            return
        if self.tensor is not None and self.tensor.device != "cpu":
            values = self.array.astype(self.tensor.dtype, copy=False)
            self.tensor.data = self.tensor.backend.from_numpy(values)
        else:
            self.target[...] = self.array.astype(self.target.dtype, copy=False)


def barrier() -> None:
    """Wait until every rank has called ``barrier`` (raises ``DistributedError`` on timeout)."""
    wait_for_all("barrier")


def all_reduce(value, op: str = ReduceOp.SUM):
    """Combine ``value`` (a Tensor or array) across ranks, in place; returns ``value``.

    ``op`` is one of ``ReduceOp.SUM`` (default), ``AVG``, ``PRODUCT``, ``MIN``, ``MAX``.
    """
    if op not in ReduceOp.ALL:
        raise ValueError(f"all_reduce: op must be one of {', '.join(ReduceOp.ALL)}, got {op!r}")
    buffer = _HostBuffer(value, "all_reduce")
    if op == ReduceOp.AVG and buffer.array.dtype.kind != "f":
        raise TypeError(f"all_reduce: AVG needs floating point data, got {buffer.array.dtype}")
    comm = communicator()
    if comm is None:
        return value
    wait_for_all("all_reduce", _signature(buffer.array, op))
    from mpi4py import MPI
    comm.Allreduce(MPI.IN_PLACE, buffer.array, op=_mpi_op(op))
    if op == ReduceOp.AVG:
        buffer.array /= get_world_size()
    buffer.store()
    return value


def all_reduce_coalesced(arrays: list, op: str = ReduceOp.SUM) -> list:
    """``all_reduce`` of several contiguous NumPy arrays, in place, in list order, after one
    meeting of the ranks (not one per array): how data-parallel training reduces its gradient
    buckets. Returns ``arrays``."""
    if op not in ReduceOp.ALL:
        raise ValueError(f"all_reduce_coalesced: op must be one of {', '.join(ReduceOp.ALL)}, "
                         f"got {op!r}")
    for array in arrays:
        if not (isinstance(array, np.ndarray) and array.flags.c_contiguous
                and array.dtype.kind in "iuf" and array.dtype.itemsize >= 4):
            raise TypeError("all_reduce_coalesced: expects contiguous int or float NumPy arrays "
                            "of 4 or 8 byte elements")
    comm = communicator()
    if comm is None:
        return arrays
    wait_for_all("all_reduce", ";".join(_signature(a, op) for a in arrays))
    from mpi4py import MPI
    for array in arrays:
        comm.Allreduce(MPI.IN_PLACE, array, op=_mpi_op(op))
        if op == ReduceOp.AVG:
            array /= get_world_size()
    return arrays


def start_all_reduce(array: np.ndarray):
    """Start summing a contiguous NumPy array across ranks in place, without waiting; returns
    the MPI request (None in a group of one).

    The ranks must have met first (:func:`~minidl.distributed.process_group.wait_for_all`:
    non-blocking calls cannot be timed out one by one) and must start the same arrays in the
    same order; :func:`~minidl.distributed.process_group.wait_for_requests` waits for them.
    How data-parallel training averages a bucket of gradients while backward goes on.
    """
    comm = communicator()
    if comm is None:
        return None
    from mpi4py import MPI
    return comm.Iallreduce(MPI.IN_PLACE, array, op=MPI.SUM)


def start_broadcast(array: np.ndarray, src: int = 0):
    """Start overwriting a contiguous NumPy array on every rank with rank ``src``'s, without
    waiting; returns the MPI request (None in a group of one). The ranks must have met first,
    as for :func:`start_all_reduce`."""
    comm = communicator()
    if comm is None:
        return None
    return comm.Ibcast(array, root=src)


def broadcast(value, src: int = 0):
    """Overwrite ``value`` (a Tensor or array) on every rank with rank ``src``'s; returns it."""
    _check_rank(src, "src")
    buffer = _HostBuffer(value, "broadcast")
    comm = communicator()
    if comm is None:
        return value
    wait_for_all("broadcast", _signature(buffer.array, src))
    comm.Bcast(buffer.array, root=src)
    buffer.store()
    return value


def all_gather(tensor_list, value=None) -> list:
    """Every rank's ``value``, in rank order.

    PyTorch's form ``all_gather(tensor_list, tensor)`` fills ``tensor_list`` (empty, or one
    same-shaped Tensor/array per rank, overwritten in place); ``all_gather(tensor)`` returns a
    new list. The values come back as the kind that went in (Tensor or array).
    """
    if value is None:
        tensor_list, value = [], tensor_list
    from ..autograd.tensor import Tensor
    buffer = _HostBuffer(value, "all_gather")
    world = get_world_size()
    comm = communicator()
    gathered = np.empty((world,) + buffer.array.shape, buffer.array.dtype)
    if comm is None:
        gathered[0] = buffer.array
    else:
        wait_for_all("all_gather", _signature(buffer.array))
        comm.Allgather(buffer.array, gathered)
    parts = [part.astype(buffer.target.dtype, copy=False) for part in gathered]
    if tensor_list:
        if len(tensor_list) != world:
            raise ValueError(f"all_gather: tensor_list has {len(tensor_list)} entries for "
                             f"{world} ranks")
        for out, part in zip(tensor_list, parts):
            if isinstance(out, Tensor):
                out.data = out.backend.from_numpy(np.array(part, order="C"))
            else:
                out[...] = part
        return tensor_list
    as_value = ((lambda a: Tensor(a, dtype=a.dtype, device=value.device))
                if isinstance(value, Tensor) else (lambda a: a))
    tensor_list.extend(as_value(np.array(part)) for part in parts)
    return tensor_list


# -- plain data -----------------------------------------------------------------------------------

def _pack(obj) -> np.ndarray:
    try:
        return np.frombuffer(msgpack.packb(obj, use_bin_type=True), np.uint8)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"collective on plain data: the value is not msgpack-able ({exc})") from None


def _unpack(data: np.ndarray):
    return msgpack.unpackb(data.tobytes(), raw=False, strict_map_key=False)


def all_gather_object(obj) -> list:
    """Every rank's ``obj`` (msgpack-able plain data), in rank order."""
    comm = communicator()
    if comm is None:
        return [obj]
    data = _pack(obj)
    wait_for_all("all_gather_object")
    sizes = np.empty(comm.Get_size(), np.int64)
    comm.Allgather(np.array([len(data)], np.int64), sizes)
    gathered = np.empty(int(sizes.sum()), np.uint8)
    comm.Allgatherv(data, [gathered, sizes])
    bounds = np.concatenate([[0], np.cumsum(sizes)])
    return [_unpack(gathered[bounds[r]:bounds[r + 1]]) for r in range(len(sizes))]


def broadcast_object(obj, src: int = 0):
    """Rank ``src``'s ``obj`` (msgpack-able plain data) on every rank."""
    _check_rank(src, "src")
    comm = communicator()
    if comm is None:
        return obj
    wait_for_all("broadcast_object")
    from mpi4py import MPI
    data = _pack(obj) if comm.Get_rank() == src else None
    size = np.array([len(data) if data is not None else 0], np.int64)
    comm.Bcast(size, root=src)
    if data is None:
        data = np.empty(int(size[0]), np.uint8)
    comm.Bcast([data, MPI.BYTE], root=src)
    return _unpack(data)


def _check_rank(rank, name: str) -> None:
    world = get_world_size()
    if isinstance(rank, bool) or not isinstance(rank, (int, np.integer)) or not 0 <= rank < world:
        raise ValueError(f"{name} must be a rank in 0..{world - 1}, got {rank!r}")


def _signature(array: np.ndarray, *extra) -> str:
    return f"{array.shape} {array.dtype.str} {' '.join(map(str, extra))}"
