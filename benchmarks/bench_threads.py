"""Time the CPU backend's threaded primitives against NumPy, at 1 thread and at more.

Usage: python benchmarks/bench_threads.py [--threads 2] [--rounds 15] [--calls 5]

Each row is one primitive on a shape taken from a training row of ``bench_engine.py`` (the
attention block, the Transformer encoder, the LSTM language model, the CIFAR CNN): the NumPy
reference's call, then the Numba backend's at 1 thread and at ``--threads`` threads. The three
are alternated round by round and each keeps its best call, so a slow spell of a shared machine
hits all three alike and the best-of filters it out. A figure from a machine whose load average
exceeds its core count says little about the many-thread column: the load average is printed
before and after.
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

import minidl as md
from minidl.backend.numba_cpu import NumbaCpuBackend, load_kernels
from minidl.backend.reference import ReferenceBackend


def cases(rng):
    """(primitive, shape description, arguments) for every timed call."""
    f32 = np.float32
    tokens = rng.standard_normal((32, 64, 512)).astype(f32)          # (batch, seq, 4·d)
    scores = rng.standard_normal((32, 4, 64, 64)).astype(f32)        # attention scores
    activations = rng.standard_normal((64, 32, 32, 32)).astype(f32)  # CIFAR conv1 output
    keep = rng.random(tokens.shape) < 0.9
    gates = rng.standard_normal((32, 4 * 256)).astype(f32)          # LSTM LM step
    cell = rng.standard_normal((32, 256)).astype(f32)
    _, c, activated = ReferenceBackend.lstm_cell_forward(gates, cell)
    return [
        ("sum", "bias grad (2048, 384) over rows",
         (tokens[:, :, :384].reshape(2048, 384).copy(), 0)),
        ("sum", "bias grad (1120, 10000) over rows",
         (rng.standard_normal((1120, 10000)).astype(f32), 0)),
        ("sum", "conv bias grad (64, 32, 32, 32) over (0, 2, 3)", (activations, (0, 2, 3))),
        ("add", "conv bias (64, 32, 32, 32) + (1, 32, 1, 1)",
         (activations, rng.standard_normal((1, 32, 1, 1)).astype(f32))),
        ("mul", "scale (32, 4, 64, 64) * 0-d", (scores, np.array(0.17, f32))),
        ("add", "residual (32, 64, 512) + same", (tokens, tokens)),
        ("relu", "(32, 64, 512)", (tokens,)),
        ("where", "dropout mask (32, 64, 512)", (keep, np.array(1 / 0.9, f32), np.zeros((), f32))),
        ("random_uniform", "dropout draw (32, 64, 512)", ((32, 64, 512), f32, (1, 2), 0)),
        ("index_add", "embedding grad (10000, 128) at (35, 32)",
         ((10000, 128), (rng.integers(0, 10000, (35, 32)),),
          rng.standard_normal((35, 32, 128)).astype(f32), f32)),
        ("lstm_cell_forward", "(32, 4x256)", (gates, cell)),
        ("lstm_cell_backward", "(32, 4x256)", (cell, cell, cell, c, activated)),
    ]


def best_call(function, args, calls: int) -> float:
    best = float("inf")
    for _ in range(calls):
        start = time.perf_counter()
        function(*args)
        best = min(best, time.perf_counter() - start)
    return best


def load_average() -> str:
    try:
        return " ".join(f"{value:.2f}" for value in os.getloadavg())
    except OSError:
        return "unknown"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)),
                        help="the many-thread count (default: every available core)")
    parser.add_argument("--rounds", type=int, default=15, help="alternated rounds")
    parser.add_argument("--calls", type=int, default=5, help="calls per round and engine")
    args = parser.parse_args(argv)
    load_kernels()
    fast, numpy = NumbaCpuBackend(), ReferenceBackend()
    before = load_average()
    print(f"{'primitive':20s} {'shape':45s} {'NumPy µs':>9s} {'1T µs':>8s} "
          f"{f'{args.threads}T µs':>8s} {'NumPy/1T':>9s} {'1T/NT':>6s}")
    for name, shape, call_args in cases(np.random.default_rng(0)):
        reference, ours = getattr(numpy, name), getattr(fast, name)
        for threads in (1, args.threads):  # warm-up: load each kernel at both counts
            md.set_num_threads(threads)
            ours(*call_args)
        best = {"numpy": float("inf"), 1: float("inf"), args.threads: float("inf")}
        for _ in range(args.rounds):
            best["numpy"] = min(best["numpy"], best_call(reference, call_args, args.calls))
            for threads in (1, args.threads):
                md.set_num_threads(threads)
                best[threads] = min(best[threads], best_call(ours, call_args, args.calls))
        print(f"{name:20s} {shape:45s} {best['numpy'] * 1e6:9.0f} {best[1] * 1e6:8.0f} "
              f"{best[args.threads] * 1e6:8.0f} {best['numpy'] / best[1]:9.2f} "
              f"{best[1] / best[args.threads]:6.2f}", flush=True)
    print(f"load average (1, 5, 15 min): {before} before, {load_average()} after")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
