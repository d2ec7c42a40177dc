"""Neural-network ops: softmax, losses, dropout, normalisation and embedding lookup."""

from __future__ import annotations

import math

import warnings

import numpy as np

from ..autograd.function import Function, ReadsInputsWhenRecorded
from ..autograd.tensor import Tensor, as_tensor
from ..backend import composed
from ..random import resolve
from ._util import broadcast_shape, normalize_axis, promote_operands, require_float
from .shape import where


# -- softmax ---------------------------------------------------------------------------------------

class SoftmaxFunction(Function):
    # y = softmax(x):  dx = y ⊙ (dy - Σ(dy ⊙ y))  (the Jacobian diag(y) - y yᵀ applied to dy)
    def forward(self, x, axis):
        self.axis = axis
        self.out = self.backend.softmax(x, axis)
        return self.out

    def backward(self, grad):
        return self.backend.softmax_backward(grad, self.out, self.axis)

    def differentiable_backward(self, grad, output):
        return output * (grad - (grad * output).sum(axis=self.axis, keepdims=True))


class LogSoftmaxFunction(Function):
    # y = x - logsumexp(x):  dx = dy - softmax(x) · Σ dy
    def forward(self, x, axis):
        self.axis = axis
        self.out = self.backend.log_softmax(x, axis)
        return self.out

    def backward(self, grad):
        be = self.backend
        total = be.sum(grad, axis=self.axis, keepdims=True)
        return be.sub(grad, be.mul(be.math_function(self.out, "exp"), total))

    def differentiable_backward(self, grad, output):
        from .elementwise import exp
        return grad - exp(output) * grad.sum(axis=self.axis, keepdims=True)


def softmax(x: Tensor, axis: int = -1, *, dim: int | None = None) -> Tensor:
    """softmax along ``axis`` (alias ``dim``)."""
    require_float("softmax", x)
    axis = dim if dim is not None else axis
    return SoftmaxFunction.apply(x, axis=normalize_axis("softmax", axis, x.ndim))


def log_softmax(x: Tensor, axis: int = -1, *, dim: int | None = None) -> Tensor:
    """log_softmax along ``axis`` (alias ``dim``)."""
    require_float("log_softmax", x)
    axis = dim if dim is not None else axis
    return LogSoftmaxFunction.apply(x, axis=normalize_axis("log_softmax", axis, x.ndim))


# -- losses ----------------------------------------------------------------------------------------

def _reduce_loss(op: str, losses: Tensor, reduction: str) -> Tensor:
    if reduction == "mean":
        return losses.mean()
    if reduction == "sum":
        return losses.sum()
    if reduction == "none":
        return losses
    raise ValueError(f"{op}: reduction must be 'mean', 'sum' or 'none', got {reduction!r}")


class SoftmaxCrossEntropyFunction(ReadsInputsWhenRecorded, Function):
    """Fused log-softmax + negative log-likelihood over logits (N, C) and class indices (N,).

    Fusing them gives the famous one-line gradient: dL/dlogits = softmax(logits) - onehot(target)
    (with label smoothing the one-hot is mixed with the uniform distribution).
    """

    def forward(self, logits, targets, ignore_index, label_smoothing, reduction):
        # The reduction happens inside the primitive: PyTorch's mean divides by the number of
        # targets that are not ignored, a count that stays on the device (reading it would wait
        # for the device), and a device backend sums, counts and divides in its own kernels.
        self.targets, self.ignore_index, self.smoothing = targets, ignore_index, label_smoothing
        self.reduction = reduction
        loss, self.log_probs = self.backend.softmax_cross_entropy_forward(
            logits, targets, ignore_index, label_smoothing, reduction)
        return loss

    def backward(self, grad):
        return self.backend.softmax_cross_entropy_backward(
            grad, self.log_probs, self.targets, self.ignore_index, self.smoothing, self.reduction)

    def composed(self, logits, *_):
        # loss_i = (1 - ε)·(-log p_i[t_i]) + ε/C·Σ_c(-log p_i[c]), 0 where t_i is ignored.
        be = self.backend
        log_probs = log_softmax(logits, axis=1)
        keep = composed.not_equal(be, self.targets, self.ignore_index)
        picked = Tensor._wrap(composed.logical_and(
            be, be.one_hot(be.where(keep, self.targets, 0), logits.shape[1], np.bool_),
            be.reshape(keep, (-1, 1))), logits.device)
        losses = -where(picked, log_probs, 0.0).sum(axis=1)
        if self.smoothing:
            spread = -log_probs.sum(axis=1) * (self.smoothing / logits.shape[1])
            losses = losses * (1 - self.smoothing) + where(Tensor._wrap(keep, logits.device),
                                                           spread, 0.0)
        if self.reduction == "none":
            return losses
        total = losses.sum()
        if self.reduction == "sum":
            return total
        count = be.sum(be.astype(keep, logits.dtype))
        return total / Tensor._wrap(be.maximum(count, 1), logits.device)


