"""Metrics for ``evaluate`` and ``fit``: accumulated over batches, read once at the end.

Each metric keeps running sums (never the predictions themselves), so it costs the same on ten
batches or ten million; precision, recall and F1 keep a confusion matrix.  Outputs are what the
model returns: class scores of shape (N, C) with integer targets (N,) for classification (the
predicted class is the arg-max, so logits and probabilities give the same result), or one score
per sample, (N,) or (N, 1), with 0/1 targets for binary classification (positive when the score
is above ``threshold``: 0.5 for probabilities, 0.0 for logits). Class targets may also be
one-hot rows of the outputs' shape (N, C), as ``cross_entropy`` takes them: their class is the
row's arg-max (Keras's ``categorical_accuracy``).

By name: ``"accuracy"``, ``"top_k_accuracy"`` (k=5), ``"precision"``, ``"recall"``, ``"f1"``
(macro averages over the classes; the positive class for binary outputs), ``"mae"``, ``"mse"``.
Build the classes to choose ``k``, ``threshold`` or ``average``.
"""

from __future__ import annotations

import numpy as np


class Metric:
    """Base class: ``update(outputs, targets)`` per batch (NumPy arrays), ``result()`` at the
    end, ``reset()`` to start over.  ``name`` is the key in the logs.

    The running sums are the attributes named in ``state_fields``; ``state_dict()`` gives them
    as plain data, so ``fit`` can checkpoint a metric in the middle of an epoch.
    """

    name = "metric"
    state_fields: tuple[str, ...] = ()

    def state_dict(self) -> dict:
        return {field: getattr(self, field) for field in self.state_fields}

    def load_state_dict(self, state: dict) -> None:
        missing = [field for field in self.state_fields if field not in state]
        if missing:
            raise ValueError(f"{self.name}: metric state lacks {missing}")
        for field in self.state_fields:
            setattr(self, field, state[field])

    def reset(self) -> None:
        raise NotImplementedError

    def update(self, outputs: np.ndarray, targets: np.ndarray) -> None:
        raise NotImplementedError

    def result(self) -> float:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r})"


def _are_target_rows(outputs: np.ndarray, targets: np.ndarray) -> bool:
    """Whether ``targets`` are one row per sample over the classes of ``outputs`` (N, C)."""
    return outputs.ndim == 2 and outputs.shape[1] > 1 and targets.shape == outputs.shape


def _is_one_hot(outputs: np.ndarray, targets: np.ndarray) -> bool:
    return (_are_target_rows(outputs, targets) and bool(np.all((targets == 0) | (targets == 1)))
            and bool(np.all(targets.sum(axis=1) == 1)))


def class_indices(outputs: np.ndarray, targets) -> np.ndarray:
    """``targets`` as class indices: rows over the classes of ``outputs`` (one-hot, or
    smoothed labels) become their arg-max; other targets are returned as they are."""
    targets = np.asarray(targets)
    return targets.argmax(axis=1) if _are_target_rows(outputs, targets) else targets


def is_classification(outputs: np.ndarray, targets: np.ndarray) -> bool:
    """Whether ``outputs`` are class scores (N, C) for integer class ``targets`` (N,) or
    one-hot rows (N, C): then accuracy is meaningful and ``fit``/``evaluate`` report it
    without being asked. (Other float rows of that shape may be a regression's: not taken.)"""
    if _is_one_hot(outputs, targets):
        return True
    return outputs.ndim == 2 and targets.dtype.kind in "iu" and targets.shape == outputs.shape[:1]


def count_correct(scores: np.ndarray, targets: np.ndarray) -> int | None:
    """Correct predictions for class scores (N, C) and class targets; None for other outputs."""
    if not is_classification(scores, targets):
        return None
    return int((scores.argmax(axis=1) == class_indices(scores, targets)).sum())


def _is_binary(outputs: np.ndarray) -> bool:
    return outputs.ndim == 1 or (outputs.ndim == 2 and outputs.shape[1] == 1)


def _predicted_classes(outputs: np.ndarray, threshold: float) -> np.ndarray:
    if _is_binary(outputs):
        return (outputs.reshape(-1) > threshold).astype(np.int64)
    if outputs.ndim != 2:
        raise ValueError(f"classification metrics need outputs of shape (N, C) or (N,), got "
                         f"{outputs.shape}")
    return outputs.argmax(axis=1)


