"""md.fit: the training loop, its history, callbacks and argument checks."""

import numpy as np
import pytest

import minidl as md
from minidl import nn, optim
from minidl.data import ArrayDataset, DataReader
from minidl.datasets import load_digits
from minidl.training import Callback, EarlyStopping, ModelCheckpoint


def small_digits_setup(seed=0, lr=1e-2):
    md.manual_seed(seed)
    x, y = load_digits("train")
    model = nn.Sequential(nn.Flatten(), nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 10))
    opt = optim.Adam(model.parameters(), lr=lr)
    reader = DataReader(ArrayDataset(x, y), batch_size=64, shuffle=True, seed=seed)
    return model, opt, reader


def test_fit_learns_digits_and_records_one_history_row_per_epoch():
    model, opt, reader = small_digits_setup()
    test = load_digits("test")
    history = md.fit(model, nn.CrossEntropyLoss(), opt, reader, epochs=4, val_data=test,
                     progress=False)
    assert len(history) == 4
    assert history.steps == [len(reader) * (e + 1) for e in range(4)]
    assert set(history.metrics) == {"loss", "accuracy", "val_loss", "val_accuracy"}
    assert history["loss"][-1] < history["loss"][0]
    assert history["val_accuracy"][-1] > 0.9


def test_small_cnn_reaches_high_test_accuracy_on_digits():
    md.manual_seed(0)
    x, y = load_digits("train")
    model = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                          nn.MaxPool2d(2), nn.Flatten(), nn.Linear(8 * 4 * 4, 10))
    opt = optim.Adam(model.parameters(), lr=1e-2)
    reader = DataReader(ArrayDataset(x, y), batch_size=32, shuffle=True, seed=0)
    md.fit(model, nn.CrossEntropyLoss(), opt, reader, epochs=5, progress=False)
    tx, ty = load_digits("test")
    model.eval()
    with md.no_grad():
        accuracy = (model(md.tensor(tx)).argmax(axis=1).numpy() == ty).mean()
    assert accuracy >= 0.93


def test_steps_mode_stops_mid_epoch_and_records_the_partial_epoch():
    model, opt, reader = small_digits_setup()
    history = md.fit(model, nn.CrossEntropyLoss(), opt, reader, steps=5, progress=False)
    assert reader.epoch == 0 and reader.position == 5 * 64
    assert history.steps == [5]


def test_scheduler_is_stepped_once_per_optimizer_step():
    model, opt, reader = small_digits_setup()
    sched = optim.lr_scheduler.StepLR(opt, step_size=3, gamma=0.5)
    md.fit(model, nn.CrossEntropyLoss(), opt, reader, steps=7, scheduler=sched, progress=False)
    assert opt.param_groups[0]["lr"] == pytest.approx(1e-2 * 0.25)


def test_early_stopping_ends_the_run_when_the_metric_stops_improving():
    class WorseningLoss(Callback):
        def on_epoch_end(self, trainer, epoch, logs):
            logs["val_loss"] = float(epoch)  # gets worse every epoch

    model, opt, reader = small_digits_setup()
    stopper = EarlyStopping(monitor="val_loss", patience=1)
    history = md.fit(model, nn.CrossEntropyLoss(), opt, reader, epochs=10,
                     callbacks=[WorseningLoss(), stopper], progress=False)
    assert len(history) == 2 and stopper.stopped_epoch == 1


def test_early_stopping_with_a_flat_metric_runs_patience_plus_one_epochs_as_keras():
    class FlatLoss(Callback):
        def on_epoch_end(self, trainer, epoch, logs):
            logs["val_loss"] = 1.0

    model, opt, reader = small_digits_setup()
    stopper = EarlyStopping(monitor="val_loss", patience=2)
    history = md.fit(model, nn.CrossEntropyLoss(), opt, reader, epochs=10,
                     callbacks=[FlatLoss(), stopper], progress=False)
    assert len(history) == 3 and stopper.stopped_epoch == 2