def cross_entropy(logits: Tensor, targets, weight=None, *, ignore_index: int = -100,
                  reduction: str = "mean", label_smoothing: float = 0.0) -> Tensor:
    """Cross-entropy between logits (N, C) or (N, C, d1, ...) (or unbatched (C,)) and integer
    class targets (N,) or (N, d1, ...); float targets of the logits' shape are read as class
    probabilities. ``weight`` (C,) rescales each class, as in PyTorch."""
    require_float("cross_entropy", logits, "logits")
    targets = as_tensor(targets) if not isinstance(targets, Tensor) else targets
    if logits.ndim < 1:
        raise ValueError(f"cross_entropy: logits must have a class axis, got shape {logits.shape}")
    if not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(f"cross_entropy: label_smoothing must be in [0, 1], got {label_smoothing}")
    if reduction not in ("mean", "sum", "none"):
        raise ValueError(f"cross_entropy: reduction must be 'mean', 'sum' or 'none', "
                         f"got {reduction!r}")
    if targets.dtype.kind == "f":
        if targets.shape != logits.shape:
            raise ValueError(f"cross_entropy: probability targets of shape {targets.shape} do not "
                             f"match logits of shape {logits.shape}")
        class_axis = 1 if logits.ndim > 1 else 0
        classes = logits.shape[class_axis]
        smoothed = targets * (1 - label_smoothing) + label_smoothing / classes
        terms = smoothed * log_softmax(logits, axis=class_axis)
        weight = _class_weight("cross_entropy", weight, classes, logits)
        if weight is not None:  # per class, along the class axis
            terms = terms * weight.reshape((classes,) + (1,) * (logits.ndim - 1 - class_axis))
        return _reduce_loss("cross_entropy", -terms.sum(axis=class_axis), reduction)
    if targets.dtype.kind not in "iu":
        raise TypeError(f"cross_entropy: targets must be integer class indices (int64) or float "
                        f"probabilities, got {targets.dtype}")
    if weight is not None:
        # Weighted: log-softmax then the weighted NLL (the fused kernel has no class weights).
        # With smoothing, PyTorch adds ε/C · Σ_c weight_c·(-log p_c), normalised like the NLL.
        log_probs = log_softmax(logits, axis=1 if logits.ndim > 1 else 0)
        nll = nll_loss(log_probs, targets, weight, ignore_index=ignore_index,
                       reduction=reduction)
        if not label_smoothing:
            return nll
        return (1 - label_smoothing) * nll + label_smoothing / logits.shape[
            1 if logits.ndim > 1 else 0] * _weighted_smoothing_term(
                log_probs, targets, weight, ignore_index, reduction)
    logits, flat, spatial_shape = _classes_last("cross_entropy", logits, targets)
    flat_targets = flat.to(dtype=np.int64).data
    try:
        out = SoftmaxCrossEntropyFunction.apply(logits, targets=flat_targets,
                                        ignore_index=int(ignore_index),
                                        label_smoothing=float(label_smoothing),
                                        reduction=reduction)
    except ValueError as error:  # the kernel's range check does not know the op or the shapes
        raise ValueError(f"cross_entropy: {error} (logits of shape {logits.shape}, targets of "
                         f"shape {targets.shape})") from None
    return out.reshape(spatial_shape) if reduction == "none" else out


