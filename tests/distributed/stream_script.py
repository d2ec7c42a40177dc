"""Streaming CSV reading in a data-parallel job, checkpointed through a CheckpointManager.

Usage: [mpiexec -n N] python stream_script.py DATA.csv DIRECTORY OUTPUT.json STEPS [STOP]
Each rank streams its byte range; every 2 steps the job saves. Rank 0 writes, as JSON, the
row ids each rank read at each step of this start.
"""

import json
import sys

import minidl.distributed as dist
from minidl.checkpoint import Checkpoint, CheckpointManager
from minidl.data import CSVReader


def main(path, directory, output, steps, stop=None):
    dist.init_process_group(timeout=60)
    rank, world = dist.get_rank(), dist.get_world_size()
    reader = CSVReader(path, 3, shuffle_buffer=4, seed=1, rank=rank, world_size=world)
    manager = CheckpointManager(Checkpoint(reader=reader), directory, save_every_steps=2)
    start = manager.restore_latest() or 0
    seen = []
    for step in range(start, steps):
        ids = reader.next_batch()[0][:, 0].astype(int).tolist()
        seen.append(dist.all_gather_object(ids))
        manager.maybe_save(step + 1)
        if stop is not None and step + 1 >= stop:
            break
    if rank == 0:
        with open(output, "w") as f:
            json.dump({"start": start, "seen": seen}, f)


if __name__ == "__main__":
    main(*sys.argv[1:4], *map(int, sys.argv[4:]))
