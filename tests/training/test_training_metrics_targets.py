"""Metrics take the targets cross_entropy takes: class indices, or one-hot rows."""

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
