"""Optimizer checkpoints: plain-data layout, msgpack round trip, bitwise resumption, and a
load_state_dict that checks everything before it changes anything."""

import copy

import numpy as np
import pytest
from optim_helpers import assert_same_state, make_param, set_grad, through_msgpack

from minidl import optim

OPTIMIZERS = [
    (optim.SGD, dict(lr=0.05, momentum=0.9, nesterov=True, weight_decay=1e-3)),
    (optim.SGD, dict(lr=0.05)),
    (optim.Adam, dict(lr=1e-2, amsgrad=True, weight_decay=1e-3)),
    (optim.AdamW, dict(lr=1e-2)),
]
IDS = ["sgd-nesterov", "sgd-plain", "adam-amsgrad", "adamw"]

SHAPES = [(5, 3), (3,), (2, 2)]


def _model(seed=0):
    rng = np.random.default_rng(seed)
    return [make_param(rng.standard_normal(shape)) for shape in SHAPES]


def _build(cls, config, params):
    # Two groups, the second with its own learning rate, as a real fine-tuning setup might.
    return cls([{"params": params[:2]}, {"params": params[2:], "lr": 0.003}], **config)


def _train(opt, params, steps, start=0):
    # The gradient depends on the parameters, so any divergence would grow.
    for step in range(start, start + steps):
        rng = np.random.default_rng(1000 + step)
        for p in params:
            set_grad(p, p.data * 0.5 + rng.standard_normal(p.data.shape).astype(np.float32))
        opt.step()


@pytest.mark.parametrize("cls,config", OPTIMIZERS, ids=IDS)
def test_layout_is_pytorch_like_and_plain(cls, config):
    params = _model()
    opt = _build(cls, config, params)
    _train(opt, params, 2)
    state = opt.state_dict()
    assert set(state) == {"state", "param_groups"}
    assert [g["params"] for g in state["param_groups"]] == [[0, 1], [2]]
    assert state["param_groups"][1]["lr"] == 0.003
    for index, slots in state["state"].items():
        assert isinstance(index, int)
        for name, value in slots.items():
            if isinstance(value, np.ndarray):
                assert value.shape == SHAPES[index] and value.dtype == np.float32
            else:
                assert type(value) in (int, float, bool, str, type(None)), name
    assert_same_state(through_msgpack(state), state)


@pytest.mark.parametrize("cls,config", OPTIMIZERS, ids=IDS)
def test_resumed_optimizer_continues_bitwise(cls, config):
    params = _model()
    uninterrupted = _build(cls, config, params)
    _train(uninterrupted, params, 9)

    first = _model()
    opt = _build(cls, config, first)
    _train(opt, first, 4)
    saved_params = [p.data.copy() for p in first]
    saved = through_msgpack(opt.state_dict())

    resumed_params = _model(seed=99)           # fresh process: different initial values
    for p, value in zip(resumed_params, saved_params):
        p.data[...] = value
    resumed = _build(cls, dict(config, lr=123.0), resumed_params)   # hyperparameters come back too
    resumed.load_state_dict(saved)
    assert resumed.param_groups[0]["lr"] == config["lr"]
    _train(resumed, resumed_params, 5, start=4)

    for a, b in zip(params, resumed_params):
        np.testing.assert_array_equal(a.data, b.data)
    assert_same_state(resumed.state_dict(), uninterrupted.state_dict())


def test_state_dict_arrays_are_the_live_slots_as_in_pytorch():
    # No copy per call (a checkpoint copies once, when it must); plain data is fresh each call.
    params = _model()
    opt = _build(optim.Adam, dict(lr=0.01), params)
    _train(opt, params, 1)
    snapshot = opt.state_dict()
    before = copy.deepcopy(snapshot)
    _train(opt, params, 1)
    now = opt.state_dict()
    np.testing.assert_array_equal(snapshot["state"][0]["exp_avg"], now["state"][0]["exp_avg"])
    assert not np.array_equal(snapshot["state"][0]["exp_avg"], before["state"][0]["exp_avg"])
    assert snapshot["state"][0]["step"] == 1 and now["state"][0]["step"] == 2


def test_load_copies_arrays_in():
    params = _model()
    opt = _build(optim.Adam, dict(lr=0.01), params)
    _train(opt, params, 2)
    saved = opt.state_dict()
    other = _build(optim.Adam, dict(lr=0.01), _model())
    other.load_state_dict(saved)
    saved["state"][0]["exp_avg"][...] = 7.0
    assert not np.any(other.state[other.param_groups[0]["params"][0]]["exp_avg"] == 7.0)


def test_string_state_keys_are_accepted():
    params = _model()
    opt = _build(optim.SGD, dict(lr=0.1, momentum=0.9), params)
    _train(opt, params, 2)
    saved = opt.state_dict()
    saved["state"] = {str(k): v for k, v in saved["state"].items()}
    other = _build(optim.SGD, dict(lr=0.1, momentum=0.9), _model())
    other.load_state_dict(saved)
    assert_same_state(other.state_dict(), opt.state_dict())


