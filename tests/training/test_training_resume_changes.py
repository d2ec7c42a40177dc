"""Resuming after harmless changes: callbacks added or removed, a rerun of a run started from a
chosen file, and the step and time save policies together."""

import os
import warnings

import pytest

import minidl as md
from minidl import nn, optim
from minidl.checkpoint import naming
from minidl.datasets import load_digits
from minidl.training import (
    Callback, CheckpointConfig, CSVLogger, EarlyStopping, LambdaCallback, ModelCheckpoint)

X, Y = load_digits("train")
X, Y = X[:128], Y[:128]  # 4 batches of 32 an epoch


def CrashAt(step):
    """A crash (an interrupt) once training reaches ``step``; a callback without state."""
    def crash(batch, logs):
        if batch == step:
            raise KeyboardInterrupt(f"crash at step {step}")
    return LambdaCallback(on_batch_end=crash)


class FlatValLoss(Callback):
    def on_epoch_end(self, trainer, epoch, logs):
        logs["val_loss"] = 1.0


def train(directory, callbacks, epochs=2, **config):
    md.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(64, 10))
    opt = optim.SGD(model.parameters(), lr=1e-2)
    config.setdefault("save_every_steps", 3)  # a crash at step 7 resumes from step 6
    md.fit(model, nn.CrossEntropyLoss(), opt, (X, Y), batch_size=32, epochs=epochs,
           callbacks=callbacks, progress=False,
           checkpoint=CheckpointConfig(directory, max_to_keep=None, **config))
    return model


def same_weights(a, b):
    return all(x.tobytes() == y.tobytes()
               for x, y in zip(a.state_dict().values(), b.state_dict().values()))


def test_adding_or_removing_a_stateless_callback_resumes_without_a_word(tmp_path):
    stopping = EarlyStopping(patience=5)
    with pytest.raises(KeyboardInterrupt):
        train(tmp_path, [FlatValLoss(), stopping, CrashAt(7)])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        resumed_stopping = EarlyStopping(patience=5)
        resumed = train(tmp_path, [CSVLogger(tmp_path / "log.csv"), FlatValLoss(),
                                   LambdaCallback(), resumed_stopping])
    assert resumed_stopping.wait == 1  # its state came back, though its position moved
    straight = train(tmp_path / "straight", [FlatValLoss(), EarlyStopping(patience=5)])
    assert same_weights(resumed, straight)


def test_a_changed_set_of_stateful_callbacks_follows_on_change(tmp_path):
    with pytest.raises(KeyboardInterrupt):
        train(tmp_path, [FlatValLoss(), EarlyStopping(patience=5), CrashAt(7)])
    before = sorted(os.listdir(tmp_path))
    with pytest.raises(ValueError, match=r"(?s)callbacks.*EarlyStopping.*ModelCheckpoint"):
        train(tmp_path, [FlatValLoss(), ModelCheckpoint(tmp_path / "m"), CrashAt(-1)],
              on_change="error")
    assert sorted(os.listdir(tmp_path)) == before  # refused before anything was restored
    kept = EarlyStopping(patience=5)
    with pytest.warns(UserWarning, match=r"(?s)ModelCheckpoint.*starts afresh") as record:
        train(tmp_path, [FlatValLoss(), kept, ModelCheckpoint(tmp_path / "m")])
    assert record[0].filename == __file__  # the warning points at the user's line
    assert kept.wait == 1  # "warn" restores the state that matches


def test_a_state_key_matches_a_callback_whatever_its_position(tmp_path):
    first, second = EarlyStopping(patience=7), EarlyStopping(patience=9, monitor="loss")
    first.state_key, second.state_key = "on-val", "on-loss"
    with pytest.raises(KeyboardInterrupt):
        train(tmp_path, [FlatValLoss(), first, second, CrashAt(7)])
    a, b = EarlyStopping(patience=7), EarlyStopping(patience=9, monitor="loss")
    a.state_key, b.state_key = "on-val", "on-loss"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        train(tmp_path, [FlatValLoss(), b, a])
    # Matched by position alone, each would take the other's best value and wait on it.
    assert (a.wait, b.wait) == (1, 0)


def test_continuing_from_a_training_state_file_with_other_callbacks(tmp_path):
    state_file = tmp_path / "state.mdl"
    train(tmp_path / "first", [ModelCheckpoint(state_file, save_training_state=True)],
          epochs=1)
    # The file holds the ModelCheckpoint's state, which this run does not continue: said once.
    with pytest.warns(UserWarning, match="ModelCheckpoint: in the checkpoint, not given now"):
        model = train(tmp_path / "second", [LambdaCallback()], restore_from=state_file)
    assert same_weights(model, train(tmp_path / "straight", []))


def test_a_rerun_of_a_run_started_from_a_chosen_file_continues_that_run(tmp_path):
    train(tmp_path, [])
    chosen = tmp_path / "ckpt-epoch0001-batch00003-step00000003.mdl"
    with pytest.raises(KeyboardInterrupt):
        train(tmp_path, [CrashAt(7)], restore_from=chosen)
    model = train(tmp_path, [], restore_from=chosen)  # the same script, run again
    runs = naming.run_prefixes("ckpt", os.listdir(tmp_path))
    assert runs == {"ckpt", "ckpt_2"}  # no third run redoing every step from the file
    assert same_weights(model, train(tmp_path / "straight", []))
    steps = [naming.parse_name("ckpt_2", n) for n in os.listdir(tmp_path)]
    assert sorted(p.step for p in steps if p) == [6, 8]


def test_override_accepts_a_changed_set_of_stateful_callbacks_quietly(tmp_path, capsys):
    with pytest.raises(KeyboardInterrupt):
        train(tmp_path, [FlatValLoss(), EarlyStopping(patience=5), CrashAt(7)])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        train(tmp_path, [FlatValLoss(), ModelCheckpoint(tmp_path / "m")], on_change="override")
    assert "continues with the callbacks given now" in capsys.readouterr().err


def test_callback_state_of_older_checkpoints_is_read_by_position_when_it_fits():
    from minidl.training.callbacks import CallbackStates
    stopping = EarlyStopping()
    states = CallbackStates([LambdaCallback(), stopping])
    states.load_state_dict({"states": [{}, {"best": 0.5, "wait": 2}]})  # one per callback
    assert (stopping.best, stopping.wait, states.changes) == (0.5, 2, [])
    other = CallbackStates([EarlyStopping()])
    other.load_state_dict({"states": [{}, {"best": 0.5, "wait": 2}]})  # another list
    assert other.changes == [
        "callbacks/callback at position 1: in the checkpoint, not given now (its state is "
        "dropped)",
        "callbacks/EarlyStopping: given now, not in the checkpoint (starts afresh)"]
