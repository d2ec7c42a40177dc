"""Ranks set up differently: every rank must raise DistributedError at the start, naming values.

Usage: mpiexec -n N python mismatch_script.py OUTPUT_PREFIX

Runs one mis-launched set-up after another (on rank N-1 only, the others correct) and writes
OUTPUT_PREFIX-rankR.json: for each case, the DistributedError message this rank got (or null).
"""

import json
import sys

import numpy as np

import minidl as md
import minidl.distributed as dist
from minidl import nn, optim
from minidl.data import ArrayDataset, CSVReader, DataReader


def main(argv):
    dist.init_process_group(timeout=300)  # a check that waited for a timeout would not name values
    rank, world = dist.get_rank(), dist.get_world_size()
    odd = rank == world - 1
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((40, 3)), rng.integers(0, 2, 40)

    def model(**options):
        return nn.parallel.DistributedDataParallel(nn.Linear(3, 2, dtype="float64"), **options)

    def fit(size=40, lr=0.1, epochs=1, batch_size=4, seed=0):
        net = model()
        md.fit(net, nn.CrossEntropyLoss(), optim.SGD(net.parameters(), lr=lr),
               (x[:size], y[:size]), batch_size=batch_size, epochs=epochs, seed=seed,
               progress=False)

    def reader(size=40, seed=0, given_rank=rank):
        return DataReader(ArrayDataset(x[:size], y[:size]), batch_size=4, shuffle=True,
                          seed=seed, rank=given_rank, world_size=world)

    prefix = argv[0]
    if rank == 0:
        for name, rows in (("a", 40), ("b", 36)):
            with open(f"{prefix}-{name}.csv", "w") as file:
                file.write("".join(f"{i},{i % 2}\n" for i in range(rows)))
    dist.barrier()

    def stream(name="a"):
        CSVReader(f"{prefix}-{name}.csv", 4, rank=rank, world_size=world)

    cases = {
        "fit data length": lambda: fit(size=36 if odd else 40),
        "fit learning rate": lambda: fit(lr=0.2 if odd else 0.1),
        "fit epochs": lambda: fit(epochs=2 if odd else 1),
        "fit seed": lambda: fit(seed=rank),
        "reader data length": lambda: reader(size=36 if odd else 40),
        "reader seed": lambda: reader(seed=rank),
        "reader rank": lambda: reader(given_rank=0),
        "ddp settings": lambda: model(bucket_cap_mb=1 if odd else 25),
        "stream file": lambda: stream("b" if odd else "a"),
        "zero learning rate": lambda: optim.ZeroRedundancyOptimizer(
            model().parameters(), optim.Adam, lr=0.2 if odd else 0.1),
        "correct": lambda: (fit(), reader(), model(), stream(), optim.ZeroRedundancyOptimizer(
            model().parameters(), optim.Adam, lr=0.1)),
    }
    messages = {}
    for name, case in cases.items():
        try:
            case()
            messages[name] = None
        except dist.DistributedError as error:
            messages[name] = str(error)
    with open(f"{prefix}-rank{rank}.json", "w") as file:
        json.dump(messages, file)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
