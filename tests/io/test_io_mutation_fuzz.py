"""Mutation fuzz of every reader: damaged and forged files give a result or a CheckpointError,
never another exception, a hang or a memory spike.  Sharded checkpoints are among the files
(a damaged index or shard, through restore, ``merge`` and ``minidl verify``).  A sample runs
with the suite; the full run (100,000 cases) is in the slow tier:
``pytest -m slow tests/io/test_io_mutation_fuzz.py``."""

import json
import os
import subprocess
import sys

import pytest

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fuzz_worker.py")
PER_CASE_SECONDS = 5  # far above the milliseconds a case takes: only a hang gets near it


def fuzz(cases: int, seed: int, timeout: float) -> dict:
    environment = dict(os.environ)
    project = os.path.dirname(os.path.dirname(os.path.dirname(WORKER)))
    environment["PYTHONPATH"] = os.pathsep.join(
        [project] + [p for p in environment.get("PYTHONPATH", "").split(os.pathsep) if p])
    done = subprocess.run([sys.executable, WORKER, "--cases", str(cases), "--seed", str(seed)],
                          capture_output=True, text=True, timeout=timeout, env=environment)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def check(report: dict) -> None:
    unexpected = {k: v for k, v in report["outcomes"].items() if k not in ("ok", "CheckpointError")}
    assert not unexpected, (unexpected, report["unexpected"])
    assert report["outcomes"]["CheckpointError"] > report["cases"] // 2  # the damage was seen
    assert report["slowest_case_s"] < PER_CASE_SECONDS
    assert report["peak_growth_bytes"] <= 2 * report["largest_file_bytes"] + (64 << 20)


def test_a_sample_of_damaged_files_raises_only_checkpoint_errors():
    check(fuzz(cases=1500, seed=0, timeout=600))


@pytest.mark.slow
@pytest.mark.parametrize("seed", [100, 101, 102, 103])
def test_a_hundred_thousand_damaged_files_raise_only_checkpoint_errors(seed):
    """Four runs of 25,000 cases (100,000 in all), each in a fresh process."""
    check(fuzz(cases=25_000, seed=seed, timeout=3600))
