"""Property tests: any value round-trips exactly; any damage to a file is either
detected (CheckpointError) or harmless (exactly the original comes back)."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import minidl.io as mio
from minidl.testing import arrays, as_saved, assert_same_value, mutations, values

FAST = settings(max_examples=60, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


@FAST
@given(value=values())
def test_any_value_round_trips(tmp_path, value):
    path = tmp_path / "v.mdl"
    mio.save(value, path)
    assert_same_value(mio.load(path), as_saved(value))
    assert_same_value(mio.load(path, mmap=True, verify=True), as_saved(value))


@FAST
@given(array=arrays(max_dims=4, max_side=6))
def test_any_array_round_trips(tmp_path, array):
    mio.save(array, tmp_path / "a.mdl")
    assert_same_value(mio.load(tmp_path / "a.mdl"), array)


def _load_or_refuse(path, original, **kw):
    try:
        loaded = mio.load(path, **kw)
    except mio.CheckpointError as error:
        assert str(path) in str(error)
        return False
    assert_same_value(loaded, as_saved(original))
    return True


REFERENCE_VALUE = {"w": np.arange(40, dtype=np.float32).reshape(5, 8), "b": np.array([1, 2], ">i2"),
                   "meta": {"step": 3, "lr": 0.1, "name": "run"}, "flags": [True, None]}


@pytest.fixture(scope="module")
def reference_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("ref") / "ref.mdl"
    mio.save(REFERENCE_VALUE, path)
    return path.read_bytes()


@settings(max_examples=300, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(mutation=mutations())
def test_mutated_files_are_refused_or_identical(tmp_path, reference_file, mutation):
    path = tmp_path / "m.mdl"
    path.write_bytes(mutation.apply(reference_file))
    _load_or_refuse(path, REFERENCE_VALUE)


@settings(max_examples=100, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(mutation=mutations(), mmap=st.booleans())
def test_mutated_files_never_escape_as_other_errors_lazily(tmp_path, reference_file, mutation, mmap):
    path = tmp_path / "m.mdl"
    path.write_bytes(mutation.apply(reference_file))
    try:
        loaded = mio.load(path, mmap=mmap, verify=not mmap)
        # Memory-mapped arrays are read only when touched: reading every byte must not raise
        # anything either (unverified, a flipped data byte is simply a different value).
        touched = _touch_every_array(loaded)
    except mio.CheckpointError as error:
        assert str(path) in str(error)
        return
    assert touched == _touch_every_array(REFERENCE_VALUE)


def _touch_every_array(value) -> int:
    """Read every byte of every array in ``value``; how many arrays there were."""
    if isinstance(value, np.ndarray):
        value.tobytes()
        return 1
    if isinstance(value, dict):
        return sum(_touch_every_array(item) for item in value.values())
    if isinstance(value, (list, tuple)):
        return sum(_touch_every_array(item) for item in value)
    return 0


def test_every_single_bit_flip_in_prelude_and_header(tmp_path, reference_file):
    """Exhaustive over the part of the file that is parsed before any check of data."""
    header_end = 64 + int.from_bytes(reference_file[16:24], "little")
    path = tmp_path / "f.mdl"
    harmless = 0
    for position in range(header_end):
        for bit in range(8):
            damaged = bytearray(reference_file)
            damaged[position] ^= 1 << bit
            path.write_bytes(bytes(damaged))
            harmless += _load_or_refuse(path, REFERENCE_VALUE)
    # Only the minor version's bits may be flipped harmlessly (newer minor: still readable).
    assert harmless <= 16
