"""Data-parallel gradients of a model on a GPU: summed bucket by bucket on the device, never one
host round trip per parameter; NCCL asked for and missing, or unreachable, is named."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

import minidl as md
import minidl.distributed as dist
from minidl.distributed import device_collectives, process_group
from mpi_run import HERE, requires_mpi, run

SCRIPT = os.path.join(HERE, "device_buckets_script.py")


@pytest.fixture(scope="module")
def crossings():
    """{check: each rank's "collective NAME crossings C1 C2 C3"} from one run of the script
    on 2 ranks (on the simulator, whatever the tests themselves run on)."""
    env_before = os.environ.get("NUMBA_ENABLE_CUDASIM")
    os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
    try:
        result = run(2, SCRIPT)
    finally:
        if env_before is None:
            del os.environ["NUMBA_ENABLE_CUDASIM"]
        else:
            os.environ["NUMBA_ENABLE_CUDASIM"] = env_before
    found: dict = {}
    for check, word, rank, *rest in map(str.split, result.stdout.splitlines()):
        if word == "rank":
            found.setdefault(check, {})[int(rank)] = rest
    return found


@requires_mpi
@pytest.mark.parametrize("check", ["overlap", "no-overlap"])
def test_cuda_gradients_cross_to_the_host_once_per_bucket_and_equal_the_host_sums(crossings,
                                                                                   check):
    # The script checks the gradients bit for bit against the per-parameter host computation;
    # here the copies: 2 buckets, each one download and one upload per backward (the
    # per-parameter path made 2 per parameter with a gradient: 8).
    assert crossings[check] == {rank: ["collective", "mpi", "crossings", "4", "4"]
                                for rank in (0, 1)}


@requires_mpi
def test_rank_0s_batchnorm_statistics_reach_the_others_in_one_array_per_dtype(crossings):
    # The script checks that each forward starts from rank 0's statistics, bit for bit; here
    # the copies: running mean and variance (float32) in one array, the batch count (int64) in
    # another, each down and up once per forward (one tensor at a time it was 9).
    assert crossings["batchnorm"] == {rank: ["collective", "mpi", "crossings", "4", "4"]
                                      for rank in (0, 1)}


def test_asking_for_nccl_without_nccl4py_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "nccl", None)  # as if it were not installed
    with pytest.raises(dist.DistributedError, match=r"minidl\[nccl\]"):
        dist.init_process_group(backend="nccl")
    with pytest.raises(dist.DistributedError, match=r"minidl\[nccl\]"):
        device_collectives.import_nccl()
    if md.cuda.is_available():  # and on a real GPU, the default backend says why not NCCL
        from minidl.backend.cuda import simulator
        monkeypatch.setattr(simulator, "SIMULATED", False)
        assert "minidl[nccl]" in device_collectives.nccl_problem()


@pytest.mark.skipif(not md.cuda.is_available(), reason="no CUDA device and no simulator")
def test_nccl_asked_for_on_the_simulator_is_refused_with_the_reason(monkeypatch):
    from minidl.backend.cuda.simulator import SIMULATED
    if not SIMULATED:
        pytest.skip("a real GPU: NCCL may well be reachable")
    monkeypatch.setattr(process_group._group, "backend", "nccl")
    monkeypatch.setattr(device_collectives, "_collectives", {})
    with pytest.raises(dist.DistributedError, match="simulator"):
        device_collectives.device_collective(0)


def test_without_nccl_cuda_buckets_go_through_mpi(monkeypatch):
    monkeypatch.setitem(sys.modules, "nccl", None)
    monkeypatch.setattr(device_collectives, "_collectives", {})
    if not md.cuda.is_available():
        pytest.skip("no CUDA device and no simulator")
    collective = device_collectives.device_collective(0)
    assert isinstance(collective, device_collectives.StagedMpiCollective)
    assert device_collectives.device_collective(0) is collective  # made once per device


@pytest.mark.skipif(not md.cuda.is_available(), reason="no CUDA device and no simulator")
def test_nccl4py_without_the_nccl_library_is_named_too(monkeypatch):
    import types

    from minidl.backend.cuda import simulator

    def get_version():
        raise OSError('Failure finding "libnccl.so.2"')
    package = types.ModuleType("nccl")
    package.core = types.SimpleNamespace(get_version=get_version)
    monkeypatch.setitem(sys.modules, "nccl", package)
    monkeypatch.setitem(sys.modules, "nccl.core", package.core)
    monkeypatch.setattr(simulator, "SIMULATED", False)
    problem = device_collectives.nccl_problem()
    assert "cannot load the NCCL library" in problem and "libnccl.so.2" in problem
    assert "minidl[nccl]" in problem


def _real_gpu_with_nccl() -> str | None:
    if not md.cuda.is_available():
        return "no CUDA device"
    from minidl.backend.cuda.simulator import SIMULATED
    if SIMULATED:
        return "CUDA runs on numba's simulator, which NCCL cannot reach"
    if not device_collectives.nccl_available():
        return "nccl4py is not installed (pip install minidl[nccl])"
    return None


@pytest.mark.skipif(_real_gpu_with_nccl() is not None, reason=str(_real_gpu_with_nccl()))
def test_nccl_sums_a_device_buffer_in_a_group_of_one(monkeypatch):
    from minidl.backend.cuda.device import download, transfers, upload
    monkeypatch.setattr(device_collectives, "_collectives", {})
    collective = device_collectives.NcclCollective(0)
    values = upload(np.arange(10, dtype=np.float32))
    before = sum(transfers.values())
    pending = collective.start(values)
    assert pending.requests == [] and sum(transfers.values()) == before  # no host crossing
    np.testing.assert_array_equal(download(pending.result()), np.arange(10, dtype=np.float32))
    collective.comm.destroy()
