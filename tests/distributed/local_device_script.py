"""Each rank's local rank under mpiexec, found by MPI's shared-memory split (the launcher's
variables removed first) and from the launcher's variable; the test starts it.

Usage: mpiexec -n N python local_device_script.py
"""

import os

import minidl.distributed as dist
from minidl.distributed import local_device

dist.init_process_group()
from_launcher = local_device.local_rank()
for name in local_device.LOCAL_RANK_VARIABLES:
    os.environ.pop(name, None)
from_mpi = local_device.local_rank()
print(f"rank {dist.get_rank()} local {from_mpi} launcher {from_launcher}", flush=True)
