"""``md.fit`` works unchanged under mpiexec: job-wide metrics, progress from rank 0 only."""

import os

import numpy as np

import minidl as md

from mpi_run import HERE, requires_mpi, run

pytestmark = requires_mpi
SCRIPT = os.path.join(HERE, "fit_script.py")


def load(path):
    with np.load(path) as archive:
        return {name: archive[name] for name in archive.files}


def test_fit_on_two_ranks_logs_once_and_matches_one_process(tmp_path):
    single = run(1, SCRIPT, str(tmp_path / "one"))
    double = run(2, SCRIPT, str(tmp_path / "two"), "--dir", str(tmp_path / "ckpt"))
    one = load(tmp_path / "one-rank0.npz")
    ranks = [load(tmp_path / f"two-rank{r}.npz") for r in range(2)]
    # Every rank's history is the job's (identical), and equals the one-process run's.
    for name in ("loss", "accuracy", "val_loss"):
        assert ranks[0][name].tobytes() == ranks[1][name].tobytes()
        np.testing.assert_allclose(ranks[0][name], one[name], rtol=0, atol=1e-9)
    np.testing.assert_allclose(ranks[0]["weight"], one["weight"], rtol=0, atol=1e-9)
    # One progress report and one callback message per epoch in both runs: rank 1 printed
    # nothing, and wrote nothing either (one CSV row per epoch, as one process writes).
    count = lambda text: sum("epoch 3" in line for line in text.splitlines())  # noqa: E731
    assert count(single.stderr + single.stdout) == 2
    assert count(double.stderr + double.stdout) == 2
    with open(tmp_path / "one.csv") as one_csv, open(tmp_path / "two.csv") as two_csv:
        rows = two_csv.read().splitlines()
        assert len(rows) == 1 + 3 and len(one_csv.read().splitlines()) == 1 + 3
    assert rows[0].split(",")[0] == "epoch" and [r.split(",")[0] for r in rows[1:]] == ["0", "1", "2"]
    assert (tmp_path / "two.png").stat().st_size > 0
    assert os.listdir(tmp_path / "ckpt")  # rank 0 wrote the checkpoints
    # ModelCheckpoint saved the model inside the DDP wrapper, loadable by a single process.
    best = md.load_model(str(tmp_path / "two-best.mdl"))
    np.testing.assert_array_equal(best[0].weight.numpy(), ranks[0]["weight"])
