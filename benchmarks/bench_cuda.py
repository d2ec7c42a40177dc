"""minidl's CUDA backend against PyTorch on the same GPU.

Measures, on ``cuda:0``:

* SGEMM 4096 x 4096 x 4096 (float32): GFLOP/s of minidl's tiled kernel and of ``torch.matmul``
  (target: minidl at least 30 % of PyTorch, which calls cuBLAS);
* an MLP 784-512-512-10, batch 128, Adam: training steps per second;
* a CIFAR-shaped CNN (3x32x32 input, two Conv-BN-ReLU-MaxPool stages, a Linear head), batch 128,
  SGD with momentum: steps per second (target for both models: at least 0.3x PyTorch);
* host<->device copies of 256 MiB: GB/s each way, to compare with the link's figure (PCIe 4.0
  x16 about 25 GB/s, PCIe 5.0 about 50 GB/s, NVLink-C2C far more);
* the caching allocator: the GPU memory the CNN's training uses at its peak and holds
  (``md.cuda.max_memory_allocated``, ``md.cuda.memory_reserved``) and how many ``cudaMalloc``
  calls its timed steps made (0 once the pool is warm).

Every figure is the median of a few timed repeats after a warm-up (compilation happens in the
warm-up). GPU work is asynchronous, so each timing ends by waiting for the GPU
(``numba.cuda.synchronize()``, ``torch.cuda.synchronize()``).

Run: ``python benchmarks/bench_cuda.py [--quick | --smoke]``. Without a CUDA GPU it says so and
exits: numba's simulator is far too slow to time anything. ``--smoke`` is the exception: it runs
every row's code with tiny sizes, once, on whatever there is (the simulator included, and
PyTorch on the CPU when it has no CUDA), to prove the script works before a GPU is at hand;
its figures mean nothing.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Sizes:
    """How big each measurement is."""

    gemm: int  # SGEMM of gemm x gemm by gemm x gemm
    mlp: tuple  # (inputs, hidden, classes)
    cnn: tuple  # (image side, first channels, second channels, classes)
    batch: int
    mlp_steps: int
    cnn_steps: int
    copy_bytes: int
    repeats: int


FULL = Sizes(gemm=4096, mlp=(784, 512, 10), cnn=(32, 32, 64, 10), batch=128, mlp_steps=20,
             cnn_steps=5, copy_bytes=256 << 20, repeats=5)
QUICK = Sizes(gemm=1024, mlp=(784, 512, 10), cnn=(32, 32, 64, 10), batch=128, mlp_steps=20,
              cnn_steps=5, copy_bytes=64 << 20, repeats=2)
SMOKE = Sizes(gemm=8, mlp=(6, 4, 3), cnn=(4, 2, 2, 3), batch=1, mlp_steps=1, cnn_steps=1,
              copy_bytes=1 << 10, repeats=1)


def torch_device(smoke: bool):
    """(torch, its device) to compare with, or (None, None). A smoke run takes PyTorch's CPU
    when it has no CUDA, so that the comparison's code runs too."""
    try:
        import torch
    except ImportError:
        return None, None
    if torch.cuda.is_available():
        return torch, "cuda"
    return (torch, "cpu") if smoke else (None, None)


def wait_for_gpu() -> None:
    """Block until the GPU has finished all queued minidl work (numba's default stream)."""
    from numba import cuda
    cuda.synchronize()


def wait_for_torch(torch, device) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def timed(function, repeats: int, after_warm_up=None) -> float:
    """Median seconds of ``function()`` after one warm-up call (then ``after_warm_up()``)."""
    function()
    if after_warm_up is not None:
        after_warm_up()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


# -- SGEMM -----------------------------------------------------------------------------------------

def sgemm(sizes: Sizes, torch, device):
    import minidl as md
    size = sizes.gemm
    rng = np.random.default_rng(0)
    a = md.tensor(rng.standard_normal((size, size), dtype=np.float32)).to("cuda")
    b = md.tensor(rng.standard_normal((size, size), dtype=np.float32)).to("cuda")
    flops = 2.0 * size ** 3

    def run_minidl():
        a @ b
        wait_for_gpu()
    ours = flops / timed(run_minidl, sizes.repeats) / 1e9
    theirs = None
    if torch is not None:
        ta = torch.randn(size, size, device=device)
        tb = torch.randn(size, size, device=device)
        torch.backends.cuda.matmul.allow_tf32 = False  # a float32 product, as minidl's

        def run_torch():
            ta @ tb
            wait_for_torch(torch, device)
        theirs = flops / timed(run_torch, sizes.repeats) / 1e9
    return [("matmul", ours, theirs)]


