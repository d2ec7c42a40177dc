"""The tensor, module and optimizer snippets of the public API page run as written."""

from __future__ import annotations

import numpy as np
import pytest

import minidl as md
from minidl import nn, optim


def test_tensor_and_autograd_snippet():
    md.manual_seed(0)
    x = md.tensor(np.ones((2, 3), np.float32), requires_grad=True)
    y = (x * 2 + 1).relu().sum()
    y.backward()
    grad = x.grad.numpy() if isinstance(x.grad, md.Tensor) else np.asarray(x.grad)
    np.testing.assert_array_equal(grad, np.full((2, 3), 2.0, np.float32))
    assert isinstance(x.numpy(), np.ndarray)
    assert x.shape == (2, 3) and x.dtype == np.float32
    assert y.item() == 18.0 and isinstance(y.item(), float)
    with md.no_grad():
        assert not (x * 2).requires_grad
    state = md.get_rng_state()
    md.set_rng_state(state)
    assert md.get_rng_state() == state


@pytest.mark.skipif(not md.cuda.is_available(), reason="no CUDA device or simulator")
def test_to_cuda_moves_the_tensor_when_there_is_a_device():
    x = md.tensor(np.ones((2, 3), np.float32), requires_grad=True)
    t = x.to("cuda")
    assert t.device == "cuda:0" and md.cuda.device_count() >= 1
    np.testing.assert_array_equal(t.cpu().numpy(), x.numpy())


def test_to_cuda_without_a_device_says_what_to_install():
    # A process where numba sees no CUDA at all, whatever this machine has: numba's own switch.
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    env["NUMBA_DISABLE_CUDA"] = "1"
    code = ("import minidl as md, numpy as np\n"
            "print(md.cuda.is_available(), md.cuda.device_count())\n"
            "try:\n    md.tensor(np.ones(2)).to('cuda')\n"
            "except RuntimeError as error:\n    print(error)\n"
            "else:\n    print('moved')\n")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True)
    availability, message = out.stdout.splitlines()
    assert availability == "False 0"
    assert "'cuda'" in message and "pip install minidl[cuda]" in message
    assert "NUMBA_ENABLE_CUDASIM=1" in message


def test_default_dtype_is_float32():
    assert md.tensor([1.0, 2.0]).dtype == np.float32
    assert md.zeros(2, 3).dtype == md.ones(2).dtype == md.randn(2).dtype == np.float32
    assert md.tensor([1, 2]).dtype == np.int64


def test_tensor_operators():
    a = md.tensor(np.arange(6, dtype=np.float32).reshape(2, 3))
    b = md.tensor(np.ones((3, 2), np.float32))
    np.testing.assert_array_equal((a + 1 - a * 2 / 2).numpy(), np.ones((2, 3)))
    np.testing.assert_array_equal((a ** 2).numpy(), a.numpy() ** 2)
    np.testing.assert_array_equal((a @ b).numpy(), a.numpy() @ b.numpy())
    np.testing.assert_array_equal((a > 2).numpy(), a.numpy() > 2)
    np.testing.assert_array_equal((a == 1).numpy(), a.numpy() == 1)
    np.testing.assert_array_equal((a <= 1).numpy(), a.numpy() <= 1)
    np.testing.assert_array_equal(a[1, ::-1].numpy(), [5, 4, 3])
    np.testing.assert_array_equal(a[a > 2].numpy(), [3, 4, 5])
    assert a.reshape(3, 2).shape == (3, 2) and a.reshape(-1).shape == (6,)
    assert a.transpose(0, 1).shape == (3, 2) and a.permute(1, 0).shape == (3, 2)
    assert a.T.shape == (3, 2)
    for name in ("exp", "tanh", "sigmoid", "relu"):
        np.testing.assert_allclose(getattr(a, name)().numpy(), {
            "exp": np.exp, "tanh": np.tanh, "sigmoid": lambda v: 1 / (1 + np.exp(-v)),
            "relu": lambda v: np.maximum(v, 0)}[name](a.numpy()), rtol=1e-6)
    np.testing.assert_allclose((a + 1).log().numpy(), np.log(a.numpy() + 1), rtol=1e-6)
    np.testing.assert_allclose(a.sqrt().numpy(), np.sqrt(a.numpy()), rtol=1e-6)
    np.testing.assert_allclose(a.softmax(-1).numpy().sum(-1), 1, rtol=1e-6)
    np.testing.assert_allclose(a.log_softmax(dim=1).exp().numpy().sum(1), 1, rtol=1e-6)