def test_model_checkpoint_saves_only_improvements(tmp_path):
    model, opt, reader = small_digits_setup()
    saver = ModelCheckpoint(str(tmp_path / "best-{epoch}.mdl"), monitor="val_loss",
                            save_best_only=True)
    md.fit(model, nn.CrossEntropyLoss(), opt, reader, epochs=3, val_data=load_digits("test"),
           callbacks=[saver], progress=False)
    assert saver.saved and all((tmp_path / p).exists() for p in saver.saved)
    reloaded = md.load_model(saver.saved[-1])
    x = md.tensor(load_digits("test")[0][:5])
    model.eval()
    reloaded.eval()
    if saver.saved[-1].endswith("best-3.mdl"):
        np.testing.assert_array_equal(reloaded(x).numpy(), model(x).numpy())


@pytest.mark.parametrize("options, message", [
    ({}, "exactly one of epochs= and steps="),
    ({"epochs": 1, "steps": 1}, "exactly one of epochs= and steps="),
    ({"steps": -1}, "steps must be >= 0"),
    ({"epochs": 1, "callbacks": [object()]}, "Callback instances"),
])
def test_bad_arguments_are_named(options, message):
    model, opt, reader = small_digits_setup()
    with pytest.raises((ValueError, TypeError), match=message):
        md.fit(model, nn.CrossEntropyLoss(), opt, reader, progress=False, **options)


