"""Mutation fuzzing of minidl's readers, run in a child process so that its peak memory,
a crash or a hang can be seen from outside.

Each case damages a sound file -- flipped bits, overwritten, inserted or cut bytes, often in
the header, and for half of the header cases the header and prelude checksums are
recomputed afterwards (as a forger would) so that the damage reaches the decoder and the
validators behind them -- and hands it to one reader. A sharded checkpoint is two files, its
index and its shard: either is damaged, and a damaged shard is, half the time, re-recorded in
the index (its size and SHA-256, as a forger would) so that the damage reaches the shard's
own reader; its readers are restore, ``merge`` and ``minidl verify``.  The only acceptable outcomes are a
result or a ``CheckpointError``.  Prints one JSON line: cases run, outcomes, the slowest
case, peak memory growth, and the first unexpected exceptions.

    python tests/io/fuzz_worker.py --cases 2000 --seed 0
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import os
import random
import resource
import struct
import sys
import tempfile
import time
import traceback
import warnings

import numpy as np

import minidl as md
from minidl import nn, optim
from minidl.checkpoint import Checkpoint, merge_checkpoint, sharded
from minidl.cli import main as command_line
from minidl.io.checksum import checksum
from minidl.testing.forging import rewrite_header

KEY = bytes(range(32))


def build_corpus(directory: str) -> list[tuple[str, bytes]]:
    """Sound files of every kind: (kind, bytes)."""
    md.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 3), nn.BatchNorm1d(3), nn.ReLU(), nn.Linear(3, 2))
    opt = optim.Adam(model.parameters(), lr=0.01)
    loss = model(md.tensor(np.ones((2, 4), np.float32))).sum()
    loss.backward()
    opt.step()
    value = {"w": np.arange(6, dtype=np.float32).reshape(2, 3), "b": np.array([True, False]),
             "e": np.zeros((0, 3), np.int64), "h": np.ones(5, np.float16),
             "meta": {"step": 3, "name": "run", "lr": 0.5, "tags": [1, "x", None, b"\x00"]}}
    corpus = []
    for kind, write in [
            ("values", lambda p: md.save(value, p)),
            ("values", lambda p: md.save(value, p, key=KEY)),
            ("model", lambda p: md.save_model(model, p)),
            ("checkpoint", lambda p: Checkpoint(model=model, optimizer=opt).save(
                p, step=7, metadata={"loss": 1.5}))]:
        path = os.path.join(directory, "seed.mdl")
        write(path)
        with open(path, "rb") as file:
            corpus.append((kind, file.read()))
    return corpus


INDEX, SHARD = "case.mdl", "case.shard-00000-of-00001.mdl"


def sharded_model():
    md.manual_seed(0)
    model = nn.Linear(4, 3)
    opt = optim.ZeroRedundancyOptimizer(model.parameters(), optim.Adam, lr=0.01)
    model(md.tensor(np.ones((2, 4), np.float32))).sum().backward()
    opt.step()
    return model, opt


def build_sharded(directory: str) -> tuple[bytes, bytes]:
    """A sound one-rank sharded checkpoint: (index bytes, shard bytes)."""
    model, opt = sharded_model()
    os.makedirs(os.path.join(directory, "sharded"), exist_ok=True)
    index = os.path.join(directory, "sharded", INDEX)
    shards = sharded.write_shards(index, 7, {"optimizer": opt})
    Checkpoint.write(index, Checkpoint(model=model, optimizer=opt).stage(7, shards=shards))
    with open(index, "rb") as file, open(os.path.join(directory, "sharded", SHARD), "rb") as f:
        return file.read(), f.read()


def write_sharded(directory: str, index: bytes, shard: bytes, record_shard: bool) -> str:
    """Write the pair as ``case.mdl`` and its shard; ``record_shard`` makes the index vouch
    for the shard's (damaged) bytes. Returns the index path."""
    path = os.path.join(directory, INDEX)
    with open(path, "wb") as file:
        file.write(index)
    with open(os.path.join(directory, SHARD), "wb") as file:
        file.write(shard)
    if record_shard:
        def vouch(tree):
            entry = tree["metadata"]["shards"]["files"][0]
            entry["bytes"], entry["sha256"] = len(shard), hashlib.sha256(shard).hexdigest()
        rewrite_header(path, vouch)
    return path


def sharded_readers():
    def restore(p):
        md.manual_seed(1)
        model, opt = nn.Linear(4, 3), None
        opt = optim.ZeroRedundancyOptimizer(model.parameters(), optim.Adam, lr=0.5)
        Checkpoint(model=model, optimizer=opt).restore(p)

    def verify(p):
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            status = command_line(["verify", p])
        if status != 0:
            raise md.CheckpointError(p, "minidl verify: FAILED")

    return [("restore sharded", restore),
            ("merge", lambda p: merge_checkpoint(p, os.path.join(os.path.dirname(p), "out.mdl"))),
            ("verify sharded", verify)]


def reseal(data: bytearray) -> None:
    """Recompute the header and prelude checksums of (possibly damaged) file bytes."""
    if len(data) < 64:
        return
    length = struct.unpack_from("<Q", data, 16)[0]
    if 64 + length <= len(data):
        struct.pack_into("<Q", data, 24, checksum(bytes(data[64:64 + length])))
    struct.pack_into("<Q", data, 44, checksum(bytes(data[:44])))


