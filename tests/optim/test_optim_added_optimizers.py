"""RMSprop, Adagrad, Adadelta, NAdam and RAdam: 200 steps against PyTorch on the same
quadratic-plus-sine losses with two parameter groups, a bitwise resume through state_dict and
msgpack, and errors that name the bad hyperparameter or slot."""

from __future__ import annotations

import numpy as np
import pytest

import minidl as md
from minidl import optim
from minidl.nn import Parameter
from optim_helpers import through_msgpack

# name -> (constructor keyword arguments for both libraries, second group's overrides)
CASES = {
    "RMSprop": ({}, {"lr": 3e-3}),
    "RMSprop_centered_momentum": ({"momentum": 0.9, "centered": True, "weight_decay": 1e-2,
                                   "lr": 1e-3}, {"alpha": 0.9}),
    "RMSprop_maximize": ({"maximize": True, "lr": 1e-3}, {}),
    "Adagrad": ({"lr": 0.1, "lr_decay": 1e-2, "initial_accumulator_value": 0.1,
                 "weight_decay": 1e-3}, {"eps": 1e-6}),
    "Adadelta": ({}, {"rho": 0.8, "lr": 0.5}),
    "Adadelta_decay": ({"weight_decay": 0.1, "maximize": True}, {}),
    "NAdam": ({}, {"lr": 1e-3}),
    "NAdam_decoupled": ({"weight_decay": 0.05, "decoupled_weight_decay": True,
                         "momentum_decay": 8e-3}, {"betas": (0.8, 0.99)}),
    "NAdam_l2": ({"weight_decay": 0.05}, {}),
    "RAdam": ({"lr": 1e-2}, {"lr": 1e-3}),
    "RAdam_decoupled": ({"weight_decay": 0.05, "decoupled_weight_decay": True}, {}),
}

SHAPES = [(4, 3), (5,)]


def starting_values():
    rng = np.random.default_rng(0)
    return [rng.standard_normal(shape).astype(np.float32) for shape in SHAPES]


def gradient_of(values, step):
    """∂/∂w of Σ (w - t)² + sin(3w)·(1 + step/50): a target that moves with the step."""
    return [(2 * (w - 0.5) + 3 * np.cos(3 * w) * (1 + step / 50)).astype(np.float32)
            for w in values]


def optimizer_name(case):
    return case.split("_")[0]


def run_minidl(case, steps, params=None, opt=None):
    kwargs, second = CASES[case]
    if params is None:
        params = [Parameter(v) for v in starting_values()]
        opt = getattr(optim, optimizer_name(case))(
            [{"params": [params[0]]}, {"params": [params[1]], **second}], **kwargs)
    start = opt.state[params[0]].get("step", 0) if params[0] in opt.state else 0
    for step in range(start, start + steps):
        for p, g in zip(params, gradient_of([p.numpy() for p in params], step)):
            p.grad = md.tensor(g)
        opt.step()
    return params, opt


def run_torch(case, steps):
    torch = pytest.importorskip("torch")
    kwargs, second = CASES[case]
    params = [torch.nn.Parameter(torch.tensor(v)) for v in starting_values()]
    opt = getattr(torch.optim, optimizer_name(case))(
        [{"params": [params[0]]}, {"params": [params[1]], **second}], **kwargs)
    for step in range(steps):
        for p, g in zip(params, gradient_of([p.detach().numpy() for p in params], step)):
            p.grad = torch.tensor(g)
        opt.step()
    return [p.detach().numpy() for p in params]


@pytest.mark.parametrize("case", sorted(CASES))
def test_200_steps_match_pytorch(case):
    expected = run_torch(case, 200)
    params, _ = run_minidl(case, 200)
    for p, e in zip(params, expected):
        np.testing.assert_allclose(p.numpy(), e, rtol=2e-4, atol=2e-5)


@pytest.mark.parametrize("case", sorted(CASES))
def test_resuming_from_a_state_dict_is_bitwise_equal(case):
    straight, _ = run_minidl(case, 30)
    params, opt = run_minidl(case, 12)
    state = through_msgpack(opt.state_dict())
    weights = [p.numpy().copy() for p in params]
    kwargs, second = CASES[case]
    resumed_params = [Parameter(w) for w in weights]
    resumed = getattr(optim, optimizer_name(case))(
        [{"params": [resumed_params[0]]}, {"params": [resumed_params[1]], **second}], **kwargs)
    resumed.load_state_dict(state)
    run_minidl(case, 18, resumed_params, resumed)
    for a, b in zip(resumed_params, straight):
        assert a.numpy().tobytes() == b.numpy().tobytes()


def test_bad_hyperparameters_and_states_are_named():
    p = Parameter(np.zeros(3, np.float32))
    with pytest.raises(ValueError, match="alpha"):
        optim.RMSprop([p], alpha=-1)
    with pytest.raises(ValueError, match="lr_decay"):
        optim.Adagrad([p], lr_decay=-0.1)
    with pytest.raises(ValueError, match="rho"):
        optim.Adadelta([p], rho=1.5)
    with pytest.raises(ValueError, match="momentum_decay"):
        optim.NAdam([p], momentum_decay=-1)
    with pytest.raises(ValueError, match=r"betas\[1\]"):
        optim.RAdam([p], betas=(0.9, 1.0))
    opt = optim.Adadelta([p])
    p.grad = md.tensor(np.ones(3, np.float32))
    opt.step()
    state = opt.state_dict()
    del state["state"][0]["acc_delta"]
    with pytest.raises(ValueError, match="acc_delta"):
        optim.Adadelta([Parameter(np.zeros(3, np.float32))]).load_state_dict(state)
