"""Data-parallel gradients of a model on a GPU (numba's simulator here), summed on the device.

Usage: mpiexec -n 2 python device_buckets_script.py [--no-overlap]

Each rank runs DistributedDataParallel over a small MLP on "cuda" (one Linear left unused, so
its gradients stay None) and checks bit for bit that the averaged gradients equal the host
computation the per-parameter path made: the ranks' gradients summed, then divided by the
world size, in float32. Rank 0 prints for each rank "rank R collective NAME buckets B crossings
C1 C2 C3", the host<->device copies (to_numpy + from_numpy + checks) of each of 3 backward passes.
"""

import sys

import numpy as np

import minidl as md
import minidl.distributed as dist
from minidl import nn
from minidl.backend.cuda.device import transfers
from minidl.nn.parallel import DistributedDataParallel

BUCKET_BYTES = 100  # two buckets: (bias 3, weight 15, bias 5) and (weight 20) of float32


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.first = nn.Linear(4, 5)
        self.unused = nn.Linear(2, 2)
        self.second = nn.Linear(5, 3)

    def forward(self, x):
        return self.second(md.relu(self.first(x)))


def crossings() -> int:
    return transfers["to_numpy"] + transfers["from_numpy"] + transfers["checks"]


def main():
    overlap = "--no-overlap" not in sys.argv
    dist.init_process_group()
    rank, world = dist.get_rank(), dist.get_world_size()
    assert world == 2, "run it on 2 ranks"
    md.manual_seed(0)
    model = Net().to("cuda")
    plain = Net().to("cuda")
    plain.load_state_dict(model.state_dict())
    ddp = DistributedDataParallel(model, bucket_cap_mb=BUCKET_BYTES / (1 << 20), overlap=overlap)
    buckets = ddp._buckets
    counts = []
    rng = np.random.default_rng(rank)
    for step in range(3):
        x = md.tensor(rng.standard_normal((2, 4)).astype(np.float32)).to("cuda")
        for net in (model, plain):
            net.zero_grad()
        loss = (ddp(x) ** 2).mean()
        before = crossings()
        loss.backward()
        counts.append(crossings() - before)
        (plain(x) ** 2).mean().backward()
        for (name, param), local in zip(model.named_parameters(), plain.parameters()):
            if name.startswith("unused"):
                assert param.grad is None, name
                continue
            everyone = dist.all_gather(local.grad.numpy())
            # (with 2 ranks every sum is a + b, whatever order MPI or NCCL adds in)
            expected = (everyone[0] + everyone[1]) / np.float32(world)
            got = param.grad.numpy()
            assert got.dtype == np.float32 and param.grad.device == param.device, name
            if not np.array_equal(got, expected):
                raise AssertionError(f"step {step} {name}: {got} != {expected}")
    collective = getattr(buckets[0], "collective", None)  # a host bucket has none
    mine = [collective.name if collective is not None else "none", len(buckets), counts]
    everyone = dist.all_gather_object(mine)  # one printer: the ranks' lines never interleave
    if rank == 0:
        for r, (name, count, per_step) in enumerate(everyone):
            print(f"rank {r} collective {name} buckets {count} crossings "
                  + " ".join(map(str, per_step)), flush=True)

if __name__ == "__main__":
    main()
