"""How long a training step stalls when it triggers a checkpoint: sync vs async saves.

A model-sized state (about 100 MB by default: parameters plus Adam's two moment buffers
of the same size) is tracked by a CheckpointManager.  For a synchronous save the step
waits for the whole save (snapshot, checksums, write, fsync, rename).  With
``async_save=True`` it waits only for the snapshot (a copy of the arrays in memory); the
file is written on a background thread while the next steps run.  Run:
``python benchmarks/bench_checkpoint.py [--mb 100] [--repeats 5]``.  Files go to a
temporary directory under the current directory (the project's filesystem) and are
deleted.

What bounds the ratio: the async stall is one memory copy of the state (into the buffers
of the previous snapshot, so no page faults), while the sync save is a checksum pass, a
write and an fsync.  Where fsync is nearly free (a VM disk with a write-back cache) the
sync save runs at memory speed too and the ratio is around a tenth; on storage where
durability costs real time it is far smaller.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import numpy as np

from minidl.checkpoint import Checkpoint, CheckpointManager


class ModelState:
    """Stands in for a model with ``n`` float32 parameters and its Adam slots."""

    def __init__(self, megabytes: float):
        n = int(megabytes * (1 << 20)) // (3 * 4)
        rng = np.random.default_rng(0)
        self.arrays = {name: rng.standard_normal(n, dtype=np.float32)
                       for name in ("weights", "exp_avg", "exp_avg_sq")}

    def state_dict(self):
        return self.arrays

    def load_state_dict(self, state):
        self.arrays = {k: np.array(v) for k, v in state.items()}

    def train_step(self):
        # Touch the state in place, as an optimizer step does.
        self.arrays["weights"][:1024] += 1.0


def measure(megabytes: float, async_save: bool, repeats: int, directory: str) -> tuple[float, float]:
    """(median seconds the triggering step stalls, median seconds until the file is committed)."""
    state = ModelState(megabytes)
    manager = CheckpointManager(Checkpoint(model=state), directory, prefix="async" if async_save
                                else "sync", max_to_keep=2, save_every_steps=1,
                                async_save=async_save)
    stalls, totals = [], []
    for step in range(1, repeats + 2):
        state.train_step()
        start = time.perf_counter()
        manager.maybe_save(step)
        stalled = time.perf_counter() - start
        manager.wait()  # outside the timed stall: only to time the whole save too
        total = time.perf_counter() - start
        if step > 1:  # the first save warms the page cache and the checksum kernel
            stalls.append(stalled)
            totals.append(total)
    return statistics.median(stalls), statistics.median(totals)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=100.0, help="state size in MB")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=".") as directory:
        sync_stall, sync_total = measure(args.mb, False, args.repeats, directory)
        async_stall, async_total = measure(args.mb, True, args.repeats, directory)
    print(f"state: {args.mb:.0f} MB, median of {args.repeats} saves")
    print(f"{'':<24}{'ms':>10}")
    print(f"{'sync save (step stall)':<24}{sync_stall * 1e3:>10.1f}")
    print(f"{'async stall (snapshot)':<24}{async_stall * 1e3:>10.1f}")
    print(f"{'async until committed':<24}{async_total * 1e3:>10.1f}")
    print(f"{'ratio async/sync stall':<24}{async_stall / sync_stall:>10.3f}   "
          f"({'within' if async_stall <= 0.10 * sync_stall else 'ABOVE'} the 10 % target)")


if __name__ == "__main__":
    main()
