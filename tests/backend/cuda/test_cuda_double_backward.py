"""Gradients of gradients on the CUDA backend: the recorded backward pass of a small CNN (conv,
batch norm, relu, max and average pooling, linear, gelu, softmax cross-entropy) gives on the
device what it gives on the CPU."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from cuda_helpers import requires_cuda  # noqa: E402

import minidl as md  # noqa: E402
from minidl import nn  # noqa: E402

pytestmark = requires_cuda


def _penalty_gradients(device):
    md.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(1, 2, 2), nn.BatchNorm2d(2), nn.ReLU(), nn.MaxPool2d(2),
                          nn.AvgPool2d(1), nn.Flatten(), nn.Linear(2, 3), nn.GELU()).to(device)
    rng = np.random.default_rng(0)
    x = md.tensor(rng.standard_normal((2, 1, 3, 3)).astype(np.float32), device=device,
                  requires_grad=True)
    loss = nn.functional.cross_entropy(model(x), md.tensor(np.array([0, 2]), device=device))
    (grad,) = md.autograd.grad(loss, x, create_graph=True)
    ((grad * grad).sum() + loss).backward()
    return [p.grad.numpy() for p in model.parameters()] + [x.grad.numpy()]


def test_gradient_penalty_of_a_cnn_matches_the_cpu():
    for on_device, on_cpu in zip(_penalty_gradients("cuda"), _penalty_gradients("cpu")):
        np.testing.assert_allclose(on_device, on_cpu, rtol=1e-4, atol=1e-6)


def test_second_derivative_through_a_device_transfer():
    x = md.tensor(np.array([0.5, -1.0, 2.0], np.float32), requires_grad=True)  # on the CPU
    y = (x.to("cuda") ** 3).sum()
    (g,) = md.autograd.grad(y, x, create_graph=True)  # 3x², back on the CPU
    (h,) = md.autograd.grad(g.sum(), x)
    assert g.device == "cpu" and h.device == "cpu"
    np.testing.assert_allclose(h.numpy(), 6 * x.numpy(), rtol=1e-6)