def test_plot_is_written_when_matplotlib_is_available(tmp_path):
    pytest.importorskip("matplotlib")
    model, opt, reader = small_digits_setup()
    md.fit(model, nn.CrossEntropyLoss(), opt, reader, epochs=2, progress=False,
           plot_path=tmp_path / "history.png")
    assert (tmp_path / "history.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


class CrashAt(Callback):
    """Simulates a crash: raises once training reaches ``step``."""

    def __init__(self, step):
        self.step = step

    def on_step_end(self, trainer, step, logs):
        if step == self.step:
            raise KeyboardInterrupt(f"crash at step {step}")


def run_with_checkpoints(run_dir, crash_at=None, epochs=3):
    model, opt, reader = small_digits_setup()
    sched = optim.lr_scheduler.StepLR(opt, step_size=10, gamma=0.9)
    callbacks = [EarlyStopping(monitor="val_loss", patience=10)]
    if crash_at is not None:
        callbacks.append(CrashAt(crash_at))
    else:
        callbacks.append(Callback())
    history = md.fit(model, nn.CrossEntropyLoss(), opt, reader, epochs=epochs, scheduler=sched,
                     val_data=load_digits("test"), callbacks=callbacks,
                     checkpoint_dir=str(run_dir), save_every_steps=7, progress=False)
    return model, opt, reader, history


def test_a_crashed_fit_rerun_with_the_same_call_ends_bitwise_equal_to_an_uninterrupted_one(
        tmp_path):
    model_a, opt_a, reader_a, history_a = run_with_checkpoints(tmp_path / "straight")
    with pytest.raises(KeyboardInterrupt):
        run_with_checkpoints(tmp_path / "crashed", crash_at=40)
    model_b, opt_b, reader_b, history_b = run_with_checkpoints(tmp_path / "crashed")
    for (name, a), (_, b) in zip(model_a.state_dict().items(), model_b.state_dict().items()):
        assert a.tobytes() == b.tobytes(), name
    state_a, state_b = opt_a.state_dict(), opt_b.state_dict()
    for index, slots in state_a["state"].items():
        for slot, value in slots.items():
            assert np.asarray(value).tobytes() == np.asarray(state_b["state"][index][slot]).tobytes()
    assert reader_a.state_dict() == reader_b.state_dict()
    assert history_a.metrics == history_b.metrics and history_a.steps == history_b.steps


def test_rerunning_a_finished_fit_restores_and_trains_no_further(tmp_path):
    model, _, _, history = run_with_checkpoints(tmp_path / "run", epochs=1)
    again, _, _, history_again = run_with_checkpoints(tmp_path / "run", epochs=1)
    for a, b in zip(model.state_dict().values(), again.state_dict().values()):
        assert a.tobytes() == b.tobytes()
    assert history_again.steps == history.steps


# -- Keras-style arguments ---------------------------------------------------------------------

def test_fit_takes_arrays_with_validation_split_and_metrics_and_returns_keras_history():
    md.manual_seed(0)
    x, y = load_digits("train")
    model = nn.Sequential(nn.Flatten(), nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 10))
    opt = optim.Adam(model.parameters(), lr=1e-2)
    trainer = md.Trainer(model, nn.CrossEntropyLoss(), opt, (x, y), batch_size=50, epochs=2,
                         validation_split=0.2, shuffle=False, metrics=["accuracy", "f1"],
                         progress=False)
    history = trainer.run()
    held_out = int(len(y) * 0.2)
    assert trainer.reader.batch_size == 50 and len(trainer.reader) == -(-(len(y) - held_out) // 50)
    assert len(trainer.validation_data[1]) == held_out
    np.testing.assert_array_equal(trainer.validation_data[1], y[-held_out:])
    assert set(history.history) == {"loss", "accuracy", "f1", "val_loss", "val_accuracy",
                                    "val_f1"}
    assert history.history["val_f1"][-1] > 0.8 and history.history["f1"][-1] > 0.8
    again = trainer.evaluate(trainer.validation_data)
    assert again["accuracy"] == history.history["val_accuracy"][-1]
    assert trainer.predict(x[:3]).shape == (3, 10)


@pytest.mark.parametrize("options, error, message", [
    ({"batch_size": 16}, ValueError, "set the batch size on the reader"),
    ({"checkpoint": "d", "checkpoint_dir": "d"}, TypeError, "not both"),
    ({"save_every_steps": 5}, TypeError, "need checkpoint_dir"),
    ({"validation_split": 0.2}, ValueError, "validation_split needs"),
])
def test_conflicting_or_misplaced_arguments_are_named(options, error, message):
    model, opt, reader = small_digits_setup()
    with pytest.raises(error, match=message):
        md.fit(model, nn.CrossEntropyLoss(), opt, reader, epochs=1, progress=False, **options)


# -- progress output ---------------------------------------------------------------------------

def test_progress_off_a_terminal_is_one_plain_line_per_epoch(capsys):
    model, opt, reader = small_digits_setup()
    md.fit(model, nn.CrossEntropyLoss(), opt, reader, epochs=3, val_data=load_digits("test"))
    out = capsys.readouterr().out
    assert "\r" not in out
    lines = out.splitlines()
    assert len(lines) == 3
    assert all(line.startswith(f"epoch {i + 1}/3 - {len(reader)} steps - ")
               for i, line in enumerate(lines))
    assert "val_accuracy" in lines[-1]


def test_progress_on_a_terminal_shows_a_bar_and_a_separate_summary_line(monkeypatch):
    pytest.importorskip("tqdm")
    import io
    import sys

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    terminal = Terminal()
    monkeypatch.setattr(sys, "stdout", terminal)
    model, opt, reader = small_digits_setup()
    md.fit(model, nn.CrossEntropyLoss(), opt, reader, epochs=2)
    text = terminal.getvalue()
    pieces = [p for chunk in text.split("\n") for p in chunk.split("\r")]
    bars = [p for p in pieces if "%|" in p]  # tqdm's bar: "epoch 1/2:  0%|   | 0/23 [...batch/s]"
    assert {b.split(":")[0] for b in bars} == {"epoch 1/2", "epoch 2/2"}
    assert all(f"/{len(reader)} [" in b and "batch/s" in b for b in bars)
    summaries = [p for p in pieces if " steps - " in p]
    assert [s.split(" - ")[0] for s in summaries] == ["epoch 1/2", "epoch 2/2"]
    assert text.endswith("\n")


def test_a_failure_during_training_carries_the_history_so_far():
    model, opt, reader = small_digits_setup()
    with pytest.raises(KeyboardInterrupt) as failure:
        md.fit(model, nn.CrossEntropyLoss(), opt, reader, epochs=5, progress=False,
               callbacks=[CrashAt(len(reader) * 2 + 3)])
    assert len(failure.value.history) == 2
