"""Learning-rate schedules: closed-form sequences, PyTorch agreement, chaining, checkpoint and
resume."""

import math
from bisect import bisect_right

import numpy as np
import pytest
from optim_helpers import make_param, set_grad, through_msgpack

from minidl import optim
from minidl.optim import lr_scheduler

BASES = [0.1, 0.02]
EPOCHS = 40

SCHEDULES = {
    "StepLR": (dict(step_size=7, gamma=0.5),
               lambda base, e: base * 0.5 ** (e // 7)),
    "MultiStepLR": (dict(milestones=[3, 10, 10, 25], gamma=0.3),
                    lambda base, e: base * 0.3 ** bisect_right([3, 10, 10, 25], e)),
    "ExponentialLR": (dict(gamma=0.9),
                      lambda base, e: base * 0.9 ** e),
    "CosineAnnealingLR": (dict(T_max=15, eta_min=1e-3),
                          lambda base, e: 1e-3 + (base - 1e-3) * (1 + math.cos(math.pi * e / 15)) / 2),
    "LinearLR": (dict(start_factor=0.25, end_factor=1.0, total_iters=8),
                 lambda base, e: base * (0.25 + 0.75 * min(e, 8) / 8)),
}


def _optimizer(cls=optim.SGD):
    params = [make_param([1.0]), make_param([2.0])]
    return cls([{"params": params[:1], "lr": BASES[0]}, {"params": params[1:], "lr": BASES[1]}])


def _sequence(scheduler, epochs=EPOCHS):
    lrs = [scheduler.get_last_lr()]
    for _ in range(epochs - 1):
        scheduler.optimizer.step()
        scheduler.step()
        lrs.append(scheduler.get_last_lr())
    return lrs


@pytest.mark.parametrize("name", sorted(SCHEDULES))
def test_sequence_equals_closed_form(name):
    kwargs, closed_form = SCHEDULES[name]
    opt = _optimizer()
    scheduler = getattr(lr_scheduler, name)(opt, **kwargs)
    lrs = _sequence(scheduler)
    expected = [[closed_form(base, e) for base in BASES] for e in range(EPOCHS)]
    # The chainable form reaches the closed form up to rounding accumulated step by step.
    np.testing.assert_allclose(lrs, expected, rtol=1e-12, atol=1e-15)
    assert [g["lr"] for g in opt.param_groups] == lrs[-1]
    assert [g["initial_lr"] for g in opt.param_groups] == BASES
    assert scheduler.last_epoch == EPOCHS - 1


@pytest.mark.parametrize("name", sorted(SCHEDULES))
def test_matches_torch(name):
    torch = pytest.importorskip("torch")
    kwargs, _ = SCHEDULES[name]
    ours = getattr(lr_scheduler, name)(_optimizer(), **kwargs)
    tparams = [torch.zeros(1, requires_grad=True) for _ in BASES]
    topt = torch.optim.SGD([{"params": [p], "lr": base} for p, base in zip(tparams, BASES)])
    theirs = getattr(torch.optim.lr_scheduler, name)(topt, **kwargs)
    expected = [theirs.get_last_lr()]
    for _ in range(EPOCHS - 1):
        topt.step()
        theirs.step()
        expected.append(theirs.get_last_lr())
    np.testing.assert_allclose(_sequence(ours), expected, rtol=1e-9, atol=1e-15)


@pytest.mark.parametrize("name", sorted(SCHEDULES))
def test_resume_from_state_dict_continues_exactly(name):
    kwargs, _ = SCHEDULES[name]
    cls = getattr(lr_scheduler, name)
    full = _sequence(cls(_optimizer(), **kwargs))

    opt = _optimizer()
    scheduler = cls(opt, **kwargs)
    head = _sequence(scheduler, 13)
    opt_state = through_msgpack(opt.state_dict())
    sched_state = through_msgpack(scheduler.state_dict())

    # As in PyTorch: build the optimizer and scheduler, then load both states (constructing a
    # scheduler applies its epoch-0 rate to the groups; the optimizer's state puts them back).
    opt2 = _optimizer()
    scheduler2 = cls(opt2, **kwargs)
    opt2.load_state_dict(opt_state)
    scheduler2.load_state_dict(sched_state)
    assert scheduler2.get_last_lr() == head[-1]
    tail = [scheduler2.get_last_lr()]
    for _ in range(EPOCHS - 13):
        scheduler2.step()
        tail.append(scheduler2.get_last_lr())
    assert head + tail[1:] == full


def _torch_chain(torch, factories, steps):
    tparams = [torch.zeros(1, requires_grad=True) for _ in BASES]
    topt = torch.optim.SGD([{"params": [p], "lr": base} for p, base in zip(tparams, BASES)])
    schedulers = [factory(torch.optim.lr_scheduler, topt) for factory in factories]
    lrs = [[g["lr"] for g in topt.param_groups]]
    for _ in range(steps):
        topt.step()
        for scheduler in schedulers:
            scheduler.step()
        lrs.append([g["lr"] for g in topt.param_groups])
    return lrs


def _our_chain(factories, steps):
    opt = _optimizer()
    schedulers = [factory(lr_scheduler, opt) for factory in factories]
    lrs = [[g["lr"] for g in opt.param_groups]]
    for _ in range(steps):
        opt.step()
        for scheduler in schedulers:
            scheduler.step()
        lrs.append([g["lr"] for g in opt.param_groups])
    return lrs


CHAINS = {
    "warmup+cosine": [lambda m, o: m.LinearLR(o, start_factor=0.1, total_iters=10),
                      lambda m, o: m.CosineAnnealingLR(o, T_max=100)],
    "step+exponential": [lambda m, o: m.StepLR(o, step_size=5, gamma=0.5),
                         lambda m, o: m.ExponentialLR(o, gamma=0.95)],
    "multistep+linear+cosine": [lambda m, o: m.MultiStepLR(o, milestones=[4, 9, 9], gamma=0.3),
                                lambda m, o: m.LinearLR(o, start_factor=0.5, total_iters=6),
                                lambda m, o: m.CosineAnnealingLR(o, T_max=7, eta_min=1e-4)],
}


def test_warmup_then_cosine_keeps_the_warmup():
    # Two schedulers on one optimizer compose: the first rate is base * 0.1, not base.
    lrs = _our_chain(CHAINS["warmup+cosine"], 1)
    assert lrs[0] == pytest.approx([b * 0.1 for b in BASES])
    assert lrs[1] == pytest.approx([b * 0.19 * (1 + math.cos(math.pi / 100)) / 2 for b in BASES])


@pytest.mark.parametrize("name", sorted(CHAINS))
def test_chained_schedulers_match_torch(name):
    torch = pytest.importorskip("torch")
    np.testing.assert_allclose(_our_chain(CHAINS[name], 60),
                               _torch_chain(torch, CHAINS[name], 60), rtol=1e-9, atol=1e-15)


def test_step_with_an_epoch_uses_the_closed_form():
    opt = _optimizer()
    scheduler = lr_scheduler.CosineAnnealingLR(opt, T_max=15, eta_min=1e-3)
    scheduler.step(7)
    assert scheduler.last_epoch == 7
    expected = [1e-3 + (b - 1e-3) * (1 + math.cos(math.pi * 7 / 15)) / 2 for b in BASES]
    assert scheduler.get_last_lr() == pytest.approx(expected, rel=1e-12)


def test_constructing_with_last_epoch_resumes():
    opt = _optimizer()
    _sequence(lr_scheduler.StepLR(opt, step_size=2, gamma=0.5), 5)
    resumed = lr_scheduler.StepLR(opt, step_size=2, gamma=0.5, last_epoch=4)
    assert resumed.last_epoch == 5
    assert resumed.get_last_lr() == [b * 0.5 ** 2 for b in BASES]


def test_last_epoch_needs_initial_lr():
    with pytest.raises(ValueError, match="initial_lr"):
        lr_scheduler.StepLR(_optimizer(), step_size=2, last_epoch=3)


def test_the_optimizer_uses_the_scheduled_rate():
    p = make_param([0.0], dtype=np.float64)
    opt = optim.SGD([p], lr=1.0)
    scheduler = lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    for _ in range(3):
        set_grad(p, [-1.0])
        opt.step()
        scheduler.step()
    np.testing.assert_allclose(p.data, [1.0 + 0.5 + 0.25])


@pytest.mark.parametrize("factory,name", [
    (lambda o: lr_scheduler.StepLR(o, step_size=0), "step_size"),
    (lambda o: lr_scheduler.StepLR(o, step_size=2.5), "step_size"),
    (lambda o: lr_scheduler.StepLR(o, step_size=2, gamma=-0.5), "gamma"),
    (lambda o: lr_scheduler.MultiStepLR(o, milestones=[3, -1]), r"milestones\[1\]"),
    (lambda o: lr_scheduler.ExponentialLR(o, gamma=0.0), "gamma"),
    (lambda o: lr_scheduler.CosineAnnealingLR(o, T_max=0), "T_max"),
    (lambda o: lr_scheduler.CosineAnnealingLR(o, T_max=10, eta_min=-1.0), "eta_min"),
    (lambda o: lr_scheduler.LinearLR(o, start_factor=0.0), "start_factor"),
    (lambda o: lr_scheduler.LinearLR(o, end_factor=1.5), "end_factor"),
    (lambda o: lr_scheduler.LinearLR(o, total_iters=0), "total_iters"),
])
def test_invalid_hyperparameters_are_named(factory, name):
    with pytest.raises(ValueError, match=name):
        factory(_optimizer())


@pytest.mark.parametrize("edit,match", [
    (lambda s: s.pop("gamma"), "gamma"),
    (lambda s: s.update(base_lrs=[0.1]), "base_lrs"),
    (lambda s: s.update(last_epoch="3"), "last_epoch"),
    (lambda s: s.update(step_size=0), "step_size"),
    (lambda s: s.update(surprise=1), "surprise"),
])
def test_invalid_state_dict_is_rejected_and_changes_nothing(edit, match):
    scheduler = lr_scheduler.StepLR(_optimizer(), step_size=3, gamma=0.5)
    _sequence(scheduler, 4)
    before = scheduler.state_dict()
    other = lr_scheduler.StepLR(_optimizer(), step_size=5, gamma=0.1)
    _sequence(other, 9)
    bad = other.state_dict()
    edit(bad)
    with pytest.raises(ValueError, match=match):
        scheduler.load_state_dict(bad)
    assert scheduler.state_dict() == before
