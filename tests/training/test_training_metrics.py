"""Metrics, evaluate and predict, checked against hand-computed values."""

import numpy as np
import pytest

import minidl as md
from minidl import nn
from minidl.training import metrics as M

SCORES = np.array([[0.9, 0.1, 0.0],    # predicts 0, target 0
                   [0.2, 0.7, 0.1],    # predicts 1, target 1
                   [0.6, 0.3, 0.1],    # predicts 0, target 2 (2 is ranked third)
                   [0.1, 0.5, 0.4]],   # predicts 1, target 2 (2 is ranked second)
                  np.float32)
TARGETS = np.array([0, 1, 2, 2])


def result(metric, outputs=SCORES, targets=TARGETS, split=2):
    metric.reset()
    for start in range(0, len(targets), split):  # accumulated over batches
        metric.update(outputs[start:start + split], targets[start:start + split])
    return metric.result()


def test_accuracy_and_top_k():
    assert result(M.Accuracy()) == 0.5
    assert result(M.TopKAccuracy(k=2)) == 0.75
    assert result(M.TopKAccuracy(k=3)) == 1.0
    assert M.get_metric("top_k_accuracy").k == 5


def test_precision_recall_f1_macro_by_hand():
    # class 0: TP 1, predicted 2, actual 1; class 1: TP 1, predicted 2, actual 1;
    # class 2: TP 0, predicted 0, actual 2
    assert result(M.Precision()) == pytest.approx((0.5 + 0.5 + 0.0) / 3)
    assert result(M.Recall()) == pytest.approx((1.0 + 1.0 + 0.0) / 3)
    assert result(M.F1Score()) == pytest.approx((2 / 3 + 2 / 3 + 0.0) / 3)
    assert result(M.F1Score(average="micro")) == pytest.approx(0.5)


def test_binary_scores_use_the_positive_class():
    scores = np.array([0.9, 0.8, 0.2, 0.6], np.float32)
    targets = np.array([1, 0, 0, 1])
    assert result(M.Precision(), scores, targets) == pytest.approx(2 / 3)
    assert result(M.Recall(), scores, targets) == 1.0
    assert result(M.Accuracy(), scores, targets) == 0.75


def test_regression_errors():
    outputs = np.array([[1.0], [2.0], [4.0]], np.float32)
    targets = np.array([[1.0], [3.0], [1.0]], np.float32)
    assert result(M.MeanAbsoluteError(), outputs, targets) == pytest.approx(4 / 3)
    assert result(M.MeanSquaredError(), outputs, targets) == pytest.approx(10 / 3)


def test_unknown_metric_is_named():
    with pytest.raises(ValueError, match="unknown metric 'auroc'"):
        M.get_metric("auroc")


def test_evaluate_and_predict_functions_match_a_manual_pass():
    md.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Dropout(0.5), nn.ReLU(), nn.Linear(8, 3))
    x = np.random.default_rng(0).normal(size=(50, 4)).astype(np.float32)
    y = np.random.default_rng(1).integers(0, 3, 50)
    model.train()
    predictions = md.predict(model, x, batch_size=7)
    assert model.training  # the mode is put back
    model.eval()
    with md.no_grad():
        expected = model(md.tensor(x)).numpy()
    np.testing.assert_allclose(predictions, expected, rtol=1e-5, atol=1e-6)
    results = md.evaluate(model, (x, y), metrics=["accuracy", "f1"], batch_size=16,
                          loss_fn=nn.CrossEntropyLoss())
    assert results["accuracy"] == pytest.approx((expected.argmax(1) == y).mean())
    assert set(results) == {"loss", "accuracy", "f1"}
    assert md.evaluate(model, (x, y)) == {"accuracy": results["accuracy"]}
    with pytest.raises(ValueError, match="give metrics= or loss_fn="):
        md.evaluate(model, (x, x[:, :3]))
