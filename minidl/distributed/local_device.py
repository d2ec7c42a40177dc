"""Which GPU a rank uses: its number among the ranks on its own machine.

With 4 ranks on each of 2 machines of 4 GPUs, ranks 0-3 and 4-7 must each take GPUs 0-3: the
rank's *local* rank, not its global one, picks the device. Launchers say it in an environment
variable (Open MPI, MVAPICH, MPICH's Hydra, Slurm, torchrun's ``LOCAL_RANK``); without one, the
ranks that share a machine are found by MPI itself (``MPI_Comm_split_type`` with
``COMM_TYPE_SHARED``: the ranks that can share memory, i.e. one machine), and a rank's place
among them is its local rank. With more local ranks than GPUs they take GPUs in turn.

    import minidl.distributed as dist
    from minidl.distributed.local_device import use_local_device
    dist.init_process_group()
    device = use_local_device()          # "cuda:<local rank>", now also what "cuda" means
    model = MyModel().to(device)
"""

from __future__ import annotations

import os

from .process_group import communicator, wait_for_all

LOCAL_RANK_VARIABLES = ("LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "MV2_COMM_WORLD_LOCAL_RANK",
                        "MPI_LOCALRANKID", "SLURM_LOCALID")
"""Launcher variables holding the local rank, in the order they are believed."""


def local_rank() -> int:
    """This process's number among the ranks on its machine: from the launcher's variable, else
    from an MPI shared-memory split of the process group (a collective: every rank must ask),
    else 0 (a group of one)."""
    for name in LOCAL_RANK_VARIABLES:
        value = os.environ.get(name)
        if value is None:
            continue
        if not value.strip().isdigit():
            raise ValueError(f"environment variable {name}={value!r} is not a local rank "
                             f"(a non-negative integer)")
        return int(value)
    comm = communicator()
    if comm is None:
        return 0
    from mpi4py import MPI
    wait_for_all("local_rank")
    machine = comm.Split_type(MPI.COMM_TYPE_SHARED)
    try:
        return machine.Get_rank()
    finally:
        machine.Free()


def local_device() -> str:
    """The device this rank should compute on: ``"cuda:<local rank mod GPUs>"`` when CUDA is
    available, else ``"cpu"`` (MPI then carries the gradients, as without GPUs)."""
    from .. import cuda
    count = cuda.device_count()
    rank = local_rank()
    return f"cuda:{rank % count}" if count else "cpu"


def use_local_device() -> str:
    """:func:`local_device`, made the current CUDA device (what ``"cuda"`` and ``.cuda()``
    mean) when it is a GPU; returns it."""
    device = local_device()
    if device != "cpu":
        from .. import cuda
        cuda.set_device(device)
    return device
