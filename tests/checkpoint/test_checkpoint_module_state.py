"""A checkpoint checks every tracked module against the file (through
Module.check_state_dict) before it loads anything: a mismatch changes no object."""

import numpy as np
import pytest

from minidl import nn, optim
from minidl.checkpoint import Checkpoint, StateMismatchError


def objects(model):
    return {"model": model, "optimizer": optim.SGD(model.parameters(), lr=0.1, momentum=0.9)}


def values_of(tracked):
    return {name: value.copy() for name, value in tracked["model"].state_dict().items()}


@pytest.mark.parametrize("target,why", [
    (lambda: nn.Sequential(nn.Linear(3, 4)), "unexpected keys: 1.weight"),
    (lambda: nn.Sequential(nn.Linear(3, 4), nn.Linear(4, 2), nn.Linear(2, 2)),
     "missing keys: 2.weight"),
    (lambda: nn.Sequential(nn.Linear(3, 4), nn.Linear(4, 5)), r"1.weight: shape \(2, 4\)"),
    (lambda: nn.Sequential(nn.Linear(3, 4), nn.Linear(4, 2)).to(dtype=np.int32),
     "dtype float32 in the state_dict cannot be copied into int32"),
], ids=["unexpected", "missing", "shape", "dtype"])
def test_restore_refuses_a_module_that_does_not_fit_and_changes_nothing(tmp_path, target, why):
    path = tmp_path / "c.mdl"
    Checkpoint(**objects(nn.Sequential(nn.Linear(3, 4), nn.Linear(4, 2)))).save(path)
    tracked = objects(target())
    before = values_of(tracked)
    with pytest.raises(StateMismatchError, match=f"module 'model' does not match the saved "
                                                 f"state: (?s:.*){why}"):
        Checkpoint(**tracked).restore(path)
    for name, value in tracked["model"].state_dict().items():
        np.testing.assert_array_equal(value, before[name])
        assert value.dtype == before[name].dtype
