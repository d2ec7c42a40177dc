"""LSTM and GRU cells as Numba kernels: one pass over the (N, H) entries per step.

Same names and results as :mod:`minidl.backend.reference.rnn_kernels`, whose docstring has the
formulas. The NumPy versions slice, activate and combine the gates in a dozen whole-array
passes with a temporary each; here every entry's gates are read once, activated and combined in
registers, which is what makes a time step cheap next to its two matrix products.

Each row (one sequence of the batch) is computed on its own, so a large step splits into fixed
blocks of rows over Numba's threads with the one-thread kernel's bits at any thread count
(from :data:`PARALLEL_MIN_GATES` gate entries: a cell's sigmoids and tanhs cost ~15 ns an entry,
so threads pay on much smaller arrays than for an add).
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit, prange

__all__ = ["lstm_cell_forward", "lstm_cell_backward", "gru_cell_forward", "gru_cell_backward"]

PARALLEL_MIN_GATES = 1 << 13
"""Gate entries (rows × gates × hidden) from which a step's rows are split over threads."""

TASK_GATES = 1 << 11
"""About how many gate entries one task's block of whole rows holds."""


@njit(cache=True)
def _sigmoid(x):
    # The form whose exponent is never positive: no overflow for any x.
    if x >= 0:
        return 1.0 / (1.0 + math.exp(-x))
    e = math.exp(x)
    return e / (1.0 + e)


@njit(cache=True)
def _lstm_forward_kernel(gates, c_prev, h, c, activated):
    rows, hidden = c_prev.shape
    for r in range(rows):
        for k in range(hidden):
            i = _sigmoid(gates[r, k])
            f = _sigmoid(gates[r, hidden + k])
            g = math.tanh(gates[r, 2 * hidden + k])
            o = _sigmoid(gates[r, 3 * hidden + k])
            cell = f * c_prev[r, k] + i * g
            c[r, k] = cell
            h[r, k] = o * math.tanh(cell)
            activated[r, k] = i
            activated[r, hidden + k] = f
            activated[r, 2 * hidden + k] = g
            activated[r, 3 * hidden + k] = o


@njit(cache=True)
def _lstm_backward_kernel(grad_h, grad_c, c_prev, c, activated, grad_gates, grad_c_prev):
    rows, hidden = c.shape
    for r in range(rows):
        for k in range(hidden):
            i = activated[r, k]
            f = activated[r, hidden + k]
            g = activated[r, 2 * hidden + k]
            o = activated[r, 3 * hidden + k]
            t = math.tanh(c[r, k])
            dc = grad_c[r, k] + grad_h[r, k] * o * (1.0 - t * t)
            grad_gates[r, k] = dc * g * i * (1.0 - i)
            grad_gates[r, hidden + k] = dc * c_prev[r, k] * f * (1.0 - f)
            grad_gates[r, 2 * hidden + k] = dc * i * (1.0 - g * g)
            grad_gates[r, 3 * hidden + k] = grad_h[r, k] * t * o * (1.0 - o)
            grad_c_prev[r, k] = dc * f


@njit(cache=True)
def _gru_forward_kernel(input_gates, hidden_gates, h_prev, h, activated):
    rows, hidden = h_prev.shape
    for row in range(rows):
        for k in range(hidden):
            r = _sigmoid(input_gates[row, k] + hidden_gates[row, k])
            z = _sigmoid(input_gates[row, hidden + k] + hidden_gates[row, hidden + k])
            n = math.tanh(input_gates[row, 2 * hidden + k] + r * hidden_gates[row, 2 * hidden + k])
            h[row, k] = (1.0 - z) * n + z * h_prev[row, k]
            activated[row, k] = r
            activated[row, hidden + k] = z
            activated[row, 2 * hidden + k] = n


@njit(cache=True)
def _gru_backward_kernel(grad_h, hidden_gates, h_prev, activated, grad_input, grad_hidden,
                         grad_h_prev):
    rows, hidden = h_prev.shape
    for row in range(rows):
        for k in range(hidden):
            r = activated[row, k]
            z = activated[row, hidden + k]
            n = activated[row, 2 * hidden + k]
            g = grad_h[row, k]
            dn = g * (1.0 - z) * (1.0 - n * n)
            dz = g * (h_prev[row, k] - n) * z * (1.0 - z)
            dr = dn * hidden_gates[row, 2 * hidden + k] * r * (1.0 - r)
            grad_input[row, k] = dr
            grad_input[row, hidden + k] = dz
            grad_input[row, 2 * hidden + k] = dn
            grad_hidden[row, k] = dr
            grad_hidden[row, hidden + k] = dz
            grad_hidden[row, 2 * hidden + k] = dn * r
            grad_h_prev[row, k] = g * z