# -- models ----------------------------------------------------------------------------------------

def mlp(nn, sizes: Sizes):
    inputs, hidden, classes = sizes.mlp
    return nn.Sequential(nn.Linear(inputs, hidden), nn.ReLU(), nn.Linear(hidden, hidden),
                         nn.ReLU(), nn.Linear(hidden, classes))


def cnn(nn, sizes: Sizes):
    """Two Conv-BN-ReLU-MaxPool stages and a Linear head; ``nn`` is minidl's or PyTorch's (the
    layer names and arguments are the same)."""
    side, first, second, classes = sizes.cnn
    return nn.Sequential(
        nn.Conv2d(3, first, 3, padding=1), nn.BatchNorm2d(first), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(first, second, 3, padding=1), nn.BatchNorm2d(second), nn.ReLU(),
        nn.MaxPool2d(2), nn.Flatten(), nn.Linear(second * (side // 4) ** 2, classes))


def input_shape(name: str, sizes: Sizes) -> tuple:
    if name == "mlp":
        return (sizes.batch, sizes.mlp[0])
    return (sizes.batch, 3, sizes.cnn[0], sizes.cnn[0])


def steps_per_second(name: str, sizes: Sizes, torch, device, memory: dict | None = None):
    """Training steps per second of the ``name`` model ("mlp": Adam, "cnn": SGD momentum); fills
    ``memory`` with the allocator's figures for minidl's timed steps when given."""
    import minidl as md
    from minidl import nn, optim
    build = mlp if name == "mlp" else cnn
    steps = sizes.mlp_steps if name == "mlp" else sizes.cnn_steps
    classes = (sizes.mlp if name == "mlp" else sizes.cnn)[-1]
    rng = np.random.default_rng(0)
    x_host = rng.standard_normal(input_shape(name, sizes), dtype=np.float32)
    y_host = rng.integers(0, classes, sizes.batch)

    if memory is not None:  # count this model's memory only: earlier rows' cached blocks go
        md.cuda.empty_cache()
        md.cuda.reset_peak_memory_stats()
    md.manual_seed(0)
    model = build(nn, sizes).to("cuda")
    opt = optim.Adam(model.parameters(), lr=1e-3) if name == "mlp" else \
        optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x, y = md.tensor(x_host).to("cuda"), md.tensor(y_host).to("cuda")

    def run_minidl():
        for _ in range(steps):
            opt.zero_grad()
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
        wait_for_gpu()
    def count_from_here():  # the warm-up's steps filled the allocator's pool
        mallocs["start"] = md.cuda.memory_stats()["num_device_alloc"]
    mallocs = {}
    ours = steps / timed(run_minidl, sizes.repeats, count_from_here)
    if memory is not None:
        memory["reserved"] = md.cuda.memory_reserved()
        memory["peak"] = md.cuda.max_memory_allocated()
        memory["mallocs"] = md.cuda.memory_stats()["num_device_alloc"] - mallocs["start"]
        memory["steps"] = steps * sizes.repeats
    theirs = None
    if torch is not None:
        tmodel = build(torch.nn, sizes).to(device)
        topt = torch.optim.Adam(tmodel.parameters(), lr=1e-3) if name == "mlp" else \
            torch.optim.SGD(tmodel.parameters(), lr=0.01, momentum=0.9)
        tx, ty = torch.from_numpy(x_host).to(device), torch.from_numpy(y_host).to(device)

        def run_torch():
            for _ in range(steps):
                topt.zero_grad()
                loss = torch.nn.functional.cross_entropy(tmodel(tx), ty)
                loss.backward()
                topt.step()
            wait_for_torch(torch, device)
        theirs = steps / timed(run_torch, sizes.repeats)
    return [("training steps", ours, theirs)]


# -- copies ----------------------------------------------------------------------------------------

def copies(sizes: Sizes, torch, device):
    import minidl as md
    host = np.ones(sizes.copy_bytes // 4, np.float32)
    on_cpu = md.tensor(host)
    on_gpu = on_cpu.to("cuda")
    size_gb = host.nbytes / 1e9

    def upload():
        on_cpu.to("cuda")
        wait_for_gpu()
    rows = [["host->device", size_gb / timed(upload, sizes.repeats), None],
            ["device->host", size_gb / timed(on_gpu.numpy, sizes.repeats), None]]
    if torch is not None:
        t_host = torch.from_numpy(host)
        t_gpu = t_host.to(device)

        def torch_upload():
            t_host.to(device)
            wait_for_torch(torch, device)
        rows[0][2] = size_gb / timed(torch_upload, sizes.repeats)
        rows[1][2] = size_gb / timed(t_gpu.cpu, sizes.repeats)
    return [tuple(row) for row in rows]


def print_table(title: str, unit: str, rows) -> None:
    """One table: each row's minidl and PyTorch figures in ``unit`` and their ratio."""
    print(f"\n{title} ({unit})")
    print(f"  {'':<16} {'minidl':>12} {'torch':>12} {'minidl/torch':>13}")
    for name, ours, theirs in rows:
        torch_text = f"{theirs:>12,.1f}" if theirs is not None else f"{'-':>12}"
        ratio = f"{ours / theirs:>12.2f}x" if theirs else f"{'-':>13}"
        print(f"  {name:<16} {ours:>12,.1f} {torch_text} {ratio}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    chosen = parser.add_mutually_exclusive_group()
    chosen.add_argument("--quick", action="store_true", help="smaller sizes, fewer repeats")
    chosen.add_argument("--smoke", action="store_true",
                        help="tiny sizes, once: checks that every row runs (also on numba's "
                             "simulator); the figures mean nothing")
    args = parser.parse_args(argv)
    import minidl as md
    if not md.cuda.is_available():
        print("bench_cuda: no CUDA GPU here (or numba-cuda is not installed: pip install "
              "minidl[cuda]); nothing to measure. numba's simulator is for tests, not timings.")
        return 0
    from minidl.backend.cuda.device import SIMULATED
    if SIMULATED and not args.smoke:
        print("bench_cuda: NUMBA_ENABLE_CUDASIM is set: the simulator runs kernels in Python "
              "and cannot be timed meaningfully; unset it on a GPU machine (or pass --smoke "
              "to check that the script runs).")
        return 0
    sizes = SMOKE if args.smoke else QUICK if args.quick else FULL
    torch, device = torch_device(args.smoke)
    if args.smoke:
        print(f"bench_cuda --smoke: tiny sizes, one repeat, PyTorch on "
              f"{device or 'nothing'}; the figures below mean nothing")
    elif torch is None:
        print("(PyTorch with CUDA is not installed: minidl's figures only)")
    n = sizes.gemm
    print_table(f"SGEMM {n}x{n}x{n} float32", "GFLOP/s", sgemm(sizes, torch, device))
    inputs, hidden, classes = sizes.mlp
    print_table(f"MLP {inputs}-{hidden}-{hidden}-{classes}, batch {sizes.batch}, Adam",
                "steps/s", steps_per_second("mlp", sizes, torch, device))
    memory = {}
    side = sizes.cnn[0]
    print_table(f"CNN ({side}x{side} RGB, BatchNorm), batch {sizes.batch}, SGD momentum",
                "steps/s", steps_per_second("cnn", sizes, torch, device, memory))
    amount = (f"{sizes.copy_bytes >> 20} MiB" if sizes.copy_bytes >= 1 << 20
              else f"{sizes.copy_bytes >> 10} KiB")
    print_table(f"Copies of {amount}", "GB/s",
                copies(sizes, torch, device))
    print(f"\nCaching allocator, CNN training: {memory['peak'] / (1 << 20):,.1f} MiB peak in use, "
          f"{memory['reserved'] / (1 << 20):,.1f} MiB reserved; {memory['mallocs']} cudaMalloc "
          f"calls in {memory['steps']} timed steps")
    return 0


if __name__ == "__main__":
    sys.exit(main())