def _weighted_smoothing_term(log_probs, targets, weight, ignore_index, reduction):
    """Σ_c weight_c·(-log p_c) per sample, 0 where ignored, reduced as the weighted NLL."""
    targets = targets if isinstance(targets, Tensor) else as_tensor(np.asarray(targets))
    rows, flat, out_shape = _classes_last("cross_entropy", log_probs, targets)
    weight = _class_weight("cross_entropy", weight, rows.shape[1], rows)
    picked, kept, row_weight = _picked_targets("cross_entropy", rows, flat, weight, ignore_index)
    per_sample = where(kept, -(rows * weight.reshape(1, -1)).sum(axis=1), 0.0)
    if reduction == "none":
        return per_sample.reshape(out_shape)
    if reduction == "sum":
        return per_sample.sum()
    return _weighted_mean(per_sample.sum(), row_weight)


def _picked_targets(op: str, rows: Tensor, flat: Tensor, weight, ignore_index: int):
    """For rows (M, C) and targets (M,): the one-hot mask of each row's target (all False on
    ignored rows), the kept-rows mask, and each row's weight (weight[t], 1 without a weight, 0
    when ignored). Built on the device; the backend rejects targets out of range."""
    be = rows.backend
    t = be.astype(flat.data, np.int64)
    keep = composed.not_equal(be, t, ignore_index)
    try:
        one_hot = be.one_hot(be.where(keep, t, 0), rows.shape[1], np.bool_)
    except IndexError:
        raise ValueError(f"{op}: targets must be in [0, {rows.shape[1]}) or "
                         f"ignore_index={ignore_index}") from None
    picked = Tensor._wrap(composed.logical_and(be, one_hot, be.reshape(keep, (-1, 1))), rows.device)
    kept = Tensor._wrap(keep, rows.device)
    row_weight = picked.to(dtype=rows.dtype).sum(axis=1) if weight is None else \
        where(picked, weight.detach().reshape(1, -1), 0.0).sum(axis=1)
    return picked, kept, row_weight


def _weighted_mean(total: Tensor, row_weight: Tensor) -> Tensor:
    """total / Σ row weights, computed on the device. With nothing counted (every target
    ignored) the mean is 0/0 = nan, as in PyTorch, but its gradient is 0, not nan: no element
    took part."""
    denominator = row_weight.sum()
    counted = denominator > 0
    return where(counted, total / where(counted, denominator, 1.0), float("nan"))


def _classes_last(op: str, scores: Tensor, targets: Tensor) -> tuple[Tensor, Tensor, tuple]:
    """Scores (N, C, d1, ...) or (C,) and targets (N, d1, ...) or () as rows (M, C) and (M,),
    plus the shape a reduction='none' result takes (the targets' shape)."""
    if scores.ndim == 1:
        if targets.shape != ():
            raise ValueError(f"{op}: unbatched input of shape {scores.shape} needs a 0-d target, "
                             f"got {targets.shape}")
        return scores.reshape(1, -1), targets.reshape(1), ()
    expected = (scores.shape[0],) + scores.shape[2:]
    if targets.shape != expected:
        raise ValueError(f"{op}: input of shape {scores.shape} needs targets of shape "
                         f"{expected}, got {targets.shape}")
    if scores.ndim > 2:  # move the class axis last, then treat every position as a sample
        axes = (0,) + tuple(range(2, scores.ndim)) + (1,)
        scores = scores.permute(axes).reshape(-1, scores.shape[1])
    return scores, targets.reshape(-1), expected


