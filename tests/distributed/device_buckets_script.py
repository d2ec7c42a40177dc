"""Data-parallel training of models on a GPU (numba's simulator here): gradients summed and
rank 0's buffers broadcast on the device. One launch runs every check (mpiexec is slow to start).

Usage: mpiexec -n 2 python device_buckets_script.py

``overlap`` and ``no-overlap``: DistributedDataParallel over a small MLP on "cuda" (one Linear
left unused, so its gradients stay None), with and without communication during backward; each
rank checks bit for bit that the averaged gradients equal the host computation the
per-parameter path made (the ranks' gradients summed, then divided by the world size, in
float32), and counts the host<->device copies (to_numpy + from_numpy + checks) of each
backward pass.

``batchnorm``: each training forward must start from rank 0's BatchNorm statistics (bit for
bit: the statistics after the forward equal those of a copy given rank 0's before it); counts
the copies of each forward pass.

Rank 0 prints for each check and rank "CHECK rank R collective NAME crossings C1 C2".
"""

import numpy as np

import minidl as md
import minidl.distributed as dist
from minidl import nn
from minidl.backend.cuda.device import transfers
from minidl.nn.parallel import DistributedDataParallel

STEPS = 2  # the second starts from state the first left: what a broadcast must overwrite
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


def collective_name(ddp) -> str:
    collective = getattr(ddp._buckets[0], "collective", None)  # a host bucket has none
    return collective.name if collective is not None else "none"


def report(check, rank, name, counts):
    everyone = dist.all_gather_object([name, counts])  # one printer: lines never interleave
    if rank == 0:
        for r, (name, per_step) in enumerate(everyone):
            print(f"{check} rank {r} collective {name} crossings "
                  + " ".join(map(str, per_step)), flush=True)


def check_batchnorm_statistics(rank):
    md.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 5), nn.BatchNorm1d(5), nn.ReLU(), nn.Linear(5, 3))
    model.to("cuda")
    plain = nn.Sequential(nn.Linear(4, 5), nn.BatchNorm1d(5), nn.ReLU(), nn.Linear(5, 3))
    plain.to("cuda")
    ddp = DistributedDataParallel(model)
    rng = np.random.default_rng(rank)
    counts = []
    for step in range(STEPS):
        x = md.tensor(rng.standard_normal((4, 4)).astype(np.float32)).to("cuda")
        state = {name: np.array(value) for name, value in model.state_dict().items()}
        for value in state.values():
            dist.broadcast(value, src=0)  # rank 0's state, through the host
        plain.load_state_dict(state)
        before = crossings()
        ddp(x)
        counts.append(crossings() - before)
        plain(x)
        for (name, got), (_, expected) in zip(model.named_buffers(), plain.named_buffers()):
            if not np.array_equal(got.numpy(), expected.numpy()):
                raise AssertionError(f"step {step} {name}: {got.numpy()} != {expected.numpy()}")
    report("batchnorm", rank, collective_name(ddp), counts)


def check_gradients(rank, world, overlap):
    md.manual_seed(0)
    model = Net().to("cuda")
    plain = Net().to("cuda")
    plain.load_state_dict(model.state_dict())
    ddp = DistributedDataParallel(model, bucket_cap_mb=BUCKET_BYTES / (1 << 20), overlap=overlap)
    buckets = ddp._buckets
    counts = []
    rng = np.random.default_rng(rank)
    for step in range(STEPS):
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
    assert len(buckets) == 2, buckets
    report("overlap" if overlap else "no-overlap", rank, collective_name(ddp), counts)


def main():
    dist.init_process_group()
    rank, world = dist.get_rank(), dist.get_world_size()
    assert world == 2, "run it on 2 ranks"
    for overlap in (True, False):
        check_gradients(rank, world, overlap)
    check_batchnorm_statistics(rank)

if __name__ == "__main__":
    main()
