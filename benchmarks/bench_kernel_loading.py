"""What a fresh process pays to start Numba and load each cached kernel.

    python benchmarks/bench_kernel_loading.py [--processes 3]

A first process fills Numba's on-disk cache; then each of ``--processes`` fresh processes times
``import numba`` and the first call of each primitive below, minus a later call (the
arithmetic, tiny here: the fastest of five later calls), which leaves the time to load the kernel's machine code from the cache.
The first kernel also starts LLVM and Numba's code loader, so it is listed apart. Kernels marked
``parallel`` are the ``prange`` variants used on large inputs: they also start the thread pool.
Best of the processes per row.
"""

from __future__ import annotations

import argparse
import subprocess
import sys

_CHILD = r"""
import time
import numpy as np
from minidl.backend.numba_cpu import NumbaCpuBackend
t = time.perf_counter()
import numba  # noqa: F401
print("import numba", time.perf_counter() - t)
from minidl.backend.numba_cpu import load_kernels
t = time.perf_counter()
load_kernels()
print("import the kernel modules", time.perf_counter() - t)
be = NumbaCpuBackend()
f32 = np.float32
small = np.ones((1, 2, 6, 6), f32)
big = np.ones((8, 16, 32, 32), f32)
geometry = ((3, 3), (1, 1), (1, 1), (1, 1))
param, grad = np.ones(1000, f32), np.ones(1000, f32)
m, v = np.zeros(1000, f32), np.zeros(1000, f32)
bparam, bgrad = np.ones(1 << 21, f32), np.ones(1 << 21, f32)
bm, bv = np.zeros(1 << 21, f32), np.zeros(1 << 21, f32)
calls = [
    ("random_uniform (Philox + uniform)", lambda: be.random_uniform((10,), f32, (1, 2), 0)),
    ("im2col", lambda: be.im2col(small, *geometry)),
    ("im2col, parallel", lambda: be.im2col(big, *geometry)),
    ("col2im", lambda: be.col2im(be.im2col(small, *geometry), small.shape, *geometry)),
    ("max_pool2d_forward 2x2", lambda: be.max_pool2d_forward(small, (2, 2), (2, 2), (0, 0),
                                                             (1, 1), False)),
    ("batch_norm_forward", lambda: be.batch_norm_forward(small.reshape(1, 2, 36), None, None,
                                                         None, None, 1e-5)),
    ("softmax", lambda: be.softmax(small, -1)),
    ("layer_norm_forward", lambda: be.layer_norm_forward(small.reshape(-1, 6), None, None,
                                                         1e-5)),
    ("gelu_forward", lambda: be.gelu_forward(small, "none")),
    ("adam_update", lambda: be.adam_update(param, grad, m, v, None, 1, 1e-3, 0.9, 0.999, 1e-8,
                                           0.0, False, False, False)),
    ("adam_update, parallel", lambda: be.adam_update(bparam, bgrad, bm, bv, None, 1, 1e-3, 0.9,
                                                     0.999, 1e-8, 0.0, False, False, False)),
]
for name, call in calls:
    t = time.perf_counter()
    call()
    first = time.perf_counter() - t
    steady = []
    for _ in range(5):
        t = time.perf_counter()
        call()
        steady.append(time.perf_counter() - t)
    print(name, first - min(steady))
"""


def run_child() -> dict:
    out = subprocess.run([sys.executable, "-c", _CHILD], capture_output=True, text=True,
                         check=True).stdout
    return {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1]) for line in out.splitlines()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=3, help="fresh processes (best of)")
    args = parser.parse_args()
    run_child()  # fills the cache
    runs = [run_child() for _ in range(args.processes)]
    names = list(runs[0])
    width = max(len(n) for n in names) + 2
    print(f"{'step (fresh process, warm cache)':{width}}  ms")
    for index, name in enumerate(names):
        label = name + ("  (first kernel: starts LLVM)" if index == 2 else "")
        print(f"{label:{width + 30}}  {min(run[name] for run in runs) * 1000:7.1f}")


if __name__ == "__main__":
    main()
