"""LSTM and GRU cells on the GPU: one thread per (row, hidden unit), grid-stride.

Each thread reads its unit's gates, activates and combines them in registers and writes the
step's outputs, as the Numba CPU kernels do; the formulas are documented in the reference
(:mod:`minidl.backend.reference.rnn_kernels`).
"""

from __future__ import annotations

import math

from numba import cuda

from .device import empty, launch


@cuda.jit(device=True)
def _sigmoid(x):
    # The form whose exponent is never positive: no overflow for any x.
    if x >= 0:
        return 1.0 / (1.0 + math.exp(-x))
    e = math.exp(x)
    return e / (1.0 + e)


@cuda.jit
def _lstm_forward(gates, c_prev, h, c, activated, count, hidden):
    start = cuda.grid(1)
    for item in range(start, count, cuda.gridsize(1)):
        r, k = item // hidden, item % hidden
        base = r * 4 * hidden + k
        i = _sigmoid(gates[base])
        f = _sigmoid(gates[base + hidden])
        g = math.tanh(gates[base + 2 * hidden])
        o = _sigmoid(gates[base + 3 * hidden])
        cell = f * c_prev[item] + i * g
        c[item] = cell
        h[item] = o * math.tanh(cell)
        activated[base] = i
        activated[base + hidden] = f
        activated[base + 2 * hidden] = g
        activated[base + 3 * hidden] = o


@cuda.jit
def _lstm_backward(grad_h, grad_c, c_prev, c, activated, grad_gates, grad_c_prev, count, hidden):
    start = cuda.grid(1)
    for item in range(start, count, cuda.gridsize(1)):
        r, k = item // hidden, item % hidden
        base = r * 4 * hidden + k
        i = activated[base]
        f = activated[base + hidden]
        g = activated[base + 2 * hidden]
        o = activated[base + 3 * hidden]
        t = math.tanh(c[item])
        dc = grad_c[item] + grad_h[item] * o * (1.0 - t * t)
        grad_gates[base] = dc * g * i * (1.0 - i)
        grad_gates[base + hidden] = dc * c_prev[item] * f * (1.0 - f)
        grad_gates[base + 2 * hidden] = dc * i * (1.0 - g * g)
        grad_gates[base + 3 * hidden] = grad_h[item] * t * o * (1.0 - o)
        grad_c_prev[item] = dc * f


@cuda.jit
def _gru_forward(input_gates, hidden_gates, h_prev, h, activated, count, hidden):
    start = cuda.grid(1)
    for item in range(start, count, cuda.gridsize(1)):
        row, k = item // hidden, item % hidden
        base = row * 3 * hidden + k
        r = _sigmoid(input_gates[base] + hidden_gates[base])
        z = _sigmoid(input_gates[base + hidden] + hidden_gates[base + hidden])
        n = math.tanh(input_gates[base + 2 * hidden] + r * hidden_gates[base + 2 * hidden])
        h[item] = (1.0 - z) * n + z * h_prev[item]
        activated[base] = r
        activated[base + hidden] = z
        activated[base + 2 * hidden] = n


@cuda.jit
def _gru_backward(grad_h, hidden_gates, h_prev, activated, grad_input, grad_hidden, grad_h_prev,
                  count, hidden):
    start = cuda.grid(1)
    for item in range(start, count, cuda.gridsize(1)):
        row, k = item // hidden, item % hidden
        base = row * 3 * hidden + k
        r = activated[base]
        z = activated[base + hidden]
        n = activated[base + 2 * hidden]
        g = grad_h[item]
        dn = g * (1.0 - z) * (1.0 - n * n)
        dz = g * (h_prev[item] - n) * z * (1.0 - z)
        dr = dn * hidden_gates[base + 2 * hidden] * r * (1.0 - r)
        grad_input[base] = dr
        grad_input[base + hidden] = dz
        grad_input[base + 2 * hidden] = dn
        grad_hidden[base] = dr
        grad_hidden[base + hidden] = dz
        grad_hidden[base + 2 * hidden] = dn * r
        grad_h_prev[item] = g * z


def _run(kernel, count, *arguments):
    if count:
        blocks, threads = launch(count)
        kernel[blocks, threads](*arguments)


def lstm_cell_forward(gates, c_prev):
    h, c = empty(c_prev.shape, gates.dtype), empty(c_prev.shape, gates.dtype)
    activated = empty(gates.shape, gates.dtype)
    _run(_lstm_forward, c_prev.size, gates.buffer, c_prev.buffer, h.buffer, c.buffer,
         activated.buffer, c_prev.size, c_prev.shape[1])
    return h, c, activated


def lstm_cell_backward(grad_h, grad_c, c_prev, c, activated):
    grad_gates = empty(activated.shape, activated.dtype)
    grad_c_prev = empty(c.shape, activated.dtype)
    _run(_lstm_backward, c.size, grad_h.buffer, grad_c.buffer, c_prev.buffer, c.buffer,
         activated.buffer, grad_gates.buffer, grad_c_prev.buffer, c.size, c.shape[1])
    return grad_gates, grad_c_prev


def gru_cell_forward(input_gates, hidden_gates, h_prev):
    h = empty(h_prev.shape, input_gates.dtype)
    activated = empty(input_gates.shape, input_gates.dtype)
    _run(_gru_forward, h_prev.size, input_gates.buffer, hidden_gates.buffer, h_prev.buffer,
         h.buffer, activated.buffer, h_prev.size, h_prev.shape[1])
    return h, activated


def gru_cell_backward(grad_h, hidden_gates, h_prev, activated):
    grad_input = empty(activated.shape, activated.dtype)
    grad_hidden = empty(activated.shape, activated.dtype)
    grad_h_prev = empty(h_prev.shape, activated.dtype)
    _run(_gru_backward, h_prev.size, grad_h.buffer, hidden_gates.buffer, h_prev.buffer,
         activated.buffer, grad_input.buffer, grad_hidden.buffer, grad_h_prev.buffer,
         h_prev.size, h_prev.shape[1])
    return grad_input, grad_hidden, grad_h_prev


__all__ = ["lstm_cell_forward", "lstm_cell_backward", "gru_cell_forward", "gru_cell_backward"]
