"""Benchmark loading models and hostile files: what checking a file costs next to reading it.

* ``load_model`` against ``md.load`` of the same model file (the ratio is the figure: building
  the module must add little to reading and verifying the weights), and ``load_model(mmap=True)``
  against a lazy ``md.load(mmap=True, verify=False)`` that then touches every byte;
* reading a file of 100,000 zero-size tensors (the cost per index entry);
* refusing a header of dense empty msgpack maps (time and peak memory).

Run: ``python benchmarks/bench_model_load.py [--model-mb 1024]``.  Files go to a temporary
directory under the current directory and are deleted.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
import tracemalloc

import numpy as np

import minidl as md
from minidl import nn


def best_of(repeats: int, fn) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def touch(arrays) -> None:
    """Read every byte, as a first forward pass would."""
    for array in arrays:
        np.add.reduce(array.reshape(-1).view(np.uint8), dtype=np.uint64)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-mb", type=int, default=1024)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    width = 4096
    layers = max(1, args.model_mb * (1 << 20) // (width * width * 4))
    rows = []
    with tempfile.TemporaryDirectory(dir=os.getcwd(), prefix=".bench_model_") as tmp:
        path = os.path.join(tmp, "model.mdl")
        with nn.init.skip_init():  # the values do not matter, only the bytes
            model = nn.Sequential(*[nn.Linear(width, width) for _ in range(layers)])
        model.load_state_dict({k: np.ones(v.shape, v.dtype) for k, v in model.state_dict().items()},
                              assign=True)
        md.save_model(model, path)
        del model
        size = os.path.getsize(path)
        md.load(path)  # warm: page cache and the checksum kernel
        load = best_of(args.repeats, lambda: md.load(path))
        load_model = best_of(args.repeats, lambda: md.load_model(path))
        lazy = best_of(args.repeats, lambda: touch(
            md.load(path, mmap=True, verify=False)["state_dict"].values()))
        mapped = best_of(args.repeats, lambda: touch(
            md.load_model(path, mmap=True).state_dict().values()))
        rows += [(f"md.load, {size / 2**30:.2f} GiB model file", f"{load:.2f} s", ""),
                 ("md.load_model, same file", f"{load_model:.2f} s",
                  f"{load_model / load:.2f}x md.load (target <= 1.5x)"),
                 ("md.load(mmap=True, verify=False) + touching the data", f"{lazy:.2f} s", ""),
                 ("md.load_model(mmap=True) + touching the data", f"{mapped:.2f} s",
                  f"{mapped / lazy:.2f}x lazy open (target <= 1.5x)")]

        zeros = os.path.join(tmp, "zeros.mdl")
        md.save({f"t{i}": np.zeros(0, np.float32) for i in range(100_000)}, zeros)
        per_entry = best_of(args.repeats, lambda: md.load(zeros))
        rows.append(("md.load, 100,000 zero-size tensors", f"{per_entry:.2f} s",
                     f"{per_entry * 1e6 / 100_000:.1f} us per tensor"))

        bomb = os.path.join(tmp, "bomb.mdl")
        count = 8 << 20  # 8 MiB of empty maps, in arrays of 4096
        metadata = {"value": [[{}] * 4096] * (count // 4096)}
        md.io.set_header_memory_limit(1 << 40)  # write it (the writer checks the same budget)
        md.io.write_file(bomb, metadata, {}, kind="values")
        md.io.set_header_memory_limit(64 << 20)

        def refuse():
            try:
                md.load(bomb)
            except md.CheckpointError:
                return
            raise AssertionError("the header bomb was accepted")
        elapsed = best_of(args.repeats, refuse)
        tracemalloc.start()  # a second run for memory: tracing slows allocation down
        refuse()
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        rows.append((f"refusing {os.path.getsize(bomb) / 2**20:.0f} MiB of empty msgpack maps",
                     f"{elapsed:.2f} s", f"peak {peak / 2**20:.0f} MiB"))

    print("| measure | result | note |\n| --- | --- | --- |")
    for row in rows:
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