# The threaded forms: the one-thread kernels above on fixed blocks of rows.

@njit(cache=True, parallel=True)
def _lstm_forward_blocks(gates, c_prev, h, c, activated, block_rows):
    rows = gates.shape[0]
    for block in prange((rows + block_rows - 1) // block_rows):
        a, b = block * block_rows, min(rows, (block + 1) * block_rows)
        _lstm_forward_kernel(gates[a:b], c_prev[a:b], h[a:b], c[a:b], activated[a:b])


@njit(cache=True, parallel=True)
def _lstm_backward_blocks(grad_h, grad_c, c_prev, c, activated, grad_gates, grad_c_prev,
                          block_rows):
    rows = c.shape[0]
    for block in prange((rows + block_rows - 1) // block_rows):
        a, b = block * block_rows, min(rows, (block + 1) * block_rows)
        _lstm_backward_kernel(grad_h[a:b], grad_c[a:b], c_prev[a:b], c[a:b], activated[a:b],
                              grad_gates[a:b], grad_c_prev[a:b])


@njit(cache=True, parallel=True)
def _gru_forward_blocks(input_gates, hidden_gates, h_prev, h, activated, block_rows):
    rows = h_prev.shape[0]
    for block in prange((rows + block_rows - 1) // block_rows):
        a, b = block * block_rows, min(rows, (block + 1) * block_rows)
        _gru_forward_kernel(input_gates[a:b], hidden_gates[a:b], h_prev[a:b], h[a:b],
                            activated[a:b])


@njit(cache=True, parallel=True)
def _gru_backward_blocks(grad_h, hidden_gates, h_prev, activated, grad_input, grad_hidden,
                         grad_h_prev, block_rows):
    rows = h_prev.shape[0]
    for block in prange((rows + block_rows - 1) // block_rows):
        a, b = block * block_rows, min(rows, (block + 1) * block_rows)
        _gru_backward_kernel(grad_h[a:b], hidden_gates[a:b], h_prev[a:b], activated[a:b],
                             grad_input[a:b], grad_hidden[a:b], grad_h_prev[a:b])


def _run(one_thread, blocks, gates, *arrays):
    """``one_thread(*arrays)``, or ``blocks`` over fixed blocks of rows when ``gates`` is large."""
    if gates.size < PARALLEL_MIN_GATES:
        one_thread(*arrays)
    else:
        blocks(*arrays, max(1, TASK_GATES // max(gates.shape[1], 1)))


def _c(array, dtype):
    return np.asarray(array, dtype=dtype, order="C")


def lstm_cell_forward(gates, c_prev):
    gates = _c(gates, gates.dtype)
    c_prev = _c(c_prev, gates.dtype)
    h, c = np.empty_like(c_prev), np.empty_like(c_prev)
    activated = np.empty_like(gates)
    _run(_lstm_forward_kernel, _lstm_forward_blocks, gates, gates, c_prev, h, c, activated)
    return h, c, activated


def lstm_cell_backward(grad_h, grad_c, c_prev, c, activated):
    dtype = activated.dtype
    grad_gates = np.empty_like(activated, order="C")
    grad_c_prev = np.empty(c.shape, dtype)
    _run(_lstm_backward_kernel, _lstm_backward_blocks, grad_gates, _c(grad_h, dtype),
         _c(grad_c, dtype), _c(c_prev, dtype), _c(c, dtype), _c(activated, dtype), grad_gates,
         grad_c_prev)
    return grad_gates, grad_c_prev


def gru_cell_forward(input_gates, hidden_gates, h_prev):
    dtype = input_gates.dtype
    h_prev = _c(h_prev, dtype)
    h = np.empty_like(h_prev)
    activated = np.empty(input_gates.shape, dtype)
    _run(_gru_forward_kernel, _gru_forward_blocks, activated, _c(input_gates, dtype),
         _c(hidden_gates, dtype), h_prev, h, activated)
    return h, activated


def gru_cell_backward(grad_h, hidden_gates, h_prev, activated):
    dtype = activated.dtype
    grad_input = np.empty(activated.shape, dtype)
    grad_hidden = np.empty(activated.shape, dtype)
    grad_h_prev = np.empty(h_prev.shape, dtype)
    _run(_gru_backward_kernel, _gru_backward_blocks, grad_input, _c(grad_h, dtype),
         _c(hidden_gates, dtype), _c(h_prev, dtype), _c(activated, dtype), grad_input,
         grad_hidden, grad_h_prev)
    return grad_input, grad_hidden, grad_h_prev
