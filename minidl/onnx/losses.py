"""The loss operators ONNX training graphs use: NegativeLogLikelihoodLoss and
SoftmaxCrossEntropyLoss.

For log-probabilities x (N, C, d…), targets t (N, d…) and class weights w (default 1):

    loss[n, d…] = −w[t] · x[n, t[n, d…], d…]        (0 where t is ``ignore_index``)

reduced by ``reduction``: "none" keeps every element, "sum" adds them, "mean" divides the sum by
the total weight of the targets that count (not by their number). SoftmaxCrossEntropyLoss is the
same applied to log_softmax of scores over the class axis, and can also return those
log-probabilities. The picked entries are a differentiable gather, so the loss trains.
"""

from __future__ import annotations

import numpy as np

from ..ops import elementwise as ew, nn_ops, reduction, shape
from .ops_shape import take_along_axis
from .registry import computed_in_float32, host_result, onnx_op, optional


def negative_log_likelihood(log_probs, targets, weight, attributes):
    """The ONNX NegativeLogLikelihoodLoss of ``log_probs`` (N, C, d…) and ``targets``."""
    target = targets.numpy().astype(np.int64)
    ignored = target == attributes["ignore_index"] if "ignore_index" in attributes else \
        np.zeros(target.shape, np.bool_)
    classes = log_probs.shape[1]
    counted = target[~ignored]
    if counted.size and (counted.min() < 0 or counted.max() >= classes):
        raise IndexError(f"target class out of range for {classes} classes")
    safe = np.where(ignored, 0, target)
    picked = take_along_axis(log_probs, np.expand_dims(safe, 1), 1)
    picked = shape.reshape(picked, target.shape)
    keep = host_result((~ignored).astype(log_probs.dtype), log_probs)
    weights = keep if weight is None else ew.mul(shape.getitem(weight, (safe,)), keep)
    losses = ew.neg(ew.mul(picked, weights))
    mode = attributes.get("reduction", "mean")
    if mode == "none":
        return losses
    total = reduction.sum(losses)
    if mode == "sum":
        return total
    return ew.div(total, reduction.sum(weights))


@onnx_op("NegativeLogLikelihoodLoss")
def _nll_loss(inputs, attributes, context):
    return negative_log_likelihood(inputs[0], inputs[1], optional(inputs, 2), attributes)


@onnx_op("SoftmaxCrossEntropyLoss")
@computed_in_float32
def _softmax_cross_entropy(inputs, attributes, context):
    scores, targets, weight = inputs[0], inputs[1], optional(inputs, 2)
    log_probs = nn_ops.log_softmax(scores, 1)
    loss = negative_log_likelihood(log_probs, targets, weight, attributes)
    return loss if context.outputs == 1 else (loss, log_probs)
