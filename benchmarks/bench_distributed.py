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
2. **Communication share of a training step** at N ranks, for an MLP (784-1024-1024-10,
   about 7.3 MB of float32 gradients) and a small CNN: DDP averaging the gradients after
   backward (blocking, as before overlap: 25 MB buckets, and one all-reduce per parameter) and
   during backward (``overlap=True``, the default: 25 MB and 1 MB buckets), with the time each
   rank spends in communication calls and its share of the step -- and, when torch is
   installed, ``torch.nn.parallel.DistributedDataParallel`` on gloo with the same models and
   batches, the reference of the README's targets.

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


def _models(framework):
    """The benchmark's two models in ``framework`` (minidl's ``nn`` or ``torch.nn``), with the
    shape of one rank's batch: an MLP 784-1024-1024-10 (7.3 MB of float32 gradients) on 64
    samples and a small CNN (two 3x3 convolutions, 4.7 MB) on 32 images of 28x28."""
    mlp = framework.Sequential(framework.Linear(784, 1024), framework.ReLU(),
                               framework.Linear(1024, 1024), framework.ReLU(),
                               framework.Linear(1024, 10))
    cnn = framework.Sequential(framework.Conv2d(1, 32, 3), framework.ReLU(),
                               framework.Conv2d(32, 64, 3), framework.ReLU(),
                               framework.MaxPool2d(2), framework.Flatten(),
                               framework.Linear(64 * 12 * 12, 128), framework.ReLU(),
                               framework.Linear(128, 10))
    return {"MLP": (mlp, (64, 784)), "CNN": (cnn, (32, 1, 28, 28))}


def _communication_timer(model):
    """Wrap the DDP model's communication calls so that their time is recorded: the blocking
    average after backward, or (overlapped) the meeting, packing and posting of each bucket
    during backward plus the final wait. Returns the list of per-step seconds."""
    per_step = []
    averager = model._averager
    pieces = {"after": model.reduce_gradients, "start": averager._start_next,
              "finish": averager.finish}
    spent = [0.0]

    def timed(name):
        def call(*args):
            began = time.perf_counter()
            pieces[name](*args)
            spent[0] += time.perf_counter() - began
            if name != "start":  # the step's communication is over
                per_step.append(spent[0])
                spent[0] = 0.0
        return call

    model.reduce_gradients = timed("after")
    averager._start_next = timed("start")
    averager.finish = timed("finish")
    return per_step


# (label, bucket_cap_mb, overlap): today's default, before it the blocking averaging.
STEP_MODES = (("after backward, 25 MB buckets", 25.0, False),
              ("after backward, per parameter", 0.0, False),
              ("during backward, 25 MB buckets", 25.0, True),
              ("during backward, 1 MB buckets", 1.0, True))


def step_table(repeats: int) -> list[str]:
    """Per model: minidl DDP's step and the time it spends in communication, for each way of
    averaging (after backward, blocking; during backward, overlapped), beside torch DDP."""
    import minidl as md
    import minidl.distributed as dist
    from minidl import nn, optim

    world, rank = dist.get_world_size(), dist.get_rank()
    rng = np.random.default_rng(rank)
    lines = [f"training step at {world} ranks (median of {repeats}); 'comm' is the time a rank "
             "spends in communication calls, 'share' its part of the step"]
    torch_steps = _torch_ddp_steps(repeats)
    for name, (_, shape) in _models(nn).items():
        x = md.tensor(rng.standard_normal(shape).astype(np.float32))
        y = md.tensor(rng.integers(0, 10, shape[0]))
        lines.append(f"{name}, batch {shape[0]} per rank")
        lines.append(f"  {'gradient averaging':<32} {'buckets':>8} {'step ms':>9} "
                     f"{'comm ms':>9} {'share':>7}")
        for label, cap, overlap in STEP_MODES:
            md.manual_seed(0)
            model = nn.parallel.DistributedDataParallel(_models(nn)[name][0], bucket_cap_mb=cap,
                                                        overlap=overlap)
            opt = optim.SGD(model.parameters(), lr=0.01)
            comm_seconds = _communication_timer(model)

            def step():
                opt.zero_grad()
                nn.functional.cross_entropy(model(x), y).backward()
                opt.step()

            step_t = _median_seconds(step, repeats)
            comm_t = statistics.median(comm_seconds[1:])
            lines.append(f"  {label:<32} {len(model._buckets):>8} {step_t * 1e3:>9.1f} "
                         f"{comm_t * 1e3:>9.1f} {comm_t / step_t:>7.0%}")
        if name in torch_steps:
            lines.append(f"  {'torch DDP on gloo (its defaults)':<32} {'':>8} "
                         f"{torch_steps[name] * 1e3:>9.1f}")
    return lines


def _torch_ddp_steps(repeats: int) -> dict:
    """Median step seconds of ``torch.nn.parallel.DistributedDataParallel`` on gloo for the
    same models and batches ({} when torch is not installed): the reference the targets of
    the README name. The ranks meet over TCP on rank 0's host, its port sent by MPI."""
    try:
        import torch
        import torch.distributed as torch_dist
    except ImportError:
        return {}
    import socket

    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    port = None
    if comm.Get_rank() == 0:
        with socket.socket() as probe:
            probe.bind(("", 0))
            port = probe.getsockname()[1]
    port = comm.bcast(port, root=0)
    host = comm.bcast(socket.gethostname() if comm.Get_rank() == 0 else None, root=0)
    torch_dist.init_process_group("gloo", init_method=f"tcp://{host}:{port}",
                                  rank=comm.Get_rank(), world_size=comm.Get_size())
    torch.manual_seed(0)
    rng = np.random.default_rng(comm.Get_rank())
    steps = {}
    for name, (model, shape) in _models(torch.nn).items():
        ddp = torch.nn.parallel.DistributedDataParallel(model)
        opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
        x = torch.from_numpy(rng.standard_normal(shape).astype(np.float32))
        y = torch.from_numpy(rng.integers(0, 10, shape[0]))

        def step():
            opt.zero_grad()
            torch.nn.functional.cross_entropy(ddp(x), y).backward()
            opt.step()

        steps[name] = _median_seconds(step, repeats)
    torch_dist.destroy_process_group()
    return steps


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
