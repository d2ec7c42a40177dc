"""Which launcher started a process, from each launcher's variables; and lone tasks of one launch
refusing to share a checkpoint directory."""

import os
import subprocess
import sys

import pytest

import minidl as md
from minidl.distributed import process_group
from minidl.distributed.launcher import _LAUNCHERS, _SLURM_TASKS, detect_launch

from mpi_run import environment

LAUNCH_VARIABLES = [name for _, rank, size in _LAUNCHERS for name in (rank, size) if name] + \
    list(_SLURM_TASKS) + ["SLURM_JOB_ID", "SLURM_STEP_ID", "PMIX_NAMESPACE"]


@pytest.mark.parametrize("environ,launcher,rank,size,job", [
    ({"PMI_RANK": "1", "PMI_SIZE": "4"}, "MPICH Hydra/PMI", 1, 4, "mpich-"),
    ({"OMPI_COMM_WORLD_RANK": "2", "OMPI_COMM_WORLD_SIZE": "3", "PMIX_RANK": "2",
      "PMIX_NAMESPACE": "prterun-vm-1@1"}, "Open MPI", 2, 3, "pmix-prterun-vm-1@1"),
    ({"MV2_COMM_WORLD_RANK": "0", "MV2_COMM_WORLD_SIZE": "2"}, "MVAPICH", 0, 2, "mvapich-"),
    # srun --mpi=pmix: PMIx's rank and Slurm's task count and job.
    ({"PMIX_RANK": "3", "PMIX_NAMESPACE": "slurm.pmix.81.0", "SLURM_PROCID": "3",
      "SLURM_STEP_NUM_TASKS": "8", "SLURM_NTASKS": "8", "SLURM_JOB_ID": "81",
      "SLURM_STEP_ID": "0"}, "PMIx", 3, 8, "slurm-81.0"),
    ({"PMIX_RANK": "0", "PMIX_NAMESPACE": "prte-1"}, "PMIx", 0, None, "pmix-prte-1"),
    # srun without MPI: Slurm alone.
    ({"SLURM_PROCID": "1", "SLURM_STEP_NUM_TASKS": "2", "SLURM_JOB_ID": "5",
      "SLURM_STEP_ID": "2"}, "Slurm", 1, 2, "slurm-5.2"),
])
def test_each_launcher_is_recognised_from_its_variables(environ, launcher, rank, size, job):
    launch = detect_launch(environ)
    assert (launch.launcher, launch.rank, launch.size) == (launcher, rank, size)
    assert launch.job.startswith(job)


def test_who_needs_mpi():
    assert detect_launch({}) is None
    assert detect_launch({"PMI_RANK": "0", "PMI_SIZE": "2"}).needs_mpi
    assert not detect_launch({"PMI_RANK": "0", "PMI_SIZE": "1"}).needs_mpi  # a group of one
    assert detect_launch({"PMIX_RANK": "0"}).needs_mpi  # only MPI knows the size
    slurm = detect_launch({"SLURM_PROCID": "0", "SLURM_NTASKS": "4"})
    assert slurm.several and not slurm.needs_mpi  # tasks that may not use MPI at all


def clean_environment(monkeypatch, **variables):
    for name in LAUNCH_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    for name, value in variables.items():
        monkeypatch.setenv(name, value)


def test_process_group_starts_mpi_under_pmix_and_not_under_slurm_alone(monkeypatch):
    clean_environment(monkeypatch, PMIX_RANK="0", PMIX_NAMESPACE="job")
    assert process_group._launched_by_mpi()
    clean_environment(monkeypatch, SLURM_PROCID="0", SLURM_STEP_NUM_TASKS="4")
    assert not process_group._launched_by_mpi()


SLURM_TASK = {"SLURM_PROCID": "{rank}", "SLURM_STEP_NUM_TASKS": "2", "SLURM_JOB_ID": "77",
              "SLURM_STEP_ID": "0"}


def manager(directory):
    return md.CheckpointManager(md.Checkpoint(model=md.nn.Linear(2, 2)), directory)


def test_lone_tasks_of_one_launch_refuse_to_share_a_checkpoint_directory(tmp_path,
                                                                         monkeypatch):
    env = environment()
    env.update({k: v.format(rank=1) for k, v in SLURM_TASK.items()})
    other = subprocess.Popen(
        [sys.executable, "-c", "import sys, minidl as md; md.CheckpointManager(md.Checkpoint("
         "model=md.nn.Linear(2, 2)), sys.argv[1]); print('claimed', flush=True); "
         "sys.stdin.read()", str(tmp_path)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert other.stdout.readline().strip() == "claimed"
        clean_environment(monkeypatch, **{k: v.format(rank=0) for k, v in SLURM_TASK.items()})
        with pytest.raises(md.CheckpointError, match="task 0 of 2 of Slurm job slurm-77.0") as error:
            manager(tmp_path)
        assert f"task 1 (process {other.pid}" in str(error.value)
        assert "srun --mpi=pmix" in str(error.value)
        manager(tmp_path / "own")  # a directory of its own is fine
    finally:
        other.kill()  # no clean exit: its claim stays behind, stale
        other.wait()
    manager(tmp_path).save(1)  # a dead task's claim does not count
    assert md.latest_checkpoint(str(tmp_path))
