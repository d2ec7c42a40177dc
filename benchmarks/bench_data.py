"""How fast the data readers are, next to the work they feed.

Prints one table:

(a) streaming parse throughput (MB of text per second) of ``CSVReader`` and ``CTFReader`` over a
    generated file of about 64 MB (written to a temporary directory and deleted afterwards), plus
    the bare Numba kernel and the plain-Python reference parser for comparison; the CTF file is
    read once with dense streams and once with sparse ones (a bag of words and a one-hot label);
(b) the cost of drawing one shuffled batch from an in-memory ``DataReader``, as a percentage of
    one training step of a 784-512-512-10 MLP with Adam at batch size 128.

Run: ``python benchmarks/bench_data.py [--megabytes 64]``.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

# Run from a source checkout without installing: put the repository root on the path.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from minidl.data import ArrayDataset, CSVReader, CTFReader, DataReader
from minidl.data.parsing import (parse_ctf, parse_ctf_reference, parse_delimited,
                                 parse_delimited_reference)

FEATURES = 32
# The sparse CTF rows: WORDS_PER_LINE distinct words of a VOCABULARY-word bag, a one-hot label.
VOCABULARY, WORDS_PER_LINE, CLASSES = 1000, 8, 10
SPARSE_STREAMS = {"words": {"dim": VOCABULARY, "sparse": True},
                  "labels": {"dim": CLASSES, "sparse": True}}


def sample_rows(rows: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((rows, FEATURES)).astype(np.float32), rng.integers(0, 10, rows)


def write_repeated(path: str, block: bytes, megabytes: float, header: bytes = b"") -> int:
    """Write ``header``, then ``block`` until the file holds ``megabytes``; return its size."""
    target = int(megabytes * 1e6)
    with open(path, "wb") as f:
        f.write(header)
        written = len(header)
        while written < target:
            f.write(block)
            written += len(block)
    return os.path.getsize(path)


def csv_block(rows: int) -> bytes:
    x, y = sample_rows(rows)
    lines = [",".join(f"{v:.6g}" for v in row) + f",{label}" for row, label in zip(x, y)]
    return ("\n".join(lines) + "\n").encode()


def ctf_block(rows: int) -> bytes:
    x, y = sample_rows(rows)
    lines = [f"{i} |features " + " ".join(f"{v:.6g}" for v in row) + f" |labels {label}"
             for i, (row, label) in enumerate(zip(x, y))]
    return ("\n".join(lines) + "\n").encode()


def ctf_sparse_block(rows: int) -> bytes:
    rng = np.random.default_rng(0)
    lines = []
    for i in range(rows):
        words = rng.choice(VOCABULARY, WORDS_PER_LINE, replace=False)
        counts = rng.integers(1, 4, WORDS_PER_LINE)
        entries = " ".join(f"{w}:{c}" for w, c in zip(words, counts))
        lines.append(f"{i} |words {entries} |labels {rng.integers(CLASSES)}:1")
    return ("\n".join(lines) + "\n").encode()


def best_seconds(function, repeats: int = 3) -> float:
    """The fastest of a few runs: the least disturbed by whatever else the machine does."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return min(times)


def stream_throughput(reader, size: int) -> float:
    """Read one whole epoch and return MB/s of file text."""
    start = time.perf_counter()
    for _ in reader:
        pass
    return size / 1e6 / (time.perf_counter() - start)


