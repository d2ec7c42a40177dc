"""Module.check_state_dict: the checks of load_state_dict, with nothing changed, so a caller
(a checkpoint restoring several objects) can check every module before loading any."""

import numpy as np
import pytest

from minidl import nn
from minidl.nn.module import StateDictMismatchError


def model():
    return nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4))


def good_state():
    return {name: np.full_like(value, 0.5) for name, value in model().state_dict().items()}


def values_of(module):
    return {name: value.copy() for name, value in module.state_dict().items()}


def mismatch(name):
    state = good_state()
    if name == "missing":
        del state["0.weight"]
    elif name == "unexpected":
        state["2.weight"] = np.zeros(3, np.float32)
    elif name == "shape":
        state["0.weight"] = np.zeros((3, 4), np.float32)
    elif name == "dtype":
        state["1.running_mean"] = np.zeros(4, np.complex64)
    elif name == "not an array":
        state["0.bias"] = [[1.0], [2.0, 3.0]]
    return state


EXPECTED = {"missing": "missing keys: 0.weight", "unexpected": "unexpected keys: 2.weight",
            "shape": r"0.weight: shape \(3, 4\) in the state_dict, \(4, 3\) in the model",
            "dtype": "1.running_mean: dtype complex64 in the state_dict cannot be copied",
            "not an array": "0.bias: not an array"}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_check_refuses_what_load_refuses_and_changes_nothing(name):
    module = model()
    before = values_of(module)
    with pytest.raises(StateDictMismatchError, match=EXPECTED[name]):
        module.check_state_dict(mismatch(name))
    with pytest.raises(StateDictMismatchError, match=EXPECTED[name]):
        module.load_state_dict(mismatch(name))
    for key, value in module.state_dict().items():
        np.testing.assert_array_equal(value, before[key])


def test_every_problem_is_listed_at_once():
    state = mismatch("shape")
    del state["0.bias"]
    state["extra"] = np.zeros(1)
    with pytest.raises(StateDictMismatchError) as caught:
        model().check_state_dict(state)
    message = str(caught.value)
    assert "missing keys: 0.bias" in message and "unexpected keys: extra" in message
    assert "0.weight: shape" in message


def test_a_fitting_state_passes_and_is_not_loaded():
    module = model()
    before = values_of(module)
    keys = module.check_state_dict(good_state())
    assert keys.missing_keys == [] and keys.unexpected_keys == []
    np.testing.assert_array_equal(module.state_dict()["0.weight"], before["0.weight"])


def test_non_strict_reports_names_but_still_refuses_shapes():
    keys = model().check_state_dict(mismatch("missing") | {"extra": 1}, strict=False)
    assert keys.missing_keys == ["0.weight"] and keys.unexpected_keys == ["extra"]
    with pytest.raises(StateDictMismatchError, match="0.weight: shape"):
        model().check_state_dict(mismatch("shape"), strict=False)


def test_assign_needs_the_exact_dtype():
    state = {name: value.astype(np.float64) if value.dtype == np.float32 else value
             for name, value in good_state().items()}
    model().check_state_dict(state)  # float64 copies into float32
    with pytest.raises(StateDictMismatchError, match="dtype float64 in the state_dict, float32"):
        model().check_state_dict(state, assign=True)


def test_a_state_that_is_not_a_mapping_is_a_type_error():
    with pytest.raises(TypeError, match="mapping"):
        model().check_state_dict([("0.weight", np.zeros((4, 3)))])
