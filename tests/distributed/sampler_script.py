"""A DataLoader ordered by a DistributedSampler in a data-parallel job, checkpointed through a
CheckpointManager.

Usage: [mpiexec -n N] python sampler_script.py DIRECTORY OUTPUT.json STEPS [STOP]
Every 2 steps the job saves. Rank 0 writes, as JSON, the sample ids each rank read at each step
of this start.
"""

import json
import sys

import numpy as np

import minidl.distributed as dist
from minidl.checkpoint import Checkpoint, CheckpointManager
from minidl.data import DataLoader, DistributedSampler, TensorDataset


def main(directory, output, steps, stop=None):
    dist.init_process_group(timeout=60)
    dataset = TensorDataset(np.arange(19, dtype=np.int64))
    loader = DataLoader(dataset, batch_size=3, sampler=DistributedSampler(dataset, seed=5))
    manager = CheckpointManager(Checkpoint(loader=loader), directory, save_every_steps=2)
    start = manager.restore_latest() or 0
    seen = []
    for step in range(start, steps):
        ids = loader.next_batch()[0].numpy().tolist()
        seen.append(dist.all_gather_object(ids))
        manager.maybe_save(step + 1)
        if stop is not None and step + 1 >= stop:
            break
    if dist.get_rank() == 0:
        with open(output, "w") as f:
            json.dump({"start": start, "seen": seen}, f)


if __name__ == "__main__":
    main(*sys.argv[1:3], *map(int, sys.argv[3:]))
