"""The same weights give the same function as PyTorch: outputs, losses, gradients and optimizer
steps (skipped where PyTorch is not installed)."""

from __future__ import annotations

import numpy as np
import pytest

import minidl as md
from minidl import nn, optim

torch = pytest.importorskip("torch")
F = torch.nn.functional

RTOL, ATOL = 1e-4, 1e-5


def to_minidl_state(module):
    return {k: v.detach().numpy().copy() for k, v in module.state_dict().items()}


def compare_gradients(torch_module, minidl_module):
    torch_params = dict(torch_module.named_parameters())
    minidl_params = dict(minidl_module.named_parameters())
    assert list(torch_params) == list(minidl_params)
    for name, p in torch_params.items():
        np.testing.assert_allclose(minidl_params[name].grad.numpy(), p.grad.numpy(), rtol=RTOL,
                                   atol=ATOL, err_msg=name)


def rng_array(shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def api_cnn_pair():
    torch.manual_seed(0)
    reference = torch.nn.Sequential(
        torch.nn.Conv2d(1, 8, kernel_size=3, padding=1), torch.nn.BatchNorm2d(8),
        torch.nn.ReLU(), torch.nn.MaxPool2d(2), torch.nn.Flatten(), torch.nn.Dropout(0.1),
        torch.nn.Linear(8 * 4 * 4, 10))
    model = nn.Sequential(
        nn.Conv2d(1, 8, kernel_size=3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Dropout(0.1), nn.Linear(8 * 4 * 4, 10))
    with torch.no_grad():  # non-trivial batch norm state, so eval mode is really tested
        reference[1].running_mean.uniform_(-0.5, 0.5)
        reference[1].running_var.uniform_(0.5, 2.0)
        reference[1].weight.uniform_(0.5, 1.5)
        reference[1].bias.uniform_(-0.5, 0.5)
    model.load_state_dict(to_minidl_state(reference))
    return reference, model


@pytest.mark.parametrize("mode", ["eval", "train"])
def test_api_cnn_matches_pytorch(mode):
    reference, model = api_cnn_pair()
    getattr(reference, mode)()
    getattr(model, mode)()
    reference[5].p = model[5].p = 0.0  # dropout's random mask is not comparable
    images = rng_array((6, 1, 8, 8))
    labels = np.array([0, 3, 9, 1, 1, 5], np.int64)

    torch_logits = reference(torch.tensor(images))
    torch_loss = F.cross_entropy(torch_logits, torch.tensor(labels))
    torch_loss.backward()
    logits = model(md.tensor(images))
    loss = nn.functional.cross_entropy(logits, md.tensor(labels))
    loss.backward()

    np.testing.assert_allclose(logits.numpy(), torch_logits.detach().numpy(), rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(loss.item(), torch_loss.item(), rtol=RTOL)
    compare_gradients(reference, model)
    for name, value in reference.state_dict().items():  # running statistics moved the same way
        np.testing.assert_allclose(model.state_dict()[name], value.numpy(), rtol=RTOL, atol=ATOL,
                                   err_msg=name)


def check_module(torch_module, minidl_module, x, input_grad=True):
    minidl_module.load_state_dict(to_minidl_state(torch_module))
    tx = torch.tensor(x, requires_grad=input_grad and x.dtype.kind == "f")
    torch_out = torch_module(tx)
    weights = rng_array(torch_out.shape, seed=1)
    (torch_out * torch.tensor(weights)).sum().backward()
    mx = md.tensor(x, dtype=x.dtype, requires_grad=input_grad and x.dtype.kind == "f")
    out = minidl_module(mx)
    (out * md.tensor(weights)).sum().backward()
    np.testing.assert_allclose(out.numpy(), torch_out.detach().numpy(), rtol=RTOL, atol=ATOL)
    if tx.requires_grad:
        np.testing.assert_allclose(mx.grad.numpy(), tx.grad.numpy(), rtol=RTOL, atol=ATOL)
    if list(torch_module.parameters()):
        compare_gradients(torch_module, minidl_module)


def test_linear():
    check_module(torch.nn.Linear(5, 3), nn.Linear(5, 3), rng_array((2, 4, 5)))


def test_layer_norm():
    ln = torch.nn.LayerNorm((3, 4))
    with torch.no_grad():
        ln.weight.uniform_(0.5, 1.5), ln.bias.uniform_(-1, 1)
    check_module(ln, nn.LayerNorm((3, 4)), rng_array((2, 3, 4)))


def test_embedding():
    indices = np.array([[0, 2, 2], [4, 0, 1]], np.int64)
    check_module(torch.nn.Embedding(5, 3), nn.Embedding(5, 3), indices)


def test_embedding_with_padding_idx():
    indices = np.array([[0, 2, 2], [4, 0, 1]], np.int64)
    check_module(torch.nn.Embedding(5, 3, padding_idx=2), nn.Embedding(5, 3, padding_idx=2),
                 indices)


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu(approximate):
    check_module(torch.nn.GELU(approximate), nn.GELU(approximate), rng_array((3, 7)) * 3)


@pytest.mark.parametrize("kwargs", [dict(kernel_size=2), dict(kernel_size=3, stride=2, padding=1),
                                    dict(kernel_size=3, stride=2, padding=1, ceil_mode=True,
                                         count_include_pad=False)])
def test_avg_pool(kwargs):
    check_module(torch.nn.AvgPool2d(**kwargs), nn.AvgPool2d(**kwargs), rng_array((2, 3, 7, 6)))


@pytest.mark.parametrize("kwargs", [dict(kernel_size=2), dict(kernel_size=3, stride=2, padding=1,
                                                               dilation=2, ceil_mode=True)])
def test_max_pool(kwargs):
    check_module(torch.nn.MaxPool2d(**kwargs), nn.MaxPool2d(**kwargs), rng_array((2, 3, 9, 8)))


def test_grouped_dilated_conv():
    args = dict(in_channels=4, out_channels=6, kernel_size=(3, 2), stride=(2, 1),
                padding=(2, 1), dilation=(2, 3), groups=2)
    check_module(torch.nn.Conv2d(**args), nn.Conv2d(**args), rng_array((2, 4, 9, 8)))


@pytest.mark.parametrize("cls", ["BatchNorm1d", "BatchNorm2d"])
def test_batch_norm_training_updates_like_pytorch(cls):
    shape = (6, 3, 4) if cls == "BatchNorm1d" else (4, 3, 2, 2)
    reference, model = getattr(torch.nn, cls)(3), getattr(nn, cls)(3)
    check_module(reference, model, rng_array(shape))
    for name, value in reference.state_dict().items():
        np.testing.assert_allclose(model.state_dict()[name], value.numpy(), rtol=RTOL, atol=ATOL,
                                   err_msg=name)


@pytest.mark.parametrize("kwargs", [dict(), dict(label_smoothing=0.2, ignore_index=1),
                                    dict(reduction="sum")])
def test_cross_entropy_loss(kwargs):
    logits = rng_array((5, 4, 3))
    targets = np.random.default_rng(0).integers(0, 4, (5, 3))
    t = torch.tensor(logits, requires_grad=True)
    expected = F.cross_entropy(t, torch.tensor(targets), **kwargs)
    expected.backward()
    m = md.tensor(logits, requires_grad=True)
    actual = nn.CrossEntropyLoss(**kwargs)(m, md.tensor(targets))
    actual.backward()
    np.testing.assert_allclose(actual.item(), expected.item(), rtol=RTOL)
    np.testing.assert_allclose(m.grad.numpy(), t.grad.numpy(), rtol=RTOL, atol=ATOL)


def test_bce_with_logits_and_mse():
    x, y = rng_array((4, 3)) * 3, np.random.default_rng(1).uniform(0, 1, (4, 3)).astype(np.float32)
    tx, ty = torch.tensor(x, requires_grad=True), torch.tensor(y, requires_grad=True)
    (F.binary_cross_entropy_with_logits(tx, ty) + F.mse_loss(tx, ty)).backward()
    mx, my = md.tensor(x, requires_grad=True), md.tensor(y, requires_grad=True)
    (nn.BCEWithLogitsLoss()(mx, my) + nn.MSELoss()(mx, my)).backward()
    np.testing.assert_allclose(mx.grad.numpy(), tx.grad.numpy(), rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(my.grad.numpy(), ty.grad.numpy(), rtol=RTOL, atol=ATOL)


OPTIMIZERS = [
    ("SGD", dict(lr=0.1)),
    ("SGD", dict(lr=0.1, momentum=0.9)),
    ("SGD", dict(lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01)),
    ("SGD", dict(lr=0.05, momentum=0.5, dampening=0.1, weight_decay=0.1)),
    ("Adam", dict(lr=0.01)),
    ("Adam", dict(lr=0.01, betas=(0.8, 0.99), weight_decay=0.1)),
    ("AdamW", dict(lr=0.01, weight_decay=0.1)),
]


@pytest.mark.parametrize("name, kwargs", OPTIMIZERS, ids=[f"{n}-{k}" for n, k in OPTIMIZERS])
def test_optimizer_steps_match_pytorch(name, kwargs):
    torch.manual_seed(0)
    reference = torch.nn.Sequential(torch.nn.Linear(4, 5), torch.nn.Tanh(), torch.nn.Linear(5, 2))
    model = nn.Sequential(nn.Linear(4, 5), nn.Tanh(), nn.Linear(5, 2))
    model.load_state_dict(to_minidl_state(reference))
    torch_opt = getattr(torch.optim, name)(reference.parameters(), **kwargs)
    opt = getattr(optim, name)(model.parameters(), **kwargs)
    for step in range(4):
        x, y = rng_array((8, 4), seed=step), rng_array((8, 2), seed=100 + step)
        torch_opt.zero_grad()
        F.mse_loss(reference(torch.tensor(x)), torch.tensor(y)).backward()
        torch_opt.step()
        opt.zero_grad()
        nn.functional.mse_loss(model(md.tensor(x)), md.tensor(y)).backward()
        opt.step()
    for key, value in reference.state_dict().items():
        np.testing.assert_allclose(model.state_dict()[key], value.numpy(), rtol=RTOL, atol=ATOL,
                                   err_msg=key)
