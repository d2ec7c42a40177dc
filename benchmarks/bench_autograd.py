"""What gradients of gradients cost, and what first-order training pays for them (nothing, by
construction: the first-order pass runs the same array rules as before).

    python benchmarks/bench_autograd.py [--seconds 2] [--rounds 3] [--against REV]

Rows, each in its own child process (one thread):

* ``mlp step``: forward + backward + Adam step of an MLP 784-512-512-10, batch 128;
* ``tiny op fwd + bwd``: a chain of 2000 ops on 1-element tensors recorded and differentiated,
  divided by the op count: the per-op cost of recording and of the walk, where kernels cost
  nothing;
* ``tiny op under no_grad``: the same chain's forward under ``no_grad``, per op: what an op costs
  when it records nothing (eager inference);
* ``small CNN model(x)``: ``bench_engine.py``'s single-sample row, the eval forward of its small
  CNN with BatchNorm under ``no_grad``, one call;
* ``step memory``: peak bytes traced (tracemalloc) during one MLP training step;
* ``penalty step / plain step``: a WGAN-GP style step (gradient of the critic with respect to
  its input, recorded, then its norm penalised) against the plain step of the same MLP;
* ``hvp / gradient``: a Hessian-vector product of the MLP's loss against one gradient.

``--against REV`` also runs the first-order rows with the minidl of git revision REV (extracted
with ``git archive`` into a temporary folder), alternating rounds between the two so that a
change in the machine's load hits both, and prints this tree's time over REV's.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = r'''
import json, sys, time, tracemalloc
import numpy as np
import minidl as md
from minidl import nn

seconds, rows = float(sys.argv[1]), sys.argv[2].split(",")
md.set_num_threads(1)
md.manual_seed(0)
rng = np.random.default_rng(0)
model = nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                      nn.Linear(512, 10))
opt = md.optim.Adam(model.parameters(), lr=1e-3)
x = md.tensor(rng.standard_normal((128, 784)).astype(np.float32))
y = md.tensor(rng.integers(0, 10, 128))


def per_second(step):
    for _ in range(3):
        step()
    count, start = 0, time.process_time()
    while time.process_time() - start < seconds:
        step()
        count += 1
    return (time.process_time() - start) / count


def plain_step():
    opt.zero_grad()
    nn.functional.cross_entropy(model(x), y).backward()
    opt.step()


def penalty_step():
    opt.zero_grad()
    inputs = x.detach().requires_grad_(True)
    (grad,) = md.autograd.grad(model(inputs).sum(), inputs, create_graph=True)
    penalty = ((md.sqrt((grad * grad).sum(axis=1)) - 1) ** 2).mean()
    (nn.functional.cross_entropy(model(x), y) + penalty).backward()
    opt.step()


def chain():
    leaf = md.tensor(np.ones(1, np.float32), requires_grad=True)
    out = leaf
    for _ in range(1000):
        out = (out * 1.0001) + 0.0001
    out.sum().backward()


def chain_without_grad():
    out = md.tensor(np.ones(1, np.float32))
    with md.no_grad():
        for _ in range(1000):
            out = (out * 1.0001) + 0.0001


def gradient():
    md.autograd.grad(nn.functional.cross_entropy(model(x), y), list(model.parameters()))


def hvp():
    params = list(model.parameters())
    grads = md.autograd.grad(nn.functional.cross_entropy(model(x), y), params, create_graph=True)
    md.autograd.grad(sum((g * g).sum() for g in grads), params)


results = {}
for row in rows:
    if row == "mlp step":
        results[row] = per_second(plain_step)
    elif row == "tiny op fwd + bwd":
        results[row] = per_second(chain) / 2000
    elif row == "tiny op under no_grad":
        results[row] = per_second(chain_without_grad) / 2000
    elif row == "small CNN model(x)":
        sys.path.append(sys.argv[3])  # this checkout's benchmarks; minidl stays the tree's
        from benchmarks.bench_engine import inference_call
        results[row] = per_second(inference_call("minidl"))
    elif row == "step memory":
        plain_step()
        tracemalloc.start()
        plain_step()
        results[row] = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    elif row == "penalty step / plain step":
        results[row] = per_second(penalty_step) / per_second(plain_step)
    elif row == "hvp / gradient":
        results[row] = per_second(hvp) / per_second(gradient)
print(json.dumps(results))
'''

FIRST_ORDER = ["mlp step", "tiny op fwd + bwd", "tiny op under no_grad", "small CNN model(x)",
               "step memory"]
SECOND_ORDER = ["penalty step / plain step", "hvp / gradient"]


def run(tree: Path, rows, seconds: float) -> dict:
    env = dict(os.environ, PYTHONPATH=str(tree), OMP_NUM_THREADS="1", MKL_NUM_THREADS="1",
               OPENBLAS_NUM_THREADS="1", NUMBA_NUM_THREADS="1")
    output = subprocess.run([sys.executable, "-c", CHILD, str(seconds), ",".join(rows),
                             str(ROOT)],
                            env=env, cwd=tempfile.gettempdir(), check=True,
                            capture_output=True, text=True).stdout
    return json.loads(output.strip().splitlines()[-1])


def extract(revision: str, folder: Path) -> Path:
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", revision, "minidl"],
                             check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(folder)], input=archive, check=True)
    return folder


def _format(row: str, value: float) -> str:
    if row == "step memory":
        return f"{value / 2 ** 20:.2f} MiB"
    if "/" in row:
        return f"{value:.2f}x"
    return f"{value * 1e6:.2f} µs" if value < 1e-3 else f"{value * 1e3:.2f} ms"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--against", help="a git revision to compare the first-order rows with")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        trees = {"this tree": ROOT}
        if args.against:
            trees[args.against] = extract(args.against, Path(folder))
        rounds = {name: [] for name in trees}
        for _ in range(args.rounds):  # alternate, so that load changes hit every tree
            for name, tree in trees.items():
                rounds[name].append(run(tree, FIRST_ORDER, args.seconds))
        best = {name: {row: min(r[row] for r in results) for row in FIRST_ORDER}
                for name, results in rounds.items()}
        second = run(ROOT, SECOND_ORDER, args.seconds)
    for row in FIRST_ORDER:
        line = f"{row:28s} " + "  ".join(f"{name}: {_format(row, best[name][row])}"
                                         for name in trees)
        if args.against:
            line += f"  ratio {best['this tree'][row] / best[args.against][row]:.3f}"
        print(line)
    for row in SECOND_ORDER:
        print(f"{row:28s} {_format(row, second[row])}")


if __name__ == "__main__":
    start = time.perf_counter()
    main()
    print(f"({time.perf_counter() - start:.0f} s)")
