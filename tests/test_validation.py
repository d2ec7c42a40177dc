"""The shared argument checks: one rule for "a non-negative integer" wherever minidl takes a
count, an index, a step or a size, from an argument or from a saved state."""

import numpy as np
import pytest

from minidl import nn, optim
from minidl.checkpoint import Checkpoint, CheckpointManager
from minidl.data import ArrayDataset, DataReader
from minidl.validation import check_non_negative_int, check_number, check_settings


@pytest.mark.parametrize("value", [0, 7, np.int64(7), np.uint8(7), np.int32(0), 10 ** 30])
def test_integers_of_every_kind_are_accepted_as_python_ints(value):
    checked = check_non_negative_int("count", value)
    assert type(checked) is int and checked == int(value)


@pytest.mark.parametrize("value,why", [
    (True, "must be an integer"), (np.bool_(True), "must be an integer"),
    (3.0, "must be an integer"), ("3", "must be an integer"), (None, "must be an integer"),
    (-1, "must be >= 0"), (np.int64(-1), "must be >= 0")])
def test_what_is_not_a_non_negative_integer_is_refused_by_name(value, why):
    with pytest.raises(ValueError, match=f"^count {why}, got"):
        check_non_negative_int("count", value)


def test_a_minimum_raises_the_floor():
    assert check_non_negative_int("batch_size", 1, minimum=1) == 1
    with pytest.raises(ValueError, match="^batch_size must be >= 1, got 0"):
        check_non_negative_int("batch_size", 0, minimum=1)


def test_huge_integers_do_not_overflow_the_finiteness_check():
    check_number("n", 10 ** 400, low=0, integer=True)
    with pytest.raises(ValueError, match="finite"):
        check_number("x", float("inf"))


def _dataset():
    return ArrayDataset(np.zeros((4, 1), np.float32))


class _Stateless:
    def state_dict(self):
        return {}

    def load_state_dict(self, state):
        pass


@pytest.mark.parametrize("make", [
    lambda n, _: DataReader(_dataset(), batch_size=n),
    lambda n, _: Checkpoint(obj=_Stateless()).stage(step=n),
    lambda n, directory: CheckpointManager(Checkpoint(obj=_Stateless()), directory,
                                           max_to_keep=n),
], ids=["reader batch_size", "checkpoint step", "manager max_to_keep"])
def test_every_package_applies_the_same_rule(make, tmp_path):
    make(np.int64(2), tmp_path)  # NumPy integers: accepted everywhere
    with pytest.raises(ValueError, match="must be an integer, got True"):
        make(True, tmp_path)


def test_save_every_steps_takes_numpy_integers(tmp_path):
    manager = CheckpointManager(Checkpoint(obj=_Stateless()), tmp_path,
                                save_every_steps=np.int64(2))
    assert manager.save_every_steps == 2
    for bad in (0, 1.5, True):
        with pytest.raises(ValueError, match="save_every_steps"):
            CheckpointManager(Checkpoint(obj=_Stateless()), tmp_path, save_every_steps=bad)


def test_optimizer_parameter_indices_are_non_negative_integers():
    layer = nn.Linear(2, 2)
    opt = optim.SGD(layer.parameters(), lr=0.1)
    saved = opt.state_dict()
    saved["param_groups"][0]["params"] = [np.int64(0), np.int64(1)]
    opt.load_state_dict(saved)
    saved["param_groups"][0]["params"] = [-1, 0]
    with pytest.raises(ValueError, match=r"param_groups\[0\]\['params'\]\[0\] must be >= 0"):
        opt.load_state_dict(saved)


def test_settings_are_checked_by_name():
    settings = {"lr": 0.1, "eps": 0.0, "nesterov": False}
    check_settings(settings, non_negative=("lr", "eps"), flags=("nesterov",))
    with pytest.raises(ValueError, match="^eps must be >= 0.0, got -1"):
        check_settings(dict(settings, eps=-1), non_negative=("lr", "eps"))
    with pytest.raises(ValueError, match="^nesterov must be True or False, got 1"):
        check_settings(dict(settings, nesterov=1), flags=("nesterov",))
    with pytest.raises(ValueError, match="^lr must be finite"):
        optim.RMSprop(nn.Linear(1, 1).parameters(), lr=float("nan"))
