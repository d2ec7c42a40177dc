"""Time each backend kernel on LeNet-5- and MLP-sized inputs: NumPy reference vs Numba.

Usage: python benchmarks/bench_kernels.py [--repeat-seconds 0.3]

Every Numba kernel is called once before timing, so compile time (or loading it from the cache)
is excluded. Each row reports the median time per call over a run of about --repeat-seconds.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from minidl.backend.numba_cpu import NumbaCpuBackend
from minidl.backend.reference import ReferenceBackend

fast, ref = NumbaCpuBackend(), ReferenceBackend()


def median_call_seconds(function, budget_seconds):
    """Median wall time of one call, over as many calls as fit in the budget (at least 5)."""
    function()  # warm-up: compiles the Numba kernel, fills caches
    timings = []
    deadline = time.perf_counter() + budget_seconds
    while len(timings) < 5 or time.perf_counter() < deadline:
        start = time.perf_counter()
        function()
        timings.append(time.perf_counter() - start)
    return float(np.median(timings))


def benchmark_cases(rng):
    """(name, shape description, callable(backend)) for every timed kernel."""
    f32 = np.float32
    # LeNet-5 on 28x28 MNIST, batch 64
    conv1_x = rng.standard_normal((64, 1, 28, 28)).astype(f32)
    conv2_x = rng.standard_normal((64, 6, 12, 12)).astype(f32)
    lenet_conv = ((5, 5), (1, 1), (0, 0), (1, 1))
    conv1_cols = rng.standard_normal((64, 25, 24 * 24)).astype(f32)
    conv2_cols = rng.standard_normal((64, 150, 8 * 8)).astype(f32)
    pool1_x = rng.standard_normal((64, 6, 24, 24)).astype(f32)
    pool2_x = rng.standard_normal((64, 16, 8, 8)).astype(f32)
    pool = ((2, 2), (2, 2), (0, 0), (1, 1), False)
    _, pool1_argmax = ref.max_pool2d_forward(pool1_x, *pool)
    pool1_grad = rng.standard_normal((64, 6, 12, 12)).astype(f32)
    # classifier head and MLP activations
    logits = rng.standard_normal((64, 10)).astype(f32)
    targets = rng.integers(0, 10, size=64)
    _, log_probs = ref.softmax_cross_entropy_forward(logits, targets, -100, 0.0)
    ce_grad = np.full(64, 1 / 64, dtype=f32)
    hidden = rng.standard_normal((64, 512)).astype(f32)
    big_hidden = rng.standard_normal((256, 1024)).astype(f32)
    ln_weight = rng.standard_normal(512).astype(f32)
    ln_bias = rng.standard_normal(512).astype(f32)
    _, ln_mean, ln_rstd = ref.layer_norm_forward(hidden, ln_weight, ln_bias, 1e-5)

    return [
        ("im2col", "LeNet conv1 64x1x28x28 k5", lambda b: b.im2col(conv1_x, *lenet_conv)),
        ("im2col", "LeNet conv2 64x6x12x12 k5", lambda b: b.im2col(conv2_x, *lenet_conv)),
        ("col2im", "LeNet conv1 -> 64x1x28x28", lambda b: b.col2im(conv1_cols, conv1_x.shape, *lenet_conv)),
        ("col2im", "LeNet conv2 -> 64x6x12x12", lambda b: b.col2im(conv2_cols, conv2_x.shape, *lenet_conv)),
        ("max_pool2d fwd", "64x6x24x24 k2 s2", lambda b: b.max_pool2d_forward(pool1_x, *pool)),
        ("max_pool2d fwd", "64x16x8x8 k2 s2", lambda b: b.max_pool2d_forward(pool2_x, *pool)),
        ("max_pool2d bwd", "64x6x24x24 k2 s2", lambda b: b.max_pool2d_backward(pool1_grad, pool1_argmax, pool1_x.shape)),
        ("avg_pool2d fwd", "64x6x24x24 k2 s2", lambda b: b.avg_pool2d_forward(pool1_x, (2, 2), (2, 2), (0, 0), False, True)),
        ("softmax-CE fwd", "64x10", lambda b: b.softmax_cross_entropy_forward(logits, targets, -100, 0.0)),
        ("softmax-CE bwd", "64x10", lambda b: b.softmax_cross_entropy_backward(ce_grad, log_probs, targets, -100, 0.0)),
        ("log_softmax", "64x10", lambda b: b.log_softmax(logits, 1)),
        ("gelu fwd (erf)", "64x512", lambda b: b.gelu_forward(hidden, "none")),
        ("gelu fwd (tanh)", "64x512", lambda b: b.gelu_forward(hidden, "tanh")),
        ("gelu bwd (tanh)", "64x512", lambda b: b.gelu_backward(hidden, hidden, "tanh")),
        ("gelu fwd (tanh)", "256x1024", lambda b: b.gelu_forward(big_hidden, "tanh")),
        ("layer_norm fwd", "64x512", lambda b: b.layer_norm_forward(hidden, ln_weight, ln_bias, 1e-5)),
        ("layer_norm bwd", "64x512", lambda b: b.layer_norm_backward(hidden, hidden, ln_mean, ln_rstd, ln_weight)),
        # dropout masks of the MLP's hidden layers; N(0, 1) for Linear(784, 512)'s init
        ("uniform (Philox)", "128x512 float32", lambda b: b.random_uniform((128, 512), f32, (1, 2), 7)),
        ("normal (Philox)", "512x784 float32", lambda b: b.random_normal((512, 784), f32, (1, 2), 7)),
    ]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat-seconds", type=float, default=0.3, help="timing budget per kernel and backend")
    args = parser.parse_args()

    rng = np.random.default_rng(0)
    print(f"{'kernel':<17} {'input':<27} {'reference':>11} {'numba':>11} {'speed-up':>9}")
    for name, shape, call in benchmark_cases(rng):
        reference_seconds = median_call_seconds(lambda: call(ref), args.repeat_seconds)
        numba_seconds = median_call_seconds(lambda: call(fast), args.repeat_seconds)
        print(
            f"{name:<17} {shape:<27} {reference_seconds * 1e6:>9.1f}us {numba_seconds * 1e6:>9.1f}us "
            f"{reference_seconds / numba_seconds:>8.1f}x"
        )


if __name__ == "__main__":
    main()
