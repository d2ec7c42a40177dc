"""LSTM and GRU cells: one time step's gate arithmetic, in NumPy.

LSTM (gates in PyTorch's order i, f, g, o; σ the logistic function)::

    i, f, o = σ(a_i), σ(a_f), σ(a_o);  g = tanh(a_g)
    c = f·c_prev + i·g;                h = o·tanh(c)

Backward, with t = tanh(c) and dc = grad_c + grad_h·o·(1 - t²)::

    da_o = grad_h·t·o(1 - o);   da_i = dc·g·i(1 - i);   da_f = dc·c_prev·f(1 - f)
    da_g = dc·i·(1 - g²);       dc_prev = dc·f

GRU (gates r, z, n; x_* from the input, h_* from the previous state, biases included)::

    r = σ(x_r + h_r);  z = σ(x_z + h_z);  n = tanh(x_n + r·h_n);  h = (1 - z)·n + z·h_prev

Backward: dn = grad_h·(1 - z)·(1 - n²), dz = grad_h·(h_prev - n)·z(1 - z),
dr = dn·h_n·r(1 - r); the input gates get (dr, dz, dn), the hidden gates (dr, dz, dn·r), and
h_prev directly grad_h·z.
"""

from __future__ import annotations

import numpy as np

from .array_ops import sigmoid as _sigmoid

__all__ = ["lstm_cell_forward", "lstm_cell_backward", "gru_cell_forward", "gru_cell_backward"]


def lstm_cell_forward(gates, c_prev):
    hidden = c_prev.shape[1]
    i, f, g, o = (gates[:, k * hidden:(k + 1) * hidden] for k in range(4))
    i, f, g, o = _sigmoid(i), _sigmoid(f), np.tanh(g), _sigmoid(o)
    c = f * c_prev + i * g
    h = o * np.tanh(c)
    return h, c, np.concatenate([i, f, g, o], axis=1)


def lstm_cell_backward(grad_h, grad_c, c_prev, c, activated):
    hidden = c.shape[1]
    i, f, g, o = (activated[:, k * hidden:(k + 1) * hidden] for k in range(4))
    t = np.tanh(c)
    dc = grad_c + grad_h * o * (1 - t * t)
    grads = [dc * g * i * (1 - i), dc * c_prev * f * (1 - f), dc * i * (1 - g * g),
             grad_h * t * o * (1 - o)]
    return np.concatenate(grads, axis=1), dc * f


def gru_cell_forward(input_gates, hidden_gates, h_prev):
    hidden = h_prev.shape[1]
    xr, xz, xn = (input_gates[:, k * hidden:(k + 1) * hidden] for k in range(3))
    hr, hz, hn = (hidden_gates[:, k * hidden:(k + 1) * hidden] for k in range(3))
    r, z = _sigmoid(xr + hr), _sigmoid(xz + hz)
    n = np.tanh(xn + r * hn)
    h = (1 - z) * n + z * h_prev
    return h, np.concatenate([r, z, n], axis=1)


def gru_cell_backward(grad_h, hidden_gates, h_prev, activated):
    hidden = h_prev.shape[1]
    r, z, n = (activated[:, k * hidden:(k + 1) * hidden] for k in range(3))
    hn = hidden_gates[:, 2 * hidden:]
    dn = grad_h * (1 - z) * (1 - n * n)
    dz = grad_h * (h_prev - n) * z * (1 - z)
    dr = dn * hn * r * (1 - r)
    return (np.concatenate([dr, dz, dn], axis=1), np.concatenate([dr, dz, dn * r], axis=1),
            grad_h * z)
