"""Which launcher started this process, as its environment variables tell.

minidl starts no processes: ``mpiexec``, ``srun`` or ``prterun`` do, and say so in the
environment of every process they start. Reading those variables tells a process whether it
is one of several before MPI is even imported, and lets it notice when MPI and the launcher
disagree: a launcher that started four tasks while MPI sees a world of one (``srun`` without
``--mpi=pmix``, or ``mpi4py`` built against another MPI than the launcher's) means four
unrelated copies of the script, each believing it is alone -- and all writing to the same
checkpoint directory.

=============================  ======================================  =====================
launcher                       rank / size                             job
=============================  ======================================  =====================
MPICH Hydra (``mpiexec``),     ``PMI_RANK`` / ``PMI_SIZE``             (the launching
PMI-1/2 of Slurm                                                       process, per host)
Open MPI (``mpirun``)          ``OMPI_COMM_WORLD_RANK`` / ``_SIZE``    ``PMIX_NAMESPACE``
MVAPICH                        ``MV2_COMM_WORLD_RANK`` / ``_SIZE``     (the launching process)
PMIx (``srun --mpi=pmix``,     ``PMIX_RANK`` / (Slurm's task count)    ``PMIX_NAMESPACE``
``prterun``)
Slurm (``srun``)               ``SLURM_PROCID`` /                      ``SLURM_JOB_ID``.
                               ``SLURM_STEP_NUM_TASKS``                ``SLURM_STEP_ID``
=============================  ======================================  =====================
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass

# (launcher, rank variable, size variable): the MPI launchers' own first, then PMIx, then the
# resource manager's, whose task counts hold whether or not MPI is used.
_LAUNCHERS = (
    ("MPICH Hydra/PMI", "PMI_RANK", "PMI_SIZE"),
    ("Open MPI", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
    ("MVAPICH", "MV2_COMM_WORLD_RANK", "MV2_COMM_WORLD_SIZE"),
    ("PMIx", "PMIX_RANK", None),
    ("Slurm", "SLURM_PROCID", None),
)
_SLURM_TASKS = ("SLURM_STEP_NUM_TASKS", "SLURM_NTASKS")


@dataclass(frozen=True)
class Launch:
    """What the launcher told this process: who started it, its rank among ``size`` tasks,
    and a name for the job (the same for every task of one launch)."""

    launcher: str
    rank: int
    size: int | None    # None: PMIx outside Slurm, where only MPI knows the size
    job: str

    @property
    def needs_mpi(self) -> bool:
        """Whether MPI should be started to reach the other tasks: an MPI launcher's or PMIx's
        task of several (Slurm alone starts tasks that may not use MPI at all)."""
        return self.launcher != "Slurm" and (self.size is None or self.size > 1)

    @property
    def several(self) -> bool:
        """Whether the launcher started more than this one task."""
        return self.size is not None and self.size > 1

    def describe(self) -> str:
        """``task R of N of LAUNCHER job JOB``, for messages."""
        return f"task {self.rank} of {self.size or '?'} of {self.launcher} job {self.job}"


def _count(environ, name) -> int | None:
    value = environ.get(name, "") if name else ""
    return int(value) if value.isdigit() else None


def _job(environ, launcher: str) -> str:
    if environ.get("SLURM_JOB_ID"):
        return f"slurm-{environ['SLURM_JOB_ID']}.{environ.get('SLURM_STEP_ID', 'batch')}"
    if environ.get("PMIX_NAMESPACE"):
        return f"pmix-{environ['PMIX_NAMESPACE']}"
    # Hydra and MVAPICH name no job: the tasks on one host share their launching process.
    return f"{launcher.split()[0].lower()}-{socket.gethostname()}-{os.getppid()}"


def detect_launch(environ=None) -> Launch | None:
    """The launch this process belongs to, or None for a process started by hand."""
    environ = os.environ if environ is None else environ
    for launcher, rank_name, size_name in _LAUNCHERS:
        rank = _count(environ, rank_name)
        if rank is None:
            continue
        sizes = [_count(environ, name) for name in (size_name, *_SLURM_TASKS)]
        size = next((n for n in sizes if n is not None), None)
        return Launch(launcher, rank, size, _job(environ, launcher))
    return None
