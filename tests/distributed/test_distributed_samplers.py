"""DataLoader(sampler=DistributedSampler(...)) under mpiexec: the ranks read disjoint shares of
each epoch, and rank 0's checkpoint resumes every rank mid-epoch exactly."""

import json
import os

from mpi_run import HERE, requires_mpi, run

pytestmark = requires_mpi
SCRIPT = os.path.join(HERE, "sampler_script.py")


def test_every_rank_resumes_its_share_from_rank_0s_checkpoint(tmp_path):
    run(2, SCRIPT, str(tmp_path / "full"), str(tmp_path / "full.json"), "9")
    run(2, SCRIPT, str(tmp_path / "cut"), str(tmp_path / "a.json"), "9", "5")
    run(2, SCRIPT, str(tmp_path / "cut"), str(tmp_path / "b.json"), "9")
    full, first, second = (json.loads((tmp_path / n).read_text())
                           for n in ("full.json", "a.json", "b.json"))
    assert second["start"] == 4  # saved every 2 steps: the run stopped at 5 resumes from 4
    assert first["seen"][:4] + second["seen"] == full["seen"]
    # An epoch is 4 steps (10 of the 19 samples per rank, padded): the ranks' shares of it are
    # disjoint but for the one padding sample, and cover the data set.
    epoch = [i for step in full["seen"][:4] for i in step[0] + step[1]]
    assert sorted(set(epoch)) == list(range(19)) and len(epoch) == 20
