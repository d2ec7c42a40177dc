"""LBFGS (closure-based, with and without the strong-Wolfe line search) and Adamax against
PyTorch: 50 steps of a small regression model in float64 agree to 1e-9, and a state_dict
round trip through msgpack half way gives the very same run."""

from __future__ import annotations

import numpy as np
import pytest

import minidl as md
from minidl import nn, optim
from optim_helpers import through_msgpack

torch = pytest.importorskip("torch")

rng = np.random.default_rng(0)
X = rng.standard_normal((32, 5))
Y = np.sin(X @ rng.standard_normal((5, 2)))
W1, B1 = rng.standard_normal((8, 5)) * 0.5, rng.standard_normal(8) * 0.1
W2, B2 = rng.standard_normal((2, 8)) * 0.5, rng.standard_normal(2) * 0.1

# The settings keep the runs out of chaos: with larger L-BFGS steps on this non-convex loss,
# the last-bit differences of any two implementations' sums (a dot product, a matmul) grow
# by orders of magnitude per step, and no two libraries agree after 50 steps.
CASES = {
    "LBFGS": ("LBFGS", {"lr": 0.2, "max_iter": 2, "history_size": 5}),
    "LBFGS_strong_wolfe": ("LBFGS", {"lr": 0.3, "max_iter": 3, "history_size": 4,
                                     "line_search_fn": "strong_wolfe"}),
    "Adamax": ("Adamax", {"lr": 0.05}),
    "Adamax_decay_maximize": ("Adamax", {"lr": 0.01, "betas": (0.8, 0.95),
                                         "weight_decay": 0.1, "maximize": True}),
}


def minidl_model():
    model = nn.Sequential(nn.Linear(5, 8, dtype=np.float64), nn.Tanh(),
                          nn.Linear(8, 2, dtype=np.float64))
    model.load_state_dict({"0.weight": W1, "0.bias": B1, "2.weight": W2, "2.bias": B2})
    return model


def torch_model():
    model = torch.nn.Sequential(torch.nn.Linear(5, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
    model = model.double()
    model.load_state_dict({k: torch.tensor(v) for k, v in
                           {"0.weight": W1, "0.bias": B1, "2.weight": W2, "2.bias": B2}.items()})
    return model


def take_steps(name, opt, closure, steps):
    """LBFGS evaluates the closure itself; the others step after one backward pass."""
    for _ in range(steps):
        if name == "LBFGS":
            opt.step(closure)
        else:
            closure()
            opt.step()


def run_minidl(case, steps, model=None, opt=None):
    name, kwargs = CASES[case]
    if model is None:
        model = minidl_model()
        opt = getattr(optim, name)(model.parameters(), **kwargs)
    x, y = md.tensor(X), md.tensor(Y)

    def closure():
        opt.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        return loss

    take_steps(name, opt, closure, steps)
    return model, opt


def run_torch(case, steps):
    name, kwargs = CASES[case]
    model = torch_model()
    opt = getattr(torch.optim, name)(model.parameters(), **kwargs)
    x, y = torch.tensor(X), torch.tensor(Y)

    def closure():
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        return loss

    take_steps(name, opt, closure, steps)
    return model, opt


def weights(model):
    return [v.detach().numpy() if hasattr(v, "detach") else np.asarray(v)
            for v in model.state_dict().values()]


@pytest.mark.parametrize("case", sorted(CASES))
def test_fifty_steps_match_pytorch_in_float64(case):
    ours, ours_opt = run_minidl(case, 50)
    theirs, theirs_opt = run_torch(case, 50)
    for a, b in zip(weights(ours), weights(theirs)):
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-9)
    if CASES[case][0] == "LBFGS":
        ours_state = ours_opt.state_dict()["state"][0]
        theirs_state = theirs_opt.state_dict()["state"][0]
        assert ours_state["func_evals"] == theirs_state["func_evals"] > 50
        assert ours_state["n_iter"] == theirs_state["n_iter"]
        np.testing.assert_allclose(ours_state["d"], theirs_state["d"].numpy(), rtol=1e-7,
                                   atol=1e-9)


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_state_dict_round_trip_half_way_continues_the_same_run(case):
    straight, _ = run_minidl(case, 30)
    first, first_opt = run_minidl(case, 15)
    state = through_msgpack(first_opt.state_dict())
    model = minidl_model()
    model.load_state_dict(first.state_dict())
    name, kwargs = CASES[case]
    opt = getattr(optim, name)(model.parameters(), **kwargs)
    opt.load_state_dict(state)
    resumed, _ = run_minidl(case, 15, model, opt)
    for a, b in zip(weights(resumed), weights(straight)):
        np.testing.assert_array_equal(a, b)


def test_lbfgs_refuses_what_it_cannot_do_and_bad_states_by_name():
    model = minidl_model()
    with pytest.raises(ValueError, match="line_search_fn"):
        optim.LBFGS(model.parameters(), line_search_fn="backtracking")
    with pytest.raises(ValueError, match="parameter groups"):
        optim.LBFGS([{"params": [model[0].weight]}, {"params": [model[2].weight]}])
    opt = optim.LBFGS(model.parameters())
    with pytest.raises(ValueError, match="closure"):
        opt.step()
    _, stepped = run_minidl("LBFGS", 2)
    state = stepped.state_dict()
    state["state"][0]["d"] = state["state"][0]["d"][:-1]
    with pytest.raises(ValueError, match="'d'"):
        opt.load_state_dict(state)
    assert opt.state_dict()["state"][0] == {"func_evals": 0, "n_iter": 0}  # unchanged
    with pytest.raises(ValueError, match="betas"):
        optim.Adamax(model.parameters(), betas=(1.0, 0.9))
