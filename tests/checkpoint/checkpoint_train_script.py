"""A tiny training run that checkpoints as it goes; the kill tests start it, SIGKILL it and
start it again until it finishes, then compare its final state with an uninterrupted run.

Usage: python checkpoint_train_script.py DIRECTORY OUTPUT.npz [--steps N] [--save-every K]
       [--async] [--ballast-mb M]

The model has Dropout (draws from the global RNG) and BatchNorm (running buffers); the
optimizer is Adam with a StepLR schedule; the reader shuffles.  ``--ballast-mb`` tracks an
extra object of M megabytes so that saves take long enough for a kill to land inside one.
The script reports its progress on stdout ("training START" once restored, "saving N"
before a step's save, "step N" when the step is done), so a harness can aim its kills at
chosen steps and tell afterwards whether a kill interrupted a save.
"""

import argparse
import os
import sys

import numpy as np

import minidl as md
from minidl import nn, optim
from minidl.checkpoint import Checkpoint, CheckpointManager
from minidl.data import ArrayDataset, DataReader


class Ballast:
    """Bulky constant state: makes each checkpoint file (and so each save) bigger."""

    def __init__(self, megabytes: float):
        self.values = np.arange(int(megabytes * (1 << 20)) // 8, dtype=np.float64)

    def state_dict(self):
        return {"values": self.values}

    def load_state_dict(self, state):
        if state["values"].shape != self.values.shape:
            raise ValueError("ballast of another size")
        self.values = np.array(state["values"])


def build(ballast_mb: float):
    md.manual_seed(0)
    data = np.random.default_rng(123)
    features = data.standard_normal((200, 10)).astype(np.float32)
    labels = data.integers(0, 4, 200).astype(np.int64)
    model = nn.Sequential(nn.Linear(10, 32), nn.BatchNorm1d(32), nn.ReLU(), nn.Dropout(0.3),
                          nn.Linear(32, 4))
    opt = optim.Adam(model.parameters(), lr=1e-2)
    sched = optim.lr_scheduler.StepLR(opt, step_size=7, gamma=0.7)
    reader = DataReader(ArrayDataset(features, labels), batch_size=16, shuffle=True, seed=5)
    return model, opt, sched, reader, Ballast(ballast_mb)


def final_state(model, opt, sched, reader) -> dict:
    """Everything that must match bit for bit, as a flat dict of arrays."""
    out = {f"model/{k}": np.array(v) for k, v in model.state_dict().items()}
    for index, slots in opt.state_dict()["state"].items():
        for name, value in slots.items():
            out[f"optimizer/{index}/{name}"] = np.array(value)
    out["lr"] = np.array([g["lr"] for g in opt.param_groups])
    out["scheduler/last_epoch"] = np.array(sched.last_epoch)
    xb, yb = reader.next_batch()
    out["next_batch/x"], out["next_batch/y"] = xb, yb
    out["next_rand"] = md.rand(4).numpy()
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("directory")
    parser.add_argument("output")
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--save-every", type=int, default=2)
    parser.add_argument("--async", dest="async_save", action="store_true")
    parser.add_argument("--ballast-mb", type=float, default=0.0)
    args = parser.parse_args(argv)

    model, opt, sched, reader, ballast = build(args.ballast_mb)
    ckpt = Checkpoint(model=model, optimizer=opt, scheduler=sched, reader=reader, ballast=ballast)
    manager = CheckpointManager(ckpt, args.directory, prefix="run", max_to_keep=2,
                                save_every_steps=args.save_every, async_save=args.async_save)
    start = manager.restore_latest() or 0
    print("training", start, flush=True)
    model.train()
    for step in range(start, args.steps):
        xb, yb = reader.next_batch()
        loss = nn.functional.cross_entropy(model(md.tensor(xb)), md.tensor(yb))
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        if (step + 1) % args.save_every == 0:  # the manager is due to save: say so first
            print("saving", step + 1, flush=True)
        manager.maybe_save(step + 1, metrics={"loss": float(loss.item())})
        print("step", step + 1, flush=True)
    manager.wait()
    print("trained", flush=True)

    # The result file is itself written atomically: a kill while dumping leaves nothing.
    temp = args.output + ".partial.npz"
    np.savez(temp, **final_state(model, opt, sched, reader))
    os.replace(temp, args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
