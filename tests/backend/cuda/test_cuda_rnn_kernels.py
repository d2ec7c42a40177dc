"""The CUDA LSTM and GRU cell kernels against the NumPy reference, and an LSTM/GRU layer's
outputs and gradients on the device against the CPU (on a GPU, or numba's CUDA simulator)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cuda_helpers import requires_cuda  # noqa: E402
from test_cuda_kernels import REF, normal, same  # noqa: E402

import minidl as md  # noqa: E402
from minidl import nn  # noqa: E402

pytestmark = requires_cuda


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_cell_kernels_match_the_reference(dtype):
    n, h = 3, 5
    gates, c_prev = normal(n, 4 * h, dtype=dtype) * 3, normal(n, h, dtype=dtype)
    same("lstm_cell_forward", gates, c_prev)
    _, c, activated = REF.lstm_cell_forward(gates, c_prev)
    same("lstm_cell_backward", normal(n, h, dtype=dtype), normal(n, h, dtype=dtype), c_prev, c,
         activated)
    inputs, hidden = normal(n, 3 * h, dtype=dtype) * 3, normal(n, 3 * h, dtype=dtype)
    h_prev = normal(n, h, dtype=dtype)
    same("gru_cell_forward", inputs, hidden, h_prev)
    _, activated = REF.gru_cell_forward(inputs, hidden, h_prev)
    same("gru_cell_backward", normal(n, h, dtype=dtype), hidden, h_prev, activated)


@pytest.mark.parametrize("mode", ["LSTM", "GRU"])
def test_a_recurrent_layer_computes_the_same_on_the_device(mode):
    md.manual_seed(0)
    layer = getattr(nn, mode)(3, 4, bidirectional=True)
    x_host = normal(4, 2, 3)
    results = []
    for device in ("cpu", "cuda"):
        layer.to(device)
        layer.zero_grad()
        x = md.tensor(x_host, requires_grad=True).to(device)
        x.retain_grad()
        out = layer(x)[0]
        (out * out).sum().backward()
        results.append([out.numpy(), x.grad.numpy()] +
                       [p.grad.numpy() for p in layer.parameters()])
    for got, want in zip(results[1], results[0]):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
