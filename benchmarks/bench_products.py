"""Time a matrix product cut into parts on two runners: minidl's Python worker threads and
Numba's threads (the CPU backend making NumPy's BLAS calls itself), against one thread.

Usage: python benchmarks/bench_products.py [--threads 2] [--rounds 9] [--calls 20]

Each row is a product from a training row of ``bench_engine.py``. Both runners are made to split
every row (their split floors set to zero), so the columns compare what handing the parts to
the other threads costs, which is what the floors in ``reference/product_threads.py`` are set
from. The three are alternated round by round; each round keeps its best call, and the table
shows the median round, so a slow spell of a shared machine hits all three alike. The load
average is printed before and after: a figure from a machine whose load exceeds its core count
says little about the many-thread columns.
"""

from __future__ import annotations

import argparse
import functools
import statistics

import numpy as np
from bench_threads import best_call, load_average  # this folder's: run as a script

import minidl as md
from minidl.backend.numba_cpu import load_kernels, product_parts
from minidl.backend.reference import array_ops, product_threads


def cases(rng):
    """(description, a, b, matmul keyword arguments) for every timed product."""
    f32 = np.float32
    columns = rng.standard_normal((1, 25, 64, 784)).astype(f32)     # LeNet conv1's im2col
    qkv = rng.standard_normal((32, 64, 3, 4, 32)).astype(f32)        # attention's heads
    q, k = qkv[:, :, 0].transpose(0, 2, 1, 3), qkv[:, :, 1].transpose(0, 2, 1, 3)
    return [
        ("LeNet conv1 forward, 64 images of 6x25 @ 25x784",
         rng.standard_normal((1, 1, 6, 25)).astype(f32), columns,
         {"b_axes": (0, 2, 1, 3), "out_axes": (1, 0, 2, 3)}),
        ("attention scores, 32x4 heads of 64x32 @ 32x64", q, k, {"transpose_b": True}),
        ("MLP layer 1, 128x784 @ 784x512",
         rng.standard_normal((128, 784)).astype(f32),
         rng.standard_normal((784, 512)).astype(f32), {}),
        ("attention MLP, 2048x128 @ 128x512",
         rng.standard_normal((2048, 128)).astype(f32),
         rng.standard_normal((128, 512)).astype(f32), {}),
        ("512x128 @ 128x128", rng.standard_normal((512, 128)).astype(f32),
         rng.standard_normal((128, 128)).astype(f32), {}),
    ]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--calls", type=int, default=20)
    options = parser.parse_args(argv)
    load_kernels()
    if not product_parts.gemm_functions():
        print("NumPy's BLAS here has no 64-bit-integer CBLAS gemm: only the Python workers run")
        return 0
    product_threads.SPLIT_MIN_WORK = product_threads.NATIVE_SPLIT_MIN_WORK = 0
    runners = {"1 thread": (1, product_parts), "Python workers": (options.threads, None),
               "Numba threads": (options.threads, product_parts)}
    print(f"threads: 1 and {options.threads}; load average (1, 5, 15 min): {load_average()}")
    header = (f"{'product':<50} {'M mult-adds':>11} " +
              " ".join(f"{name:>22}" for name in runners))
    print(header)
    print("-" * len(header))
    for description, a, b, keywords in cases(np.random.default_rng(0)):
        rounds = {name: [] for name in runners}
        for _ in range(options.rounds):
            for name, (threads, native) in runners.items():
                md.set_num_threads(threads)
                product_threads.native_parts = native
                product = functools.partial(array_ops.matmul, **keywords)
                rounds[name].append(best_call(product, (a, b), options.calls))
        median = {name: statistics.median(times) for name, times in rounds.items()}
        out = array_ops.matmul(a, b, **keywords)
        work = out.size * (a.shape[-2] if keywords.get("transpose_a") else a.shape[-1])
        cells = [f"{median['1 thread'] * 1e6:9.0f} us {'':>10}"] + [
            f"{median[name] * 1e6:9.0f} us ({median['1 thread'] / median[name]:.2f}x)"
            for name in ("Python workers", "Numba threads")]
        print(f"{description:<50} {work / 1e6:>11.1f} " + " ".join(f"{c:>22}" for c in cells))
    print(f"load average after: {load_average()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
