"""The Optimizer base: parameter groups, gradient handling, zero_grad, hyperparameter checks."""

import numpy as np
import pytest
from optim_helpers import make_param, set_grad

from minidl import optim


def test_exports():
    assert set(optim.__all__) == {"Optimizer", "SGD", "Adam", "AdamW", "RMSprop", "Adagrad",
                                  "Adadelta", "NAdam", "RAdam", "Adamax", "LBFGS",
                                  "lr_scheduler", "ZeroRedundancyOptimizer"}
    assert issubclass(optim.SGD, optim.Optimizer) and issubclass(optim.AdamW, optim.Adam)


def test_empty_parameter_list_is_rejected():
    with pytest.raises(ValueError, match="empty parameter list"):
        optim.SGD([], lr=0.1)


def test_a_bare_parameter_is_rejected():
    with pytest.raises(TypeError, match="iterable"):
        optim.SGD(make_param([1.0]), lr=0.1)


def test_generator_of_parameters_is_accepted():
    params = [make_param([1.0]), make_param([2.0])]
    opt = optim.SGD((p for p in params), lr=0.1)
    assert [id(p) for p in opt.param_groups[0]["params"]] == [id(p) for p in params]


def test_duplicate_parameter_is_rejected():
    p = make_param([1.0])
    with pytest.raises(ValueError, match="more than once"):
        optim.SGD([p, p], lr=0.1)
    opt = optim.SGD([p], lr=0.1)
    with pytest.raises(ValueError, match="more than once"):
        opt.add_param_group({"params": [p]})


def test_param_groups_take_defaults_and_overrides():
    a, b = make_param([1.0]), make_param([1.0])
    opt = optim.SGD([{"params": [a]}, {"params": b, "lr": 0.5}], lr=0.1, momentum=0.9)
    assert [g["lr"] for g in opt.param_groups] == [0.1, 0.5]
    assert all(g["momentum"] == 0.9 for g in opt.param_groups)
    assert opt.param_groups[1]["params"][0] is b
    set_grad(a, [1.0])
    set_grad(b, [1.0])
    opt.step()
    np.testing.assert_allclose(a.data, [0.9])
    np.testing.assert_allclose(b.data, [0.5])


def test_add_param_group_validates_hyperparameters():
    opt = optim.Adam([make_param([1.0])])
    with pytest.raises(ValueError, match="lr"):
        opt.add_param_group({"params": [make_param([2.0])], "lr": -1.0})
    assert len(opt.param_groups) == 1
    opt.add_param_group({"params": [make_param([2.0])], "lr": 0.5})
    assert opt.param_groups[1]["betas"] == (0.9, 0.999)


def test_parameters_without_gradient_are_skipped():
    a, b = make_param([1.0, 2.0]), make_param([3.0])
    opt = optim.Adam([a, b], lr=0.1)
    set_grad(a, [1.0, 1.0])
    opt.step()
    np.testing.assert_array_equal(b.data, [3.0])
    assert b not in opt.state and a in opt.state
    assert opt.state[a]["step"] == 1


def test_data_is_updated_in_place():
    p = make_param(np.ones((2, 3)))
    array = p.data
    opt = optim.SGD([p], lr=0.1, momentum=0.9)
    set_grad(p, np.ones((2, 3)))
    opt.step()
    assert p.data is array
    np.testing.assert_allclose(array, 0.9)


def test_gradient_of_wrong_shape_is_rejected():
    p = make_param([1.0, 2.0])
    p.grad = make_param([1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match="shape"):
        optim.SGD([p], lr=0.1).step()


@pytest.mark.parametrize("set_to_none", [True, False])
def test_zero_grad(set_to_none):
    a, b = make_param([1.0, 2.0]), make_param([3.0])
    opt = optim.SGD([a, b], lr=0.1)
    set_grad(a, [5.0, 6.0])
    opt.zero_grad(set_to_none=set_to_none)
    if set_to_none:
        assert a.grad is None
    else:
        np.testing.assert_array_equal(a.grad.data, [0.0, 0.0])
    assert b.grad is None


def test_zero_grad_defaults_to_none():
    p = make_param([1.0])
    set_grad(p, [1.0])
    opt = optim.SGD([p], lr=0.1)
    opt.zero_grad()
    assert p.grad is None


def test_step_calls_closure_and_returns_its_loss():
    p = make_param([2.0])
    calls = []

    def closure():
        calls.append(1)
        set_grad(p, [1.0])
        return 4.0

    assert optim.SGD([p], lr=0.5).step(closure) == 4.0
    assert calls == [1]
    np.testing.assert_allclose(p.data, [1.5])


@pytest.mark.parametrize("factory,name", [
    (lambda p: optim.SGD(p, lr=-0.1), "lr"),
    (lambda p: optim.SGD(p, lr=float("nan")), "lr"),
    (lambda p: optim.SGD(p, lr=0.1, momentum=-0.5), "momentum"),
    (lambda p: optim.SGD(p, lr=0.1, weight_decay=-1.0), "weight_decay"),
    (lambda p: optim.SGD(p, lr=0.1, nesterov=True), "nesterov"),
    (lambda p: optim.SGD(p, lr=0.1, momentum=0.9, dampening=0.1, nesterov=True), "nesterov"),
    (lambda p: optim.Adam(p, lr=-1e-3), "lr"),
    (lambda p: optim.Adam(p, betas=(1.0, 0.999)), r"betas\[0\]"),
    (lambda p: optim.Adam(p, betas=(0.9, -0.1)), r"betas\[1\]"),
    (lambda p: optim.Adam(p, betas=(0.9,)), "betas"),
    (lambda p: optim.Adam(p, eps=-1e-8), "eps"),
    (lambda p: optim.Adam(p, weight_decay=-0.1), "weight_decay"),
    (lambda p: optim.Adam(p, amsgrad="yes"), "amsgrad"),
    (lambda p: optim.AdamW(p, weight_decay=-0.01), "weight_decay"),
    (lambda p: optim.AdamW(p, lr="fast"), "lr"),
])
def test_invalid_hyperparameters_are_named(factory, name):
    with pytest.raises(ValueError, match=name):
        factory([make_param([1.0])])


def test_hyperparameters_are_plain_in_the_group():
    opt = optim.AdamW([make_param([1.0])], lr=0.01, betas=[0.8, 0.9])
    group = opt.param_groups[0]
    assert group["betas"] == (0.8, 0.9) and group["decoupled_weight_decay"] is True
    assert group["weight_decay"] == 0.01
    assert "AdamW" in repr(opt)


def test_trains_a_real_model_through_autograd():
    import minidl as md
    from minidl import nn

    md.manual_seed(0)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((64, 3)).astype(np.float32)
    y = x @ np.array([[1.0], [-2.0], [0.5]], np.float32) + 0.3
    model = nn.Linear(3, 1)
    opt = optim.Adam(model.parameters(), lr=0.05)
    losses = []
    for _ in range(150):
        opt.zero_grad()
        loss = nn.functional.mse_loss(model(md.tensor(x)), md.tensor(y))
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 1e-3 * losses[0]


def test_closure_records_gradients_even_under_no_grad():
    import minidl as md

    p = make_param([3.0])
    opt = optim.SGD([p], lr=0.1)

    def closure():
        opt.zero_grad()
        loss = (p * p).sum()
        loss.backward()
        return loss

    with md.no_grad():
        loss = opt.step(closure)
    assert loss.item() == 9.0
    np.testing.assert_allclose(p.data, [3.0 - 0.1 * 6.0], rtol=1e-6)
