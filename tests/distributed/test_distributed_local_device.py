"""minidl.distributed.local_device: each rank takes the GPU of its local rank, from the
launcher's variable or from an MPI shared-memory split."""

import os

import pytest

import minidl as md
from minidl.distributed import local_device
from mpi_run import HERE, requires_mpi, run


@pytest.fixture
def no_launcher(monkeypatch):
    for name in local_device.LOCAL_RANK_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


@pytest.mark.parametrize("name", local_device.LOCAL_RANK_VARIABLES)
def test_the_local_rank_comes_from_the_launchers_variable(no_launcher, name):
    no_launcher.setenv(name, "3")
    assert local_device.local_rank() == 3


def test_a_group_of_one_without_a_launcher_is_local_rank_0(no_launcher):
    assert local_device.local_rank() == 0


def test_a_malformed_local_rank_is_named(no_launcher):
    no_launcher.setenv("SLURM_LOCALID", "two")
    with pytest.raises(ValueError, match="SLURM_LOCALID='two'"):
        local_device.local_rank()


def test_ranks_take_gpus_in_turn_or_the_cpu_without_cuda(no_launcher):
    no_launcher.setenv("LOCAL_RANK", "5")
    no_launcher.setattr(md.cuda, "device_count", lambda: 2)
    assert local_device.local_device() == "cuda:1"
    no_launcher.setattr(md.cuda, "device_count", lambda: 0)
    assert local_device.local_device() == "cpu"
    assert local_device.use_local_device() == "cpu"


@pytest.mark.skipif(not md.cuda.is_available(), reason="no CUDA device and no simulator")
def test_use_local_device_makes_it_what_cuda_means(no_launcher):
    no_launcher.setenv("LOCAL_RANK", str(md.cuda.device_count()))  # wraps to cuda:0
    assert local_device.use_local_device() == "cuda:0"
    assert md.cuda.current_device() == 0 and md.ones(1).cuda().device == "cuda:0"


@requires_mpi
def test_ranks_on_one_machine_are_numbered_by_mpis_shared_memory_split():
    result = run(2, os.path.join(HERE, "local_device_script.py"))
    lines = sorted(line for line in result.stdout.splitlines() if line.startswith("rank"))
    assert [line.split()[:4] for line in lines] == [["rank", "0", "local", "0"],
                                                    ["rank", "1", "local", "1"]], result.stdout
