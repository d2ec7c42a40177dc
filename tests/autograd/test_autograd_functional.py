"""``md.autograd.functional`` (vjp, jvp, hvp, vhp, jacobian, hessian) against
``torch.autograd.functional`` on the same functions and values."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.autograd.functional as TAF

import minidl as md
import minidl.autograd.functional as MAF

RNG = np.random.default_rng(0)
X = RNG.standard_normal((2, 3))
Y = RNG.standard_normal((3,))
V_OUT = RNG.standard_normal((2, 3))


def _vector(lib, x, y):
    return lib.tanh(x * y) + x ** 2


def _scalar(lib, x, y):
    return (lib.exp(x * 0.5) * y).sum() + (x ** 3).sum() * (y ** 2).sum()


def _pair(lib):
    tensor = md.tensor if lib is md else torch.tensor
    return tensor(X), tensor(Y)


def _close(ours, theirs):
    if isinstance(theirs, (tuple, list)):
        assert isinstance(ours, tuple) and len(ours) == len(theirs)
        for a, b in zip(ours, theirs):
            _close(a, b)
        return
    np.testing.assert_allclose(ours.numpy(), theirs.detach().numpy(), rtol=1e-10, atol=1e-12)


def test_vjp_and_jvp_match_torch():
    for ours_fn, their_fn, v in (
            (MAF.vjp, TAF.vjp, V_OUT), (MAF.jvp, TAF.jvp, None)):
        inputs_m, inputs_t = _pair(md), _pair(torch)
        if v is None:  # jvp: a direction per input
            vm = tuple(md.tensor(RNG.standard_normal(t.shape)) for t in inputs_m)
            vt = tuple(torch.tensor(t.numpy()) for t in vm)
        else:
            vm, vt = md.tensor(v), torch.tensor(v)
        out_m, prod_m = ours_fn(lambda x, y: _vector(md, x, y), inputs_m, vm)
        out_t, prod_t = their_fn(lambda x, y: _vector(torch, x, y), inputs_t, vt)
        _close(out_m, out_t)
        _close(prod_m, prod_t)
        assert not out_m.requires_grad


def test_hvp_vhp_and_hessian_match_torch():
    inputs_m, inputs_t = _pair(md), _pair(torch)
    vm = tuple(md.tensor(RNG.standard_normal(t.shape)) for t in inputs_m)
    vt = tuple(torch.tensor(t.numpy()) for t in vm)
    for ours_fn, their_fn in ((MAF.hvp, TAF.hvp), (MAF.vhp, TAF.vhp)):
        value_m, prod_m = ours_fn(lambda x, y: _scalar(md, x, y), inputs_m, vm)
        value_t, prod_t = their_fn(lambda x, y: _scalar(torch, x, y), inputs_t, vt)
        _close(value_m, value_t)
        _close(prod_m, prod_t)
    _close(MAF.hessian(lambda x, y: _scalar(md, x, y), inputs_m),
           TAF.hessian(lambda x, y: _scalar(torch, x, y), inputs_t))
    _close(MAF.hessian(lambda x: _scalar(md, x, inputs_m[1]), inputs_m[0]),
           TAF.hessian(lambda x: _scalar(torch, x, inputs_t[1]), inputs_t[0]))


def test_jacobian_matches_torch_for_every_nesting():
    inputs_m, inputs_t = _pair(md), _pair(torch)
    _close(MAF.jacobian(lambda x, y: _vector(md, x, y), inputs_m),
           TAF.jacobian(lambda x, y: _vector(torch, x, y), inputs_t))
    _close(MAF.jacobian(lambda x: _vector(md, x, inputs_m[1]), inputs_m[0]),
           TAF.jacobian(lambda x: _vector(torch, x, inputs_t[1]), inputs_t[0]))
    two = (lambda x, y: (x * y, (x ** 2).sum()), lambda x, y: (x * y, (x ** 2).sum()))
    _close(MAF.jacobian(two[0], inputs_m), TAF.jacobian(two[1], inputs_t))


def test_create_graph_keeps_the_results_differentiable():
    x = md.tensor(X, requires_grad=True)
    _, hv = MAF.hvp(lambda a: (a ** 4).sum(), x, md.tensor(np.ones_like(X)), create_graph=True)
    (third,) = md.autograd.grad(hv.sum(), x)  # d/dx Σ 12x² = 24x
    np.testing.assert_allclose(third.numpy(), 24 * X, rtol=1e-12)


def test_independent_inputs_give_zeros_and_bad_arguments_are_named():
    x, y = _pair(md)
    _, (gx, gy) = MAF.vjp(lambda a, b: a * 2, (x, y), md.tensor(V_OUT))
    np.testing.assert_allclose(gy.numpy(), np.zeros(3))
    np.testing.assert_allclose(gx.numpy(), 2 * V_OUT)
    with pytest.raises(ValueError, match="hvp: the function must return a single one-element"):
        MAF.hvp(lambda a: a * 2, x, md.tensor(X))
    with pytest.raises(ValueError, match="v\\[0\\] has shape \\(3,\\), the input has shape"):
        MAF.jvp(lambda a: a * 2, x, md.tensor(Y))
    with pytest.raises(TypeError, match="inputs must be a Tensor"):
        MAF.jacobian(lambda a: a, [1.0])
    with pytest.raises(ValueError, match="v may be left out only"):
        MAF.vjp(lambda a: a * 2, x)
