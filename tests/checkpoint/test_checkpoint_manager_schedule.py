"""When a CheckpointManager saves with both a step and a time policy, and what epoch its file
names carry in a hand-written loop (the rule of ``fit``)."""

import os

import numpy as np

from minidl.checkpoint import Checkpoint, CheckpointManager, naming
from minidl.data import ArrayDataset, DataReader


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_with_a_step_and_a_time_policy_the_step_policy_wins(tmp_path):
    clock = Clock()
    reader = DataReader(ArrayDataset(np.arange(10.0)), batch_size=1)
    manager = CheckpointManager(Checkpoint(reader=reader), tmp_path, save_every_steps=25,
                                save_every_seconds=60, max_to_keep=None, clock=clock)
    saved = []
    for step in range(1, 80):
        clock.now += 7.0  # 7 s a step: the clock alone would save every 9 steps
        if manager.maybe_save(step):
            saved.append(step)
    assert saved == [25, 50, 75]  # MindSpore's rule


def test_a_hand_written_loop_names_the_epoch_as_fit_does(tmp_path):
    # 10 samples, batches of 4: 3 batches an epoch. The name carries the epoch of the last
    # batch trained, counted from 1, as fit's names do.
    reader = DataReader(ArrayDataset(np.arange(10.0)), batch_size=4)
    manager = CheckpointManager(Checkpoint(reader=reader), tmp_path, prefix="own",
                                max_to_keep=None)
    names = [os.path.basename(manager.save(0))]
    for step in range(1, 6):
        reader.next_batch()
        names.append(os.path.basename(manager.save(step)))
    assert [naming.parse_name("own", n).epoch for n in names] == [0, 1, 1, 1, 2, 2]
