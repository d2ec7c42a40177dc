"""The Keras-style callbacks: what they do, and that their state survives a resume."""

import csv
import os

import pytest

import minidl as md
from minidl import nn, optim
from minidl.datasets import load_digits
from minidl.training import (
    Callback, CSVLogger, CheckpointConfig, LambdaCallback, LearningRateScheduler,
    ModelCheckpoint, ReduceLROnPlateau,
)

X, Y = load_digits("train")
X, Y = X[:256], Y[:256]
XV, YV = load_digits("test")


def setup(lr=1e-2):
    md.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(64, 16), nn.ReLU(), nn.Linear(16, 10))
    return model, optim.SGD(model.parameters(), lr=lr)


def fit(callbacks, epochs=3, **options):
    model, opt = setup()
    history = md.fit(model, nn.CrossEntropyLoss(), opt, (X, Y), batch_size=32, epochs=epochs,
                     callbacks=callbacks, progress=False, **options)
    return model, opt, history


class SetMetric(Callback):
    def __init__(self, values):
        self.values = values

    def on_epoch_end(self, trainer, epoch, logs):
        logs["val_loss"] = self.values[epoch]


def test_reduce_lr_on_plateau_cuts_the_rate_after_patience_epochs():
    rates = []
    record = LambdaCallback(on_epoch_end=lambda e, logs: rates.append(opt_rate()))
    model, opt = setup(lr=0.1)

    def opt_rate():
        return opt.param_groups[0]["lr"]

    md.fit(model, nn.CrossEntropyLoss(), opt, (X, Y), batch_size=32, epochs=6, progress=False,
           callbacks=[SetMetric([1.0, 0.5, 0.5, 0.5, 0.5, 0.5]),
                      ReduceLROnPlateau(factor=0.5, patience=2, min_lr=0.03), record])
    assert rates == pytest.approx([0.1, 0.1, 0.1, 0.05, 0.05, 0.03])


def test_rate_callbacks_refuse_a_scheduler():
    model, opt = setup()
    sched = optim.lr_scheduler.StepLR(opt, step_size=1)
    with pytest.raises(ValueError, match="scheduler"):
        md.fit(model, nn.CrossEntropyLoss(), opt, (X, Y), epochs=1, scheduler=sched,
               callbacks=[ReduceLROnPlateau()], progress=False)


def test_learning_rate_scheduler_sets_the_rate_each_epoch():
    seen = []
    model, opt = setup(lr=1.0)
    md.fit(model, nn.CrossEntropyLoss(), opt, (X, Y), batch_size=32, epochs=3, progress=False,
           callbacks=[LearningRateScheduler(lambda epoch, lr: 0.1 / (epoch + 1)),
                      LambdaCallback(on_epoch_begin=lambda e: seen.append(
                          opt.param_groups[0]["lr"]))])
    assert seen == pytest.approx([0.1, 0.05, 0.1 / 3])


def test_lambda_callback_hooks_run_with_keras_signatures():
    events = []
    fit([LambdaCallback(on_train_begin=lambda: events.append("begin"),
                        on_batch_end=lambda step, logs: events.append(("step", step)),
                        on_epoch_end=lambda epoch, logs: events.append(("epoch", epoch)),
                        on_train_end=lambda: events.append("end"))], epochs=2)
    assert events[0] == "begin" and events[-1] == "end"
    assert events.count(("epoch", 0)) == 1 and ("step", 16) in events and len(events) == 20


def test_csv_logger_writes_one_row_per_epoch_and_is_not_duplicated_by_a_resume(tmp_path):
    path = tmp_path / "log.csv"

    class CrashAt(Callback):
        def on_step_end(self, trainer, step, logs):
            if step == 20:
                raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):  # epochs 1 and 2 logged, checkpoint at step 15
        fit([CSVLogger(path), CrashAt()], epochs=3, validation_data=(XV, YV),
            checkpoint=CheckpointConfig(tmp_path / "run", save_every_steps=15))
    _, _, history = fit([CSVLogger(path), Callback()], epochs=3, validation_data=(XV, YV),
                        checkpoint=CheckpointConfig(tmp_path / "run", save_every_steps=15))
    rows = list(csv.reader(open(path)))
    assert rows[0] == ["epoch", "accuracy", "loss", "val_accuracy", "val_loss"]
    assert [r[0] for r in rows[1:]] == ["0", "1", "2"]
    assert [float(r[2]) for r in rows[1:]] == pytest.approx(history.history["loss"])


def test_model_checkpoint_every_n_batches_weights_only_and_visible_to_latest_checkpoint(tmp_path):
    saver = ModelCheckpoint(tmp_path / "w-{epoch}-{batch}", save_weights_only=True, save_freq=5)
    model, _, _ = fit([saver], epochs=2)
    assert [os.path.basename(p) for p in saver.saved] == ["w-1-5.mdl", "w-2-2.mdl",
                                                          "w-2-7.mdl"]
    assert md.latest_checkpoint(tmp_path) == saver.saved[-1]
    weights = md.load(saver.saved[-1])
    assert set(weights) == set(model.state_dict())


def test_model_checkpoint_best_only_saves_improvements_of_the_monitored_metric(tmp_path):
    saver = ModelCheckpoint(tmp_path / "best-{epoch}.mdl", save_best_only=True)
    fit([SetMetric([3.0, 2.0, 2.5, 1.0]), saver], epochs=4)
    assert [os.path.basename(p) for p in saver.saved] == ["best-1.mdl", "best-2.mdl",
                                                          "best-4.mdl"]
    assert isinstance(md.load_model(saver.saved[-1]), nn.Module)


@pytest.mark.parametrize("state_file", ["state-8.mdl", "state-12.mdl"])  # epoch end, middle
def test_model_checkpoint_with_training_state_resumes_bitwise(tmp_path, state_file):
    saver = ModelCheckpoint(tmp_path / "state-{step}.mdl", save_freq=4, save_training_state=True)
    straight, _, straight_history = fit([saver], epochs=3, validation_data=(XV, YV))
    resumed, _, history = fit([ModelCheckpoint(tmp_path / "other-{step}.mdl", save_freq=4)],
                              epochs=3, validation_data=(XV, YV),
                              checkpoint=CheckpointConfig(tmp_path / "run",
                                                          restore_from=tmp_path / state_file))
    for a, b in zip(straight.state_dict().values(), resumed.state_dict().values()):
        assert a.tobytes() == b.tobytes()
    assert history.history == straight_history.history and history.steps == [8, 16, 24]
