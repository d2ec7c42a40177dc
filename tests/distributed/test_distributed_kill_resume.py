"""A data-parallel job with one rank SIGKILLed -- mid-step or mid-save -- and started again
continues from its newest complete checkpoint and ends bitwise equal to an uninterrupted job.

The kill takes one rank; ``mpiexec`` then ends the others (that is the fail-fast: nothing
waits for a dead rank), and the harness starts the whole job again, as a job scheduler would.
"""

import os
import signal
import time

import numpy as np
import pytest

from mpi_run import SCRIPT, requires_mpi, run, start

pytestmark = requires_mpi

STEPS = 14
OPTIONS = ["--steps", str(STEPS), "--save-every", "2", "--dropout", "0.3", "--batchnorm",
           "--ballast-mb", "8"]


def load(path):
    with np.load(path) as archive:
        return {name: archive[name] for name in archive.files}


def differences(a, b):
    problems = sorted(set(a) ^ set(b))
    return problems + [k for k in sorted(set(a) & set(b)) if a[k].tobytes() != b[k].tobytes()]


def run_with_kills(ranks, directory, output, kill_plan, rng, extra=()):
    """Start the job; for each ``(victim_rank, inside_save)`` of ``kill_plan`` kill that rank
    once the job has made progress, then restart; finally let the job finish."""
    plan = list(kill_plan)
    kills = kills_inside_save = 0
    while True:
        process = start(ranks, SCRIPT, output, "--dir", directory, *OPTIONS, *extra)
        pids, started = {}, None
        victim, inside_save = plan.pop(0) if plan else (None, False)
        target = None
        for line in process.stdout:
            words = line.split()
            if words[:1] == ["pids"]:
                pids = dict(enumerate(map(int, words[1:])))
            elif words[:1] == ["training"]:
                started = int(words[1])
                target = started + int(rng.integers(1, 5))
            elif victim is not None and len(pids) == ranks and target is not None:
                reached = int(words[1]) >= target if words[0] in ("step", "saving") else False
                if reached and (words[0] == "saving" or not inside_save):
                    if inside_save:
                        time.sleep(rng.uniform(0, 0.02))  # the save (8 MB) is under way
                    os.kill(pids[victim], signal.SIGKILL)
                    kills += 1
                    kills_inside_save += inside_save
                    break
        began = time.monotonic()
        out, err = process.communicate(timeout=60)
        if victim is not None and process.returncode != 0:
            # Fail fast: the surviving ranks did not wait for the dead one.
            assert time.monotonic() - began < 30
            continue
        assert process.returncode == 0, err[-3000:]
        if os.path.exists(output):
            return kills, kills_inside_save


VARIANTS = {"adam": ([], [(1, False), (0, True), (1, True)]),
            "zero": (["--zero"], [(0, True), (1, True)])}


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    runs = {}

    def result(variant):
        if variant not in runs:
            base = tmp_path_factory.mktemp(f"uninterrupted-{variant}")
            run(2, SCRIPT, str(base / "final.npz"), "--dir", str(base / "run"), *OPTIONS,
                *VARIANTS[variant][0])
            runs[variant] = base / "final.npz"
        return load(runs[variant])
    return result


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_job_killed_mid_step_and_mid_save_ends_bitwise_equal(tmp_path, uninterrupted, variant):
    extra, plan = VARIANTS[variant]
    kills, inside_save = run_with_kills(2, str(tmp_path / "run"), str(tmp_path / "final.npz"),
                                        plan, np.random.default_rng(0), extra)
    assert (kills, inside_save) == (len(plan), sum(s for _, s in plan))
    result = load(tmp_path / "final.npz")
    # "consumed" holds the samples of the last start's steps only; the rest covers the run.
    expected = uninterrupted(variant)
    del result["consumed"], expected["consumed"]
    assert differences(result, expected) == []
    # Each rank's dropout stream was restored, not only rank 0's: their next draws differ.
    assert not np.array_equal(result["rank_draws"][0], result["rank_draws"][1])
    assert [n for n in os.listdir(tmp_path / "run") if n.endswith(".tmp")] == []


def test_a_one_rank_run_is_not_what_two_ranks_compute(tmp_path, uninterrupted):
    # Guards the test above: with dropout and BatchNorm, world size matters, so agreeing
    # with the two-rank run is evidence, not a coincidence of equal computations.
    run(1, SCRIPT, str(tmp_path / "final.npz"), *OPTIONS)
    assert differences(load(tmp_path / "final.npz"), uninterrupted("adam")) != []
