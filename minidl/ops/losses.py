"""More of PyTorch's losses: robust regression (L1, smooth L1, Huber), probabilities (BCE, KL
divergence, Gaussian NLL) and the metric-learning ones (cosine embedding, margin ranking,
triplet margin).

Each is written in a few generic ops (``abs``, ``where``, ``log``, ...), so its gradient is the
chain rule through them and an exported model writes the same ops to ONNX; the formula is in the
docstring. ``reduction`` is ``"mean"`` (over every element), ``"sum"`` or ``"none"``, as in
PyTorch (``kl_div`` adds ``"batchmean"``).
"""

from __future__ import annotations

import math
import warnings

from ..autograd.tensor import Tensor, as_tensor
from . import elementwise as ew
from ._util import broadcast_shape
from .nn_ops import _reduce_loss
from .shape import where

# PyTorch clamps the logarithms of binary_cross_entropy at -100 so that a probability of
# exactly 0 or 1 gives a large finite loss instead of inf.
_LOG_FLOOR = -100.0


def _paired(op: str, prediction: Tensor, target) -> Tensor:
    """``target`` as a Tensor like ``prediction``, warning (as PyTorch) when they broadcast."""
    target = as_tensor(target, like=prediction)
    if target.shape != prediction.shape:
        broadcast_shape(op, prediction.shape, target.shape)
        warnings.warn(f"{op}: using a target size {target.shape} that is different to the input "
                      f"size {prediction.shape}; the two are broadcast, which is rarely what "
                      f"was meant", UserWarning, stacklevel=3)
    return target


def l1_loss(input: Tensor, target, reduction: str = "mean") -> Tensor:
    """|input - target|."""
    return _reduce_loss("l1_loss", ew.abs(input - _paired("l1_loss", input, target)), reduction)


def smooth_l1_loss(input: Tensor, target, reduction: str = "mean", beta: float = 1.0) -> Tensor:
    """0.5·d²/beta where |d| < beta, |d| - 0.5·beta elsewhere (d = input - target): quadratic
    near zero, so its gradient d/beta fades out instead of jumping; beta = 0 is the L1 loss."""
    if beta < 0:
        raise ValueError(f"smooth_l1_loss: beta must be >= 0, got {beta}")
    size = ew.abs(input - _paired("smooth_l1_loss", input, target))
    if beta == 0:
        return _reduce_loss("smooth_l1_loss", size, reduction)
    losses = where(size < beta, size * size * (0.5 / beta), size - 0.5 * beta)
    return _reduce_loss("smooth_l1_loss", losses, reduction)


def huber_loss(input: Tensor, target, reduction: str = "mean", delta: float = 1.0) -> Tensor:
    """0.5·d² where |d| <= delta, delta·(|d| - 0.5·delta) elsewhere: smooth L1 times delta."""
    if not delta > 0:
        raise ValueError(f"huber_loss: delta must be > 0, got {delta}")
    size = ew.abs(input - _paired("huber_loss", input, target))
    losses = where(size <= delta, size * size * 0.5, (size - 0.5 * delta) * delta)
    return _reduce_loss("huber_loss", losses, reduction)


def binary_cross_entropy(input: Tensor, target, weight=None, reduction: str = "mean") -> Tensor:
    """-[y·log p + (1 - y)·log(1 - p)] for probabilities p = ``input`` (each log clamped at
    -100, as PyTorch). On logits, ``binary_cross_entropy_with_logits`` is the stable choice."""
    target = as_tensor(target, like=input)
    if target.shape != input.shape:
        raise ValueError(f"binary_cross_entropy: target shape {target.shape} must equal the "
                         f"input shape {input.shape}")
    log_p = ew.clamp(ew.log(input), min=_LOG_FLOOR)
    log_not_p = ew.clamp(ew.log(1.0 - input), min=_LOG_FLOOR)
    losses = -(target * log_p + (1.0 - target) * log_not_p)
    if weight is not None:
        losses = losses * as_tensor(weight, like=input).to(dtype=input.dtype)
    return _reduce_loss("binary_cross_entropy", losses, reduction)


def kl_div(input: Tensor, target, reduction: str = "mean", log_target: bool = False) -> Tensor:
    """KL(target ‖ q) pointwise, with ``input`` = log q: target·(log target - input), and 0
    where target = 0 (the limit of t·log t); ``log_target=True`` takes log target instead:
    e^t·(t - input). ``reduction="batchmean"`` divides the sum by the batch size -- the true
    KL divergence per sample; ``"mean"`` divides by the element count, as PyTorch. Where the
    target is 0 its gradient is 0 (the term is the constant 0 there; PyTorch gives nan)."""
    target = as_tensor(target, like=input)
    if log_target:
        losses = ew.exp(target) * (target - input)
    else:
        nonzero = target != 0
        # log of 1 where target is 0 keeps the unused branch finite (its gradient is masked).
        safe_log = ew.log(where(nonzero, target, 1.0))
        losses = where(nonzero, target * (safe_log - input), 0.0)
    if reduction == "batchmean":
        return losses.sum() / (input.shape[0] if input.ndim else 1)
    return _reduce_loss("kl_div", losses, reduction)


