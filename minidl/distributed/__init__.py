"""Data-parallel training on MPI: ``import minidl.distributed as dist``.

Launch with ``mpiexec -n 4 python train.py`` (or a plain ``python train.py``, a group of one);
call :func:`init_process_group`, wrap the model in ``nn.parallel.DistributedDataParallel``,
give the data reader ``rank=`` and ``world_size=``. The names follow ``torch.distributed``.
"""

from .collectives import (
    ReduceOp, all_gather, all_gather_object, all_reduce, all_reduce_coalesced, barrier, broadcast, broadcast_object,
)
from .process_group import (
    DistributedError, destroy_process_group, get_backend, get_rank, get_timeout, get_world_size,
    init_process_group, is_available, is_initialized,
)

__all__ = [
    "init_process_group", "destroy_process_group", "is_initialized", "is_available",
    "get_rank", "get_world_size", "get_backend", "get_timeout", "barrier", "all_reduce",
    "all_reduce_coalesced", "broadcast",
    "all_gather", "all_gather_object", "broadcast_object", "ReduceOp", "DistributedError",
]
