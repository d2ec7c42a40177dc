"""Recovery under damage and hostile files: restore_latest falls back past any unusable
checkpoint, a restore is all-or-nothing even against Ctrl-C, and nothing but a
CheckpointError escapes."""

import os
import threading
import warnings

import pytest

import minidl as md
from minidl.checkpoint import Checkpoint, CheckpointManager
from minidl.testing.forging import rewrite_header

from checkpoint_helpers import Counter, assert_bitwise_equal, build, snapshot, train


def counter_manager(directory, **options):
    counter = Counter()
    return counter, CheckpointManager(Checkpoint(counter=counter), directory, **options)


def three_checkpoints(tmp_path):
    counter, manager = counter_manager(tmp_path, max_to_keep=None)
    for step in (1, 2, 3):
        counter.count = step * 10
        manager.save(step)
    return tmp_path / "ckpt-step00000003.mdl"


def restores_older_with_warning(tmp_path, why):
    fresh_counter, fresh = counter_manager(tmp_path)
    with pytest.warns(RuntimeWarning, match=f"ckpt-step00000003.mdl.*{why}"):
        assert fresh.restore_latest() == 2
    assert fresh_counter.count == 20


@pytest.mark.parametrize("byte", [10, 12, 13])  # the minor version and the flags
def test_a_flipped_prelude_bit_in_the_newest_falls_back(tmp_path, byte):
    newest = three_checkpoints(tmp_path)
    data = bytearray(newest.read_bytes())
    data[byte] ^= 0x02
    newest.write_bytes(bytes(data))
    restores_older_with_warning(tmp_path, "prelude")


def test_a_newest_file_of_another_kind_falls_back(tmp_path):
    newest = three_checkpoints(tmp_path)
    md.save({"count": 99}, newest)
    restores_older_with_warning(tmp_path, "not a 'checkpoint' file")


def test_a_newest_file_that_does_not_fit_falls_back(tmp_path):
    newest = three_checkpoints(tmp_path)
    Checkpoint(other=Counter()).save(newest, step=3)
    restores_older_with_warning(tmp_path, "holds no state")


def test_binary_map_keys_neither_break_the_manager_nor_restore(tmp_path):
    newest = three_checkpoints(tmp_path)

    def add_binary_key(tree):
        tree["metadata"][b"step"] = tree["metadata"].pop("step")
    rewrite_header(newest, add_binary_key)
    restores_older_with_warning(tmp_path, "not a string")


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_a_fifo_named_like_the_newest_checkpoint_is_skipped(tmp_path):
    newest = three_checkpoints(tmp_path)
    newest.unlink()
    os.mkfifo(newest)
    outcome = {}

    def resume():
        try:
            outcome["manager"] = counter_manager(tmp_path)
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                outcome["step"] = outcome["manager"][1].restore_latest()
            outcome["warnings"] = [str(w.message) for w in caught]
        except BaseException as exc:  # noqa: BLE001 - reported below
            outcome["error"] = exc

    thread = threading.Thread(target=resume, daemon=True)
    thread.start()
    thread.join(15)
    if thread.is_alive():
        os.close(os.open(newest, os.O_WRONLY | os.O_NONBLOCK))  # unblock it
        thread.join(5)
        pytest.fail("a FIFO blocked the manager")
    assert "error" not in outcome, outcome.get("error")
    assert outcome["step"] == 2
    assert any("not a regular file" in w for w in outcome["warnings"])


def test_a_checkpoint_deleted_while_restoring_makes_the_manager_look_again(tmp_path):
    """A trainer with max_to_keep=1 saves (and deletes the previous file) while an
    evaluator restores: the evaluator must find the new file, not give up."""
    counter, trainer = counter_manager(tmp_path, max_to_keep=1)
    counter.count = 10
    trainer.save(1)
    evaluator_counter, evaluator = counter_manager(tmp_path)
    original = evaluator.checkpoint._restore  # what restore_latest calls for each file
    calls = []

    def restore_racing_the_trainer(path, **options):
        calls.append(os.path.basename(path))
        if len(calls) == 1:  # the trainer commits step 2 and deletes step 1 right now
            counter.count = 20
            trainer.save(2)
        return original(path, **options)

    evaluator.checkpoint._restore = restore_racing_the_trainer
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a vanished file is not damage: no warning either
        assert evaluator.restore_latest() == 2
    assert evaluator_counter.count == 20
    assert calls == ["ckpt-step00000001.mdl", "ckpt-step00000002.mdl"]


