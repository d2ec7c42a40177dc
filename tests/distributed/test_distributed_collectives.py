"""minidl.distributed: collectives under mpiexec, and failing fast instead of hanging."""

import os
import re
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


def run_failing(mode, *launcher_options):
    # The timeout only guards against a hang; what is asserted is how the job ended.
    line = command(3, SCRIPT, mode)
    line[1:1] = launcher_options
    return subprocess.run(line, capture_output=True, text=True, timeout=900,
                          env=environment())


def reports(result) -> dict:
    """Each rank's DistributedError message, by rank."""
    return {int(rank): message
            for rank, message in re.findall(r"<rank (\d+): (.*?)>", result.stdout, re.DOTALL)}


def test_a_rank_that_never_arrives_makes_the_others_fail_fast():
    result = run_failing("straggler")
    assert result.returncode != 0
    assert "DistributedError" in result.stderr and "waited 1 s" in result.stderr
    # a waiting rank ended the whole job ...
    assert re.search(r"minidl: rank \d ends the job with MPI_Abort", result.stderr), result.stderr
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


def test_a_dead_rank_is_named_long_before_the_default_timeout():
    # The launcher would end the job itself; without its clean-up the ranks must see it.
    result = run_failing("dead", "-disable-auto-cleanup")
    found = reports(result)
    # The first rank to see it aborts the job, which may end the other before it reports.
    assert found and set(found) <= {0, 1}, result.stdout + result.stderr
    for message in found.values():
        # "died" (seen from its missing process), not "did not answer" (the timeout's word)
        assert "barrier (collective #2)" in message and "rank 2 died" in message


def test_a_rank_in_another_collective_is_named_by_every_rank():
    result = run_failing("skip")
    found = reports(result)
    assert sorted(found) == [0, 1, 2], result.stdout + result.stderr
    for message in found.values():
        assert "rank 0: barrier (collective #1)" in message
        assert "rank 2: all_reduce (3,) <f8 sum (collective #1)" in message


def test_a_busy_rank_is_named_after_the_timeout():
    result = run_failing("busy")
    found = reports(result)
    for rank in (0, 1):
        assert "waited 1 s" in found[rank] and "rank 2 did not answer" in found[rank]
        assert f"rank {1 - rank}" not in found[rank].split("others:")[1]  # it was there


def test_a_slow_rank_within_the_default_timeout_is_waited_for():
    result = run(3, SCRIPT, "slow")
    assert all(result.stdout.count(f"rank {r} ok") == 1 for r in range(3))


def test_a_forward_after_a_backward_that_failed_mid_averaging_is_refused():
    result = run_failing("failed-backward")
    found = reports(result)
    assert sorted(found) == [0, 1, 2], result.stdout + result.stderr
    assert all("previous backward failed" in message for message in found.values())