def _class_weight(op: str, weight, classes: int, like: Tensor) -> Tensor | None:
    if weight is None:
        return None
    if isinstance(weight, str):
        raise TypeError(f"{op}: the third positional argument is weight, as in PyTorch; pass "
                        f"reduction={weight!r} by keyword")
    weight = as_tensor(weight, like=like)
    if weight.shape != (classes,):
        raise ValueError(f"{op}: weight must have one value per class, shape ({classes},), got "
                         f"{weight.shape}")
    return weight.to(dtype=like.dtype)


def nll_loss(log_probs: Tensor, targets, weight=None, *, ignore_index: int = -100,
             reduction: str = "mean") -> Tensor:
    """Negative log-likelihood of integer targets under log-probabilities, as PyTorch's: input
    (N, C) or (N, C, d1, ...) or unbatched (C,), targets (N,) or (N, d1, ...) or ().

    loss_i = -weight[t_i]·log_probs[i, t_i] (0 where t_i == ignore_index); the mean divides by
    the total weight of the targets not ignored (their count without ``weight``).
    """
    require_float("nll_loss", log_probs, "input")
    if reduction not in ("mean", "sum", "none"):
        raise ValueError(f"nll_loss: reduction must be 'mean', 'sum' or 'none', "
                         f"got {reduction!r}")
    targets = targets if isinstance(targets, Tensor) else as_tensor(np.asarray(targets))
    if targets.dtype.kind not in "iu":
        raise TypeError(f"nll_loss: targets must be integer class indices, got {targets.dtype}")
    if targets.device != log_probs.device:
        raise ValueError(f"nll_loss: targets are on {targets.device}, log_probs on "
                         f"{log_probs.device}")
    rows, flat, out_shape = _classes_last("nll_loss", log_probs, targets)
    weight = _class_weight("nll_loss", weight, rows.shape[1], rows)
    picked, _, row_weight = _picked_targets("nll_loss", rows, flat, weight, ignore_index)
    # where() picks log p[target] (and passes the gradient only there) rather than a product
    # with the one-hot rows, so the other, possibly -inf, entries are never multiplied by 0.
    scale = row_weight if weight is None else where(picked, weight.reshape(1, -1), 0.0).sum(1)
    losses = -(where(picked, rows, 0.0).sum(axis=1) * scale)
    if reduction == "none":
        return losses.reshape(out_shape)
    if reduction == "sum":
        return losses.sum()
    return _weighted_mean(losses.sum(), row_weight)


def mse_loss(prediction: Tensor, target, reduction: str = "mean") -> Tensor:
    """Mean squared error ((prediction - target)²). Shapes that differ are broadcast with
    PyTorch's warning (an (N,) prediction against an (N, 1) target gives N² terms, which is
    rarely what was meant)."""
    target = as_tensor(target, like=prediction)
    if target.shape != prediction.shape:
        broadcast_shape("mse_loss", prediction.shape, target.shape)
        warnings.warn(f"mse_loss: using a target size {target.shape} that is different to the "
                      f"input size {prediction.shape}. This will likely lead to incorrect "
                      f"results due to broadcasting. Please ensure they have the same size.",
                      UserWarning, stacklevel=2)
    difference = prediction - target
    return _reduce_loss("mse_loss", difference * difference, reduction)