INTERESTING = [0x00, 0xFF, 0x7F, 0x80, 0xC0, 0xC1, 0xCA, 0xCF, 0xD3, 0xDC, 0xDD, 0xDE, 0xDF,
               0xC4, 0xC7, 0xD4, 0x90, 0x9F, 0x80, 0x8F, 0xA0, 0xBF]


def mutate(rng: random.Random, original: bytes) -> bytes:
    data = bytearray(original)
    header_length = struct.unpack_from("<Q", original, 16)[0]
    in_header = rng.random() < 0.6
    for _ in range(rng.choice([1, 1, 1, 2, 3, 8])):
        if not data:
            break
        end = min(len(data), 64 + header_length) if in_header else len(data)
        at = rng.randrange(0, max(1, end))
        kind = rng.random()
        if kind < 0.4:
            data[at] ^= 1 << rng.randrange(8)
        elif kind < 0.65:
            data[at] = rng.choice(INTERESTING) if rng.random() < 0.6 else rng.randrange(256)
        elif kind < 0.75:
            data[at:at] = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 9)))
        elif kind < 0.85:
            del data[at:at + rng.randrange(1, 9)]
        elif kind < 0.92:
            del data[at:]
        else:  # a length or count field set to something huge
            data[at:at + 5] = bytes([rng.choice([0xDD, 0xDF, 0xC6, 0xDB])]) + b"\xff\xff\xff\x7f"
    if in_header and rng.random() < 0.5:
        reseal(data)
    return bytes(data)


def readers_for(kind: str, encrypted: bool):
    key = {"key": KEY} if encrypted else {}
    load = md.load if kind != "checkpoint" else md.io.read_file  # md.load has no checkpoints
    readers = [("load", lambda p: load(p, **key)),
               ("load mmap", lambda p: load(p, mmap=True, **key)),
               ("read_header", lambda p: md.io.read_header(p, **key)),
               ("verify_file", lambda p: md.io.verify_file(p, **key))]
    if kind == "model":
        readers.append(("load_model", lambda p: md.load_model(p, **key)))
        readers.append(("load_model mmap", lambda p: md.load_model(p, mmap=True, **key)))
    if kind == "checkpoint":
        def restore(p):
            md.manual_seed(1)
            model = nn.Sequential(nn.Linear(4, 3), nn.BatchNorm1d(3), nn.ReLU(), nn.Linear(3, 2))
            opt = optim.Adam(model.parameters(), lr=0.01)
            Checkpoint(model=model, optimizer=opt).restore(p)
        readers.append(("restore", restore))
    return readers


def peak_rss_bytes() -> int:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024


def run(cases: int, seed: int) -> dict:
    rng = random.Random(seed)
    outcomes = {"ok": 0, "CheckpointError": 0}
    unexpected = []
    slowest = 0.0
    with tempfile.TemporaryDirectory(prefix="minidl-fuzz-") as directory:
        corpus = build_corpus(directory)
        index, shard = build_sharded(directory)
        path = os.path.join(directory, INDEX)
        for kind, data in corpus:  # warm up every reader on sound files first
            for _, reader in readers_for(kind, data[12] & 1 == 1):
                with open(path, "wb") as file:
                    file.write(data)
                reader(path)
        for _, reader in sharded_readers():
            reader(write_sharded(directory, index, shard, record_shard=False))
        baseline = peak_rss_bytes()
        largest = 0
        for case in range(cases):
            choice = rng.randrange(len(corpus) + 2)  # the last two: a sharded checkpoint
            if choice < len(corpus):
                kind, original = corpus[choice]
                readers = readers_for(kind, original[12] & 1 == 1)
                name, reader = readers[rng.randrange(len(readers))]
                damaged = mutate(rng, original)
                with open(path, "wb") as file:
                    file.write(damaged)
            else:
                kind = "sharded index" if choice == len(corpus) else "shard"
                name, reader = rng.choice(sharded_readers())
                damaged = mutate(rng, index if kind == "sharded index" else shard)
                write_sharded(directory, damaged if kind == "sharded index" else index,
                              damaged if kind == "shard" else shard,
                              record_shard=kind == "shard" and rng.random() < 0.5)
            largest = max(largest, len(damaged))
            start = time.perf_counter()
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    reader(path)
                outcomes["ok"] += 1
            except md.CheckpointError:
                outcomes["CheckpointError"] += 1
            except Exception as exc:  # noqa: BLE001 - what the fuzz is looking for
                outcomes[type(exc).__name__] = outcomes.get(type(exc).__name__, 0) + 1
                if len(unexpected) < 5:
                    unexpected.append({"case": case, "reader": name, "kind": kind,
                                       "error": "".join(traceback.format_exception(exc))[-1500:],
                                       "bytes": damaged.hex()[:4000]})
            slowest = max(slowest, time.perf_counter() - start)
        growth = peak_rss_bytes() - baseline
    return {"cases": cases, "seed": seed, "outcomes": outcomes, "unexpected": unexpected,
            "slowest_case_s": slowest, "peak_growth_bytes": max(growth, 0),
            "largest_file_bytes": largest}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    print(json.dumps(run(args.cases, args.seed)))


if __name__ == "__main__":
    main()
