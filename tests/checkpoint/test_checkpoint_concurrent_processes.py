"""A trainer process saving with max_to_keep=1 while this process, as an evaluator, keeps
creating managers on the same directory and restoring the latest checkpoint: neither side
may fail (no deleted save in progress, no restore giving up while a sound file exists)."""

import os
import subprocess
import sys
import textwrap
import warnings

from minidl.checkpoint import Checkpoint, CheckpointManager

TRAINER = textwrap.dedent("""
    import sys
    import numpy as np
    import minidl as md

    class State:
        def __init__(self):
            self.step, self.weights = 0, np.zeros(20_000)
        def state_dict(self):
            return {"step": self.step, "weights": self.weights}
        def load_state_dict(self, state):
            self.step, self.weights = state["step"], state["weights"]

    state = State()
    manager = md.CheckpointManager(md.Checkpoint(state=state), sys.argv[1], max_to_keep=1)
    for step in range(1, int(sys.argv[2]) + 1):
        state.step, state.weights = step, np.full(20_000, float(step))
        manager.save(step)  # raises if its temporary file was deleted under it
    print("trainer done")
""")


class Seen:
    def __init__(self):
        self.step, self.weights = -1, None

    def state_dict(self):
        return {"step": self.step, "weights": self.weights}

    def load_state_dict(self, state):
        self.step, self.weights = state["step"], state["weights"]


def test_a_trainer_and_an_evaluator_share_a_directory(tmp_path):
    project = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    environment = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [project] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    trainer = subprocess.Popen([sys.executable, "-c", TRAINER, str(tmp_path), "100"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env=environment)
    restored = []
    try:
        while trainer.poll() is None:
            seen = Seen()
            with warnings.catch_warnings():
                warnings.simplefilter("error")  # a vanished file is no reason to warn
                evaluator = CheckpointManager(Checkpoint(state=seen), tmp_path)
                step = evaluator.restore_latest()
            if step is not None:
                assert seen.step == step and float(seen.weights[0]) == step  # no torn read
                restored.append(step)
    finally:
        out, err = trainer.communicate(timeout=120)
    assert trainer.returncode == 0 and "trainer done" in out, err[-2000:]
    assert restored and restored == sorted(restored)
