"""A restore that fails changes nothing: every object and the RNG stay as they were, and the
only exception is a CheckpointError naming the file."""

import os

import numpy as np
import pytest

import minidl as md
from minidl import nn
from minidl.checkpoint import Checkpoint, StateMismatchError
from minidl.io import (
    ChecksumMismatchError, CorruptFileError, MissingFileError, WrongKindError, read_header)

from checkpoint_helpers import Counter, assert_bitwise_equal, build, snapshot, train


@pytest.fixture
def saved(tmp_path):
    """A sound checkpoint of trained objects, and a different set of live objects."""
    source = build(seed=0)
    train(source, 5)
    path = tmp_path / "good.mdl"
    Checkpoint(**source).save(path, step=5)
    target = build(seed=1)
    train(target, 2)
    return path, target


def assert_untouched(target, path, error_type, match=None, **restore_options):
    before = snapshot(target)
    with pytest.raises(error_type, match=match) as caught:
        Checkpoint(**target).restore(path, **restore_options)
    assert isinstance(caught.value, md.CheckpointError)
    assert str(path) in str(caught.value)
    assert_bitwise_equal(snapshot(target), before)
    return caught.value


def test_missing_file(saved, tmp_path):
    _, target = saved
    assert_untouched(target, tmp_path / "nope.mdl", MissingFileError)


@pytest.mark.parametrize("keep", [0.1, 0.5, 0.9, 0.999])
def test_truncated_file(saved, tmp_path, keep):
    path, target = saved
    data = path.read_bytes()
    cut = tmp_path / "cut.mdl"
    cut.write_bytes(data[:int(len(data) * keep)])
    assert_untouched(target, cut, CorruptFileError)


def test_damaged_tensor_byte(saved, tmp_path):
    path, target = saved
    header = read_header(path)
    entry = next(e for e in header.entries if e.name.startswith("objects/optimizer"))
    data = bytearray(path.read_bytes())
    data[header.prelude.data_start + entry.offset] ^= 0x40
    bad = tmp_path / "bad.mdl"
    bad.write_bytes(bytes(data))
    assert_untouched(target, bad, ChecksumMismatchError)


def test_damaged_header_byte(saved, tmp_path):
    path, target = saved
    data = bytearray(path.read_bytes())
    data[80] ^= 0x01
    bad = tmp_path / "bad.mdl"
    bad.write_bytes(bytes(data))
    assert_untouched(target, bad, CorruptFileError)


def test_wrong_kind(saved, tmp_path):
    _, target = saved
    md.save({"w": np.zeros(3, np.float32)}, tmp_path / "values.mdl")
    assert_untouched(target, tmp_path / "values.mdl", WrongKindError)
    md.save_model(target["model"], tmp_path / "model.mdl")
    assert_untouched(target, tmp_path / "model.mdl", WrongKindError)


def test_tracked_object_missing_from_the_file(tmp_path):
    source = build()
    Checkpoint(model=source["model"], optimizer=source["optimizer"]).save(tmp_path / "c.mdl")
    target = build(seed=2)
    error = assert_untouched(target, tmp_path / "c.mdl", StateMismatchError)
    assert "scheduler" in str(error) and "counter" in str(error)


def test_untracked_objects_in_the_file_strict_and_not(saved):
    path, target = saved
    partial = {"model": target["model"], "reader": target["reader"]}
    error = assert_untouched(partial, path, StateMismatchError)
    assert "optimizer" in str(error) and "strict=False" in str(error)
    info = Checkpoint(**partial).restore(path, strict=False)
    assert info.skipped == ("optimizer", "scheduler", "counter")
    assert info.restored == ("model", "reader")


def test_mis_shaped_model(saved):
    path, target = saved
    md.manual_seed(0)
    target["model"] = nn.Sequential(nn.Linear(6, 13), nn.BatchNorm1d(13), nn.ReLU(),
                                    nn.Dropout(0.25), nn.Linear(13, 3))
    error = assert_untouched(target, path, StateMismatchError)
    assert "0.weight" in str(error) and "(12, 6)" in str(error)


class Picky(Counter):
    """Refuses states from five or more steps, after scribbling on itself (a careless
    load_state_dict): the rollback must undo the scribble with the saved snapshot."""

    def load_state_dict(self, state):
        self.count = -12345
        self.history[:] = np.nan
        if state["count"] >= 5:
            raise KeyError("no thanks")
        super().load_state_dict(state)


