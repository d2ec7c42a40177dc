"""nn.utils.clip_grad_norm_ and clip_grad_value_ against PyTorch and against the definition."""

from __future__ import annotations

import math

import numpy as np
import pytest

import minidl as md
from minidl import nn

rng = np.random.default_rng(0)
GRADS = [rng.standard_normal((3, 4)).astype(np.float32) * 5, rng.standard_normal(6)
         .astype(np.float32)]


def parameters_with(grads):
    params = [nn.Parameter(np.zeros(g.shape, np.float32)) for g in grads]
    for p, g in zip(params, grads):
        p.grad = md.tensor(g)
    return params


@pytest.mark.parametrize("norm_type", [2.0, 1.0, 3.0, math.inf])
@pytest.mark.parametrize("max_norm", [0.5, 1e6])
def test_clip_grad_norm_matches_the_definition(norm_type, max_norm):
    params = parameters_with(GRADS)
    flat = np.concatenate([g.ravel() for g in GRADS]).astype(np.float64)
    expected_norm = np.abs(flat).max() if math.isinf(norm_type) else \
        (np.abs(flat) ** norm_type).sum() ** (1 / norm_type)
    total = nn.utils.clip_grad_norm_(params, max_norm, norm_type)
    np.testing.assert_allclose(total.item(), expected_norm, rtol=1e-5)
    scale = min(1.0, max_norm / (expected_norm + 1e-6))
    for p, g in zip(params, GRADS):
        np.testing.assert_allclose(p.grad.numpy(), g * scale, rtol=1e-5)


def test_clip_grad_norm_and_value_match_pytorch():
    torch = pytest.importorskip("torch")
    ours = parameters_with(GRADS)
    theirs = [torch.nn.Parameter(torch.zeros(g.shape)) for g in GRADS]
    for p, g in zip(theirs, GRADS):
        p.grad = torch.tensor(g)
    total = nn.utils.clip_grad_norm_(ours, 2.0)
    expected = torch.nn.utils.clip_grad_norm_(theirs, 2.0)
    np.testing.assert_allclose(total.item(), expected.item(), rtol=1e-6)
    nn.utils.clip_grad_value_(ours, 0.1)
    torch.nn.utils.clip_grad_value_(theirs, 0.1)
    for a, b in zip(ours, theirs):
        np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=1e-6, atol=1e-8)


@pytest.mark.filterwarnings("ignore:invalid value encountered")  # inf·0: nan, as PyTorch
def test_nonfinite_norms_raise_only_when_asked_and_parameters_without_grad_are_skipped():
    params = parameters_with([np.array([np.inf, 1.0], np.float32)])
    params.append(nn.Parameter(np.zeros(2, np.float32)))  # no gradient: left alone
    with pytest.raises(RuntimeError, match="error_if_nonfinite"):
        nn.utils.clip_grad_norm_(params, 1.0, error_if_nonfinite=True)
    assert math.isinf(nn.utils.clip_grad_norm_(params, 1.0).item())
    assert params[1].grad is None
    with pytest.raises(ValueError, match="clip_value"):
        nn.utils.clip_grad_value_(params, -1)
