"""Module hooks (forward pre-hooks, forward hooks, full backward hooks): PyTorch's semantics,
removable, not state, and never silently dropped by md.compile or ONNX export."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import minidl as md
from minidl import nn


def _cnn_pair():
    """The same small CNN in minidl and torch, with copied weights (float64)."""
    md.manual_seed(0)
    ours = nn.Sequential(nn.Conv2d(1, 3, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Flatten(), nn.Linear(3 * 2 * 2, 2)).double()
    theirs = torch.nn.Sequential(torch.nn.Conv2d(1, 3, 3, padding=1), torch.nn.ReLU(),
                                 torch.nn.MaxPool2d(2), torch.nn.Flatten(),
                                 torch.nn.Linear(3 * 2 * 2, 2)).double()
    theirs.load_state_dict({k: torch.tensor(v.copy()) for k, v in ours.state_dict().items()})
    return ours, theirs


def test_forward_hook_collects_cnn_features_like_torch():
    ours, theirs = _cnn_pair()
    images = np.random.default_rng(0).standard_normal((2, 1, 4, 4))
    features = {}
    handles = [ours[i].register_forward_hook(
        lambda module, args, out, i=i: features.__setitem__(("md", i), out.numpy().copy()))
        for i in (0, 2)]
    for i in (0, 2):
        theirs[i].register_forward_hook(
            lambda module, args, out, i=i: features.__setitem__(("torch", i), out.detach().numpy()))
    ours(md.tensor(images))
    theirs(torch.tensor(images))
    for i in (0, 2):
        np.testing.assert_allclose(features["md", i], features["torch", i], rtol=1e-10, atol=1e-12)
    for handle in handles:
        handle.remove()
    features.clear()
    ours(md.tensor(images))
    assert features == {}


def test_pre_hook_and_forward_hook_can_replace_arguments_and_output():
    layer = nn.Linear(2, 2)
    layer.register_forward_pre_hook(lambda module, args: args[0] * 0)
    layer.register_forward_hook(lambda module, args, out: out + 1)
    out = layer(md.tensor(np.ones((1, 2), np.float32)))
    np.testing.assert_allclose(out.numpy(), layer.bias.numpy()[None] + 1, rtol=1e-6)
    order = []
    model = nn.Linear(2, 2)
    model.register_forward_pre_hook(lambda m, a: order.append("b"))
    model.register_forward_pre_hook(lambda m, a: order.append("a"), prepend=True)
    model.register_forward_pre_hook(lambda m, a, k: order.append(("kw", dict(k))),
                                    with_kwargs=True)
    model(md.tensor(np.ones((1, 2), np.float32)))
    assert order == ["a", "b", ("kw", {})]
    with pytest.raises(TypeError, match="register_forward_hook: expected a callable"):
        model.register_forward_hook("not a function")
    with pytest.raises(TypeError, match="register_full_backward_hook: expected a callable"):
        model.register_full_backward_hook(None)


def test_full_backward_hook_matches_torch_and_can_replace_grad_input():
    ours, theirs = _cnn_pair()
    images = np.random.default_rng(1).standard_normal((2, 1, 4, 4))
    seen = {}

    def recorder(tag):
        def hook(module, grad_input, grad_output):
            seen[tag] = ([None if g is None else np.array(g.detach().numpy() if hasattr(
                g, "detach") else g.numpy()) for g in grad_input],
                [np.array(g.detach().numpy()) for g in grad_output])
            return tuple(None if g is None else g * 2 for g in grad_input)
        return hook

    ours[4].register_full_backward_hook(recorder("md"))
    theirs[4].register_full_backward_hook(recorder("torch"))
    xm = md.tensor(images, requires_grad=True)
    xt = torch.tensor(images, requires_grad=True)
    ours(xm).sum().backward()
    theirs(xt).sum().backward()
    for ours_grads, their_grads in zip(seen["md"], seen["torch"]):
        for a, b in zip(ours_grads, their_grads):
            np.testing.assert_allclose(a, b, rtol=1e-10)
    np.testing.assert_allclose(xm.grad.numpy(), xt.grad.numpy(), rtol=1e-10)  # the doubled one
    for name, p in ours.named_parameters():
        np.testing.assert_allclose(p.grad.numpy(), dict(theirs.named_parameters())[name].grad,
                                   rtol=1e-10, atol=1e-12)


def test_backward_hook_on_a_module_with_two_inputs_gets_both_gradients_at_once():
    class Product(nn.Module):
        def forward(self, a, b):
            return a * b

    module = Product()
    calls = []

    def hook(module, grad_input, grad_output):
        calls.append([g.numpy().copy() for g in grad_input])
        return grad_input[0] * 0, grad_input[1]

    module.register_full_backward_hook(hook)
    a = md.tensor([3.0, 4.0], requires_grad=True)
    b = md.tensor([5.0, 6.0], requires_grad=True)
    module(a, b).sum().backward()
    assert len(calls) == 1
    np.testing.assert_allclose(calls[0][0], [5.0, 6.0])
    np.testing.assert_allclose(calls[0][1], [3.0, 4.0])
    np.testing.assert_allclose(a.grad.numpy(), [0.0, 0.0])
    np.testing.assert_allclose(b.grad.numpy(), [3.0, 4.0])


def test_backward_hook_with_inputs_that_need_no_gradient_sees_none():
    layer = nn.Linear(2, 1)
    calls = []
    layer.register_full_backward_hook(lambda m, gi, go: calls.append((gi, go)))
    layer(md.tensor(np.ones((3, 2), np.float32))).sum().backward()
    assert len(calls) == 1 and calls[0][0] == (None,)
    np.testing.assert_allclose(calls[0][1][0].numpy(), np.ones((3, 1)))


def test_hooks_are_not_state(tmp_path):
    model = nn.Sequential(nn.Linear(2, 2), nn.ReLU())
    md.Checkpoint(model=model).save(tmp_path / "plain.ckpt")
    names = list(model.state_dict())
    handles = [model[0].register_forward_hook(lambda m, a, o: None),
               model.register_full_backward_hook(lambda m, gi, go: None),
               model.register_forward_pre_hook(lambda m, a: None)]
    assert list(model.state_dict()) == names
    md.Checkpoint(model=model).save(tmp_path / "hooked.ckpt")
    assert (tmp_path / "hooked.ckpt").read_bytes() == (tmp_path / "plain.ckpt").read_bytes()
    md.Checkpoint(model=model).restore(tmp_path / "plain.ckpt")  # a restore keeps the hooks
    assert model._hooks_in_tree() == ["Sequential: forward pre-hooks, backward hooks",
                                      "0: forward hooks"]
    for handle in handles:
        handle.remove()
    assert model._hooks_in_tree() == []


def test_compile_refuses_a_model_with_hooks_and_accepts_it_after_remove():
    model = nn.Sequential(nn.Linear(2, 2), nn.ReLU()).eval()
    handle = model[1].register_forward_hook(lambda m, a, o: None)
    with pytest.raises(ValueError, match="compile: the model has hooks \\(1: forward hooks\\)"):
        md.compile(model, md.tensor(np.ones((1, 2), np.float32)))
    handle.remove()
    compiled = md.compile(model, md.tensor(np.ones((1, 2), np.float32)))
    assert compiled(md.tensor(np.ones((1, 2), np.float32))).shape == (1, 2)


def test_onnx_export_runs_forward_hooks_into_the_graph(tmp_path):
    pytest.importorskip("onnxruntime")
    import onnxruntime
    model = nn.Sequential(nn.Linear(2, 3), nn.ReLU()).eval()
    model[0].register_forward_hook(lambda m, a, out: out * 2)  # part of what the model computes
    calls = []
    model[1].register_forward_pre_hook(lambda m, a: calls.append(1))
    example = np.random.default_rng(0).standard_normal((4, 2)).astype(np.float32)
    path = md.export_onnx(model, str(tmp_path / "hooked.onnx"), md.tensor(example))
    assert calls  # the pre-hook ran while tracing
    session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    (result,) = session.run(None, {session.get_inputs()[0].name: example})
    np.testing.assert_allclose(result, model(md.tensor(example)).numpy(), rtol=1e-6)


def test_backward_hook_with_create_graph_sees_recorded_gradients_like_torch():
    # (The first pass hands the hook recorded gradients; the second, plain ones.)
    values = np.array([[0.5, -1.0], [2.0, 0.25]])
    results = []
    for lib, module in ((md, nn.Tanh()), (torch, torch.nn.Tanh())):
        x = (md.tensor if lib is md else torch.tensor)(values, requires_grad=True)
        seen = []
        module.register_full_backward_hook(
            lambda m, gi, go, seen=seen: seen.append(gi[0].requires_grad))
        (g,) = lib.autograd.grad((module(x) ** 3).sum(), x, create_graph=True)
        (h,) = lib.autograd.grad((g * g).sum(), x)
        results.append((seen, g.detach().numpy(), h.numpy()))
    (seen_m, g_m, h_m), (seen_t, g_t, h_t) = results
    # Called in both passes, as in torch: the second walks the module's output again.
    assert seen_m == seen_t == [True, False]
    np.testing.assert_allclose(g_m, g_t, rtol=1e-12)
    np.testing.assert_allclose(h_m, h_t, rtol=1e-12)


def test_backward_hook_is_skipped_when_the_gradient_bypasses_the_output_like_torch():
    values = np.array([0.5, -1.0])
    counts = []
    for lib, module in ((md, nn.Tanh()), (torch, torch.nn.Tanh())):
        x = (md.tensor if lib is md else torch.tensor)(values, requires_grad=True)
        calls = []
        module.register_full_backward_hook(lambda m, gi, go, calls=calls: calls.append(1))
        (g,) = lib.autograd.grad(module(x).sum(), x, create_graph=True)  # 1 - tanh²: no output
        lib.autograd.grad(g.sum(), x)  # reaches the input through tanh, not the output node
        counts.append(len(calls))
    assert counts == [1, 1]