def test_betas_come_back_as_a_tuple():
    params = _model()
    opt = _build(optim.Adam, dict(lr=0.01, betas=(0.8, 0.9)), params)
    saved = through_msgpack(opt.state_dict())
    assert saved["param_groups"][0]["betas"] == [0.8, 0.9]
    other = _build(optim.Adam, dict(lr=0.01), _model())
    other.load_state_dict(saved)
    assert other.param_groups[0]["betas"] == (0.8, 0.9)


def test_pytorch_style_none_momentum_buffer_means_no_buffer_yet():
    config = dict(lr=0.1, momentum=0.9)
    params = _model()
    opt = _build(optim.SGD, config, params)
    _train(opt, params, 2)  # every parameter has a momentum buffer now
    saved = opt.state_dict()
    saved["state"][0] = {"momentum_buffer": None}  # what PyTorch writes before the first step
    opt.load_state_dict(saved)
    assert "momentum_buffer" not in opt.state_dict()["state"].get(0, {})
    assert "momentum_buffer" in opt.state_dict()["state"][1]
    # The next step starts parameter 0's buffer from its gradient, as a new optimizer's first
    # step does; parameter 1 goes on with the momentum it had.
    fresh_params = [make_param(p.data) for p in params]
    fresh = _build(optim.SGD, config, fresh_params)
    _train(opt, params, 1, start=2)
    _train(fresh, fresh_params, 1, start=2)
    np.testing.assert_array_equal(params[0].data, fresh_params[0].data)
    assert not np.array_equal(params[1].data, fresh_params[1].data)


def _corrupt(name):
    """Each corruption leaves the earlier entries valid, so a partial load would show."""
    def edit(state):
        if name == "group count":
            state["param_groups"].pop()
        elif name == "param count":
            state["param_groups"][1]["params"].append(7)
        elif name == "slot shape":
            state["state"][2]["exp_avg"] = np.zeros((3, 3), np.float32)
        elif name == "slot dtype":
            state["state"][2]["exp_avg_sq"] = state["state"][2]["exp_avg_sq"].astype(np.float64)
        elif name == "missing slot":
            del state["state"][2]["exp_avg"]
        elif name == "unknown slot":
            state["state"][2]["velocity"] = np.zeros((2, 2), np.float32)
        elif name == "bad step":
            state["state"][2]["step"] = -1
        elif name == "unknown index":
            state["state"][9] = state["state"].pop(2)
        elif name == "bad lr":
            state["param_groups"][1]["lr"] = -1.0
        elif name == "bad betas":
            state["param_groups"][1]["betas"] = [0.9, 1.5]
        elif name == "not plain":
            state["param_groups"][1]["lr"] = object()
        elif name == "not an array":
            state["state"][2]["exp_avg"] = [[0.0, 0.0], [0.0, 0.0]]
        elif name == "extra key":
            state["extra"] = 1
        return state
    return edit


CORRUPTIONS = {
    "group count": "parameter groups", "param count": r"param_groups\[1\]",
    "slot shape": r"state\[2\].*exp_avg.*shape", "slot dtype": r"state\[2\].*exp_avg_sq.*dtype",
    "missing slot": r"state\[2\].*exp_avg", "unknown slot": "velocity",
    "bad step": "step", "unknown index": "9", "bad lr": r"param_groups\[1\].*lr",
    "bad betas": r"betas\[1\]", "not plain": r"param_groups\[1\]\['lr'\]",
    "not an array": "exp_avg", "extra key": "keys",
}


@pytest.mark.parametrize("name", sorted(CORRUPTIONS))
def test_invalid_state_dict_is_rejected_and_changes_nothing(name):
    params = _model()
    opt = _build(optim.Adam, dict(lr=0.01, weight_decay=0.0), params)
    _train(opt, params, 2)
    before = opt.state_dict()
    groups_before = [dict(g) for g in opt.param_groups]

    donor_params = _model(seed=5)
    donor = _build(optim.Adam, dict(lr=0.5, betas=(0.5, 0.6)), donor_params)
    _train(donor, donor_params, 3)
    bad = _corrupt(name)(donor.state_dict())

    with pytest.raises(ValueError, match=CORRUPTIONS[name]):
        opt.load_state_dict(bad)
    assert_same_state(opt.state_dict(), before)
    for group, saved in zip(opt.param_groups, groups_before):
        assert group.keys() == saved.keys()
        assert all(group[k] is saved[k] or group[k] == saved[k] for k in group if k != "params")


def test_non_dict_is_rejected():
    opt = optim.SGD([make_param([1.0])], lr=0.1)
    with pytest.raises(ValueError):
        opt.load_state_dict([1, 2])
