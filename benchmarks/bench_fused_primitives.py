"""Does each fused primitive pay? Time it against its form composed of other primitives.

Usage: python benchmarks/bench_fused_primitives.py [--rounds 7] [--calls 20] [--backend numba]

A fused primitive earns its place in the contract (and a kernel in every backend) only by being
faster than the same computation written with the other primitives, on the shapes the engine
benchmark trains (``bench_engine.py``: the MLP, the CIFAR-shaped CNN with batch norm, the
attention block). Each row times both forms on one input, alternating between them round after
round and keeping each form's best round, so a burst of load on a shared machine hurts both
alike; the ratio composed / fused is what to read (above 1: the fused kernel pays).

Rows whose primitive has left the contract (composed in ``minidl.backend.composed`` now) are
listed as such, with no timing: there is nothing fused left to compare.
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np

from minidl.backend import composed
from minidl.backend.primitives import ALL_PRIMITIVES


# -- composed forms of the fused primitives that stay (the removed ones are in composed.py) ------

def softmax_composed(be, x, axis):
    shifted = be.sub(x, be.max(x, axis=axis, keepdims=True))
    exps = be.math_function(shifted, "exp")
    return be.div(exps, be.sum(exps, axis=axis, keepdims=True))


def log_softmax_composed(be, x, axis):
    shifted = be.sub(x, be.max(x, axis=axis, keepdims=True))
    total = be.sum(be.math_function(shifted, "exp"), axis=axis, keepdims=True)
    return be.sub(shifted, be.math_function(total, "log"))


def relu_composed(be, x):
    return be.maximum(x, x.dtype.type(0))


def relu_backward_composed(be, grad, x):
    return be.where(be.less(0, x), grad, grad.dtype.type(0))


def gelu_tanh_composed(be, x):
    # 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))
    inner = be.mul(be.add(x, be.mul(be.mul(be.mul(x, x), x), 0.044715)), math.sqrt(2 / math.pi))
    return be.mul(be.mul(x, 0.5), be.add(be.math_function(inner, "tanh"), 1.0))


def layer_norm_composed(be, x, weight, bias, eps):
    width = float(x.shape[-1])
    mean = be.div(be.sum(x, axis=(1,), keepdims=True), width)
    centered = be.sub(x, mean)
    var = be.div(be.sum(be.mul(centered, centered), axis=(1,), keepdims=True), width)
    rstd = be.div(1.0, be.math_function(be.add(var, eps), "sqrt"))
    return be.add(be.mul(be.mul(centered, rstd), weight), bias)


def gelu_tanh_backward_composed(be, grad, x):
    # d/dx of 0.5·x·(1 + t), t = tanh(u), u = k·(x + 0.044715·x³):
    # 0.5·(1 + t) + 0.5·x·(1 - t²)·k·(1 + 3·0.044715·x²)
    k = math.sqrt(2 / math.pi)
    squares = be.mul(x, x)
    t = be.math_function(be.mul(be.mul(x, be.add(be.mul(squares, 0.044715), 1.0)), k), "tanh")
    slope = be.mul(be.mul(be.mul(x, 0.5), be.sub(1.0, be.mul(t, t))),
                   be.mul(be.add(be.mul(squares, 3 * 0.044715), 1.0), k))
    return be.mul(grad, be.add(be.mul(be.add(t, 1.0), 0.5), slope))


def layer_norm_backward_composed(be, grad, x, mean, rstd, weight):
    # dx = rstd·(g - mean(g) - x̂·mean(g·x̂)) with g = grad·weight, per row
    width = float(x.shape[-1])
    column = (x.shape[0], 1)
    rstd_rows = be.reshape(rstd, column)
    xhat = be.mul(be.sub(x, be.reshape(mean, column)), rstd_rows)
    g = be.mul(grad, weight)
    mean_g = be.div(be.sum(g, axis=(1,), keepdims=True), width)
    mean_gx = be.div(be.sum(be.mul(g, xhat), axis=(1,), keepdims=True), width)
    dx = be.mul(be.sub(be.sub(g, mean_g), be.mul(xhat, mean_gx)), rstd_rows)
    return dx, be.sum(be.mul(grad, xhat), axis=(0,)), be.sum(grad, axis=(0,))


def cross_entropy_forward_composed(be, logits, targets, ignore_index, smoothing):
    # No ignored rows and no smoothing in these rows: -log p[target] per row.
    log_probs = log_softmax_composed(be, logits, 1)
    picked = be.one_hot(targets, logits.shape[1], logits.dtype)
    return be.mul(be.sum(be.mul(log_probs, picked), axis=(1,)), -1.0), log_probs


def cross_entropy_backward_composed(be, grad_losses, log_probs, targets, ignore_index,
                                    smoothing):
    # (softmax - one_hot(target))·grad per row
    picked = be.one_hot(targets, log_probs.shape[1], log_probs.dtype)
    return be.mul(be.sub(be.math_function(log_probs, "exp"), picked),
                  be.reshape(grad_losses, (log_probs.shape[0], 1)))


def lstm_cell_forward_composed(be, gates, c_prev):
    hidden = c_prev.shape[1]
    i, f, g, o = (be.getitem(gates, (slice(None), slice(k * hidden, (k + 1) * hidden)))
                  for k in range(4))
    i, f, o = be.sigmoid(i), be.sigmoid(f), be.sigmoid(o)
    g = be.math_function(g, "tanh")
    c = be.add(be.mul(f, c_prev), be.mul(i, g))
    h = be.mul(o, be.math_function(c, "tanh"))
    return h, c, be.concatenate([i, f, g, o], 1)


def cases(rng):
    """(primitive, shape description, arguments, composed form) for every timed row."""
    f32 = np.float32

    def normal(*shape):
        return rng.standard_normal(shape).astype(f32)

    mlp_hidden = normal(128, 512)                    # MLP 784-512-512-10, batch 128
    cnn_act = normal(64, 32, 32, 32)                 # CIFAR CNN's first block, batch 64
    bn_x = normal(64, 32, 32 * 32)                   # its batch norm input, as (N, C, S)
    bn_grad = normal(64, 32, 32 * 32)
    channels = normal(32)
    scores = normal(32, 4, 64, 64)                   # attention scores, batch 32, 4 heads
    probs = np.exp(scores - scores.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    tokens = normal(32 * 64, 128)                    # the attention block's rows, d = 128
    wide = normal(32 * 64, 512)                      # its feed-forward hidden layer
    logits = normal(128, 10)
    width = normal(128)
    classes = rng.integers(0, 10, 128)
    vocabulary_logits = normal(35 * 32, 10_000)      # LSTM language model: 35 steps, batch 32
    words = rng.integers(0, 10_000, 35 * 32)
    gates, cells = normal(32, 4 * 256), normal(32, 256)  # its LSTM cell, hidden 256

    reference = np_backend()
    bn_stats = composed.batch_norm_forward(reference, bn_x, channels, channels, None, None,
                                           1e-5)
    _, ln_mean, ln_rstd = reference.layer_norm_forward(tokens, width, width, 1e-5)
    _, log_probs = reference.softmax_cross_entropy_forward(logits, classes, -100, 0.0)
    _, vocabulary_log_probs = reference.softmax_cross_entropy_forward(vocabulary_logits, words,
                                                                       -100, 0.0)
    return [
        ("softmax", "attention 32x4x64x64", (scores, -1), softmax_composed),
        ("softmax_backward", "attention 32x4x64x64", (scores, probs, -1),
         composed.softmax_backward),
        ("log_softmax", "attention 32x4x64x64", (scores, -1), log_softmax_composed),
        ("log_softmax", "classifier 128x10", (logits, 1), log_softmax_composed),
        ("relu", "MLP 128x512", (mlp_hidden,), relu_composed),
        ("relu", "CNN 64x32x32x32", (cnn_act,), relu_composed),
        ("relu_backward", "CNN 64x32x32x32", (cnn_act, cnn_act), relu_backward_composed),
        ("gelu_forward", "attention FF 2048x512 (tanh)", (wide, "tanh"),
         lambda be, x, _: gelu_tanh_composed(be, x)),
        ("gelu_backward", "attention FF 2048x512 (tanh)", (wide, wide, "tanh"),
         lambda be, grad, x, _: gelu_tanh_backward_composed(be, grad, x)),
        ("layer_norm_forward", "attention 2048x128", (tokens, width, width, 1e-5),
         layer_norm_composed),
        ("layer_norm_backward", "attention 2048x128", (tokens, tokens, ln_mean, ln_rstd, width),
         layer_norm_backward_composed),
        ("softmax_cross_entropy_forward", "classifier 128x10", (logits, classes, -100, 0.0),
         cross_entropy_forward_composed),
        ("softmax_cross_entropy_forward", "LSTM LM 1120x10000",
         (vocabulary_logits, words, -100, 0.0), cross_entropy_forward_composed),
        ("softmax_cross_entropy_backward", "LSTM LM 1120x10000",
         (np.full(35 * 32, 1 / 1120, f32), vocabulary_log_probs, words, -100, 0.0),
         cross_entropy_backward_composed),
        ("lstm_cell_forward", "LSTM LM 32x4x256", (gates, cells), lstm_cell_forward_composed),
        ("batch_norm_forward", "CNN 64x32x1024", (bn_x, channels, channels, None, None, 1e-5),
         composed.batch_norm_forward),
        ("batch_norm_backward", "CNN 64x32x1024",
         (bn_grad, bn_x, bn_stats[1], bn_stats[3], channels, True), composed.batch_norm_backward),
        ("clip", "CNN 64x32x32x32", (cnn_act, -1.0, 1.0), composed.clip),
        ("sign", "MLP 128x512", (mlp_hidden,), composed.sign),
        ("less_equal", "MLP 128x512", (mlp_hidden, 0.0), composed.less_equal),
        ("min", "MLP 128x512 rows", (mlp_hidden, (1,), True), composed.min),
        ("argmin", "classifier 128x10", (logits, 1, False), composed.argmin),
        ("stack", "LSTM 35 steps of 32x256", ([normal(32, 256) for _ in range(35)], 0),
         composed.stack),
    ]


def np_backend():
    from minidl.backend.reference import ReferenceBackend
    return ReferenceBackend()


def best_call_seconds(fused, composed_form, rounds: int, calls: int):
    """Each form's best mean time per call over ``rounds`` alternating rounds of ``calls``."""
    fused(), composed_form()  # warm-up: compiles or loads the Numba kernels
    best = [math.inf, math.inf]
    for _ in range(rounds):
        for i, function in enumerate((fused, composed_form)):
            start = time.perf_counter()
            for _ in range(calls):
                function()
            best[i] = min(best[i], (time.perf_counter() - start) / calls)
    return best


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--backend", choices=("numba", "numpy"), default="numba")
    args = parser.parse_args()
    if args.backend == "numba":
        from minidl.backend.numba_cpu import NumbaCpuBackend
        be = NumbaCpuBackend()
    else:
        be = np_backend()

    print(f"backend {args.backend}; best of {args.rounds} alternating rounds of {args.calls} "
          f"calls")
    print(f"{'primitive':<32}{'shape':<32}{'fused ms':>10}{'composed ms':>13}"
          f"{'composed/fused':>16}")
    for name, shape, arguments, composed_form in cases(np.random.default_rng(0)):
        if name not in ALL_PRIMITIVES:
            print(f"{name:<32}{shape:<32}{'composed (no longer a primitive)':>39}")
            continue
        fused_s, composed_s = best_call_seconds(
            lambda: getattr(be, name)(*arguments), lambda: composed_form(be, *arguments),
            args.rounds, args.calls)
        print(f"{name:<32}{shape:<32}{fused_s * 1e3:>10.3f}{composed_s * 1e3:>13.3f}"
              f"{composed_s / fused_s:>15.2f}x")


if __name__ == "__main__":
    main()