class BinaryCrossEntropyWithLogitsFunction(Function):
    """Per element, with positive weight p (1 without ``pos_weight``):
    -[p·y·log σ(x) + (1-y)·log(1 - σ(x))] = (1-y)·x + (1 + (p-1)·y)·softplus(-x),
    where softplus(-x) = log(1 + e^-x) is computed as max(-x, 0) + log(1 + e^-|x|) so e^x never
    overflows. Derivatives: in x, (1-y) - (1 + (p-1)·y)·σ(-x) = (1 + (p-1)·y)·σ(x) - p·y
    (= σ(x) - y when p = 1), written in the second form, PyTorch's: for a negative logit and
    y = 0 the first is 1 - σ(-x), which cancels to 0 in float32 below x = -17 while σ(x) stays
    accurate; in y, -x + (p-1)·softplus(-x) (PyTorch differentiates the target too, e.g. for
    soft labels produced by another network); in p, y·softplus(-x)."""

    def forward(self, x, y, pos_weight=None):
        be = self.backend
        self.x, self.y, self.pos_weight = x, y, pos_weight
        decaying = be.math_function(composed.neg(be, be.abs(x)), "exp")
        self.softplus_neg = be.add(be.relu(composed.neg(be, x)),
                                   be.math_function(be.add(decaying, 1), "log"))
        self.log_weight = composed.ones_like(be, y) if pos_weight is None else be.add(
            be.mul(be.sub(pos_weight, 1), y), 1)
        return be.add(be.mul(be.sub(1, y), x), be.mul(self.log_weight, self.softplus_neg))

    def backward(self, grad):
        be = self.backend
        positive_weight = self.y if self.pos_weight is None else be.mul(self.pos_weight, self.y)
        grad_x = be.mul(grad, be.sub(be.mul(self.log_weight, be.sigmoid(self.x)),
                                     positive_weight))
        d_y = composed.neg(be, self.x)
        if self.pos_weight is not None:
            d_y = be.add(d_y, be.mul(be.sub(self.pos_weight, 1), self.softplus_neg))
        grads = (grad_x, be.mul(grad, d_y))
        if self.pos_weight is None:
            return grads
        return grads + (be.mul(grad, be.mul(self.y, self.softplus_neg)),)

    def composed(self, x, y, pos_weight=None):
        from .elementwise import abs, exp, log, relu
        softplus_neg = relu(-x) + log(exp(-abs(x)) + 1)
        log_weight = 1 if pos_weight is None else (pos_weight - 1) * y + 1
        return (1 - y) * x + log_weight * softplus_neg


def binary_cross_entropy_with_logits(logits: Tensor, target, weight=None, *,
                                     reduction: str = "mean", pos_weight=None) -> Tensor:
    """Binary cross-entropy on logits, as PyTorch's: ``weight`` rescales each element's loss
    (broadcast), ``pos_weight`` the positive term (broadcast along the last axis, one per
    class)."""
    if isinstance(weight, str):
        raise TypeError("binary_cross_entropy_with_logits: the third positional argument is "
                        f"weight, as in PyTorch; pass reduction={weight!r} by keyword")
    target = as_tensor(target, like=logits)
    require_float("binary_cross_entropy_with_logits", logits, "logits")
    if target.shape != logits.shape:
        raise ValueError(f"binary_cross_entropy_with_logits: logits of shape {logits.shape} and "
                         f"target of shape {target.shape} differ")
    loss_dtype = target.dtype if target.dtype.kind == "f" else logits.dtype
    if loss_dtype != logits.dtype:
        # Mixed float dtypes compute in the wider one, and the losses come out in the
        # target's dtype: PyTorch's formula runs in place on (1 - target).
        logits, target = promote_operands(logits, target)
    inputs = [logits, target.to(dtype=logits.dtype)]
    if pos_weight is not None:
        pos_weight = as_tensor(pos_weight, like=logits).to(dtype=logits.dtype)
        broadcast_shape("binary_cross_entropy_with_logits (pos_weight)", pos_weight.shape,
                        logits.shape)
        inputs.append(pos_weight)
    losses = BinaryCrossEntropyWithLogitsFunction.apply(*inputs)
    if losses.dtype != loss_dtype:
        losses = losses.to(dtype=loss_dtype)
    if weight is not None:
        losses = losses * as_tensor(weight, like=logits).to(dtype=logits.dtype)
    return _reduce_loss("binary_cross_entropy_with_logits", losses, reduction)


