"""The "Distributed data parallel (MPI)" snippet of the public API page runs as written in a
plain process (a group of one); tests/distributed runs the same calls under mpiexec."""

import numpy as np

import minidl as md
import minidl.distributed as dist
from minidl import nn, optim
from minidl.cli import main
from minidl.data import ArrayDataset, DataReader


def test_distributed_snippet_in_one_process(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    ds = ArrayDataset(np.zeros((64, 4), np.float32), np.zeros(64, np.int64))
    model = nn.Sequential(nn.Linear(4, 3))

    dist.init_process_group()
    rank, world = dist.get_rank(), dist.get_world_size()
    model = nn.parallel.DistributedDataParallel(model)
    reader = DataReader(ds, batch_size=32, shuffle=True, seed=0, rank=rank, world_size=world)
    opt = optim.ZeroRedundancyOptimizer(model.parameters(), optim.Adam, lr=1e-3)
    manager = md.CheckpointManager(md.Checkpoint(model=model, optimizer=opt, reader=reader),
                                   "runs/x")
    start = manager.restore_latest() or 0
    t = md.tensor([1.0, 2.0])
    dist.all_reduce(t); dist.broadcast(t, src=0); dist.barrier()

    assert (rank, world, start) == (0, 1, 0) and t.numpy().tolist() == [1.0, 2.0]
    xb, yb = reader.next_batch()
    opt.zero_grad()
    nn.functional.cross_entropy(model(md.tensor(xb)), md.tensor(yb)).backward()
    opt.step()
    path = manager.save(1)
    assert main(["merge", path, "OUT.mdl"]) == 0
    assert md.CheckpointManager(md.Checkpoint(model=model, optimizer=opt, reader=reader),
                                "runs/x").restore_latest() == 1
