"""ZeroRedundancyOptimizer in one process (the sharded runs are in tests/distributed)."""

import numpy as np
import pytest

import minidl as md
from minidl import nn, optim
from minidl.optim.zero import merge_shard_states, partition


def train(model, opt, steps=4):
    x = md.tensor(np.random.default_rng(0).standard_normal((6, 3)).astype(np.float32))
    for _ in range(steps):
        opt.zero_grad()
        (model(x) ** 2).mean().backward()
        opt.step()


def make(seed=0):
    md.manual_seed(seed)
    return nn.Sequential(nn.Linear(3, 5), nn.Tanh(), nn.Linear(5, 2))


def test_in_a_group_of_one_it_is_the_wrapped_optimizer():
    a, b = make(), make()
    adam = optim.Adam(a.parameters(), lr=0.01, betas=(0.8, 0.9))
    zero = optim.ZeroRedundancyOptimizer(b.parameters(), optim.Adam, lr=0.01, betas=(0.8, 0.9))
    sched = optim.lr_scheduler.StepLR(zero, step_size=2, gamma=0.5)
    sched_a = optim.lr_scheduler.StepLR(adam, step_size=2, gamma=0.5)
    for _ in range(3):
        train(a, adam, 1), train(b, zero, 1)
        sched.step(), sched_a.step()
    for p, q in zip(a.parameters(), b.parameters()):
        assert p.numpy().tobytes() == q.numpy().tobytes()
    s, t = adam.state_dict(), zero.state_dict()
    assert s["param_groups"] == t["param_groups"]
    for i in s["state"]:
        for k in s["state"][i]:
            assert np.array_equal(s["state"][i][k], t["state"][i][k])


def test_loads_the_unsharded_state_and_refuses_a_wrong_one():
    a, b = make(), make()
    adam = optim.Adam(a.parameters(), lr=0.01)
    train(a, adam)
    zero = optim.ZeroRedundancyOptimizer(b.parameters(), optim.Adam, lr=0.01)
    zero.load_state_dict(adam.state_dict())
    assert zero.state_dict()["state"][1]["step"] == 4
    bad = adam.state_dict()
    bad["state"][0]["exp_avg"] = np.zeros(3, np.float32)
    with pytest.raises(ValueError, match="shape"):
        zero.load_state_dict(bad)
    assert zero.state_dict()["state"][0]["exp_avg"].shape == (5, 3)  # unchanged


def test_partition_is_balanced_and_deterministic():
    owner = partition([100, 10, 60, 50, 5], 2)
    assert owner == [0, 0, 1, 1, 0]  # largest first: loads 115 and 110
    assert partition([4] * 5, 3) == [0, 1, 2, 0, 1]
    assert partition([7], 3) == [0]


def test_merging_shards_joins_their_parameters_and_refuses_overlaps():
    groups = [{"lr": 0.1, "params": [0, 1, 2]}]
    shards = [{"state": {2: {"step": 1}}, "param_groups": groups},
              {"state": {0: {"step": 1}}, "param_groups": groups}]
    assert list(merge_shard_states(shards)["state"]) == [0, 2]
    with pytest.raises(ValueError, match="more than one shard"):
        merge_shard_states(shards + shards[:1])


def test_needs_an_optimizer_class():
    with pytest.raises(TypeError, match="optimizer_class"):
        optim.ZeroRedundancyOptimizer(make().parameters(), "adam")