def streaming_rows(megabytes: float):
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        block = csv_block(20_000)
        header = ",".join(f"x{i}" for i in range(FEATURES)) + ",label\n"
        path = os.path.join(tmp, "bench.csv")
        size = write_repeated(path, block, megabytes, header.encode())
        # Warm up: compile (or load from cache) the kernel before timing.
        CSVReader(path, 1024).next_batch()
        rows.append(("CSVReader, one epoch, batch 1024", stream_throughput(
            CSVReader(path, 1024), size), "MB/s"))
        rows.append(("CSVReader, shuffle_buffer=10000", stream_throughput(
            CSVReader(path, 1024, shuffle_buffer=10_000), size), "MB/s"))
        rows.append(("CSVReader, prefetch=4", stream_throughput(
            CSVReader(path, 1024, prefetch=4), size), "MB/s"))
        rows.append(("parse_delimited kernel, in memory", len(block) / 1e6 / best_seconds(
            lambda: parse_delimited(block, FEATURES + 1, b",")), "MB/s"))
        start = time.perf_counter()
        parse_delimited_reference(block, FEATURES + 1, b",")
        rows.append(("parse_delimited_reference (Python)",
                     len(block) / 1e6 / (time.perf_counter() - start), "MB/s"))
        os.remove(path)

        path = os.path.join(tmp, "bench.ctf")
        size = write_repeated(path, ctf_block(20_000), megabytes)
        streams = {"features": FEATURES, "labels": (1, "int64")}
        CTFReader(path, 1024, streams=streams).next_batch()
        rows.append(("CTFReader, one epoch, batch 1024", stream_throughput(
            CTFReader(path, 1024, streams=streams), size), "MB/s"))
        os.remove(path)

        block = ctf_sparse_block(20_000)
        size = write_repeated(path, block, megabytes)
        # A chunk becomes a dense float64 matrix of VOCABULARY + CLASSES columns: 1 MB chunks
        # (about 15,000 lines, 120 MB of matrix) keep that bounded.
        chunk = 1 << 20
        CTFReader(path, 1024, streams=SPARSE_STREAMS, chunk_bytes=chunk).next_batch()
        sparse_mb_per_s = stream_throughput(
            CTFReader(path, 1024, streams=SPARSE_STREAMS, chunk_bytes=chunk), size)
        rows.append(("CTFReader sparse, one epoch, batch 1024", sparse_mb_per_s, "MB/s"))
        # MB/s undersells sparse text: a ~70-byte line becomes VOCABULARY + CLASSES dense
        # values, so writing the dense rows, not reading the text, sets the pace.
        line_bytes = len(block) / block.count(b"\n")
        rows.append(("CTFReader sparse, lines per second", sparse_mb_per_s * 1e6 / line_bytes
                     / 1e3, "k lines/s"))
        kernel_streams = [(b"words", VOCABULARY, True), (b"labels", CLASSES, True)]
        piece = block[:block.index(b"\n", chunk) + 1]
        rows.append(("parse_ctf kernel, sparse, in memory", len(piece) / 1e6 / best_seconds(
            lambda: parse_ctf(piece, kernel_streams)), "MB/s"))
        start = time.perf_counter()
        parse_ctf_reference(piece, kernel_streams)
        rows.append(("parse_ctf_reference, sparse (Python)",
                     len(piece) / 1e6 / (time.perf_counter() - start), "MB/s"))
    return rows


def training_overhead_rows():
    try:
        return _training_overhead_rows()
    except (ImportError, AttributeError, NotImplementedError) as error:
        # The comparison needs the engine's nn/optim API; report instead of failing the table.
        return [(f"MLP step comparison skipped: engine API not available ({error})", None, "")]


def _training_overhead_rows():
    import minidl as md
    from minidl import nn, optim

    rng = np.random.default_rng(0)
    x = rng.standard_normal((20_000, 784)).astype(np.float32)
    y = rng.integers(0, 10, 20_000).astype(np.int64)
    reader = DataReader(ArrayDataset(x, y), batch_size=128, shuffle=True, seed=0)

    md.manual_seed(0)
    model = nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                          nn.Linear(512, 10))
    opt = optim.Adam(model.parameters(), lr=1e-3)

    def train_step(xb, yb):
        loss = nn.functional.cross_entropy(model(md.tensor(xb)), md.tensor(yb))
        opt.zero_grad()
        loss.backward()
        opt.step()

    batches = [reader.next_batch() for _ in range(5)]
    for xb, yb in batches:  # warm-up: kernels compile or load from cache
        train_step(xb, yb)
    steps = 30
    start = time.perf_counter()
    for i in range(steps):
        train_step(*batches[i % len(batches)])
    step_seconds = (time.perf_counter() - start) / steps

    draws = 300
    start = time.perf_counter()
    for _ in range(draws):
        reader.next_batch()
    read_seconds = (time.perf_counter() - start) / draws
    return [
        ("MLP 784-512-512-10 Adam step, batch 128", step_seconds * 1e3, "ms"),
        ("DataReader.next_batch, shuffled, batch 128", read_seconds * 1e3, "ms"),
        ("reader overhead relative to the step", 100 * read_seconds / step_seconds, "%"),
    ]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--megabytes", type=float, default=64.0,
                        help="size of the generated CSV/CTF files")
    args = parser.parse_args()
    rows = streaming_rows(args.megabytes) + training_overhead_rows()
    notes = [name for name, value, _ in rows if value is None]
    rows = [row for row in rows if row[1] is not None]
    width = max(len(name) for name, _, _ in rows)
    print(f"{'measurement':<{width}}  {'value':>10}  unit")
    print("-" * (width + 18))
    for name, value, unit in rows:
        print(f"{name:<{width}}  {value:10.2f}  {unit}")
    for note in notes:
        print(note)


if __name__ == "__main__":
    main()
