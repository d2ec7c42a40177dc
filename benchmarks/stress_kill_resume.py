"""Stress test: SIGKILL a checkpointing training run hundreds of times, resume it each time,
and check that it still ends bitwise identical to a run that was never interrupted.

The training script and the kill harness are the ones the test suite uses
(``tests/checkpoint/``): a tiny model with Dropout and BatchNorm, Adam, StepLR, a shuffled
DataReader and a CheckpointManager saving every 2 steps, with megabytes of ballast so that
saves take most of the time and many kills land inside one.  Half the trials save
synchronously, half in the background.  Run: ``python benchmarks/stress_kill_resume.py``
(``--kills 200`` in all by default).  A kill counts as inside a save when it left the
hidden temporary file of a half-written checkpoint (a lower bound: a kill during the
final rename's directory fsync or the deletion of an old checkpoint is not counted).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                "checkpoint"))
from kill_harness import (  # noqa: E402
    bitwise_differences, load_result, run_uninterrupted, run_with_kills)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=200, help="kills in all (default 200)")
    parser.add_argument("--kills-per-trial", type=int, default=10)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--ballast-mb", type=float, default=16)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    options = ["--steps", str(args.steps), "--save-every", "2", "--ballast-mb",
               str(args.ballast_mb)]
    rng = np.random.default_rng(args.seed)
    rows = {False: [0, 0, 0, 0, 0, True], True: [0, 0, 0, 0, 0, True]}  # trials..equal
    began = time.perf_counter()
    with tempfile.TemporaryDirectory(dir=".") as scratch:
        reference_path = os.path.join(scratch, "reference.npz")
        seconds_per_step = run_uninterrupted(os.path.join(scratch, "reference"),
                                             reference_path, options)
        expected = load_result(reference_path)
        trial, done = 0, 0
        while done < args.kills:
            async_save = trial % 2 == 1
            run_dir = os.path.join(scratch, f"trial{trial}")
            output = os.path.join(scratch, f"trial{trial}.npz")
            kills = min(args.kills_per_trial, args.kills - done)
            stats = run_with_kills(run_dir, output, options + (["--async"] if async_save else []),
                                   kills, seconds_per_step, args.steps, rng)
            equal = bitwise_differences(load_result(output), expected) == []
            row = rows[async_save]
            row[0] += 1
            row[1] += stats.kills
            row[2] += stats.kills_inside_save
            row[3] += stats.restarts
            row[4] += stats.seconds
            row[5] = row[5] and equal
            if stats.kills == 0:
                raise SystemExit("no kill landed: the runs finish faster than the kills are aimed")
            done += stats.kills
            trial += 1
            print(f"trial {trial:3d} {'async' if async_save else 'sync '}: {stats.kills} kills "
                  f"({stats.kills_inside_save} inside a save), {stats.restarts} restarts, "
                  f"equal: {'yes' if equal else 'NO'}", flush=True)

    print()
    print(f"{'mode':<6} {'trials':>6} {'kills':>6} {'in save':>8} {'restarts':>9} "
          f"{'seconds':>8}  result equal")
    for async_save, (trials, kills, inside, restarts, seconds, equal) in rows.items():
        print(f"{'async' if async_save else 'sync':<6} {trials:>6} {kills:>6} {inside:>8} "
              f"{restarts:>9} {seconds:>8.1f}  {'yes' if equal else 'NO'}")
    total = [sum(r[i] for r in rows.values()) for i in range(4)]
    all_equal = all(r[5] for r in rows.values())
    print(f"{'all':<6} {total[0]:>6} {total[1]:>6} {total[2]:>8} {total[3]:>9} "
          f"{time.perf_counter() - began:>8.1f}  {'yes' if all_equal else 'NO'}")
    return 0 if all_equal else 1


if __name__ == "__main__":
    sys.exit(main())
