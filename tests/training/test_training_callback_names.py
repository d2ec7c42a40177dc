"""What callbacks make of the names and metrics users give them: ModelCheckpoint templates
with format fields, and metrics a run never computes (Keras warns and goes on)."""

import os

import pytest

import minidl as md
from minidl import nn, optim
from minidl.datasets import load_digits
from minidl.training import CheckpointConfig, EarlyStopping, ModelCheckpoint, ReduceLROnPlateau

X, Y = load_digits("train")
X, Y = X[:64], Y[:64]


def fit(callbacks, epochs=2, **options):
    md.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(64, 10))
    opt = optim.SGD(model.parameters(), lr=1e-2)
    md.fit(model, nn.CrossEntropyLoss(), opt, (X, Y), batch_size=32, epochs=epochs,
           callbacks=callbacks, progress=False, **options)
    return model


@pytest.mark.parametrize("template, first", [
    ("best-{epoch:02d}-{val_loss:.3f}", "best-01-"),
    ("weights.{epoch:02d}-{val_loss:.2f}", "weights.01-"),
])
def test_a_template_with_format_fields_gets_the_mdl_suffix(tmp_path, template, first):
    fit([ModelCheckpoint(tmp_path / template)], validation_data=(X, Y))
    names = sorted(os.listdir(tmp_path))
    assert len(names) == 2 and all(n.endswith(".mdl") for n in names)
    assert names[0].startswith(first)
    assert md.latest_checkpoint(tmp_path) is not None
    assert md.load_model(md.latest_checkpoint(tmp_path))  # a model file, as named


def test_a_template_with_its_own_suffix_keeps_it(tmp_path):
    fit([ModelCheckpoint(tmp_path / "m-{epoch}.weights", save_weights_only=True)])
    assert sorted(os.listdir(tmp_path)) == ["m-1.weights", "m-2.weights"]


@pytest.mark.parametrize("callback, consequence", [
    (lambda d: ModelCheckpoint(d / "best", save_best_only=True), "no file is saved"),
    (lambda d: EarlyStopping(patience=0), "will not stop training"),
    (lambda d: ReduceLROnPlateau(patience=0), "rate is left as it is"),
])
def test_a_monitored_metric_that_is_never_computed_is_said_once_and_training_goes_on(
        tmp_path, callback, consequence):
    with pytest.warns(UserWarning, match=rf"'val_loss' is not computed.*validation_data=.*"
                                         rf"{consequence}") as record:
        fit([callback(tmp_path)], epochs=3)
    assert len([w for w in record if "val_loss" in str(w.message)]) == 1
    assert record[0].filename == __file__
    assert not os.path.exists(tmp_path / "best.mdl")


def test_keep_best_by_a_metric_never_computed_is_said_once(tmp_path):
    with pytest.warns(UserWarning, match=r"monitor 'val_loss' is not among the metrics") as record:
        fit([], epochs=3, checkpoint=CheckpointConfig(tmp_path, monitor="val_loss", keep_best=1,
                                                      save_every_steps=1))
    assert len(record) == 1