def test_late_failure_rolls_back_objects_already_loaded(saved):
    path, target = saved
    target["counter"] = Picky()
    target["counter"].count = 3
    error = assert_untouched(target, path, StateMismatchError)
    assert "counter" in str(error) and "no thanks" in str(error)
    assert target["counter"].count == 3


def test_invalid_rng_state_in_the_file(saved, tmp_path):
    _, target = saved
    staged = Checkpoint(**build()).stage(step=1)
    staged.header["rng"] = {"kind": "minidl.Generator/PCG64", "state": "zz"}
    Checkpoint.write(tmp_path / "badrng.mdl", staged)
    assert_untouched(target, tmp_path / "badrng.mdl", CorruptFileError, match="RNG")


def test_header_missing_a_checkpoint_field(saved, tmp_path):
    _, target = saved
    staged = Checkpoint(**build()).stage(step=1)
    del staged.header["objects"]
    staged.tensors.clear()
    Checkpoint.write(tmp_path / "noobjects.mdl", staged)
    assert_untouched(target, tmp_path / "noobjects.mdl", CorruptFileError, match="objects")


def test_directory_instead_of_a_file(saved, tmp_path):
    _, target = saved
    os.mkdir(tmp_path / "adir")
    assert_untouched(target, tmp_path / "adir", md.CheckpointError)


class Stubborn(Counter):
    """Refuses every state, even its own: rollback cannot help, and the error says so."""

    def load_state_dict(self, state):
        raise ValueError("never")


def test_failed_rollback_is_reported(saved):
    path, target = saved
    target["counter"] = Stubborn()
    with pytest.raises(StateMismatchError, match="rolling back also failed for counter"):
        Checkpoint(**target).restore(path)


class InterruptedThenStubborn(Counter):
    """Ctrl-C while its saved state loads; then refuses its own snapshot too."""

    def load_state_dict(self, state):
        raise ValueError("never") if hasattr(self, "interrupted") else self._interrupt()

    def _interrupt(self):
        self.interrupted = True
        raise KeyboardInterrupt


def test_a_rollback_that_fails_after_a_ctrl_c_is_reported_on_the_interrupt(saved):
    path, target = saved
    target["counter"] = InterruptedThenStubborn()
    with pytest.raises(KeyboardInterrupt) as caught:
        Checkpoint(**target).restore(path)
    notes = "\n".join(getattr(caught.value, "__notes__", []))
    assert "rolling back also failed for counter (ValueError: never)" in notes
    assert str(path) in notes


@pytest.mark.parametrize("every", [997, pytest.param(1, marks=pytest.mark.slow)])
@pytest.mark.parametrize("objects", ["with a user object", "minidl's own only"])
def test_a_ctrl_c_at_any_bytecode_of_a_restore_leaves_every_object_as_it_was(saved, every,
                                                                              objects):
    """Interrupted anywhere, a restore leaves the objects as they were (rolled back, with no
    rollback failing: an optimizer once broke for good) or, once done, fully restored. With
    minidl's own objects only, modules take the file's arrays and snapshots are not copied."""
    from minidl.testing.interrupts import call_interrupted, count_bytecodes

    path, target = saved
    if objects == "minidl's own only":
        source = build(seed=0)
        train(source, 5)
        del source["counter"], target["counter"]
        Checkpoint(**source).save(path, step=5)  # the file holds what is tracked
    checkpoint = Checkpoint(**target)
    before, undo = snapshot(target), path.with_name("before.mdl")
    checkpoint.save(undo, step=0)
    total = count_bytecodes(lambda: checkpoint.restore(path))
    restored = snapshot(target)
    # Reading and checking the file (most of the bytecodes) changes nothing; the default run
    # walks the last fifth, where the objects are loaded, the slow one every bytecode.
    first = 0 if every == 1 else total - total // 5
    for n in range(first, total, every):
        checkpoint.restore(undo)
        try:
            call_interrupted(n, lambda: checkpoint.restore(path))
        except KeyboardInterrupt as interrupt:
            assert not getattr(interrupt, "__notes__", None), (n, interrupt.__notes__)
            # Rolled back -- or, interrupted in the last bytecodes after every object was
            # loaded, restored: never some objects of each.
            now = snapshot(target)
            try:
                assert_bitwise_equal(now, before)
            except AssertionError:
                assert_bitwise_equal(now, restored)
        else:
            assert_bitwise_equal(snapshot(target), restored)
