"""The added schedules against PyTorch for 200 steps (rates and cycled momentum, two parameter
groups), and a restore from state_dict (through msgpack) in the middle that continues exactly."""

from __future__ import annotations

import math
import warnings
from types import SimpleNamespace

import numpy as np
import pytest

from minidl import optim
from minidl.nn import Parameter
from optim_helpers import through_msgpack


def halve_every_50(epoch):
    return 0.5 ** (epoch // 50)


def gentle(epoch):
    return 0.99 if epoch % 3 else 1.01


def metric_at(step):
    """A validation loss that improves, stalls, improves a little and stalls again."""
    return 1.0 / (1 + min(step, 40)) + (0.001 * (step - 120) if step > 120 else 0.0)


# name -> (optimizer, builder of the scheduler given (library, optimizer))
CASES = {
    "LambdaLR": ("SGD", lambda lib, opt: lib.LambdaLR(opt, [halve_every_50,
                                                           lambda e: 1 / (1 + e)])),
    "MultiplicativeLR": ("SGD", lambda lib, opt: lib.MultiplicativeLR(opt, gentle)),
    "PolynomialLR": ("SGD", lambda lib, opt: lib.PolynomialLR(opt, total_iters=150, power=2.0)),
    "CosineAnnealingWarmRestarts": ("SGD", lambda lib, opt: lib.CosineAnnealingWarmRestarts(
        opt, T_0=7, T_mult=2, eta_min=1e-4)),
    "CyclicLR_triangular2": ("SGD", lambda lib, opt: lib.CyclicLR(
        opt, base_lr=[0.01, 0.02], max_lr=0.1, step_size_up=13, step_size_down=7,
        mode="triangular2")),
    "CyclicLR_exp_range_adam": ("Adam", lambda lib, opt: lib.CyclicLR(
        opt, base_lr=1e-3, max_lr=1e-2, step_size_up=10, mode="exp_range", gamma=0.99)),
    "CyclicLR_no_momentum": ("Adam", lambda lib, opt: lib.CyclicLR(
        opt, 1e-3, 1e-2, step_size_up=5, cycle_momentum=False)),
    "OneCycleLR": ("SGD", lambda lib, opt: lib.OneCycleLR(opt, max_lr=[0.1, 0.2],
                                                          total_steps=201)),
    "OneCycleLR_three_phase_linear_adam": ("Adam", lambda lib, opt: lib.OneCycleLR(
        opt, max_lr=0.01, epochs=4, steps_per_epoch=51, pct_start=0.25,
        anneal_strategy="linear", three_phase=True)),
    "SequentialLR": ("SGD", lambda lib, opt: lib.SequentialLR(
        opt, [lib.LinearLR(opt, start_factor=0.1, total_iters=10),
              lib.PolynomialLR(opt, total_iters=60), lib.CosineAnnealingWarmRestarts(opt, 20)],
        milestones=[10, 90])),
    "ChainedScheduler": ("SGD", lambda lib, opt: lib.ChainedScheduler(
        [lib.MultiplicativeLR(opt, gentle), lib.PolynomialLR(opt, total_iters=120)])),
    "ReduceLROnPlateau": ("SGD", lambda lib, opt: lib.ReduceLROnPlateau(
        opt, patience=5, factor=0.5, cooldown=3, min_lr=[1e-4, 0.0], threshold=0.01)),
    "ReduceLROnPlateau_max_abs": ("SGD", lambda lib, opt: lib.ReduceLROnPlateau(
        opt, mode="max", patience=2, threshold_mode="abs", threshold=0.001)),
}


def make_optimizer(lib, kind, params):
    groups = [{"params": [params[0]]}, {"params": [params[1]], "lr": 0.05}]
    if kind == "SGD":
        return lib.SGD(groups, lr=0.1, momentum=0.9)
    return lib.Adam(groups, lr=1e-3)


def momentum_of(group):
    return group["betas"][0] if "betas" in group else group["momentum"]


def advance(scheduler, step):
    if "ReduceLROnPlateau" in type(scheduler).__name__:
        scheduler.step(metric_at(step))
    else:
        scheduler.step()


def trajectory(lib, params, case, steps, start=0, state=None):
    kind, build = CASES[case]
    opt = make_optimizer(lib, kind, params)
    scheduler = build(lib, opt)
    if state is not None:
        opt.load_state_dict(state[0])
        scheduler.load_state_dict(state[1])
    rates = []
    for step in range(start, start + steps):
        opt.step()  # PyTorch warns when a scheduler steps first
        advance(scheduler, step)
        rates.append([(g["lr"], momentum_of(g)) for g in opt.param_groups])
    return rates, opt, scheduler


@pytest.mark.parametrize("case", sorted(CASES))
def test_200_steps_match_pytorch(case):
    torch = pytest.importorskip("torch")
    library = SimpleNamespace(**vars(torch.optim.lr_scheduler), SGD=torch.optim.SGD,
                              Adam=torch.optim.Adam)
    theirs, _, _ = trajectory(library, [torch.nn.Parameter(torch.zeros(2)),
                                        torch.nn.Parameter(torch.zeros(3))], case, 200)
    ours, _, _ = trajectory(Library(), [Parameter(np.zeros(2, np.float32)),
                                        Parameter(np.zeros(3, np.float32))], case, 200)
    np.testing.assert_allclose(np.array(ours), np.array(theirs), rtol=1e-9, atol=1e-12)


class Library:
    """minidl's optimizers and schedules under one namespace, as the builders expect."""

    def __getattr__(self, name):
        return getattr(optim, name, None) or getattr(optim.lr_scheduler, name)


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_restored_schedule_continues_exactly(case):
    def params():
        return [Parameter(np.zeros(2, np.float32)), Parameter(np.zeros(3, np.float32))]

    straight, _, _ = trajectory(Library(), params(), case, 150)
    _, opt, scheduler = trajectory(Library(), params(), case, 70)
    state = through_msgpack([opt.state_dict(), scheduler.state_dict()])
    resumed, _, _ = trajectory(Library(), params(), case, 80, start=70, state=state)
    assert resumed == straight[70:]


def test_bad_arguments_are_named():
    opt = optim.SGD([Parameter(np.zeros(2, np.float32))], lr=0.1)
    lr = optim.lr_scheduler
    with pytest.raises(ValueError, match="total_steps"):
        lr.OneCycleLR(opt, max_lr=0.1)
    with pytest.raises(ValueError, match="mode"):
        lr.CyclicLR(opt, 0.01, 0.1, mode="square")
    with pytest.raises(ValueError, match="factor"):
        lr.ReduceLROnPlateau(opt, factor=1.5)
    with pytest.raises(ValueError, match="milestones"):
        lr.SequentialLR(opt, [lr.LambdaLR(opt, lambda e: 1.0)], milestones=[3])
    with pytest.raises(TypeError, match="lr_lambda"):
        lr.LambdaLR(opt, 3)
    plain = optim.Adagrad([Parameter(np.zeros(2, np.float32))])
    with pytest.raises(ValueError, match="cycle_momentum"):
        lr.OneCycleLR(plain, max_lr=0.1, total_steps=10)
    scheduler = lr.ReduceLROnPlateau(opt)
    state = scheduler.state_dict()
    state["patience"] = -1
    with pytest.raises(ValueError, match="patience"):
        scheduler.load_state_dict(state)
    assert scheduler.patience == 10


def test_lambda_functions_are_not_in_the_state_and_must_be_passed_again():
    opt = optim.SGD([Parameter(np.zeros(2, np.float32))], lr=0.1)
    scheduler = optim.lr_scheduler.LambdaLR(opt, halve_every_50)
    for _ in range(60):
        scheduler.step()
    state = scheduler.state_dict()
    assert all(not callable(v) for v in state.values())
    rebuilt = optim.lr_scheduler.LambdaLR(opt, halve_every_50)
    rebuilt.load_state_dict(state)
    rebuilt.step()
    assert math.isclose(opt.param_groups[0]["lr"], 0.05)


@pytest.mark.parametrize("name", ["LambdaLR", "MultiplicativeLR", "PolynomialLR", "OneCycleLR"])
def test_step_with_an_epoch_matches_pytorch(name):
    torch = pytest.importorskip("torch")
    builders = {
        "LambdaLR": lambda lib, opt: lib.LambdaLR(opt, [halve_every_50, lambda e: 1 / (1 + e)]),
        "MultiplicativeLR": lambda lib, opt: lib.MultiplicativeLR(opt, gentle),
        "PolynomialLR": lambda lib, opt: lib.PolynomialLR(opt, total_iters=80),
        "OneCycleLR": lambda lib, opt: lib.OneCycleLR(opt, max_lr=0.1, total_steps=100),
    }
    rates = []
    for lib, params in ((SimpleNamespace(**vars(torch.optim.lr_scheduler),
                                         SGD=torch.optim.SGD),
                         [torch.nn.Parameter(torch.zeros(2)), torch.nn.Parameter(torch.zeros(3))]),
                        (Library(), [Parameter(np.zeros(2, np.float32)),
                                     Parameter(np.zeros(3, np.float32))])):
        opt = make_optimizer(lib, "SGD", params)
        scheduler = builders[name](lib, opt)
        seen = []
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # PyTorch deprecates step(epoch)
            for epoch in (3, 7, 60, 61, 2):
                opt.step()
                scheduler.step(epoch)
                seen.append([g["lr"] for g in opt.param_groups])
        rates.append(seen)
    np.testing.assert_allclose(np.array(rates[1]), np.array(rates[0]), rtol=1e-12)
