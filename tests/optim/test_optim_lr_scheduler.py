"""Learning-rate schedules: closed-form sequences, PyTorch agreement, checkpoint and resume."""

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
    assert lrs == expected
    assert [g["lr"] for g in opt.param_groups] == expected[-1]
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

    opt2 = _optimizer()
    opt2.load_state_dict(opt_state)
    scheduler2 = cls(opt2, **kwargs)       # constructing applies epoch 0 ...
    scheduler2.load_state_dict(sched_state)  # ... and loading puts the counter back
    assert scheduler2.get_last_lr() == head[-1]
    tail = [scheduler2.get_last_lr()]
    for _ in range(EPOCHS - 13):
        scheduler2.step()
        tail.append(scheduler2.get_last_lr())
    assert head + tail[1:] == full


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
