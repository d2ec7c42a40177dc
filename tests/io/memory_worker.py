"""Peak memory of every load path on header-heavy and legitimate files, measured in a child
process (so that nothing the test process already holds is counted).

For each (file, path) it prints one JSON line: the file's size and the peak growth of Python's
traced allocations (NumPy arrays included) while the path ran. The kernels that checksums use
are loaded first, on a small file: their one-time cost is native code, not per file.

    python tests/io/memory_worker.py DIRECTORY [STRINGS]

STRINGS (default 150,000) is the count of the header-heavy files beyond the budget.
"""

from __future__ import annotations

import contextlib
import gc
import io
import json
import os
import sys
import tracemalloc
import warnings

import numpy as np

import minidl as md
from minidl import nn, optim
from minidl.checkpoint import Checkpoint, CheckpointManager
from minidl.cli import main as command_line
from minidl.io import CheckpointError
from minidl.testing.forging import rewrite_header

# The header budget is set to LIMIT, an eighth of the default: the same arithmetic, eight
# times faster. The promise's 64 MB is 4 x the default limit; here it is 4 x LIMIT.
LIMIT = 2 << 20
# 2-character strings: the header items whose real cost is closest to the decoder's estimate.
# 30,000 of them stay just within LIMIT; 150,000 (450 KB) are far beyond it.
WITHIN, BEYOND = 30_000, 150_000


def strings(count: int) -> list:
    return [chr(65 + i % 50) + chr(65 + (i // 50) % 50) for i in range(count)]


def with_junk(path: str, count: int) -> str:
    """The file with ``count`` short strings added to its metadata (header and checksums
    recomputed, as a forger would: minidl's writer refuses headers beyond the budget)."""
    rewrite_header(path, lambda tree: tree["metadata"].update(junk=strings(count)))
    return path


class Net(nn.Module):
    """A user's own model class, as most checkpoints hold."""

    def __init__(self, width: int):
        super().__init__()
        self.first, self.second = nn.Linear(width, width), nn.Linear(width, width)

    def forward(self, x):
        return self.second(nn.functional.relu(self.first(x)))


def training_objects(seed: int, width: int) -> dict:
    md.manual_seed(seed)
    model = Net(width)
    opt = optim.Adam(model.parameters(), lr=0.01)
    model(md.tensor(np.ones((2, width), np.float32))).sum().backward()
    opt.step()
    return {"model": model, "optimizer": opt}


def files(directory: str, beyond: int) -> dict:
    """name -> (path, readers): header-heavy files within and beyond the budget, and
    legitimate files whose size is their tensors."""
    made = {}
    for count in (WITHIN, beyond):
        values = os.path.join(directory, f"values-{count}.mdl")
        md.save({"w": np.ones(4, np.float32)}, values)
        made[f"values with {count} strings"] = (with_junk(values, count), "values")
        model = os.path.join(directory, f"model-{count}.mdl")
        md.save_model(nn.Linear(4, 2), model)
        made[f"model with {count} strings"] = (with_junk(model, count), "model")
        run = os.path.join(directory, f"heavy{count}")
        os.makedirs(run)
        Checkpoint(model=nn.Linear(4, 2)).save(os.path.join(run, "ckpt-step00000001.mdl"), 1)
        made[f"checkpoint with {count} strings"] = (
            with_junk(os.path.join(run, "ckpt-step00000001.mdl"), count), "small checkpoint")
    model = os.path.join(directory, "model.mdl")
    md.save_model(nn.Sequential(nn.Linear(1024, 1024), nn.Linear(1024, 1024)), model)  # 8 MiB
    made["legitimate model"] = (model, "model")
    run = os.path.join(directory, "legitimate")
    os.makedirs(run)
    checkpoint = os.path.join(run, "ckpt-step00000001.mdl")
    Checkpoint(**training_objects(0, 1024)).save(checkpoint, 1)  # 24 MiB: weights, 2 moments
    made["legitimate checkpoint"] = (checkpoint, "checkpoint")
    return made


def readers(kind: str, path: str) -> dict:
    """path name -> a function of the tracked objects (built beforehand, so that building
    them is not counted) that reads ``path`` that way."""
    def inspect(_):
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            command_line(["inspect", path])
    paths = {"read_file": lambda _: md.io.read_file(path), "inspect": inspect}
    if kind in ("values", "model"):
        paths["md.load"] = lambda _: md.load(path)
        paths["md.load mmap"] = lambda _: md.load(path, mmap=True)
    if kind == "model":
        paths["load_model"] = lambda _: md.load_model(path)
    if kind in ("checkpoint", "small checkpoint"):
        paths["Checkpoint.restore"] = lambda objects: Checkpoint(**objects).restore(path)
        paths["restore_latest"] = lambda objects: CheckpointManager(
            Checkpoint(**objects), os.path.dirname(path)).restore_latest()
    return paths


def tracked_objects(kind: str) -> dict | None:
    if kind == "checkpoint":
        return training_objects(1, 1024)
    return {"model": nn.Linear(4, 2)} if kind == "small checkpoint" else None


def measure(function) -> int:
    """Peak growth of traced allocations while ``function`` runs (refusals included)."""
    gc.collect()
    tracemalloc.reset_peak()
    before = tracemalloc.get_traced_memory()[0]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            function()
    except CheckpointError:
        pass  # refused: what it cost until then is what counts
    return tracemalloc.get_traced_memory()[1] - before


def main(directory: str, beyond: int = BEYOND) -> None:
    md.io.set_header_memory_limit(LIMIT)
    print(json.dumps({"limit": LIMIT}), flush=True)
    warm = os.path.join(directory, "warm.mdl")
    md.save({"w": np.ones(1 << 20, np.float32)}, warm)
    md.load(warm)
    for name, (path, kind) in files(directory, beyond).items():
        for reader, function in readers(kind, path).items():
            objects = tracked_objects(kind)
            tracemalloc.start()
            growth = measure(lambda: function(objects))
            tracemalloc.stop()
            del objects
            print(json.dumps({"file": name, "path": reader, "file_bytes": os.path.getsize(path),
                              "growth_bytes": growth}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1], *map(int, sys.argv[2:3]))
