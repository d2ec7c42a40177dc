"""A data-parallel training run, the same script at every world size (one process included).

Usage: [mpiexec -n N] python ddp_train_script.py OUTPUT.npz [--dir DIRECTORY] [--steps S]
       [--global-batch G] [--save-every K] [--dropout P] [--batchnorm] [--zero]
       [--accumulate M] [--ballast-mb MB] [--stop-after S] [--bucket-mb MB] [--no-overlap]

Every step reads the global batch of G samples (G / N per rank), so runs at different world
sizes train on the same sample sequence. ``--bucket-mb`` sets DDP's bucket size (0: one per
parameter); ``--no-overlap`` averages the buckets after backward instead of during it. With ``--dir`` it checkpoints every K steps through
a CheckpointManager and resumes from the newest checkpoint there. ``--accumulate M`` splits
each rank's batch into M micro-batches, the first M-1 under ``no_sync()``. At the end rank 0
writes the final state, the sample ids each step consumed, and every rank's next random
draws to OUTPUT. Rank 0 prints progress: "pids P0 P1 ...", "training START", "saving N", "step N".
"""

import argparse
import os
import sys

import numpy as np

import minidl as md
import minidl.distributed as dist
from minidl import nn, optim
from minidl.checkpoint import Checkpoint, CheckpointManager
from minidl.data import ArrayDataset, DataReader


class Ballast:
    """Bulky constant state that makes every save take long enough to be killed inside."""

    def __init__(self, megabytes):
        self.values = np.arange(int(megabytes * (1 << 20)) // 8, dtype=np.float64)

    def state_dict(self):
        return {"values": self.values}

    def load_state_dict(self, state):
        self.values = np.array(state["values"])


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("output")
    parser.add_argument("--dir")
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--global-batch", type=int, default=12)
    parser.add_argument("--save-every", type=int, default=2)
    parser.add_argument("--dropout", type=float, default=0.0)
    parser.add_argument("--batchnorm", action="store_true")
    parser.add_argument("--zero", action="store_true")
    parser.add_argument("--accumulate", type=int, default=1)
    parser.add_argument("--ballast-mb", type=float, default=0.0)
    parser.add_argument("--stop-after", type=int, default=None)
    parser.add_argument("--bucket-mb", type=float, default=25.0)
    parser.add_argument("--no-overlap", action="store_true")
    args = parser.parse_args(argv)

    dist.init_process_group(timeout=60)
    rank, world = dist.get_rank(), dist.get_world_size()
    pids = dist.all_gather_object(os.getpid())
    if rank == 0:
        print("pids " + " ".join(map(str, pids)), flush=True)
    md.manual_seed(7 + rank)  # each rank its own dropout stream; DDP gives all rank 0's weights
    data = np.random.default_rng(3)
    features = data.standard_normal((96, 10)).astype(np.float64)
    labels = data.integers(0, 4, 96).astype(np.int64)
    ids = np.arange(96)
    layers = [nn.Linear(10, 16, dtype="float64")]
    if args.batchnorm:
        layers.append(nn.BatchNorm1d(16, dtype="float64"))
    layers += [nn.Tanh(), nn.Dropout(args.dropout), nn.Linear(16, 4, dtype="float64")]
    model = nn.parallel.DistributedDataParallel(nn.Sequential(*layers), bucket_cap_mb=args.bucket_mb,
                                                overlap=not args.no_overlap)
    if args.zero:
        opt = optim.ZeroRedundancyOptimizer(model.parameters(), optim.Adam, lr=0.05)
    else:
        opt = optim.Adam(model.parameters(), lr=0.05)
    reader = DataReader(ArrayDataset(features, labels, ids), batch_size=args.global_batch // world,
                        shuffle=True, seed=5, rank=rank, world_size=world)
    manager = None
    start = 0
    if args.dir:
        tracked = dict(model=model, optimizer=opt, reader=reader)
        if args.ballast_mb:
            tracked["ballast"] = Ballast(args.ballast_mb)
        manager = CheckpointManager(Checkpoint(**tracked), args.dir, prefix="run", max_to_keep=2,
                                    save_every_steps=args.save_every)
        start = manager.restore_latest() or 0
    if rank == 0:
        print(f"training {start}", flush=True)
    consumed = []
    for step in range(start, args.steps):
        x, y, batch_ids = reader.next_batch()
        consumed.append(np.concatenate(dist.all_gather_object(batch_ids.tolist())))
        opt.zero_grad()
        parts = np.array_split(np.arange(len(y)), args.accumulate)
        for i, part in enumerate(parts):
            # Sum of micro-batch means, scaled: the mean over the whole local batch.
            def backward():
                logits = model(md.tensor(x[part], dtype=np.float64))
                loss = nn.functional.cross_entropy(logits, md.tensor(y[part]))
                (loss * (len(part) / len(y))).backward()
            if i < len(parts) - 1:
                with model.no_sync():
                    backward()
            else:
                backward()
        opt.step()
        if manager is not None and (step + 1) % args.save_every == 0:
            if rank == 0:
                print(f"saving {step + 1}", flush=True)
            manager.maybe_save(step + 1)
        if rank == 0:
            print(f"step {step + 1}", flush=True)
        if args.stop_after is not None and step + 1 >= args.stop_after:
            break
    draws = dist.all_gather_object(md.rand(3).numpy().tolist())
    if rank == 0:
        out = {f"model/{k}": np.array(v) for k, v in model.state_dict().items()}
        if args.zero:
            opt.consolidate_state_dict(to=0)
        state = opt.state_dict()
        for index, slots in state["state"].items():
            for name, value in slots.items():
                out[f"optimizer/{index}/{name}"] = np.array(value)
        out["rank_draws"] = np.array(draws)
        out["reader"] = np.array([reader.epoch, reader.position])
        if consumed:
            out["consumed"] = np.stack(consumed)
        np.savez(args.output, **out)
    elif args.zero:
        opt.consolidate_state_dict(to=0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
