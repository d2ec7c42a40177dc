"""Data-parallel communication: all-reduce bandwidth, and how much of a step it takes.

Run: ``python benchmarks/bench_distributed.py [--ranks 2] [--repeats 5]``; the script starts
itself under ``mpiexec`` (the one beside this Python, from ``pip install minidl[mpi]``, or on
the PATH) and rank 0 prints two tables.

1. **All-reduce bandwidth**, 1 to 100 MB of float32, ``minidl.distributed.all_reduce`` against
   a raw ``mpi4py`` ``Allreduce`` on the same buffer. minidl adds one tiny non-blocking
   all-reduce before each call (the timed meeting of the ranks that lets a missing rank fail
   fast, which also checks that all ranks pass the same shape); the ratio shows what that
   costs. "bus GB/s" is the ring figure 2(N-1)/N * bytes / time: the bytes each rank must
   send (and receive) in the bandwidth-optimal algorithm, so it is comparable across N.
   A third line times that meeting alone against an MPI barrier.
2. **Communication share of an MLP training step** at N ranks (784-1024-1024-10, float32,
   about 7.3 MB of gradients): the step with DDP averaging gradients in 25 MB buckets, and
   unbucketed (one all-reduce per parameter, ``bucket_cap_mb=0``).

Timings are medians of ``--repeats`` runs after a warm-up, from one run; on a shared
machine they vary by tens of percent.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time

import numpy as np

SIZES_MB = (1, 4, 16, 64, 100)
THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
                    "NUMBA_NUM_THREADS")


def _median_seconds(function, repeats: int) -> float:
    function()  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def bandwidth_table(repeats: int) -> list[str]:
    from mpi4py import MPI

    import minidl.distributed as dist
    world = dist.get_world_size()
    comm = MPI.COMM_WORLD
    lines = [f"all-reduce of float32 at {world} ranks (best of {repeats}, interleaved)",
             f"{'MB':>5} {'raw ms':>9} {'minidl ms':>10} {'raw bus GB/s':>13} "
             f"{'minidl bus GB/s':>16} {'minidl/raw':>11}"]
    for megabytes in SIZES_MB:
        buffer = np.ones(megabytes * (1 << 20) // 4, np.float32)
        ring_bytes = 2 * (world - 1) / world * buffer.nbytes

        def raw():
            comm.Barrier()
            comm.Allreduce(MPI.IN_PLACE, buffer, op=MPI.SUM)

        def ours():
            comm.Barrier()
            dist.all_reduce(buffer)

        # Interleaved, so that both see the same machine load.
        raw_s, ours_s = [], []
        for _ in range(repeats):
            raw_s.append(_median_seconds(raw, 1))
            ours_s.append(_median_seconds(ours, 1))
        raw_t, ours_t = min(raw_s), min(ours_s)
        lines.append(f"{megabytes:>5} {raw_t * 1e3:>9.2f} {ours_t * 1e3:>10.2f} "
                     f"{ring_bytes / raw_t / 1e9:>13.2f} {ring_bytes / ours_t / 1e9:>16.2f} "
                     f"{raw_t / ours_t:>10.0%}")
    return lines


def meeting_table(repeats: int) -> list[str]:
    """What the fail-fast meeting before each collective costs, next to an MPI barrier."""
    from mpi4py import MPI

    from minidl.distributed.process_group import wait_for_all
    comm = MPI.COMM_WORLD
    calls = 1000
    timings = {"MPI Barrier": [], "minidl meeting": []}
    for _ in range(repeats):
        for label, call in (("MPI Barrier", comm.Barrier),
                            ("minidl meeting", lambda: wait_for_all("bench", "(1,) <f4"))):
            comm.Barrier()
            start = time.perf_counter()
            for _ in range(calls):
                call()
            timings[label].append((time.perf_counter() - start) / calls)
    return ["latency of meeting the ranks (best of "
            f"{repeats} x {calls} calls): " + ", ".join(
                f"{label} {min(values) * 1e6:.1f} us" for label, values in timings.items())]


def step_table(repeats: int) -> list[str]:
    import minidl as md
    import minidl.distributed as dist
    from minidl import nn, optim

    world, rank = dist.get_world_size(), dist.get_rank()
    rng = np.random.default_rng(rank)
    x = md.tensor(rng.standard_normal((64, 784)).astype(np.float32))
    y = md.tensor(rng.integers(0, 10, 64))
    lines = [f"MLP 784-1024-1024-10 step at {world} ranks, batch 64 per rank "
             f"(median of {repeats})",
             f"{'gradient sync':<26} {'buckets':>8} {'step ms':>9} {'comm ms':>9} "
             f"{'comm share':>11}"]
    for label, cap in (("bucketed (25 MB)", 25.0), ("unbucketed (per parameter)", 0.0)):
        md.manual_seed(0)
        model = nn.parallel.DistributedDataParallel(
            nn.Sequential(nn.Linear(784, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(),
                          nn.Linear(1024, 10)), bucket_cap_mb=cap)
        opt = optim.SGD(model.parameters(), lr=0.01)
        comm_seconds = []
        reduce = model.reduce_gradients

        def timed_reduce():
            start = time.perf_counter()
            reduce()
            comm_seconds.append(time.perf_counter() - start)

        model.reduce_gradients = timed_reduce

        def step():
            opt.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            opt.step()

        step_t = _median_seconds(step, repeats)
        comm_t = statistics.median(comm_seconds[1:])
        lines.append(f"{label:<26} {len(model._buckets):>8} {step_t * 1e3:>9.1f} "
                     f"{comm_t * 1e3:>9.1f} {comm_t / step_t:>10.0%}")
    return lines


def worker(repeats: int) -> None:
    import minidl.distributed as dist
    dist.init_process_group()
    lines = (bandwidth_table(repeats) + meeting_table(repeats) + [""] + step_table(repeats))
    if dist.get_rank() == 0:
        print("\n".join(lines), flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.repeats)
        return 0
    mpiexec = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    mpiexec = mpiexec if os.path.exists(mpiexec) else shutil.which("mpiexec")
    if mpiexec is None:
        print("bench_distributed: needs mpiexec and mpi4py (pip install minidl[mpi])")
        return 1
    # Ranks share the machine's cores: each gets its share of threads (BLAS, Numba), or the
    # ranks' thread pools fight over the same cores.
    env = dict(os.environ)
    threads = str(max(1, (os.cpu_count() or 1) // args.ranks))
    for name in THREAD_VARIABLES:
        env.setdefault(name, threads)
    return subprocess.call([mpiexec, "-n", str(args.ranks), sys.executable, __file__,
                            "--worker", "--repeats", str(args.repeats)], env=env)


if __name__ == "__main__":
    sys.exit(main())
