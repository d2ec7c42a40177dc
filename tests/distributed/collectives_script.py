"""Collectives and failure modes under mpiexec; the tests start it with a MODE.

Usage: mpiexec -n N python collectives_script.py MODE
  values    -- every collective on Tensors and arrays, checked with asserts
  straggler -- rank 1 never reaches a barrier: the others must raise DistributedError
  mismatch  -- rank 1 builds a different model: wrapping it in DDP must fail on every rank
  restore DIRECTORY -- restoring fails on rank 1 only: every rank must learn it at once
  dead      -- rank 2 exits at once: the others must name it dead, long before the timeout
  skip      -- rank 2 skips a barrier for an all_reduce: every rank names each one's collective
  busy      -- rank 2 computes past the 1 s timeout: the roll call names it as not answering
  slow      -- rank 2 is late by seconds, well inside the default timeout: no error
  failed-backward -- backward raises after DDP started averaging some buckets: the next
               training forward must refuse, on every rank
The failure modes print "<rank R: MESSAGE>" for the DistributedError each rank raised.
"""

import sys
import time

import numpy as np

import minidl as md
import minidl.distributed as dist
from minidl import nn


def values(rank, world):
    t = md.tensor(np.full((2, 3), rank + 1.0, np.float32))
    assert dist.all_reduce(t) is t
    np.testing.assert_array_equal(t.numpy(), np.full((2, 3), world * (world + 1) / 2))
    a = np.arange(4.0) + rank
    dist.all_reduce(a, op=dist.ReduceOp.MAX)
    np.testing.assert_array_equal(a, np.arange(4.0) + world - 1)
    avg = np.array([float(rank)])
    dist.all_reduce(avg, op=dist.ReduceOp.AVG)
    assert avg[0] == (world - 1) / 2
    strided = np.zeros((3, 4))[:, ::2]  # not contiguous: reduced through a copy, written back
    strided += rank
    dist.all_reduce(strided)
    assert (strided == sum(range(world))).all()
    b = md.tensor(np.arange(5) * (rank + 1))
    dist.broadcast(b, src=world - 1)
    np.testing.assert_array_equal(b.numpy(), np.arange(5) * world)
    gathered = dist.all_gather(md.tensor([rank, rank * 10]))
    assert [g.numpy().tolist() for g in gathered] == [[r, r * 10] for r in range(world)]
    into = [np.zeros(2, np.int64) for _ in range(world)]
    dist.all_gather(into, np.array([rank, -rank]))
    assert [x.tolist() for x in into] == [[r, -r] for r in range(world)]
    assert dist.all_gather_object({"rank": rank}) == [{"rank": r} for r in range(world)]
    assert dist.broadcast_object("from 0" if rank == 0 else None) == "from 0"
    try:
        dist.all_reduce(np.zeros(rank + 1))
    except dist.DistributedError as exc:
        assert "disagree" in str(exc)
    else:
        raise AssertionError("a shape mismatch went unnoticed")
    dist.barrier()
    print(f"rank {rank} ok", flush=True)


def straggler(rank, world):
    if rank == 1:
        time.sleep(3600)  # longer than any test waits: the others must not wait for it
        print("rank 1 woke up", flush=True)
    dist.barrier()


def mismatch(rank, world):
    md.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8 if rank != 1 else 9), nn.ReLU(), nn.Linear(8, 2))
    nn.parallel.DistributedDataParallel(model)


def restore_fails_on_one_rank(rank, world):
    from minidl.checkpoint import Checkpoint, CheckpointManager
    directory = sys.argv[2]
    CheckpointManager(Checkpoint(model=nn.Linear(4, 2)), directory).save(1)
    other = nn.Linear(4, 3 if rank == 1 else 2)  # rank 1 cannot take the saved weights
    try:
        CheckpointManager(Checkpoint(model=other), directory).restore_latest()
    except md.CheckpointError as exc:
        print(f"rank {rank} refused: {exc}", flush=True)


def reported(function):
    def run(rank, world):
        try:
            function(rank, world)
        except dist.DistributedError as exc:
            # Ranks print at once into one pipe: markers keep the messages apart.
            print(f"\n<rank {rank}: {exc}>", flush=True)
            # The first rank to exit aborts the job (its group is broken): give the others
            # the time to report too.
            time.sleep(1)
    return run


@reported
def dead(rank, world):
    dist.barrier()
    if rank == 2:
        import os
        os._exit(3)
    dist.barrier()


@reported
def skip(rank, world):
    if rank == 2:
        dist.all_reduce(np.zeros(3))
    else:
        dist.barrier()


@reported
def busy(rank, world):
    if rank == 2:
        time.sleep(10)
    dist.barrier()


def slow(rank, world):
    if rank == 2:
        time.sleep(2)  # several liveness looks of the others, which must find it alive
    dist.barrier()
    print(f"rank {rank} ok", flush=True)


@reported
def failed_backward(rank, world):
    from minidl.autograd.engine import register_gradient_ready_hook
    model = nn.parallel.DistributedDataParallel(
        nn.Sequential(nn.Linear(3, 4), nn.Linear(4, 2)), bucket_cap_mb=0)

    def explode(leaf):  # runs after DDP's own hook: fail once a bucket's average has started
        if model._averager.started:
            raise RuntimeError("exploded")

    hook = register_gradient_ready_hook(explode)
    x = md.tensor(np.ones((2, 3), np.float32))
    try:
        model(x).sum().backward()
    except RuntimeError as exc:
        assert str(exc) == "exploded"
    hook.remove()
    model(x)


if __name__ == "__main__":
    dist.init_process_group(timeout=120)
    modes = {"values": values, "straggler": straggler, "mismatch": mismatch,
             "restore": restore_fails_on_one_rank, "dead": dead, "skip": skip, "busy": busy,
             "slow": slow, "failed-backward": failed_backward}
    if sys.argv[1] == "skip":
        # Every rank must have reached its collective when the roll call is taken: room for a
        # slow start.
        dist.init_process_group(timeout=3)
    elif sys.argv[1] in ("straggler", "busy"):
        # What happens after the timeout is the claim, not its length: the shortest wait.
        dist.init_process_group(timeout=1)
    elif sys.argv[1] in ("dead", "slow"):
        # The default: what a user gets without choosing a timeout.
        dist.init_process_group(timeout=dist.process_group.DEFAULT_TIMEOUT_SECONDS)
    modes[sys.argv[1]](dist.get_rank(), dist.get_world_size())
