"""``md.autograd.grad`` and ``Tensor.backward``'s PyTorch arguments (create_graph, retain_graph,
inputs), checked against torch on the same values."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import minidl as md


def _pair(array, requires_grad=True):
    return (md.tensor(array, requires_grad=requires_grad),
            torch.tensor(array, requires_grad=requires_grad))


def test_api_snippet_third_derivative_of_a_cube():
    x = md.tensor(np.linspace(-1, 1, 5, dtype=np.float32), requires_grad=True)
    y = (x ** 3).sum()
    (g,) = md.autograd.grad(y, x, create_graph=True)
    (h,) = md.autograd.grad(g.sum(), x, create_graph=True)
    (third,) = md.autograd.grad(h.sum(), x)
    np.testing.assert_allclose(g.numpy(), 3 * x.numpy() ** 2, rtol=1e-6)
    np.testing.assert_allclose(h.numpy(), 6 * x.numpy(), rtol=1e-6)
    np.testing.assert_allclose(third.numpy(), np.full(5, 6.0), rtol=1e-6)
    assert x.grad is None  # grad() returns, it never accumulates


def test_grad_of_several_outputs_and_inputs_with_weights_matches_torch():
    a = np.random.default_rng(0).standard_normal((3, 4))
    b = np.random.default_rng(1).standard_normal((4,))
    xm, xt = _pair(a)
    wm, wt = _pair(b)
    outs_m = [(xm * wm).tanh(), (xm.exp() * wm).sum(axis=0)]
    outs_t = [(xt * wt).tanh(), (xt.exp() * wt).sum(dim=0)]
    weights = [np.random.default_rng(2).standard_normal((3, 4)), np.ones(4)]
    got = md.autograd.grad(outs_m, [xm, wm], [md.tensor(w) for w in weights])
    want = torch.autograd.grad(outs_t, [xt, wt], [torch.tensor(w) for w in weights])
    for g, w in zip(got, want):
        np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-12)


def test_retain_graph_defaults_to_create_graph():
    x = md.tensor([1.0, 2.0], requires_grad=True)
    y = (x * x).sum()
    md.autograd.grad(y, x)
    with pytest.raises(RuntimeError, match="second time"):
        md.autograd.grad(y, x)
    z = (x * x).sum()
    md.autograd.grad(z, x, create_graph=True)
    (again,) = md.autograd.grad(z, x)  # the graph was kept
    np.testing.assert_allclose(again.numpy(), [2.0, 4.0])


def test_allow_unused_gives_none_and_its_absence_an_error():
    x = md.tensor([1.0], requires_grad=True)
    unused = md.tensor([1.0], requires_grad=True)
    with pytest.raises(RuntimeError, match="input 1 .* not used.*allow_unused"):
        md.autograd.grad((x * 2).sum(), [x, unused], retain_graph=True)
    y = (x * 2).sum()
    gx, gu = md.autograd.grad(y, [x, unused], allow_unused=True)
    assert gu is None and gx.item() == 2.0


def test_materialize_grads_gives_zeros_for_unused_inputs_as_torch():
    x = md.tensor([1.0], requires_grad=True)
    unused = md.tensor([[1.0, 2.0]], requires_grad=True)
    gx, gu = md.autograd.grad((x * 2).sum(), [x, unused], materialize_grads=True)
    np.testing.assert_allclose(gu.numpy(), np.zeros((1, 2)))
    assert gu.dtype == unused.dtype and gx.item() == 2.0
    with pytest.raises(ValueError, match="materialize_grads=True .* allow_unused=False"):
        md.autograd.grad((x * 2).sum(), [x, unused], allow_unused=False, materialize_grads=True)


def test_grad_refuses_inputs_without_requires_grad_and_bad_grad_outputs():
    x = md.tensor([1.0, 2.0], requires_grad=True)
    constant = md.tensor([1.0, 2.0])
    with pytest.raises(RuntimeError, match="input 0 does not require grad"):
        md.autograd.grad((x * constant).sum(), constant)
    with pytest.raises(RuntimeError, match="only for a scalar"):
        md.autograd.grad(x * 2, x)
    with pytest.raises(ValueError, match="gradient has shape"):
        md.autograd.grad(x * 2, x, md.tensor([1.0]))
    with pytest.raises(TypeError, match="inputs must be a Tensor"):
        md.autograd.grad((x * 2).sum(), "x")


def test_grad_leaves_graph_beyond_the_inputs_alone():
    # Only the path to the inputs is differentiated: an op without a double backward upstream
    # of the input (a recurrence, say) must not be reached by create_graph.
    x = md.tensor([0.5, -1.0], requires_grad=True)
    hidden = x.exp()
    y = (hidden * hidden).sum()
    (g,) = md.autograd.grad(y, hidden, create_graph=True)
    np.testing.assert_allclose(g.numpy(), 2 * np.exp([0.5, -1.0]), rtol=1e-6)
    assert x.grad is None and hidden.grad is None


def test_grad_with_respect_to_an_intermediate_and_its_input_sums_paths_like_torch():
    a = np.array([0.3, -0.7, 1.1])
    xm, xt = _pair(a)
    hm, ht = xm.sigmoid(), xt.sigmoid()
    got = md.autograd.grad((hm * xm).sum(), [hm, xm])
    want = torch.autograd.grad((ht * xt).sum(), [ht, xt])
    for g, w in zip(got, want):
        np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-12)


@pytest.mark.filterwarnings("ignore:Using backward\\(\\) with create_graph")
def test_backward_create_graph_leaves_differentiable_grads_and_accumulates():
    a = np.array([0.2, -0.4, 0.9])
    xm, xt = _pair(a)
    (xm * xm * xm).sum().backward(create_graph=True)
    (xt * xt * xt).sum().backward(create_graph=True)
    assert xm.grad.requires_grad
    np.testing.assert_allclose(xm.grad.numpy(), xt.grad.detach().numpy(), rtol=1e-12)
    # d/dx Σ (dL/dx)² accumulates into the same .grad, as in PyTorch.
    (xm.grad * xm.grad).sum().backward()
    (xt.grad * xt.grad).sum().backward()
    np.testing.assert_allclose(xm.grad.numpy(), xt.grad.detach().numpy(), rtol=1e-12)


def test_backward_inputs_restricts_accumulation():
    x = md.tensor([1.0, 2.0], requires_grad=True)
    w = md.tensor([3.0, 4.0], requires_grad=True)
    hidden = x * w
    hidden.retain_grad()
    (hidden * hidden).sum().backward(inputs=[w])
    assert x.grad is None
    np.testing.assert_allclose(w.grad.numpy(), [6.0, 32.0])  # 2·(x·w)·x
    # A tensor that retains its gradient gets it whenever it is computed (PyTorch 2's rule).
    np.testing.assert_allclose(hidden.grad.numpy(), [6.0, 16.0])
    with pytest.raises(ValueError, match="inputs is empty"):
        (x * 2).sum().backward(inputs=[])


def test_backward_gradient_keyword_and_its_old_alias():
    x = md.tensor([1.0, 2.0], requires_grad=True)
    (x * 3).backward(gradient=md.tensor([1.0, 0.5]))
    (x * 3).backward(grad=md.tensor([1.0, 0.5]))
    np.testing.assert_allclose(x.grad.numpy(), [6.0, 3.0])
    with pytest.raises(TypeError, match="not both"):
        (x * 3).backward(gradient=md.tensor([1.0, 1.0]), grad=md.tensor([1.0, 1.0]))


def test_grad_outputs_that_require_grad_are_differentiated_through():
    # d/dv of vᵀ(∂y/∂x): the gradient with create_graph is linear in grad_outputs.
    x = md.tensor(np.array([0.5, 1.5]), requires_grad=True)
    v = md.tensor(np.array([2.0, -1.0]), requires_grad=True)
    (g,) = md.autograd.grad(x.exp(), x, v, create_graph=True)
    (dv,) = md.autograd.grad(g.sum(), v)
    np.testing.assert_allclose(dv.numpy(), np.exp([0.5, 1.5]), rtol=1e-12)
