"""Elastic resume: a job checkpointed at 3 ranks continues at 2 ranks or 1 process on the
same global sample sequence, and (same global batch) trains to the same weights."""

import shutil

import numpy as np
import pytest

from mpi_run import SCRIPT, requires_mpi, run

pytestmark = requires_mpi


def load(path):
    with np.load(path) as archive:
        return {name: archive[name] for name in archive.files}


@pytest.fixture(scope="module")
def saved_at_three(tmp_path_factory):
    base = tmp_path_factory.mktemp("elastic")
    run(3, SCRIPT, str(base / "full.npz"), "--steps", "12")
    run(3, SCRIPT, str(base / "half.npz"), "--dir", str(base / "run"), "--steps", "12",
        "--stop-after", "6")
    return base


@pytest.mark.parametrize("ranks", [2, 1])
def test_save_at_three_resume_at_fewer_ranks(tmp_path, saved_at_three, ranks):
    shutil.copytree(saved_at_three / "run", tmp_path / "run")
    run(ranks, SCRIPT, str(tmp_path / "resumed.npz"), "--dir", str(tmp_path / "run"),
        "--steps", "12")
    resumed, full = load(tmp_path / "resumed.npz"), load(saved_at_three / "full.npz")
    half = load(saved_at_three / "half.npz")
    # Steps 1-6 at 3 ranks, then 7-12 here: together, the uninterrupted 3-rank sequence.
    assert len(resumed["consumed"]) == 6
    np.testing.assert_array_equal(np.concatenate([half["consumed"], resumed["consumed"]]),
                                  full["consumed"])
    np.testing.assert_array_equal(resumed["reader"], full["reader"])
    for name in full:
        if name.startswith(("model/", "optimizer/")):
            np.testing.assert_allclose(resumed[name], full[name], rtol=0, atol=1e-6,
                                       err_msg=name)