# -- dropout ---------------------------------------------------------------------------------------

def dropout(x: Tensor, p: float = 0.5, training: bool = True, generator=None) -> Tensor:
    """Zero each element with probability p and scale the rest by 1/(1-p), so the expected value
    is unchanged and evaluation needs no rescaling ("inverted" dropout)."""
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout: p must be in [0, 1], got {p}")
    if not training or p == 0.0:
        return x
    if p == 1.0:
        return x * 0.0
    # The mask is drawn on x's device, and is 1/(1-p) where kept, 0 where dropped.
    be = x.backend
    keep = resolve(generator).bernoulli(1.0 - p, x.shape, device=x.device)
    mask = be.where(keep, be.full((), 1.0 / (1.0 - p), x.dtype), be.zeros((), x.dtype))
    return x * Tensor._wrap(mask, x.device)


# -- normalisation ---------------------------------------------------------------------------------

class LayerNormFunction(ReadsInputsWhenRecorded, Function):
    def forward(self, x, weight=None, bias=None, *, normalized_size, eps):
        be = self.backend
        self.shape = x.shape
        rows = be.reshape(x, (-1, normalized_size))
        w = None if weight is None else be.reshape(weight, (-1,))
        b = None if bias is None else be.reshape(bias, (-1,))
        y, self.mean, self.rstd = be.layer_norm_forward(rows, w, b, eps)
        self.eps = eps
        self.rows, self.weight = rows, w
        return be.reshape(y, x.shape)

    def backward(self, grad):
        be = self.backend
        rows = be.reshape(grad, self.rows.shape)
        dx, dweight, dbias = be.layer_norm_backward(rows, self.rows, self.mean, self.rstd,
                                                    self.weight)
        if self.weight is None:
            return be.reshape(dx, self.shape)
        shape = self.parents[1].shape
        return be.reshape(dx, self.shape), be.reshape(dweight, shape), be.reshape(dbias, shape)

    def composed(self, x, weight=None, bias=None):
        from .elementwise import sqrt
        rows = x.reshape(self.rows.shape)
        centered = rows - rows.mean(axis=1, keepdims=True)
        variance = (centered * centered).mean(axis=1, keepdims=True)  # biased, as the kernel
        y = centered / sqrt(variance + self.eps)
        if weight is not None:
            y = y * weight.reshape(-1) + bias.reshape(-1)
        return y.reshape(self.shape)


def layer_norm(x: Tensor, normalized_shape, weight: Tensor | None = None,
               bias: Tensor | None = None, eps: float = 1e-5) -> Tensor:
    """Normalise over the trailing ``normalized_shape`` axes: (x - mean) / sqrt(var + eps)."""
    normalized_shape = (normalized_shape,) if isinstance(normalized_shape, int) \
        else tuple(normalized_shape)
    if x.shape[x.ndim - len(normalized_shape):] != normalized_shape:
        raise ValueError(f"layer_norm: input of shape {x.shape} does not end with "
                         f"normalized_shape {normalized_shape}")
    for name, t in (("weight", weight), ("bias", bias)):
        if t is not None and t.shape != normalized_shape:
            raise ValueError(f"layer_norm: {name} has shape {t.shape}, expected {normalized_shape}")
    if (weight is None) != (bias is None):
        raise ValueError("layer_norm: give both weight and bias, or neither")
    if x.numel() == 0:  # nothing to normalise: an empty result, still in the graph
        return x * 1.0 if weight is None else x * weight + bias
    inputs = (x,) if weight is None else (x, weight, bias)
    return LayerNormFunction.apply(*inputs, normalized_size=int(np.prod(normalized_shape)), eps=eps)


