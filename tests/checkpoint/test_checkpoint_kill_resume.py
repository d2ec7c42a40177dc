"""The promise of the API: a run SIGKILLed at any moment, even inside a save, and started
again with the same script ends bitwise identical to a run that was never interrupted.

A few trials run here; ``benchmarks/stress_kill_resume.py`` runs hundreds of kills.
"""

import numpy as np
import pytest

from kill_harness import bitwise_differences, load_result, run_uninterrupted, run_with_kills

STEPS = 40
# 16 MB of ballast makes every save (every 2 steps) take far longer than a training step, so
# most kills land inside a save.
OPTIONS = ["--steps", str(STEPS), "--save-every", "2", "--ballast-mb", "16"]


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    base = tmp_path_factory.mktemp("reference")
    seconds = run_uninterrupted(str(base / "run"), str(base / "final.npz"), OPTIONS)
    return load_result(str(base / "final.npz")), seconds / STEPS


# Two kill times per save mode; the default tier runs one of each mode (each run costs seconds
# of child processes), the slow tier all four.
@pytest.mark.parametrize("async_save, trial", [
    pytest.param(False, 0, id="0-sync"),
    pytest.param(True, 1, id="1-async"),
    pytest.param(True, 0, id="0-async", marks=pytest.mark.slow),
    pytest.param(False, 1, id="1-sync", marks=pytest.mark.slow),
])
def test_killed_and_restarted_run_ends_bitwise_identical(tmp_path, reference, async_save, trial):
    expected, seconds_per_step = reference
    options = OPTIONS + (["--async"] if async_save else [])
    rng = np.random.default_rng(1000 * trial + async_save)
    stats = run_with_kills(str(tmp_path / "run"), str(tmp_path / "final.npz"), options,
                           kills=4, seconds_per_step=seconds_per_step, total_steps=STEPS, rng=rng)
    assert stats.kills >= 1, stats
    assert bitwise_differences(load_result(str(tmp_path / "final.npz")), expected) == []
    # No temporary file survives the last (clean) run, and the policy held.
    names = sorted((tmp_path / "run").iterdir())
    assert [p.name for p in names if p.name.endswith(".tmp")] == []
    assert len(names) <= 2


def test_sync_and_async_runs_agree(tmp_path, reference):
    expected, _ = reference
    run_uninterrupted(str(tmp_path / "run"), str(tmp_path / "final.npz"), OPTIONS + ["--async"])
    assert bitwise_differences(load_result(str(tmp_path / "final.npz")), expected) == []
