"""LSTM and GRU cells as Numba kernels: one pass over the (N, H) entries per step.

Same names and results as :mod:`minidl.backend.reference.rnn_kernels`, whose docstring has the
formulas. The NumPy versions slice, activate and combine the gates in a dozen whole-array
passes with a temporary each; here every entry's gates are read once, activated and combined in
registers, which is what makes a time step cheap next to its two matrix products.

Each row (one sequence of the batch) is computed on its own, so a large step splits its rows
over Numba's threads with the one-thread bits at any thread count (from
:data:`PARALLEL_MIN_GATES` gate entries, whose docstring says why that is so many).
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit, prange, types
from numba.extending import overload

from .vector_math import CONTRACT_TO_FMA, exp_of_negative

__all__ = ["lstm_cell_forward", "lstm_cell_backward", "gru_cell_forward", "gru_cell_backward"]

PARALLEL_MIN_GATES = 1 << 20
"""Gate entries (rows × gates × hidden) from which a step's rows are split over threads.

Timed alone, back to back, a (32, 4·256) LSTM step is ~1.7x faster on two threads than on one
(~50 -> ~30 µs). But a cell never runs alone: each step follows the step's recurrent product
h·W_hhᵀ, and by then the pool's threads are asleep (or, with OpenBLAS threading the product,
were spinning on the cores), and waking them costs more than the cell (~150 µs on a 2-core
virtual machine). Measured on 2 cores, a 35-step forward and backward loop (product, add,
cell) at 2 threads ran slower with the threaded cells at every batch tried, 32, 128 and 512
rows of 4·256 gates (up to 2^19 entries). So a step stays on the calling thread below 2^20
entries."""


def _sigmoid(x, like):
    """σ(x) = 1 / (1 + e^-x), in the form whose exponent is never positive (no overflow), for a
    result stored in the array ``like``."""


def _tanh(x, like):
    """tanh(x), for a result stored in the array ``like``."""


# float32 cells compute their activations with vector_math's exp(-y), which LLVM vectorises
# (the C library's exp and tanh go one element per call, ~10 ns each: the NumPy reference's
# vectorised ufuncs beat that one-thread kernel ~3x on a (32, 4x256) LSTM step); float64 cells
# keep the C library, whose last-bit accuracy the float64 polynomial does not promise. The
# choice is made by the dtype of the array the result goes to, when a kernel is compiled. The
# kernels fuse a·b + c into one rounding (CONTRACT_TO_FMA, as vector_math asks), float64 too.

@njit(cache=True, inline="always", error_model="numpy", fastmath=CONTRACT_TO_FMA)
def _sigmoid_vectorised(x):
    e = exp_of_negative(abs(x))                   # e^-|x|, in (0, 1]
    return (1.0 if x >= 0 else e) / (1.0 + e)     # 1/(1 + e^-x) or e^x/(1 + e^x); NaN stays NaN


@njit(cache=True, inline="always", error_model="numpy", fastmath=CONTRACT_TO_FMA)
def _tanh_vectorised(x):
    a = abs(x)
    e = exp_of_negative(2.0 * a)
    large = (1.0 - e) / (1.0 + e)                 # tanh a = (1 - e^-2a) / (1 + e^-2a)
    # Near 0, 1 - e^-2a cancels: the series a - a³/3 + 2a⁵/15 - 17a⁷/315 (next term ~5e-12
    # relative below 1/16) keeps tanh's relative accuracy for tiny a.
    a2 = a * a
    small = a * (1.0 + a2 * (-1.0 / 3.0 + a2 * (2.0 / 15.0 + a2 * (-17.0 / 315.0))))
    return math.copysign(small if a < 0.0625 else large, x)


@njit(cache=True, inline="always")
def _sigmoid_exact(x):
    if x >= 0:
        return 1.0 / (1.0 + math.exp(-x))
    e = math.exp(x)
    return e / (1.0 + e)


@overload(_sigmoid)
def _sigmoid_by_type(x, like):
    if like.dtype == types.float32:
        return lambda x, like: _sigmoid_vectorised(np.float64(x))
    return lambda x, like: _sigmoid_exact(x)


@overload(_tanh)
def _tanh_by_type(x, like):
    if like.dtype == types.float32:
        return lambda x, like: _tanh_vectorised(np.float64(x))
    return lambda x, like: math.tanh(x)


# Each kernel computes one row (one sequence of the batch) from 1-D views of its rows: written
# over a whole (rows, ·) array, the loop did not vectorise and ran ~4x slower per entry.

@njit(cache=True, error_model="numpy", fastmath=CONTRACT_TO_FMA)
def _lstm_forward_row(gates, c_prev, h, c, activated):
    hidden = c_prev.size
    for k in range(hidden):
        i = _sigmoid(gates[k], c)
        f = _sigmoid(gates[hidden + k], c)
        g = _tanh(gates[2 * hidden + k], c)
        o = _sigmoid(gates[3 * hidden + k], c)
        cell = f * c_prev[k] + i * g
        c[k] = cell
        h[k] = o * _tanh(cell, c)
        activated[k] = i
        activated[hidden + k] = f
        activated[2 * hidden + k] = g
        activated[3 * hidden + k] = o


@njit(cache=True, error_model="numpy", fastmath=CONTRACT_TO_FMA)
def _lstm_backward_row(grad_h, grad_c, c_prev, c, activated, grad_gates, grad_c_prev):
    hidden = c.size
    for k in range(hidden):
        i = activated[k]
        f = activated[hidden + k]
        g = activated[2 * hidden + k]
        o = activated[3 * hidden + k]
        t = _tanh(c[k], c)
        dc = grad_c[k] + grad_h[k] * o * (1.0 - t * t)
        grad_gates[k] = dc * g * i * (1.0 - i)
        grad_gates[hidden + k] = dc * c_prev[k] * f * (1.0 - f)
        grad_gates[2 * hidden + k] = dc * i * (1.0 - g * g)
        grad_gates[3 * hidden + k] = grad_h[k] * t * o * (1.0 - o)
        grad_c_prev[k] = dc * f


@njit(cache=True, error_model="numpy", fastmath=CONTRACT_TO_FMA)
def _gru_forward_row(input_gates, hidden_gates, h_prev, h, activated):
    hidden = h_prev.size
    for k in range(hidden):
        r = _sigmoid(input_gates[k] + hidden_gates[k], h)
        z = _sigmoid(input_gates[hidden + k] + hidden_gates[hidden + k], h)
        n = _tanh(input_gates[2 * hidden + k] + r * hidden_gates[2 * hidden + k], h)
        h[k] = (1.0 - z) * n + z * h_prev[k]
        activated[k] = r
        activated[hidden + k] = z
        activated[2 * hidden + k] = n


@njit(cache=True, error_model="numpy", fastmath=CONTRACT_TO_FMA)
def _gru_backward_row(grad_h, hidden_gates, h_prev, activated, grad_input, grad_hidden,
                      grad_h_prev):
    hidden = h_prev.size
    for k in range(hidden):
        r = activated[k]
        z = activated[hidden + k]
        n = activated[2 * hidden + k]
        g = grad_h[k]
        dn = g * (1.0 - z) * (1.0 - n * n)
        dz = g * (h_prev[k] - n) * z * (1.0 - z)
        dr = dn * hidden_gates[2 * hidden + k] * r * (1.0 - r)
        grad_input[k] = dr
        grad_input[hidden + k] = dz
        grad_input[2 * hidden + k] = dn
        grad_hidden[k] = dr
        grad_hidden[hidden + k] = dz
        grad_hidden[2 * hidden + k] = dn * r
        grad_h_prev[k] = g * z


# Each over every row: on the calling thread, or with prange (a row is one task's work, computed
# by the same code, so the bits do not depend on the thread count).

@njit(cache=True)
def _lstm_forward_rows(gates, c_prev, h, c, activated):
    for r in range(gates.shape[0]):
        _lstm_forward_row(gates[r], c_prev[r], h[r], c[r], activated[r])


@njit(cache=True, parallel=True)
def _lstm_forward_threads(gates, c_prev, h, c, activated):
    for r in prange(gates.shape[0]):
        _lstm_forward_row(gates[r], c_prev[r], h[r], c[r], activated[r])


@njit(cache=True)
def _lstm_backward_rows(grad_h, grad_c, c_prev, c, activated, grad_gates, grad_c_prev):
    for r in range(c.shape[0]):
        _lstm_backward_row(grad_h[r], grad_c[r], c_prev[r], c[r], activated[r], grad_gates[r],
                           grad_c_prev[r])


@njit(cache=True, parallel=True)
def _lstm_backward_threads(grad_h, grad_c, c_prev, c, activated, grad_gates, grad_c_prev):
    for r in prange(c.shape[0]):
        _lstm_backward_row(grad_h[r], grad_c[r], c_prev[r], c[r], activated[r], grad_gates[r],
                           grad_c_prev[r])


@njit(cache=True)
def _gru_forward_rows(input_gates, hidden_gates, h_prev, h, activated):
    for r in range(h_prev.shape[0]):
        _gru_forward_row(input_gates[r], hidden_gates[r], h_prev[r], h[r], activated[r])


@njit(cache=True, parallel=True)
def _gru_forward_threads(input_gates, hidden_gates, h_prev, h, activated):
    for r in prange(h_prev.shape[0]):
        _gru_forward_row(input_gates[r], hidden_gates[r], h_prev[r], h[r], activated[r])


@njit(cache=True)
def _gru_backward_rows(grad_h, hidden_gates, h_prev, activated, grad_input, grad_hidden,
                       grad_h_prev):
    for r in range(h_prev.shape[0]):
        _gru_backward_row(grad_h[r], hidden_gates[r], h_prev[r], activated[r], grad_input[r],
                          grad_hidden[r], grad_h_prev[r])


@njit(cache=True, parallel=True)
def _gru_backward_threads(grad_h, hidden_gates, h_prev, activated, grad_input, grad_hidden,
                          grad_h_prev):
    for r in prange(h_prev.shape[0]):
        _gru_backward_row(grad_h[r], hidden_gates[r], h_prev[r], activated[r], grad_input[r],
                          grad_hidden[r], grad_h_prev[r])


def _run(one_thread, threads, gates, *arrays):
    """``one_thread(*arrays)``, or ``threads(*arrays)`` when ``gates`` is large."""
    (one_thread if gates.size < PARALLEL_MIN_GATES else threads)(*arrays)


def _c(array, dtype):
    return np.asarray(array, dtype=dtype, order="C")


def lstm_cell_forward(gates, c_prev):
    gates = _c(gates, gates.dtype)
    c_prev = _c(c_prev, gates.dtype)
    h, c = np.empty_like(c_prev), np.empty_like(c_prev)
    activated = np.empty_like(gates)
    _run(_lstm_forward_rows, _lstm_forward_threads, gates, gates, c_prev, h, c, activated)
    return h, c, activated


def lstm_cell_backward(grad_h, grad_c, c_prev, c, activated):
    dtype = activated.dtype
    grad_gates = np.empty_like(activated, order="C")
    grad_c_prev = np.empty(c.shape, dtype)
    _run(_lstm_backward_rows, _lstm_backward_threads, grad_gates, _c(grad_h, dtype),
         _c(grad_c, dtype), _c(c_prev, dtype), _c(c, dtype), _c(activated, dtype), grad_gates,
         grad_c_prev)
    return grad_gates, grad_c_prev


def gru_cell_forward(input_gates, hidden_gates, h_prev):
    dtype = input_gates.dtype
    h_prev = _c(h_prev, dtype)
    h = np.empty_like(h_prev)
    activated = np.empty(input_gates.shape, dtype)
    _run(_gru_forward_rows, _gru_forward_threads, activated, _c(input_gates, dtype),
         _c(hidden_gates, dtype), h_prev, h, activated)
    return h, activated


def gru_cell_backward(grad_h, hidden_gates, h_prev, activated):
    dtype = activated.dtype
    grad_input = np.empty(activated.shape, dtype)
    grad_hidden = np.empty(activated.shape, dtype)
    grad_h_prev = np.empty(h_prev.shape, dtype)
    _run(_gru_backward_rows, _gru_backward_threads, grad_input, _c(grad_h, dtype),
         _c(hidden_gates, dtype), _c(h_prev, dtype), _c(activated, dtype), grad_input,
         grad_hidden, grad_h_prev)
    return grad_input, grad_hidden, grad_h_prev