def test_reductions_take_axis_or_dim_and_keepdims():
    values = np.arange(6, dtype=np.float32).reshape(2, 3)
    a = md.tensor(values)
    for op, np_op in (("sum", np.sum), ("mean", np.mean), ("amax", np.max)):
        expected = np_op(values, axis=1, keepdims=True)
        np.testing.assert_array_equal(getattr(a, op)(axis=1, keepdims=True).numpy(), expected)
        np.testing.assert_array_equal(getattr(a, op)(dim=1, keepdim=True).numpy(), expected)
        np.testing.assert_array_equal(getattr(a, op)(dim=-1).numpy(), expected[:, 0])
        assert getattr(a, op)().item() == np_op(values)
    # max/min(dim) return (values, indices), as PyTorch.
    values_, indices = a.max(dim=1)
    np.testing.assert_array_equal(values_.numpy(), values.max(axis=1))
    np.testing.assert_array_equal(indices.numpy(), values.argmax(axis=1))
    assert a.max().item() == values.max()


def test_cat_stack_where():
    a, b = md.tensor(np.zeros((2, 3), np.float32)), md.tensor(np.ones((2, 3), np.float32))
    assert md.cat([a, b], axis=0).shape == (4, 3) and md.cat([a, b], dim=1).shape == (2, 6)
    assert md.stack([a, b]).shape == (2, 2, 3) and md.stack([a, b], axis=2).shape == (2, 3, 2)
    chosen = md.where(md.tensor(np.array([True, False, True])), a, b)
    np.testing.assert_array_equal(chosen.numpy(), [[0, 1, 0], [0, 1, 0]])


def make_data(n=16, seed=0):
    rng = np.random.default_rng(seed)
    images = rng.standard_normal((n, 1, 8, 8)).astype(np.float32)
    labels = rng.integers(0, 10, n).astype(np.int64)
    return images, labels


def test_module_functional_and_optimizer_snippet():
    images, labels = make_data()
    model = nn.Sequential(
        nn.Conv2d(1, 8, kernel_size=3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Dropout(0.1), nn.Linear(8 * 4 * 4, 10),
    )
    logits = model(md.tensor(images))
    assert logits.shape == (16, 10)
    loss = nn.functional.cross_entropy(logits, md.tensor(labels))
    assert len(list(model.parameters())) == 6
    assert [n for n, _ in model.named_parameters()][:2] == ["0.weight", "0.bias"]
    model.train()
    model.eval()
    model.train()
    sd = model.state_dict()
    assert list(sd)[:7] == ["0.weight", "0.bias", "1.weight", "1.bias", "1.running_mean",
                            "1.running_var", "1.num_batches_tracked"]
    model.load_state_dict(sd, strict=True)

    opt = optim.Adam(model.parameters(), lr=1e-3)
    sched = optim.lr_scheduler.StepLR(opt, step_size=100, gamma=0.5)
    before = model.state_dict()["6.weight"].copy()
    opt.zero_grad()
    loss.backward()
    opt.step()
    sched.step()
    assert not np.array_equal(model.state_dict()["6.weight"], before)
    s = opt.state_dict()
    opt.load_state_dict(s)
    s = sched.state_dict()
    sched.load_state_dict(s)


def test_a_few_training_steps_reduce_the_loss():
    images, labels = make_data(32)
    md.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(1, 8, kernel_size=3, padding=1), nn.BatchNorm2d(8),
                          nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Dropout(0.1),
                          nn.Linear(8 * 4 * 4, 10))
    opt = optim.SGD(model.parameters(), lr=0.1, momentum=0.9, nesterov=True, weight_decay=1e-4)
    sched = optim.lr_scheduler.CosineAnnealingLR(opt, T_max=20)
    losses = []
    for _ in range(20):
        loss = nn.CrossEntropyLoss()(model(md.tensor(images)), md.tensor(labels))
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0]
    optim.AdamW(model.parameters(), lr=1e-3)


def test_state_dict_mismatch_names_the_keys():
    model = nn.Sequential(nn.Linear(4, 2))
    with pytest.raises(Exception) as info:
        model.load_state_dict({"0.weight": np.zeros((2, 4), np.float32)}, strict=True)
    assert "0.bias" in str(info.value)


def test_listed_layers_and_losses_exist():
    for name in ("Linear", "Conv2d", "MaxPool2d", "AvgPool2d", "BatchNorm1d", "BatchNorm2d",
                 "LayerNorm", "Dropout", "Embedding", "Flatten", "ReLU", "GELU", "Tanh",
                 "Sigmoid", "Softmax", "Sequential", "CrossEntropyLoss", "MSELoss"):
        assert isinstance(getattr(nn, name), type)
    for name in ("cross_entropy", "mse_loss", "binary_cross_entropy_with_logits"):
        assert callable(getattr(nn.functional, name))