def _class_targets(targets: np.ndarray, count: int) -> np.ndarray:
    targets = np.asarray(targets).reshape(-1)
    if targets.shape[0] != count:
        raise ValueError(f"metric: {count} outputs but {targets.shape[0]} targets")
    if targets.dtype.kind == "f":
        if not np.all(targets == np.round(targets)):
            raise ValueError("classification metrics need integer class targets, got fractions")
        targets = targets.astype(np.int64)
    return targets


class Accuracy(Metric):
    """Fraction of samples whose predicted class equals the target."""

    name = "accuracy"
    state_fields = ("correct", "count")

    def __init__(self, threshold: float = 0.5):
        self.threshold = float(threshold)
        self.reset()

    def reset(self):
        self.correct, self.count = 0, 0

    def update(self, outputs, targets):
        predicted = _predicted_classes(outputs, self.threshold)
        targets = _class_targets(class_indices(outputs, targets), len(predicted))
        self.correct += int((predicted == targets).sum())
        self.count += len(predicted)

    def result(self):
        return self.correct / self.count if self.count else float("nan")


class TopKAccuracy(Metric):
    """Fraction of samples whose target is among the ``k`` highest scores."""

    state_fields = ("correct", "count")

    def __init__(self, k: int = 5):
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ValueError(f"TopKAccuracy: k must be a positive integer, got {k!r}")
        self.k = k
        self.name = "top_k_accuracy" if k == 5 else f"top_{k}_accuracy"
        self.reset()

    def reset(self):
        self.correct, self.count = 0, 0

    def update(self, outputs, targets):
        if outputs.ndim != 2:
            raise ValueError(f"{self.name} needs class scores of shape (N, C), got "
                             f"{outputs.shape}")
        targets = _class_targets(class_indices(outputs, targets), len(outputs))
        k = min(self.k, outputs.shape[1])
        # The target is in the top k when fewer than k classes score strictly higher than it.
        target_scores = outputs[np.arange(len(outputs)), targets]
        higher = (outputs > target_scores[:, None]).sum(axis=1)
        self.correct += int((higher < k).sum())
        self.count += len(outputs)

    def result(self):
        return self.correct / self.count if self.count else float("nan")


class _ConfusionMetric(Metric):
    """Precision, recall and F1 from one confusion matrix (rows: target, columns: predicted).

    ``average="macro"`` averages the per-class values (classes never seen nor predicted are
    left out); ``"micro"`` pools the counts (then all three equal accuracy); for binary
    outputs the value is the positive class's.
    """

    def __init__(self, average: str = "macro", threshold: float = 0.5):
        if average not in ("macro", "micro"):
            raise ValueError(f"{self.name}: average must be 'macro' or 'micro', got {average!r}")
        self.average, self.threshold = average, float(threshold)
        self.reset()

    def reset(self):
        self.confusion = np.zeros((0, 0), np.int64)
        self.binary = None

    def state_dict(self):
        return {"confusion": self.confusion.tolist(), "binary": self.binary}

    def load_state_dict(self, state):
        confusion = np.asarray(state["confusion"], np.int64)
        if confusion.ndim != 2 or confusion.shape[0] != confusion.shape[1]:
            confusion = np.zeros((0, 0), np.int64)  # an empty matrix is stored as []
        self.confusion, self.binary = confusion, state["binary"]

    def update(self, outputs, targets):
        predicted = _predicted_classes(outputs, self.threshold)
        targets = _class_targets(class_indices(outputs, targets), len(predicted))
        self.binary = _is_binary(outputs)
        classes = max(2 if self.binary else outputs.shape[1], self.confusion.shape[0],
                      int(targets.max(initial=-1)) + 1)
        if classes > self.confusion.shape[0]:
            grown = np.zeros((classes, classes), np.int64)
            grown[:self.confusion.shape[0], :self.confusion.shape[1]] = self.confusion
            self.confusion = grown
        np.add.at(self.confusion, (targets, predicted), 1)

    def _per_class(self):
        true_positive = np.diag(self.confusion).astype(np.float64)
        predicted = self.confusion.sum(axis=0).astype(np.float64)
        actual = self.confusion.sum(axis=1).astype(np.float64)
        return true_positive, predicted, actual

    def result(self):
        if self.confusion.size == 0:
            return float("nan")
        true_positive, predicted, actual = self._per_class()
        if self.binary:
            true_positive, predicted, actual = true_positive[1:2], predicted[1:2], actual[1:2]
        elif self.average == "micro":
            true_positive, predicted, actual = (true_positive.sum(keepdims=True),
                                                predicted.sum(keepdims=True),
                                                actual.sum(keepdims=True))
        else:
            seen = (predicted > 0) | (actual > 0)
            true_positive, predicted, actual = true_positive[seen], predicted[seen], actual[seen]
        values = self._from_counts(true_positive, predicted, actual)
        return float(values.mean()) if values.size else float("nan")

    @staticmethod
    def _ratio(numerator, denominator):
        # 0/0 counts as 0, as scikit-learn's zero_division=0: no predictions, no precision.
        return np.divide(numerator, denominator, out=np.zeros_like(numerator),
                         where=denominator > 0)


