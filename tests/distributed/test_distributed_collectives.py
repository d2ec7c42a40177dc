"""minidl.distributed: collectives under mpiexec, and failing fast instead of hanging."""

import os
import subprocess

import pytest

from mpi_run import HERE, command, environment, requires_mpi, run

pytestmark = requires_mpi
SCRIPT = os.path.join(HERE, "collectives_script.py")


@pytest.mark.parametrize("ranks", [2, 3])
def test_collectives_on_tensors_and_arrays(ranks):
    result = run(ranks, SCRIPT, "values")
    # Lines of different ranks may interleave; each rank's report must be there once.
    assert all(result.stdout.count(f"rank {r} ok") == 1 for r in range(ranks))


def run_failing(mode):
    # The timeout only guards against a hang; what is asserted is how the job ended.
    return subprocess.run(command(3, SCRIPT, mode), capture_output=True, text=True,
                          timeout=900, env=environment())


def test_a_rank_that_never_arrives_makes_the_others_fail_fast():
    result = run_failing("straggler")
    assert result.returncode != 0
    assert "DistributedError" in result.stderr and "waited 3 s" in result.stderr
    assert "MPI_Abort" in result.stderr  # a waiting rank ended the whole job ...
    assert "rank 1 woke up" not in result.stdout  # ... while the straggler still slept


def test_mismatched_models_are_refused_at_wrap_time():
    result = run_failing("mismatch")
    assert result.returncode != 0
    assert "DistributedDataParallel: the model on rank" in result.stderr
    assert "0.weight" in result.stderr


def test_a_restore_that_fails_on_one_rank_fails_on_every_rank_at_once(tmp_path):
    result = run(3, SCRIPT, "restore", str(tmp_path / "run"))
    # Every rank learns rank 1's reason (no rank waits out the collective timeout instead).
    assert "rank 1 refused" in result.stdout and "does not match" in result.stdout
    for rank in (0, 2):
        assert f"rank {rank} refused" in result.stdout
    assert result.stdout.count("restoring failed on another rank (rank 1:") == 2
