"""A failed Optimizer.load_state_dict changes nothing: neither param_groups (no hyperparameter
merged in from the refused snapshot) nor the per-parameter state; and a snapshot that lacks a
key the live groups gained since (a scheduler's 'initial_lr') removes it again."""

import copy

import numpy as np
import pytest
from optim_helpers import assert_same_state, make_param, set_grad

from minidl import optim


def trained_adam(lr=0.01):
    params = [make_param(np.ones((2, 2))), make_param(np.ones(3))]
    opt = optim.Adam([{"params": params[:1]}, {"params": params[1:], "lr": 0.5}], lr=lr)
    for p in params:
        set_grad(p, np.full(p.data.shape, 0.25))
    opt.step()
    return opt


def groups_of(opt):
    return [{k: v for k, v in g.items() if k != "params"} for g in opt.param_groups]


def late_failures():
    """Snapshots whose groups are valid (with other hyperparameters than the live ones) and
    whose fault comes after them: a half-applied restore would show in param_groups."""
    def unknown_group_key(state):
        state["param_groups"][1]["momentum"] = 0.9  # not an Adam hyperparameter
    def bad_slot(state):
        state["state"][1]["exp_avg"] = np.zeros(5, np.float32)
    def unknown_index(state):
        state["state"][7] = state["state"].pop(1)
    def non_ascii_digits(state):
        state["state"]["\u0661"] = state["state"].pop(1)  # ARABIC-INDIC DIGIT ONE
    return {"unknown group key": (unknown_group_key, "unknown key 'momentum'"),
            "bad slot": (bad_slot, r"state\[1\].*exp_avg.*shape"),
            "unknown index": (unknown_index, "7"),
            "non-ASCII digits": (non_ascii_digits, "\u0661")}


@pytest.mark.parametrize("name", sorted(late_failures()))
def test_a_refused_snapshot_leaves_groups_and_state_as_they_were(name):
    opt = trained_adam()
    groups_before, state_before = groups_of(opt), opt.state_dict()
    state_before = {"state": {i: dict(s) for i, s in state_before["state"].items()},
                    "param_groups": state_before["param_groups"]}
    snapshot = trained_adam(lr=0.3).state_dict()
    snapshot["param_groups"][0]["lr"] = 0.3
    snapshot["param_groups"][0]["betas"] = [0.5, 0.6]
    edit, why = late_failures()[name]
    edit(snapshot)
    with pytest.raises(ValueError, match=why):
        opt.load_state_dict(snapshot)
    assert groups_of(opt) == groups_before
    assert opt.param_groups[0]["betas"] == (0.9, 0.999)
    assert_same_state(opt.state_dict(), state_before)


def test_rolling_back_to_a_snapshot_without_initial_lr_removes_it():
    opt = trained_adam()
    snapshot = opt.state_dict()
    snapshot = {"state": snapshot["state"],
                "param_groups": [dict(g) for g in snapshot["param_groups"]]}
    optim.lr_scheduler.StepLR(opt, step_size=1)  # adds 'initial_lr' to every group
    assert all("initial_lr" in g for g in opt.param_groups)
    opt.load_state_dict(snapshot)
    assert all("initial_lr" not in g for g in opt.param_groups)


def test_hyperparameters_that_are_not_plain_data_are_named():
    opt = trained_adam()
    opt.param_groups[1]["lr"] = object()
    with pytest.raises(TypeError, match=r"param_groups\[1\]\['lr'\]"):
        opt.state_dict()


def interrupted_points(total: int, every: int) -> list[int]:
    """Every ``every``-th bytecode, and each of the last 200 (where the checked state is
    swapped in: the part that used to break)."""
    return sorted(set(range(0, total, every)) | set(range(max(0, total - 200), total)))


@pytest.mark.parametrize("every", [29, pytest.param(1, marks=pytest.mark.slow)])
def test_a_ctrl_c_at_any_bytecode_of_a_restore_leaves_a_working_optimizer(every):
    """An interrupt between clearing a group and putting its params back used to leave the
    group without 'params': state_dict() then raised KeyError and no restore worked again."""
    from minidl.testing.interrupts import call_interrupted, count_bytecodes

    snapshot = trained_adam(lr=0.3).state_dict()
    opt = trained_adam()
    before = copy.deepcopy(opt.state_dict())
    total = count_bytecodes(lambda: opt.load_state_dict(snapshot))
    for n in interrupted_points(total, every):
        opt.load_state_dict(before)
        with pytest.raises(KeyboardInterrupt):
            call_interrupted(n, lambda: opt.load_state_dict(snapshot))
        # Interrupted anywhere, the groups are either untouched or restored in full...
        assert opt.state_dict()["param_groups"] in (before["param_groups"],
                                                    snapshot["param_groups"]), n
        # ...and a later restore (the rollback a Checkpoint makes) works.
        opt.load_state_dict(before)
        assert_same_state(opt.state_dict(), before)