class BatchNormFunction(ReadsInputsWhenRecorded, Function):
    """Normalise each channel (axis 1) over the batch and spatial axes.

    With x̂ = (x - μ)·r, r = 1/sqrt(σ² + eps) and m values per channel, the input gradient is
    dx = r/m · (m·dx̂ - Σdx̂ - x̂·Σ(dx̂·x̂)) where dx̂ = dy·γ, because μ and σ² depend on every x.
    In evaluation the statistics are constants and dx = dy·γ·r. Both directions are one backend
    primitive over x viewed as (N, C, S), which computes them channel by channel.

    ``mean``/``var``: the statistics to normalise with (evaluation), or None for the batch's own.
    In training the running statistics (if given) move towards the batch's, in place:
    running = (1 - momentum)·running + momentum·batch, with the unbiased batch variance, as
    PyTorch does.
    """

    def forward(self, x, weight=None, bias=None, *, mean, var, eps, batch_stats,
                running_mean=None, running_var=None, momentum=0.0):
        be = self.backend
        self.shape = x.shape
        self.x = be.reshape(x, (x.shape[0], x.shape[1], math.prod(x.shape[2:])))
        self.weight, self.batch_stats, self.eps = weight, batch_stats, eps
        y, self.mean, batch_var, self.rstd = be.batch_norm_forward(
            self.x, weight, bias, None if batch_stats else mean, None if batch_stats else var,
            eps)
        if batch_stats:
            count = self.x.shape[0] * self.x.shape[2]
            # The running statistics are updated in place: state_dict() hands out their storage.
            if running_mean is not None:
                be.running_average_(running_mean, self.mean, momentum, 1.0)
            if running_var is not None:  # the unbiased batch variance
                be.running_average_(running_var, batch_var, momentum, count / (count - 1))
        return be.reshape(y, x.shape)

    def backward(self, grad):
        be = self.backend
        grad_x, grad_weight, grad_bias = be.batch_norm_backward(
            be.reshape(grad, self.x.shape), self.x, self.mean, self.rstd, self.weight,
            self.batch_stats)
        grad_x = be.reshape(grad_x, self.shape)
        return grad_x if self.weight is None else (grad_x, grad_weight, grad_bias)

    def composed(self, x, weight=None, bias=None):
        from .elementwise import sqrt
        x = x.reshape(self.x.shape)  # (N, C, S): statistics per channel over N and S
        if self.batch_stats:
            centered = x - x.mean(axis=(0, 2), keepdims=True)
            variance = (centered * centered).mean(axis=(0, 2), keepdims=True)
            y = centered / sqrt(variance + self.eps)
        else:  # the running statistics are constants
            channels = (1, x.shape[1], 1)
            mean = Tensor._wrap(self.backend.reshape(self.mean, channels), x.device)
            rstd = Tensor._wrap(self.backend.reshape(self.rstd, channels), x.device)
            y = (x - mean) * rstd
        if weight is not None:
            y = y * weight.reshape(1, -1, 1) + bias.reshape(1, -1, 1)
        return y.reshape(self.shape)


