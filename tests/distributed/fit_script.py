"""``md.fit`` under mpiexec: the unchanged high-level loop on a data-parallel model.

Usage: [mpiexec -n N] python fit_script.py OUTPUT_PREFIX [--dir DIRECTORY]
Every rank writes OUTPUT_PREFIX-rankR.npz with its history; rank 0 alone shows progress and
writes the callbacks' files (OUTPUT_PREFIX-best.mdl, OUTPUT_PREFIX.csv) and the plot.
"""

import sys

import numpy as np

import minidl as md
import minidl.distributed as dist
from minidl import nn, optim
from minidl.training import CSVLogger, LearningRateScheduler, ModelCheckpoint


def main(argv):
    output = argv[0]
    directory = argv[argv.index("--dir") + 1] if "--dir" in argv else None
    dist.init_process_group(timeout=60)
    rank, world = dist.get_rank(), dist.get_world_size()
    md.manual_seed(1)
    data = np.random.default_rng(0)
    x = data.standard_normal((48, 6))
    y = data.integers(0, 3, 48)
    model = nn.parallel.DistributedDataParallel(
        nn.Sequential(nn.Linear(6, 8, dtype="float64"), nn.Tanh(), nn.Linear(8, 3, dtype="float64")))
    callbacks = [ModelCheckpoint(f"{output}-best.mdl", save_best_only=True),
                 CSVLogger(f"{output}.csv"),
                 LearningRateScheduler(lambda epoch, lr: 0.1, verbose=True)]
    checkpoint = md.CheckpointConfig(directory, save_every_steps=5) if directory else None
    # The arrays as they are: fit gives each rank its block of every global batch of 12.
    history = md.fit(model, nn.CrossEntropyLoss(), optim.SGD(model.parameters(), lr=0.1), (x, y),
                     batch_size=12 // world, shuffle=True, seed=2, epochs=3, metrics=["accuracy"],
                     validation_data=(x, y), checkpoint=checkpoint, callbacks=callbacks,
                     plot_path=f"{output}.png")
    np.savez(f"{output}-rank{rank}.npz", loss=np.array(history.metrics["loss"]),
             accuracy=np.array(history.metrics["accuracy"]),
             val_loss=np.array(history.metrics["val_loss"]),
             weight=model.module[0].weight.numpy())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
