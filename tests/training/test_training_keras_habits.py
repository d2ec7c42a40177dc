"""What Keras users bring to fit: one-hot targets for the metrics (as cross_entropy takes them),
and names for the loss and the optimizer."""

import numpy as np
import pytest

import minidl as md
from minidl import nn, optim
from minidl.datasets import load_digits
from minidl.training.metrics import Accuracy, F1Score, TopKAccuracy

X, Y = load_digits("train")
X, Y = X[:64], Y[:64]
ONE_HOT = np.eye(10, dtype=np.float32)[Y]


def test_class_metrics_read_one_hot_targets_as_their_classes():
    scores = np.random.default_rng(0).standard_normal((64, 10)).astype(np.float32)
    for metric_class in (Accuracy, F1Score, TopKAccuracy):
        by_index, by_one_hot = metric_class(), metric_class()
        by_index.update(scores, Y)
        by_one_hot.update(scores, ONE_HOT)
        assert by_one_hot.result() == by_index.result()


@pytest.mark.parametrize("metrics", [["accuracy", "f1"], None])
def test_fit_and_evaluate_with_one_hot_targets_report_accuracy(metrics):
    md.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(64, 10))
    history = md.fit(model, nn.CrossEntropyLoss(), optim.SGD(model.parameters(), lr=0.05),
                     (X, ONE_HOT), batch_size=32, epochs=2, metrics=metrics, progress=False,
                     validation_data=(X, ONE_HOT))
    assert "accuracy" in history.history and "val_accuracy" in history.history
    by_index = md.evaluate(model, (X, Y), metrics=metrics)
    assert md.evaluate(model, (X, ONE_HOT), metrics=metrics) == by_index


def test_fit_takes_keras_names_for_the_loss_and_the_optimizer():
    md.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(64, 10))
    history = md.fit(model, "categorical_crossentropy", "adam", (X, Y), batch_size=32,
                     epochs=2, progress=False)
    md.manual_seed(0)
    same = nn.Sequential(nn.Flatten(), nn.Linear(64, 10))
    expected = md.fit(same, nn.CrossEntropyLoss(), optim.Adam(same.parameters(), lr=1e-3),
                      (X, Y), batch_size=32, epochs=2, progress=False)
    assert history.history == expected.history
    regression = nn.Linear(4, 1)
    md.fit(regression, "mse", "sgd", (np.ones((8, 4), np.float32), np.ones((8, 1), np.float32)),
           epochs=1, progress=False)


@pytest.mark.parametrize("loss, optimizer, message", [
    ("hinge", "adam", r"unknown loss 'hinge'; known names: .*nn\.CrossEntropyLoss\(\)"),
    ("mse", "lbfgs", r"unknown optimizer 'lbfgs'.*optim\.Adam\(model\.parameters\(\)"),
    (3, "adam", r"the loss must be a loss object .*got int"),
])
def test_unknown_names_say_what_fit_takes(loss, optimizer, message):
    model = nn.Linear(4, 1)
    with pytest.raises((ValueError, TypeError), match=message):
        md.fit(model, loss, optimizer, (np.ones((8, 4), np.float32), np.ones((8, 1))),
               epochs=1, progress=False)


def test_keras_metric_names_are_understood():
    scores = np.random.default_rng(1).standard_normal((64, 10)).astype(np.float32)
    targets_by_name = {"categorical_accuracy": ONE_HOT, "sparse_categorical_accuracy": Y,
                     "top_k_categorical_accuracy": ONE_HOT}
    for name, targets in targets_by_name.items():
        metric = md.training.metrics.get_metric(name)
        metric.update(scores, targets)
        reference = Accuracy() if "top_k" not in name else TopKAccuracy()
        reference.update(scores, Y)
        assert metric.result() == reference.result()