class Interrupting:
    """A user object whose restore is interrupted by Ctrl-C (its rollback then succeeds)."""

    def __init__(self):
        self.interrupted = False

    def state_dict(self):
        return {"x": 1}

    def load_state_dict(self, state):
        if not self.interrupted:
            self.interrupted = True
            raise KeyboardInterrupt


def test_keyboard_interrupt_during_restore_rolls_everything_back(tmp_path):
    objects = build()
    path = tmp_path / "c.mdl"
    Checkpoint(**objects, late=Interrupting()).save(path, step=1)
    train(objects, 2)
    before = snapshot(objects)
    with pytest.raises(KeyboardInterrupt):
        Checkpoint(**objects, late=Interrupting()).restore(path)
    assert_bitwise_equal(snapshot(objects), before)


@pytest.mark.parametrize("key", ["__class__", "surprise"])
def test_unknown_param_group_keys_are_refused_and_leave_nothing_behind(tmp_path, key):
    objects = build()
    path = tmp_path / "c.mdl"
    Checkpoint(optimizer=objects["optimizer"]).save(path, step=1)

    def add_key(tree):
        group = tree["metadata"]["objects"]["optimizer"]["param_groups"][0]
        group[key] = 1
    rewrite_header(path, add_key)
    groups_before = [dict(g) for g in objects["optimizer"].param_groups]
    with pytest.raises(md.CheckpointError, match=f"unknown key '{key}'"):
        Checkpoint(optimizer=objects["optimizer"]).restore(path)
    assert [dict(g) for g in objects["optimizer"].param_groups] == groups_before


def test_a_changed_dtype_in_a_checkpoint_is_refused_and_changes_nothing(tmp_path):
    objects = build()
    path = tmp_path / "c.mdl"
    Checkpoint(model=objects["model"]).save(path, step=1)

    def to_int32(tree):
        for entry in tree["tensors"]:
            if entry["dtype"] == "float32":
                entry["dtype"] = "int32"
    rewrite_header(path, to_int32)
    before = snapshot({"model": objects["model"]})
    with pytest.raises(md.CheckpointError, match="checksum mismatch"):
        Checkpoint(model=objects["model"]).restore(path)
    assert_bitwise_equal(snapshot({"model": objects["model"]}), before)


def test_a_reader_manager_never_deletes_a_save_in_progress(tmp_path):
    """An evaluator's manager, created while the trainer writes (default is_writer=True),
    used to delete the trainer's temporary file: the trainer's save then failed."""
    from minidl.io import atomic

    counter, trainer = counter_manager(tmp_path)
    real_write = atomic.write_atomically
    started = []

    def write_while_an_evaluator_starts(path, write_fn, **options):
        def write(file):
            write_fn(file)
            started.append(counter_manager(tmp_path))  # the evaluator starts now
        real_write(path, write, **options)

    import minidl.io.writer as writer
    writer.write_atomically, saved = write_while_an_evaluator_starts, writer.write_atomically
    try:
        counter.count = 5
        trainer.save(1)
    finally:
        writer.write_atomically = saved
    assert started and trainer.checkpoints == [str(tmp_path / "ckpt-step00000001.mdl")]
    fresh_counter, fresh = counter_manager(tmp_path)
    assert fresh.restore_latest() == 1 and fresh_counter.count == 5


@pytest.mark.parametrize("header_step", [2, 2**63, 2**64 - 1])
def test_a_file_whose_header_step_differs_from_its_name_is_skipped(tmp_path, header_step):
    """A file named ...step00000003 that says step 2**63 inside used to restore as 2**63."""
    newest = three_checkpoints(tmp_path)

    def claim_step(tree):
        tree["metadata"]["step"] = header_step
    rewrite_header(newest, claim_step)
    restores_older_with_warning(tmp_path, "step")


def test_steps_are_bounded_on_save_and_file_names_with_absurd_steps_are_no_checkpoints(tmp_path):
    counter, manager = counter_manager(tmp_path)
    with pytest.raises(ValueError, match="step"):
        manager.save(2**63)
    with pytest.raises(ValueError, match="step"):
        Checkpoint(counter=counter).save(tmp_path / "x.mdl", step=2**63)
    three_checkpoints(tmp_path)
    # Names whose step no counter can hold are not checkpoints of the run at all.
    for digits in ("9" * 240, "9" * 20, str(2**63)):
        (tmp_path / f"ckpt-step{digits}.mdl").write_bytes(
            (tmp_path / "ckpt-step00000003.mdl").read_bytes())
    fresh_counter, fresh = counter_manager(tmp_path)
    assert fresh.restore_latest() == 3 and fresh_counter.count == 30
