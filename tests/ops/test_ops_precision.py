"""Precision at the edges: ELU near 0⁻ (expm1, not eˣ - 1) and the gradient of
binary_cross_entropy_with_logits for large negative logits (σ(x) - y, not 1 - σ(-x) - y).

The expected values are the exact ones, as float32 (PyTorch gives the same)."""

import numpy as np
import pytest

import minidl as md
import minidl.nn.functional as F


@pytest.mark.parametrize("x", [-1e-6, -1e-30, -3e-4, -0.5, -20.0, 1.5])
def test_elu_is_accurate_near_zero(x):
    out = F.elu(md.tensor(np.float32([x])), alpha=1.0).numpy()[0]
    exact = np.float32(np.expm1(np.float64(np.float32(x))) if x < 0 else x)
    # within 2 float32 ulps of the exact value (eˣ - 1 was off by 1,456 ulps at -1e-6)
    assert abs(out - exact) <= 2 * np.spacing(abs(exact)), (out, exact)


def test_elu_gradient_at_tiny_negative_inputs_is_alpha():
    x = md.tensor(np.float32([-1e-30, -1e-6]), requires_grad=True)
    F.elu(x, alpha=2.0).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [2.0, 2.0 * np.exp(-1e-6)], rtol=1e-7)


@pytest.mark.parametrize("x", [-15.0, -17.0, -30.0, -80.0])
def test_bce_with_logits_gradient_for_negative_logits_and_target_0(x):
    logits = md.tensor(np.float32([x]), requires_grad=True)
    F.binary_cross_entropy_with_logits(logits, md.tensor(np.float32([0.0])),
                                       reduction="sum").backward()
    exact = 1.0 / (1.0 + np.exp(-np.float64(x)))  # σ(x)
    np.testing.assert_allclose(logits.grad.numpy(), [exact], rtol=1e-6)


def test_bce_with_logits_gradient_with_pos_weight_is_accurate_for_negative_logits():
    # d/dx = (1 + (p-1)·y)·σ(x) - p·y; with y = 0 that is σ(x), tiny for x = -20
    logits = md.tensor(np.float32([-20.0, 3.0]), requires_grad=True)
    target = md.tensor(np.float32([0.0, 1.0]))
    F.binary_cross_entropy_with_logits(logits, target, reduction="sum",
                                       pos_weight=md.tensor(np.float32([2.0, 2.0]))).backward()
    sigma = 1.0 / (1.0 + np.exp(-np.float64([-20.0, 3.0])))
    np.testing.assert_allclose(logits.grad.numpy(), [sigma[0], 2.0 * sigma[1] - 2.0], rtol=1e-6)
