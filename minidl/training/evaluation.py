"""``evaluate(model, data, metrics=)`` and ``predict(model, data)``: a model run over data in
evaluation mode (dropout off, batch-norm running statistics), without recording a graph, batch
by batch, and put back in the mode it was in."""

from __future__ import annotations

import contextlib

import numpy as np

from ..autograd.grad_mode import no_grad
from ..autograd.tensor import Tensor
from .data_source import batches, model_device, on_device
from .metrics import Accuracy, Metric, get_metric, is_classification


@contextlib.contextmanager
def evaluation_mode(model):
    """``model.eval()`` and no graph inside; the model's previous mode afterwards."""
    was_training = model.training
    model.eval()
    try:
        with no_grad():
            yield
    finally:
        model.train(was_training)


def evaluate(model, data, metrics=None, *, loss_fn=None, batch_size: int = 256) -> dict:
    """The mean loss (with ``loss_fn``) and ``metrics`` of ``model`` over ``data``.

    ``data`` is ``(inputs, targets)`` arrays, a data set or a reader (the last array of each
    batch is the target).  ``metrics`` is a list of names (``"accuracy"``, ``"top_k_accuracy"``,
    ``"precision"``, ``"recall"``, ``"f1"``, ``"mae"``, ``"mse"``) or
    :class:`~minidl.training.metrics.Metric` objects; by default accuracy is reported when the
    outputs are class scores and the targets class indices or one-hot rows.  Returns
    ``{name: value}``.
    """
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"evaluate: batch_size must be a positive integer, got {batch_size!r}")
    if isinstance(metrics, (str, Metric)):
        metrics = [metrics]
    chosen = [get_metric(m) for m in metrics] if metrics is not None else []
    for metric in chosen:
        metric.reset()
    automatic = Accuracy() if metrics is None else None
    total_loss, count = 0.0, 0
    device = model_device(model)
    with evaluation_mode(model):
        for batch in batches(data, batch_size, "evaluate: data"):
            if len(batch) < 2:
                raise ValueError("evaluate: data must hold inputs and targets (the last array)")
            inputs, targets = batch[:-1], np.asarray(batch[-1])
            outputs = model(*(on_device(x, device) for x in inputs))
            if loss_fn is not None:
                total_loss += float(loss_fn(outputs, on_device(targets, device)).item()) \
                    * len(targets)
            scores = outputs.numpy()
            for metric in chosen:
                metric.update(scores, targets)
            if automatic is not None and not is_classification(scores, targets):
                automatic = None
            if automatic is not None:
                automatic.update(scores, targets)
            count += len(targets)
    if count == 0:
        raise ValueError("evaluate: data holds no samples")
    results = {"loss": total_loss / count} if loss_fn is not None else {}
    for metric in chosen + ([automatic] if automatic is not None else []):
        results[metric.name] = metric.result()
    if not results:
        raise ValueError("evaluate: nothing to compute; give metrics= or loss_fn= (the outputs "
                         "are not class scores, so accuracy does not apply)")
    return results


def predict(model, data, *, batch_size: int = 256):
    """``model``'s outputs for every sample of ``data`` as one NumPy array (a tuple of arrays
    for a model with several outputs).

    ``data`` is the inputs: an array or Tensor, a tuple of arrays for a model with several
    inputs, a data set or a reader (whose batches' last array, the target, is left out).
    """
    from .data_source import as_arrays, is_reader

    with_targets = is_reader(data) or (
        as_arrays(data, "predict: data") is None and not isinstance(data, (np.ndarray, Tensor)))
    pieces, device = [], model_device(model)
    with evaluation_mode(model):
        for batch in batches(data, batch_size, "predict: data"):
            inputs = batch[:-1] if with_targets and len(batch) > 1 else batch
            outputs = model(*(on_device(x, device) for x in inputs))
            pieces.append(tuple(o.numpy() for o in outputs) if isinstance(outputs, tuple)
                          else outputs.numpy())
    if not pieces:
        raise ValueError("predict: data holds no samples")
    if isinstance(pieces[0], tuple):
        return tuple(np.concatenate(parts) for parts in zip(*pieces))
    return np.concatenate(pieces)