def batch_norm(x: Tensor, running_mean: Tensor | None, running_var: Tensor | None,
               weight: Tensor | None = None, bias: Tensor | None = None, training: bool = False,
               momentum: float = 0.1, eps: float = 1e-5) -> Tensor:
    """Batch normalisation over axis 1 of x (N, C, ...), as PyTorch's ``F.batch_norm``.

    In training the batch statistics normalise, and the running statistics (if given) move
    towards them: running = (1 - momentum)·running + momentum·batch, with the unbiased batch
    variance, as PyTorch does. In evaluation the running statistics normalise.
    """
    # Shapes read from the arrays (what Tensor.shape returns, without a call for each of the
    # five tensors): a network's every batch norm layer passes here on every forward.
    x_shape = tuple(x.data.shape)
    if len(x_shape) < 2:
        raise ValueError(f"batch_norm: input must be at least 2-D (N, C, ...), got {x_shape}")
    channels = x_shape[1]
    per_channel = (channels,)
    # The tensors alone, their names looked up only for an error: pairing each with its name
    # built five tuples per call.
    for t in (running_mean, running_var, weight, bias):
        if t is not None and tuple(t.data.shape) != per_channel:
            name = next(name for name, given in (("running_mean", running_mean),
                                                 ("running_var", running_var),
                                                 ("weight", weight), ("bias", bias))
                        if given is t)
            raise ValueError(f"batch_norm: {name} has shape {t.shape}, expected ({channels},) "
                             f"for input of shape {x_shape}")
    inputs = (x,) if weight is None else (x, weight, bias)
    if training:
        count = x.numel() // max(channels, 1)
        if count <= 1:
            raise ValueError(f"batch_norm: expected more than 1 value per channel when "
                             f"training, got input of shape {x.shape}")
        return BatchNormFunction.apply(
            *inputs, mean=None, var=None, eps=eps, batch_stats=True,
            running_mean=None if running_mean is None else running_mean.data,
            running_var=None if running_var is None else running_var.data, momentum=momentum)
    if running_mean is None or running_var is None:
        raise ValueError("batch_norm: evaluation needs running_mean and running_var")
    return BatchNormFunction.apply(*inputs, mean=running_mean.data, var=running_var.data, eps=eps,
                           batch_stats=False)


# -- embedding -------------------------------------------------------------------------------------

class EmbeddingLookupFunction(Function):
    """Rows of the table picked by integer indices (a gather on the device); the gradient of
    each picked row is scatter-added back into the table's gradient, so a row picked twice
    receives both gradients. ``padding_idx``'s row is looked up like any other but, as in
    PyTorch, never receives a gradient."""

    def forward(self, weight, indices, padding_idx):
        self.indices, self.shape, self.dtype = indices, weight.shape, weight.dtype
        self.padding_idx = padding_idx
        return self.backend.take(weight, indices)

    def backward(self, grad):
        be = self.backend
        if self.padding_idx is not None:
            padding = be.reshape(be.equal(self.indices, self.padding_idx),
                                 tuple(self.indices.shape) + (1,))
            grad = be.where(padding, 0, grad)
        return be.index_add(self.shape, (self.indices,), grad, self.dtype), None

    def differentiable_backward(self, grad, output):
        from .shape import IndexPutFunction
        if self.padding_idx is not None:
            padding = self.backend.reshape(self.backend.equal(self.indices, self.padding_idx),
                                           tuple(self.indices.shape) + (1,))
            grad = where(Tensor._wrap(padding, grad.device), 0.0, grad)
        zeros = Tensor._wrap(grad.backend.zeros(self.shape, self.dtype), grad.device)
        return IndexPutFunction.apply(zeros, grad, index=(self.indices,), accumulate=True), None


def embedding(indices, weight: Tensor, padding_idx: int | None = None) -> Tensor:
    """Rows of ``weight`` picked by integer ``indices``; gradients scatter-add into those rows
    (none into row ``padding_idx``, whose stored values are returned unchanged)."""
    indices = indices if isinstance(indices, Tensor) else as_tensor(np.asarray(indices))
    if indices.dtype.kind not in "iu":
        raise TypeError(f"embedding: indices must be integers, got {indices.dtype}")
    if indices.device != weight.device:
        raise ValueError(f"embedding: indices are on {indices.device}, weight on {weight.device}")
    if padding_idx is not None:
        if not -weight.shape[0] <= padding_idx < weight.shape[0]:
            raise ValueError(f"embedding: padding_idx {padding_idx} is out of range for a table "
                             f"of {weight.shape[0]} rows")
        padding_idx = int(padding_idx) % weight.shape[0]
    try:  # the backend checks the range where the indices are
        return EmbeddingLookupFunction.apply(weight, indices, padding_idx=padding_idx)
    except IndexError as error:
        raise IndexError(f"embedding: {error} (a table of {weight.shape[0]} rows)") from None
