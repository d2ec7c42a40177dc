"""One writer per checkpoint directory among the tasks of a launch.

A launcher that starts N tasks of a script whose MPI sees a world of one (``srun`` without
``--mpi=pmix``; ``mpi4py`` built against another MPI) leaves N processes that each believe
they are alone: each is rank 0, each writes checkpoints, and all of them into the same
directory, overwriting one another. Such a process leaves a small *claim* file in the
directory naming its launch, task, host and process id; a second live task of the same
launch that finds it refuses to start, naming both tasks and what to do instead.

Claims of processes that are gone (same host, process id no longer alive) are stale and
ignored; a claim from another host of the same launch counts as live (the launch is running).
A process removes its claim when it exits.
"""

from __future__ import annotations

import atexit
import os
import re
import socket

from .. import distributed as dist
from ..distributed.launcher import detect_launch
from ..distributed.roll_call import is_alive
from ..io import CheckpointError

CLAIM_SUFFIX = ".claim"


def _claim_prefix(job: str) -> str:
    return ".minidl-task-" + re.sub(r"[^A-Za-z0-9_.-]", "_", job) + "-"


def _read_claim(path: str) -> tuple[str, int, int] | None:
    try:
        with open(path) as file:
            host, pid, rank = file.read().split()
        return host, int(pid), int(rank)
    except (OSError, ValueError):
        return None  # being written, or removed meanwhile: not a claim (yet)


def claim_directory(directory: str) -> None:
    """Refuse to write ``directory`` if another live task of this process's launch writes
    it while MPI sees a world of one here; otherwise claim it (nothing to do outside such a
    launch)."""
    launch = detect_launch()
    if launch is None or not launch.several or dist.get_world_size() > 1:
        return
    prefix = _claim_prefix(launch.job)
    host = socket.gethostname()
    mine = os.path.join(directory, f"{prefix}{launch.rank}{CLAIM_SUFFIX}")
    with open(mine, "w") as file:
        file.write(f"{host} {os.getpid()} {launch.rank}\n")
    atexit.register(_remove, mine)
    others = []
    for name in sorted(os.listdir(directory)):
        if not (name.startswith(prefix) and name.endswith(CLAIM_SUFFIX)) or \
                os.path.join(directory, name) == mine:
            continue
        claim = _read_claim(os.path.join(directory, name))
        if claim is None or (claim[0] == host and not is_alive(claim[1])):
            continue
        others.append(f"task {claim[2]} (process {claim[1]} on {claim[0]})")
    if others:
        _remove(mine)
        raise CheckpointError(directory, (
            f"this process is {launch.describe()}, but MPI sees a world of one, and "
            f"{', '.join(others)} of the same job writes this checkpoint directory too: the "
            "tasks would overwrite each other's checkpoints. Launch so that MPI sees every "
            "task (mpiexec, or srun --mpi=pmix with an MPI built with PMIx support, and call "
            "minidl.distributed.init_process_group()), or give each task its own directory"))


def _remove(path: str) -> None:
    try:
        os.remove(path)
    except OSError:
        pass
