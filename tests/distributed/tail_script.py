"""Data-parallel training on data sets whose size is no multiple of the global batch.

Usage: [mpiexec -n N] python tail_script.py OUTPUT.npz GLOBAL_BATCH SIZE [SIZE ...]

For every data set size it trains the same model twice, with ``md.fit`` (metrics and
validation included) and with a hand-written loop over a ``DataReader``, each rank reading
GLOBAL_BATCH / N samples of every global batch; the last global batch of an epoch is short
and may leave some ranks fewer samples than others, or none. Rank 0 writes, per size, the
fit history, the hand-written loop's losses and both final weights to OUTPUT.npz; every rank
checks that its weights equal rank 0's bit for bit.
"""

import sys

import numpy as np

import minidl as md
import minidl.distributed as dist
from minidl import nn, optim
from minidl.data import ArrayDataset, DataReader


def data(size):
    rng = np.random.default_rng(size)
    return rng.standard_normal((size, 5)), rng.integers(0, 3, size)


def model():
    md.manual_seed(4)
    return nn.parallel.DistributedDataParallel(
        nn.Sequential(nn.Linear(5, 7, dtype="float64"), nn.Tanh(),
                      nn.Linear(7, 3, dtype="float64")))


def weights(ddp):
    return np.concatenate([p.numpy().ravel() for p in ddp.module.parameters()])


def with_fit(size, local_batch):
    x, y = data(size)
    net = model()
    history = md.fit(net, nn.CrossEntropyLoss(), optim.Adam(net.parameters(), lr=0.05), (x, y),
                     batch_size=local_batch, epochs=2, seed=3, metrics=["accuracy"],
                     validation_data=(x[:7], y[:7]), progress=False)
    return {name: np.array(values) for name, values in history.metrics.items()}, weights(net)


def by_hand(size, local_batch):
    x, y = data(size)
    net = model()
    opt = optim.SGD(net.parameters(), lr=0.2, momentum=0.5)
    reader = DataReader(ArrayDataset(x, y), batch_size=local_batch, shuffle=True, seed=3,
                        rank=dist.get_rank(), world_size=dist.get_world_size())
    losses = []
    for _ in range(2 * len(reader)):
        xb, yb = reader.next_batch()
        opt.zero_grad()
        loss = nn.functional.cross_entropy(net(md.tensor(xb)), md.tensor(yb))
        loss.backward()
        opt.step()
        # The job's loss: each rank's batch mean weighted by its samples (an empty batch's NaN
        # mean weighs nothing).
        parts = dist.all_gather_object([float(loss.item()) if len(yb) else 0.0, len(yb)])
        losses.append(sum(v * n for v, n in parts) / sum(n for _, n in parts))
    return np.array(losses), weights(net)


def main(argv):
    output, global_batch, sizes = argv[0], int(argv[1]), [int(s) for s in argv[2:]]
    dist.init_process_group(timeout=60)
    world = dist.get_world_size()
    out = {}
    for size in sizes:
        history, fit_weights = with_fit(size, global_batch // world)
        losses, hand_weights = by_hand(size, global_batch // world)
        for name, values in history.items():
            out[f"{size}/fit/{name}"] = values
        out[f"{size}/fit/weights"] = fit_weights
        out[f"{size}/hand/loss"] = losses
        out[f"{size}/hand/weights"] = hand_weights
        for name in (f"{size}/fit/weights", f"{size}/hand/weights"):
            ours = out[name]
            if dist.broadcast(ours.copy(), src=0).tobytes() != ours.tobytes():
                raise AssertionError(f"{name}: rank {dist.get_rank()} differs from rank 0")
    if dist.get_rank() == 0:
        np.savez(output, **out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
