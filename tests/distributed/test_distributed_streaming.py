"""Streaming readers in a data-parallel job: each rank reads its byte range, and a checkpoint
written by rank 0 restores every rank's own position."""

import json
import os

from mpi_run import HERE, requires_mpi, run

pytestmark = requires_mpi
SCRIPT = os.path.join(HERE, "stream_script.py")


def test_every_rank_resumes_its_own_stream_from_rank_0s_checkpoint(tmp_path):
    data = tmp_path / "d.csv"
    data.write_text("".join(f"{i},{i % 3}\n" for i in range(60)))
    run(2, SCRIPT, str(data), str(tmp_path / "full"), str(tmp_path / "full.json"), "9")
    run(2, SCRIPT, str(data), str(tmp_path / "cut"), str(tmp_path / "a.json"), "9", "4")
    run(2, SCRIPT, str(data), str(tmp_path / "cut"), str(tmp_path / "b.json"), "9")
    full, first, second = (json.loads((tmp_path / n).read_text())
                           for n in ("full.json", "a.json", "b.json"))
    assert second["start"] == 4
    assert first["seen"] + second["seen"] == full["seen"]
    # The ranks read disjoint halves of the file.
    rank0 = {i for step in full["seen"] for i in step[0]}
    rank1 = {i for step in full["seen"] for i in step[1]}
    assert max(rank0) < min(rank1)