def gaussian_nll_loss(input: Tensor, target, var, full: bool = False, eps: float = 1e-6,
                      reduction: str = "mean") -> Tensor:
    """0.5·(log var + (input - target)²/var) (+ 0.5·log 2π with ``full``): the negative
    log-likelihood of ``target`` under N(input, var).

    ``var`` has the input's shape, or lacks its last axis (one variance per sample), or has 1
    there. It is clamped at ``eps`` for the value only -- the gradient passes as if unclamped,
    which is what PyTorch does.
    """
    target = as_tensor(target, like=input)
    var = as_tensor(var, like=input)
    if var.shape != input.shape:
        if var.shape == input.shape[:-1]:
            var = var.unsqueeze(-1)
        elif not (var.shape[:-1] == input.shape[:-1] and var.shape[-1:] == (1,)):
            raise ValueError(f"gaussian_nll_loss: var of shape {var.shape} fits neither the "
                             f"input shape {input.shape} nor it without its last axis")
    if (var.numpy() < 0).any():
        raise ValueError("gaussian_nll_loss: var has negative entries")
    var = var + (ew.clamp(var, min=eps) - var).detach()
    difference = input - target
    losses = (ew.log(var) + difference * difference / var) * 0.5
    if full:
        losses = losses + 0.5 * math.log(2 * math.pi)
    return _reduce_loss("gaussian_nll_loss", losses, reduction)


def _sign_target(target, like: Tensor) -> Tensor:
    """The 1/-1 labels as a Tensor of the inputs' dtype."""
    target = as_tensor(target, like=like)
    return target.astype(like.dtype) if target.dtype != like.dtype else target


def margin_ranking_loss(input1: Tensor, input2: Tensor, target, margin: float = 0.0,
                        reduction: str = "mean") -> Tensor:
    """max(0, -y·(x1 - x2) + margin) for y = 1 (x1 should rank higher) or -1."""
    target = _sign_target(target, input1)
    losses = ew.relu(-target * (input1 - input2) + margin)
    return _reduce_loss("margin_ranking_loss", losses, reduction)


# PyTorch adds this to both squared norms of cosine_embedding_loss, so zero vectors give 0.
_COSINE_EPS = 1e-12


def cosine_embedding_loss(input1: Tensor, input2: Tensor, target, margin: float = 0.0,
                          reduction: str = "mean") -> Tensor:
    """1 - cos(x1, x2) for y = 1 (pull together), max(0, cos(x1, x2) - margin) for y = -1
    (push apart); the cosine is along the last axis."""
    target = _sign_target(target, input1)
    dot = (input1 * input2).sum(-1)
    norms = ((input1 * input1).sum(-1) + _COSINE_EPS) * ((input2 * input2).sum(-1) + _COSINE_EPS)
    cosine = dot / ew.sqrt(norms)
    losses = where(target > 0, 1.0 - cosine, ew.relu(cosine - margin))
    return _reduce_loss("cosine_embedding_loss", losses, reduction)


def pairwise_distance(x1: Tensor, x2: Tensor, p: float = 2.0, eps: float = 1e-6,
                      keepdim: bool = False) -> Tensor:
    """‖x1 - x2 + eps‖_p along the last axis (eps keeps the norm's gradient finite at 0)."""
    difference = ew.abs(x1 - x2 + eps)
    if p == 1:
        return difference.sum(-1, keepdims=keepdim)
    return ((difference ** p).sum(-1, keepdims=keepdim)) ** (1.0 / p)


def triplet_margin_loss(anchor: Tensor, positive: Tensor, negative: Tensor, margin: float = 1.0,
                        p: float = 2.0, eps: float = 1e-6, swap: bool = False,
                        reduction: str = "mean") -> Tensor:
    """max(d(a, p) - d(a, n) + margin, 0) with d the p-norm distance; ``swap`` uses the
    smaller of d(a, n) and d(p, n) (the "distance swap" of Balntas et al.)."""
    to_positive = pairwise_distance(anchor, positive, p, eps)
    to_negative = pairwise_distance(anchor, negative, p, eps)
    if swap:
        to_negative = ew.minimum(to_negative, pairwise_distance(positive, negative, p, eps))
    losses = ew.relu(to_positive - to_negative + margin)
    return _reduce_loss("triplet_margin_loss", losses, reduction)
