"""minidl's CUDA backend against PyTorch on the same GPU.

Measures, on ``cuda:0``:

* SGEMM 4096 x 4096 x 4096 (float32): GFLOP/s of minidl's tiled kernel and of ``torch.matmul``
  (target: minidl at least 30 % of PyTorch, which calls cuBLAS);
* an MLP 784-512-512-10, batch 128, Adam: training steps per second;
* a CIFAR-shaped CNN (3x32x32 input, two Conv-BN-ReLU-MaxPool stages, a Linear head), batch 128,
  SGD with momentum: steps per second (target for both models: at least 0.3x PyTorch);
* host<->device copies of 256 MiB: GB/s each way, to compare with the link's figure (PCIe 4.0
  x16 about 25 GB/s, PCIe 5.0 about 50 GB/s, NVLink-C2C far more).

Every figure is the median of a few timed repeats after a warm-up (compilation happens in the
warm-up). GPU work is asynchronous, so each timing ends by reading a result (minidl) or with
``torch.cuda.synchronize()``. Run: ``python benchmarks/bench_cuda.py [--quick]``. Without a CUDA
GPU it says so and exits (numba's simulator is far too slow to time anything).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import numpy as np


def _torch_cuda():
    try:
        import torch
    except ImportError:
        return None
    return torch if torch.cuda.is_available() else None


def timed(function, repeats: int) -> float:
    """Median seconds of ``function()`` after one warm-up call."""
    function()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def wait_for_gpu(*results) -> None:
    """Block until the GPU has finished the kernels producing ``results`` (all queued work)."""
    from numba import cuda
    cuda.synchronize()


# -- SGEMM -----------------------------------------------------------------------------------------

def sgemm(size: int, repeats: int, torch):
    import minidl as md
    rng = np.random.default_rng(0)
    a = md.tensor(rng.standard_normal((size, size), dtype=np.float32)).to("cuda")
    b = md.tensor(rng.standard_normal((size, size), dtype=np.float32)).to("cuda")
    flops = 2.0 * size ** 3

    def run_minidl():
        wait_for_gpu(a @ b)
    rows = [("minidl", flops / timed(run_minidl, repeats) / 1e9)]
    if torch is not None:
        ta, tb = torch.randn(size, size, device="cuda"), torch.randn(size, size, device="cuda")
        torch.backends.cuda.matmul.allow_tf32 = False  # a float32 product, as minidl's

        def run_torch():
            ta @ tb
            torch.cuda.synchronize()
        rows.append(("torch", flops / timed(run_torch, repeats) / 1e9))
    return rows


# -- models ----------------------------------------------------------------------------------------

def mlp_minidl():
    from minidl import nn
    return nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                         nn.Linear(512, 10))


def cnn_minidl():
    from minidl import nn
    return nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(64 * 8 * 8, 10))


def mlp_torch(torch):
    nn = torch.nn
    return nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                         nn.Linear(512, 10))


def cnn_torch(torch):
    nn = torch.nn
    return nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(64 * 8 * 8, 10))


def steps_per_second(name: str, input_shape, optimizer: str, steps: int, repeats: int, torch):
    import minidl as md
    from minidl import nn, optim
    rng = np.random.default_rng(0)
    x_host = rng.standard_normal(input_shape, dtype=np.float32)
    y_host = rng.integers(0, 10, input_shape[0])

    md.manual_seed(0)
    model = (mlp_minidl if name == "mlp" else cnn_minidl)().to("cuda")
    opt = optim.Adam(model.parameters(), lr=1e-3) if optimizer == "adam" else \
        optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x, y = md.tensor(x_host).to("cuda"), md.tensor(y_host).to("cuda")

    def run_minidl():
        for _ in range(steps):
            opt.zero_grad()
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
        wait_for_gpu(loss)
    rows = [("minidl", steps / timed(run_minidl, repeats))]
    if torch is not None:
        tmodel = (mlp_torch(torch) if name == "mlp" else cnn_torch(torch)).cuda()
        topt = torch.optim.Adam(tmodel.parameters(), lr=1e-3) if optimizer == "adam" else \
            torch.optim.SGD(tmodel.parameters(), lr=0.01, momentum=0.9)
        tx, ty = torch.from_numpy(x_host).cuda(), torch.from_numpy(y_host).cuda()

        def run_torch():
            for _ in range(steps):
                topt.zero_grad()
                loss = torch.nn.functional.cross_entropy(tmodel(tx), ty)
                loss.backward()
                topt.step()
            torch.cuda.synchronize()
        rows.append(("torch", steps / timed(run_torch, repeats)))
    return rows


# -- copies ----------------------------------------------------------------------------------------

def copies(megabytes: int, repeats: int, torch):
    import minidl as md
    host = np.ones(megabytes * (1 << 20) // 4, np.float32)
    on_cpu = md.tensor(host)
    on_gpu = on_cpu.to("cuda")
    size_gb = host.nbytes / 1e9
    rows = [("minidl host->device", size_gb / timed(lambda: wait_for_gpu(on_cpu.to("cuda")),
                                                     repeats)),
            ("minidl device->host", size_gb / timed(lambda: on_gpu.numpy(), repeats))]
    if torch is not None:
        t_host = torch.from_numpy(host)
        t_gpu = t_host.cuda()

        def up():
            t_host.cuda()
            torch.cuda.synchronize()
        rows += [("torch host->device", size_gb / timed(up, repeats)),
                 ("torch device->host", size_gb / timed(lambda: t_gpu.cpu(), repeats))]
    return rows


def print_table(title, unit, rows):
    print(f"\n{title}")
    reference = dict(rows).get("torch")
    for name, value in rows:
        ratio = f"  ({value / reference:.2f}x torch)" if reference and name != "torch" else ""
        print(f"  {name:<22} {value:>12,.1f} {unit}{ratio}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes, fewer repeats")
    args = parser.parse_args(argv)
    import minidl as md
    if not md.cuda.is_available():
        print("bench_cuda: no CUDA GPU here (or numba-cuda is not installed: pip install "
              "minidl[cuda]); nothing to measure. numba's simulator is for tests, not timings.")
        return 0
    from minidl.backend.cuda.device import SIMULATED
    if SIMULATED:
        print("bench_cuda: NUMBA_ENABLE_CUDASIM is set: the simulator runs kernels in Python "
              "and cannot be timed meaningfully; unset it on a GPU machine.")
        return 0
    torch = _torch_cuda()
    if torch is None:
        print("(PyTorch with CUDA is not installed: minidl's figures only)")
    repeats = 2 if args.quick else 5
    size = 1024 if args.quick else 4096
    print_table(f"SGEMM {size}^3 float32", "GFLOP/s", sgemm(size, repeats, torch))
    print_table("MLP 784-512-512-10, batch 128, Adam", "steps/s",
                steps_per_second("mlp", (128, 784), "adam", 20, repeats, torch))
    print_table("CNN (CIFAR-shaped, BatchNorm), batch 128, SGD momentum", "steps/s",
                steps_per_second("cnn", (128, 3, 32, 32), "sgd", 5, repeats, torch))
    print_table("Copies of 256 MiB", "GB/s", copies(64 if args.quick else 256, repeats, torch))
    return 0


if __name__ == "__main__":
    sys.exit(main())
