"""Optimizer step time on the parameters of an MLP 784-512-512-10 (669,706 float32 values).

Compares the plain-NumPy reference backend, the Numba backend and, when it is installed,
``torch.optim`` on the same shapes. Each configuration is warmed up first (so Numba's
compilation and caches are excluded), then timed as the median of several repeats.

PyTorch is timed in a separate process: Numba's and PyTorch's OpenMP runtimes each keep their
worker threads spinning for a while after a parallel loop, and on a small machine the two pools
would steal each other's cores and distort both timings.

    python benchmarks/bench_optim.py [--repeats 50] [--threads N]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

import numpy as np

from minidl import Tensor, optim
from minidl.backend import use_cpu_backend
from minidl.nn import Parameter

LAYERS = [784, 512, 512, 10]


def mlp_shapes():
    """Weight (out, in) and bias (out,) shapes of each Linear layer, as PyTorch lays them out."""
    shapes = []
    for fan_in, fan_out in zip(LAYERS[:-1], LAYERS[1:]):
        shapes += [(fan_out, fan_in), (fan_out,)]
    return shapes


CONFIGS = {
    "SGD": (optim.SGD, dict(lr=0.01)),
    "SGD momentum": (optim.SGD, dict(lr=0.01, momentum=0.9, nesterov=True)),
    "Adam": (optim.Adam, dict(lr=1e-3)),
    "AdamW amsgrad": (optim.AdamW, dict(lr=1e-3, amsgrad=True)),
}


def median_ms(step, warmup: int, repeats: int) -> float:
    for _ in range(warmup):
        step()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def time_minidl(cls, config, backend: str, warmup: int, repeats: int) -> float:
    previous = use_cpu_backend(backend)
    rng = np.random.default_rng(0)
    params = [Parameter(rng.standard_normal(s).astype(np.float32) * 0.05) for s in mlp_shapes()]
    for p in params:
        p.grad = Tensor(rng.standard_normal(p.data.shape).astype(np.float32) * 1e-3)
    opt = cls(params, **config)
    try:
        return median_ms(opt.step, warmup, repeats)
    finally:
        use_cpu_backend(previous)


def time_torch(name, config, warmup: int, repeats: int, foreach: bool):
    import torch

    rng = np.random.default_rng(0)
    params = [torch.tensor(rng.standard_normal(s).astype(np.float32) * 0.05, requires_grad=True)
              for s in mlp_shapes()]
    for p in params:
        p.grad = torch.tensor(rng.standard_normal(p.shape).astype(np.float32) * 1e-3)
    cls = {"SGD": torch.optim.SGD, "SGD momentum": torch.optim.SGD, "Adam": torch.optim.Adam,
           "AdamW amsgrad": torch.optim.AdamW}[name]
    opt = cls(params, foreach=foreach, **config)
    return median_ms(opt.step, warmup, repeats)


def torch_timings(args) -> dict | None:
    """Run this script with ``--torch-only`` in a fresh process; None when torch is missing."""
    command = [sys.executable, __file__, "--torch-only", "--repeats", str(args.repeats),
               "--warmup", str(args.warmup)]
    if args.threads:
        command += ["--threads", str(args.threads)]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        return None
    return json.loads(result.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=50)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--threads", type=int, default=None,
                        help="Numba (and torch) threads; default: all cores")
    parser.add_argument("--torch-only", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.torch_only:
        import torch
        if args.threads:
            torch.set_num_threads(args.threads)
        print(json.dumps({name: [time_torch(name, config, args.warmup, args.repeats, foreach)
                                 for foreach in (False, True)]
                          for name, (_, config) in CONFIGS.items()}))
        return

    import numba
    if args.threads:
        numba.set_num_threads(args.threads)
    count = sum(int(np.prod(s)) for s in mlp_shapes())
    print(f"optimizer step on {count:,} float32 parameters ({len(mlp_shapes())} arrays), "
          f"median of {args.repeats}, {numba.get_num_threads()} threads")
    # All reference timings first: Numba's idle workers spin briefly after each parallel loop.
    rows = {name: [time_minidl(cls, config, "numpy", args.warmup, args.repeats)]
            for name, (cls, config) in CONFIGS.items()}
    for name, (cls, config) in CONFIGS.items():
        rows[name].append(time_minidl(cls, config, "numba", args.warmup, args.repeats))
    theirs = torch_timings(args)
    columns = ["numpy reference", "numba"] + (["torch", "torch foreach"] if theirs else [])
    print(f"{'':15}" + "".join(f"{c:>17}" for c in columns) + f"{'numba speed-up':>16}")
    for name, row in rows.items():
        cells = "".join(f"{ms:>14.3f} ms" for ms in row + (theirs[name] if theirs else []))
        print(f"{name:15}{cells}{row[0] / row[1]:>15.1f}x")
    if theirs is None:
        print("(torch not installed: its columns are left out)")


if __name__ == "__main__":
    main()