class Precision(_ConfusionMetric):
    """Of the samples predicted as a class, the fraction that belong to it."""

    name = "precision"

    def _from_counts(self, true_positive, predicted, actual):
        return self._ratio(true_positive, predicted)


class Recall(_ConfusionMetric):
    """Of the samples of a class, the fraction predicted as it."""

    name = "recall"

    def _from_counts(self, true_positive, predicted, actual):
        return self._ratio(true_positive, actual)


class F1Score(_ConfusionMetric):
    """Harmonic mean of precision and recall: 2·TP / (predicted + actual)."""

    name = "f1"

    def _from_counts(self, true_positive, predicted, actual):
        return self._ratio(2 * true_positive, predicted + actual)


class _ErrorMetric(Metric):
    state_fields = ("total", "count")

    def reset(self):
        self.total, self.count = 0.0, 0

    def update(self, outputs, targets):
        outputs = np.asarray(outputs, np.float64)
        targets = np.asarray(targets, np.float64)
        if outputs.shape != targets.shape and outputs.size == targets.size:
            targets = targets.reshape(outputs.shape)  # (N, 1) outputs against (N,) targets
        if outputs.shape != targets.shape:
            raise ValueError(f"{self.name}: outputs {outputs.shape} and targets "
                             f"{targets.shape} do not match")
        difference = outputs - targets
        self.total += float(self._error(difference).sum())
        self.count += difference.size

    def result(self):
        return self.total / self.count if self.count else float("nan")


class MeanAbsoluteError(_ErrorMetric):
    """Mean of |output - target| over every element."""

    name = "mae"

    def __init__(self):
        self.reset()

    @staticmethod
    def _error(difference):
        return np.abs(difference)


class MeanSquaredError(_ErrorMetric):
    """Mean of (output - target)² over every element."""

    name = "mse"

    def __init__(self):
        self.reset()

    @staticmethod
    def _error(difference):
        return difference * difference


BY_NAME = {"accuracy": Accuracy, "acc": Accuracy, "top_k_accuracy": TopKAccuracy,
           "precision": Precision, "recall": Recall, "f1": F1Score,
           "mae": MeanAbsoluteError, "mse": MeanSquaredError,
           # Keras's longer names; the logs use the short ones above. Accuracy reads class
           # indices and one-hot rows alike, so Keras's three accuracies are one metric here.
           "categorical_accuracy": Accuracy, "sparse_categorical_accuracy": Accuracy,
           "binary_accuracy": Accuracy, "top_k_categorical_accuracy": TopKAccuracy,
           "sparse_top_k_categorical_accuracy": TopKAccuracy,
           "mean_absolute_error": MeanAbsoluteError, "mean_squared_error": MeanSquaredError}


def get_metric(metric) -> Metric:
    """A fresh :class:`Metric` from a name in ``BY_NAME`` or a Metric instance (used as is)."""
    if isinstance(metric, Metric):
        return metric
    if isinstance(metric, str) and metric in BY_NAME:
        return BY_NAME[metric]()
    raise ValueError(f"unknown metric {metric!r}; known: {sorted(BY_NAME)} or a Metric instance")
