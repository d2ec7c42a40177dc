"""minidl.distributed in a plain process: a group of one that needs no MPI."""

import subprocess
import sys

import numpy as np
import pytest

import minidl as md
import minidl.distributed as dist


def test_importing_and_initialising_without_mpiexec_needs_no_mpi():
    code = ("import sys, minidl, minidl.distributed as d; d.init_process_group(); "
            "print(d.get_rank(), d.get_world_size(), d.is_initialized(), 'mpi4py' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["0", "1", "True", "False"]


def test_collectives_in_a_group_of_one_are_the_identity():
    t = md.tensor([1.0, 2.0])
    assert dist.all_reduce(t) is t and t.numpy().tolist() == [1.0, 2.0]
    a = np.arange(3)
    assert dist.broadcast(a, src=0) is a and a.tolist() == [0, 1, 2]
    assert [x.numpy().tolist() for x in dist.all_gather(t)] == [[1.0, 2.0]]
    assert dist.all_gather_object({"a": 1}) == [{"a": 1}]
    assert dist.broadcast_object([1, "x"]) == [1, "x"]
    dist.barrier()


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="op"):
        dist.all_reduce(np.zeros(2), op="median")
    with pytest.raises(ValueError, match="src"):
        dist.broadcast(np.zeros(2), src=1)
    with pytest.raises(TypeError, match="AVG"):
        dist.all_reduce(np.zeros(2, np.int64), op=dist.ReduceOp.AVG)
    with pytest.raises(TypeError, match="Tensor or a NumPy array"):
        dist.all_reduce([1.0, 2.0])
    with pytest.raises(ValueError, match="timeout"):
        dist.init_process_group(timeout=0)
    with pytest.raises(ValueError, match="backend"):
        dist.init_process_group(backend="gloo")
    dist.init_process_group()
    assert dist.get_backend() == "mpi"
