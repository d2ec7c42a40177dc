"""Tensor hooks (``register_hook``) and ``retain_grad``, against PyTorch's behaviour."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import minidl as md


def test_a_hook_that_scales_a_gradient_matches_torch():
    values = np.array([0.5, -1.0, 2.0])
    xm = md.tensor(values, requires_grad=True)
    xt = torch.tensor(values, requires_grad=True)
    hm, ht = xm.exp(), xt.exp()
    hm.register_hook(lambda g: g * 0.25)
    ht.register_hook(lambda g: g * 0.25)
    (hm * hm).sum().backward()
    (ht * ht).sum().backward()
    np.testing.assert_allclose(xm.grad.numpy(), xt.grad.numpy(), rtol=1e-12)


def test_hooks_run_in_order_see_the_summed_gradient_and_can_be_removed():
    x = md.tensor([1.0, 2.0], requires_grad=True)
    seen = []
    first = x.register_hook(lambda g: seen.append(("first", g.numpy().copy())))
    x.register_hook(lambda g: g * 10)
    x.register_hook(lambda g: seen.append(("third", g.numpy().copy())))
    (x * 2 + x * 3).sum().backward()  # two consumers: the hook sees their sum, once
    assert [name for name, _ in seen] == ["first", "third"]
    np.testing.assert_allclose(seen[0][1], [5.0, 5.0])
    np.testing.assert_allclose(seen[1][1], [50.0, 50.0])
    np.testing.assert_allclose(x.grad.numpy(), [50.0, 50.0])  # a leaf stores the hooked value
    first.remove()
    first.remove()  # twice is harmless
    seen.clear()
    x.grad = None
    (x * 1).sum().backward()
    assert [name for name, _ in seen] == ["third"]


def test_a_hook_on_an_intermediate_changes_what_flows_upstream():
    x = md.tensor([1.0, -1.0], requires_grad=True)
    hidden = x * 3
    hidden.register_hook(lambda g: md.zeros_like(g))
    (hidden * x).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [3.0, -3.0])  # only the direct path to x


def test_hook_errors_are_clear():
    with pytest.raises(RuntimeError, match="does not require grad"):
        md.tensor([1.0]).register_hook(lambda g: g)
    x = md.tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(TypeError, match="callable"):
        x.register_hook(3)
    x.register_hook(lambda g: md.tensor([1.0]))
    with pytest.raises(ValueError, match="returned a value of shape \\(1,\\).*shape \\(2,\\)"):
        (x * 2).sum().backward()


def test_retain_grad_on_an_intermediate_matches_torch_after_its_hooks():
    values = np.array([[0.3, -0.2], [1.5, 0.7]])
    xm = md.tensor(values, requires_grad=True)
    xt = torch.tensor(values, requires_grad=True)
    hm, ht = xm.tanh(), xt.tanh()
    for h in (hm, ht):
        h.retain_grad()
        h.register_hook(lambda g: g * 2)  # registered after retain_grad, still applied first
    assert hm.retains_grad and not xm.retains_grad
    (hm * hm).sum().backward()
    (ht * ht).sum().backward()
    np.testing.assert_allclose(hm.grad.numpy(), ht.grad.numpy(), rtol=1e-12)
    np.testing.assert_allclose(xm.grad.numpy(), xt.grad.numpy(), rtol=1e-12)
    assert md.tensor([1.0]).requires_grad is False
    with pytest.raises(RuntimeError, match="retain_grad: the tensor does not require grad"):
        md.tensor([1.0]).retain_grad()


def test_hooks_with_create_graph_are_recorded():
    x = md.tensor(np.array([0.5, 2.0]), requires_grad=True)
    y = x * x * x
    y.register_hook(lambda g: g * x)  # a hook using x: its arithmetic is on the tape too
    (g,) = md.autograd.grad(y.sum(), x, create_graph=True)  # 3x²·x = 3x³
    (h,) = md.autograd.grad(g.sum(), x)
    np.testing.assert_allclose(g.numpy(), 3 * np.array([0.5, 2.0]) ** 3, rtol=1e-12)
    np.testing.assert_allclose(h.numpy(), 9 * np.array([0.5, 2.0]) ** 2, rtol=1e-12)


def test_a_hook_may_return_host_data_on_either_pass():
    for create_graph in (False, True):
        x = md.tensor(np.array([1.0, 2.0]), requires_grad=True)
        y = x * 3
        y.register_hook(lambda g: np.array([1.0, -1.0]))
        (g,) = md.autograd.grad(y.sum(), x, create_graph=create_graph)
        np.testing.assert_allclose(g.numpy(), [3.0, -3.0])
        assert g.dtype == np.float64
