"""Neural-network ops: softmax, losses, dropout, normalisation and embedding lookup."""

from __future__ import annotations

import numpy as np

from ..autograd.function import Function
from ..autograd.tensor import Tensor, as_tensor
from ..random import resolve
from ._util import normalize_axis, require_float
from .shape import where


# -- softmax ---------------------------------------------------------------------------------------

class Softmax(Function):
    # y = softmax(x):  dx = y ⊙ (dy - Σ(dy ⊙ y))  (the Jacobian diag(y) - y yᵀ applied to dy)
    def forward(self, x, axis):
        self.axis = axis
        self.out = self.backend.softmax(x, axis)
        return self.out

    def backward(self, grad):
        be = self.backend
        dot = be.sum(be.mul(grad, self.out), axis=self.axis, keepdims=True)
        return be.mul(self.out, be.sub(grad, dot))


class LogSoftmax(Function):
    # y = x - logsumexp(x):  dx = dy - softmax(x) · Σ dy
    def forward(self, x, axis):
        self.axis = axis
        self.out = self.backend.log_softmax(x, axis)
        return self.out

    def backward(self, grad):
        be = self.backend
        total = be.sum(grad, axis=self.axis, keepdims=True)
        return be.sub(grad, be.mul(be.exp(self.out), total))


def softmax(x: Tensor, axis: int = -1) -> Tensor:
    require_float("softmax", x)
    return Softmax.apply(x, axis=normalize_axis("softmax", axis, x.ndim))


def log_softmax(x: Tensor, axis: int = -1) -> Tensor:
    require_float("log_softmax", x)
    return LogSoftmax.apply(x, axis=normalize_axis("log_softmax", axis, x.ndim))


# -- losses ----------------------------------------------------------------------------------------

def _reduce_loss(op: str, losses: Tensor, reduction: str) -> Tensor:
    if reduction == "mean":
        return losses.mean()
    if reduction == "sum":
        return losses.sum()
    if reduction == "none":
        return losses
    raise ValueError(f"{op}: reduction must be 'mean', 'sum' or 'none', got {reduction!r}")


class SoftmaxCrossEntropy(Function):
    """Fused log-softmax + negative log-likelihood over logits (N, C) and class indices (N,).

    Fusing them gives the famous one-line gradient: dL/dlogits = softmax(logits) - onehot(target)
    (with label smoothing the one-hot is mixed with the uniform distribution).
    """

    def forward(self, logits, targets, ignore_index, label_smoothing, reduction):
        be = self.backend
        self.targets, self.ignore_index, self.smoothing = targets, ignore_index, label_smoothing
        self.reduction = reduction
        losses, self.log_probs = be.softmax_cross_entropy_forward(logits, targets, ignore_index,
                                                                  label_smoothing)
        if reduction == "none":
            return losses
        total = be.sum(losses)
        if reduction == "sum":
            return total
        # PyTorch's mean divides by the number of targets that are not ignored. The count stays
        # on the device (reading it would wait for the device); with every target ignored the
        # mean is nan, as PyTorch's (divided by nan rather than 0: the same nan, no warning).
        self.count = be.sum(be.astype(be.not_equal(targets, ignore_index), logits.dtype))
        return be.div(total, be.where(be.greater(self.count, 0), self.count, np.nan))

    def backward(self, grad):
        be = self.backend
        n = self.targets.shape[0]
        if self.reduction == "none":
            per_sample = grad
        else:
            scale = grad if self.reduction == "sum" else be.div(grad, be.maximum(self.count, 1))
            per_sample = be.broadcast_to(scale, (n,))
        return be.softmax_cross_entropy_backward(per_sample, self.log_probs, self.targets,
                                                 self.ignore_index, self.smoothing)


def cross_entropy(logits: Tensor, targets, reduction: str = "mean", ignore_index: int = -100,
                  label_smoothing: float = 0.0) -> Tensor:
    """Cross-entropy between logits (N, C) or (N, C, d1, ...) and integer class targets
    (N,) or (N, d1, ...); float targets of the logits' shape are read as class probabilities."""
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
        classes = logits.shape[1] if logits.ndim > 1 else logits.shape[0]
        smoothed = targets * (1 - label_smoothing) + label_smoothing / classes
        losses = -(smoothed * log_softmax(logits, axis=1 if logits.ndim > 1 else 0)).sum(
            axis=1 if logits.ndim > 1 else 0)
        return _reduce_loss("cross_entropy", losses, reduction)
    if targets.dtype.kind not in "iu":
        raise TypeError(f"cross_entropy: targets must be integer class indices (int64) or float "
                        f"probabilities, got {targets.dtype}")
    if logits.ndim == 1:
        logits, targets = logits.reshape(1, -1), targets.reshape(1)
    expected = (logits.shape[0],) + logits.shape[2:]
    if targets.shape != expected:
        raise ValueError(f"cross_entropy: logits of shape {logits.shape} need targets of shape "
                         f"{expected}, got {targets.shape}")
    spatial_shape = targets.shape
    if logits.ndim > 2:  # move the class axis last, then treat every position as a sample
        axes = (0,) + tuple(range(2, logits.ndim)) + (1,)
        logits = logits.permute(axes).reshape(-1, logits.shape[1])
    be = targets.backend
    flat_targets = be.astype(be.reshape(targets.data, (-1,)), np.int64)
    try:
        out = SoftmaxCrossEntropy.apply(logits, targets=flat_targets,
                                        ignore_index=int(ignore_index),
                                        label_smoothing=float(label_smoothing),
                                        reduction=reduction)
    except ValueError as error:  # the kernel's range check does not know the op or the shapes
        raise ValueError(f"cross_entropy: {error} (logits of shape {logits.shape}, targets of "
                         f"shape {targets.shape})") from None
    return out.reshape(spatial_shape) if reduction == "none" else out


def nll_loss(log_probs: Tensor, targets, reduction: str = "mean",
             ignore_index: int = -100) -> Tensor:
    """Negative log-likelihood of integer targets (N,) under log-probabilities (N, C)."""
    targets = as_tensor(targets) if not isinstance(targets, Tensor) else targets
    if log_probs.ndim != 2 or targets.shape != (log_probs.shape[0],):
        raise ValueError(f"nll_loss: expected log_probs (N, C) and targets (N,), got "
                         f"{log_probs.shape} and {targets.shape}")
    if targets.dtype.kind not in "iu":
        raise TypeError(f"nll_loss: targets must be integer class indices, got {targets.dtype}")
    if targets.device != log_probs.device:
        raise ValueError(f"nll_loss: targets are on {targets.device}, log_probs on "
                         f"{log_probs.device}")
    # log p[target] is picked with a one-hot mask (all False on ignored rows), built on the
    # device; the backend rejects targets out of range. where() rather than a product with the
    # one-hot rows, so that the other, possibly -inf, entries are never multiplied by 0.
    be = log_probs.backend
    t = be.astype(targets.data, np.int64)
    keep = be.not_equal(t, ignore_index)
    try:
        one_hot = be.one_hot(be.where(keep, t, 0), log_probs.shape[1], np.bool_)
    except IndexError:
        raise ValueError(f"nll_loss: targets must be in [0, {log_probs.shape[1]}) or "
                         f"ignore_index={ignore_index}") from None
    picked = Tensor._wrap(be.logical_and(one_hot, be.reshape(keep, (-1, 1))), log_probs.device)
    losses = -where(picked, log_probs, 0.0).sum(axis=1)
    if reduction == "mean":
        # Divided by the number of kept targets, counted on the device (nan if none is kept).
        kept = be.sum(be.astype(keep, log_probs.dtype))
        kept = be.where(be.greater(kept, 0), kept, np.nan)
        return losses.sum() / Tensor._wrap(kept, log_probs.device)
    return _reduce_loss("nll_loss", losses, reduction)


def mse_loss(prediction: Tensor, target, reduction: str = "mean") -> Tensor:
    """Mean squared error ((prediction - target)²)."""
    target = as_tensor(target, like=prediction)
    if target.shape != prediction.shape:
        raise ValueError(f"mse_loss: prediction of shape {prediction.shape} and target of shape "
                         f"{target.shape} differ")
    difference = prediction - target
    return _reduce_loss("mse_loss", difference * difference, reduction)


class BinaryCrossEntropyWithLogits(Function):
    """Per element: log(1 + e^x) - y·x, computed as max(x, 0) - x·y + log(1 + e^-|x|) so e^x
    never overflows. Its derivative in x is σ(x) - y, and in y it is -x (PyTorch differentiates
    the target too, e.g. for soft labels produced by another network)."""

    def forward(self, x, y):
        be = self.backend
        self.x, self.y = x, y
        softplus_tail = be.log(be.add(be.exp(be.neg(be.abs(x))), 1))
        return be.add(be.sub(be.relu(x), be.mul(x, y)), softplus_tail)

    def backward(self, grad):
        be = self.backend
        return be.mul(grad, be.sub(be.sigmoid(self.x), self.y)), be.neg(be.mul(grad, self.x))


def binary_cross_entropy_with_logits(logits: Tensor, target, reduction: str = "mean") -> Tensor:
    target = as_tensor(target, like=logits)
    require_float("binary_cross_entropy_with_logits", logits, "logits")
    if target.shape != logits.shape:
        raise ValueError(f"binary_cross_entropy_with_logits: logits of shape {logits.shape} and "
                         f"target of shape {target.shape} differ")
    losses = BinaryCrossEntropyWithLogits.apply(logits, target.to(dtype=logits.dtype))
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

class LayerNorm(Function):
    def forward(self, x, weight=None, bias=None, *, normalized_size, eps):
        be = self.backend
        self.shape = x.shape
        rows = be.reshape(x, (-1, normalized_size))
        w = None if weight is None else be.reshape(weight, (-1,))
        b = None if bias is None else be.reshape(bias, (-1,))
        y, self.mean, self.rstd = be.layer_norm_forward(rows, w, b, eps)
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
    inputs = (x,) if weight is None else (x, weight, bias)
    return LayerNorm.apply(*inputs, normalized_size=int(np.prod(normalized_shape)), eps=eps)


class BatchNorm(Function):
    """Normalise each channel (axis 1) over the batch and spatial axes.

    With x̂ = (x - μ)·r, r = 1/sqrt(σ² + eps) and m values per channel, the input gradient is
    dx = r/m · (m·dx̂ - Σdx̂ - x̂·Σ(dx̂·x̂)) where dx̂ = dy·γ, because μ and σ² depend on every x.
    In evaluation the statistics are constants and dx = dy·γ·r.
    """

    def forward(self, x, weight=None, bias=None, *, mean, var, eps, batch_stats):
        be = self.backend
        self.axes = (0,) + tuple(range(2, x.ndim))
        shape = (1, -1) + (1,) * (x.ndim - 2)
        self.batch_stats = batch_stats
        self.rstd = be.reshape(be.div(1, be.sqrt(be.add(var, eps))), shape)
        self.x_hat = be.mul(be.sub(x, be.reshape(mean, shape)), self.rstd)
        self.gamma = None if weight is None else be.reshape(weight, shape)
        y = self.x_hat if weight is None else be.mul(self.x_hat, self.gamma)
        return y if bias is None else be.add(y, be.reshape(bias, shape))

    def backward(self, grad):
        be = self.backend
        grad_x_hat = grad if self.gamma is None else be.mul(grad, self.gamma)
        if self.batch_stats:
            count = grad.size // grad.shape[1]
            sum_g = be.sum(grad_x_hat, axis=self.axes, keepdims=True)
            sum_gx = be.sum(be.mul(grad_x_hat, self.x_hat), axis=self.axes, keepdims=True)
            inner = be.sub(be.sub(be.mul(grad_x_hat, grad.dtype.type(count)), sum_g),
                           be.mul(self.x_hat, sum_gx))
            grad_x = be.mul(inner, be.div(self.rstd, grad.dtype.type(count)))
        else:
            grad_x = be.mul(grad_x_hat, self.rstd)
        if self.gamma is None:
            return grad_x
        grad_weight = be.sum(be.mul(grad, self.x_hat), axis=self.axes)
        grad_bias = be.sum(grad, axis=self.axes)
        return grad_x, grad_weight, grad_bias


def batch_norm(x: Tensor, running_mean: Tensor | None, running_var: Tensor | None,
               weight: Tensor | None = None, bias: Tensor | None = None, training: bool = False,
               momentum: float = 0.1, eps: float = 1e-5) -> Tensor:
    """Batch normalisation over axis 1 of x (N, C, ...), as PyTorch's ``F.batch_norm``.

    In training the batch statistics normalise, and the running statistics (if given) move
    towards them: running = (1 - momentum)·running + momentum·batch, with the unbiased batch
    variance, as PyTorch does. In evaluation the running statistics normalise.
    """
    if x.ndim < 2:
        raise ValueError(f"batch_norm: input must be at least 2-D (N, C, ...), got {x.shape}")
    channels = x.shape[1]
    for name, t in (("running_mean", running_mean), ("running_var", running_var),
                    ("weight", weight), ("bias", bias)):
        if t is not None and t.shape != (channels,):
            raise ValueError(f"batch_norm: {name} has shape {t.shape}, expected ({channels},) "
                             f"for input of shape {x.shape}")
    be = x.backend
    if training:
        axes = (0,) + tuple(range(2, x.ndim))
        count = x.numel() // max(channels, 1)
        if count <= 1:
            raise ValueError(f"batch_norm: expected more than 1 value per channel when "
                             f"training, got input of shape {x.shape}")
        mean = be.div(be.sum(x.data, axis=axes), x.dtype.type(count))
        centered = be.sub(x.data, be.reshape(mean, (1, -1) + (1,) * (x.ndim - 2)))
        var = be.div(be.sum(be.mul(centered, centered), axis=axes), x.dtype.type(count))
        # The running statistics are updated in place: state_dict() hands out their storage.
        if running_mean is not None:
            _move_towards(be, running_mean.data, mean, momentum)
        if running_var is not None:
            unbiased = be.mul(var, x.dtype.type(count / (count - 1)))
            _move_towards(be, running_var.data, unbiased, momentum)
    else:
        if running_mean is None or running_var is None:
            raise ValueError("batch_norm: evaluation needs running_mean and running_var")
        mean, var = running_mean.data, running_var.data
    inputs = (x,) if weight is None else (x, weight, bias)
    return BatchNorm.apply(*inputs, mean=mean, var=var, eps=eps, batch_stats=training)


def _move_towards(be, running, batch, momentum: float) -> None:
    """running = (1 - momentum)·running + momentum·batch, in place, in running's dtype."""
    dtype = running.dtype.type
    be.assign_(running, be.add(be.mul(running, dtype(1 - momentum)),
                               be.mul(be.astype(batch, running.dtype), dtype(momentum))))


# -- embedding -------------------------------------------------------------------------------------

class EmbeddingLookup(Function):
    """Rows of the table picked by integer indices (a gather on the device); the gradient of
    each picked row is scatter-added back into the table's gradient, so a row picked twice
    receives both gradients."""

    def forward(self, weight, indices):
        self.indices, self.shape, self.dtype = indices, weight.shape, weight.dtype
        return self.backend.take(weight, indices)

    def backward(self, grad):
        return self.backend.index_add(self.shape, (self.indices,), grad, self.dtype), None


def embedding(indices, weight: Tensor) -> Tensor:
    """Rows of ``weight`` picked by integer ``indices``; gradients scatter-add into those rows."""
    indices = indices if isinstance(indices, Tensor) else as_tensor(np.asarray(indices))
    if indices.dtype.kind not in "iu":
        raise TypeError(f"embedding: indices must be integers, got {indices.dtype}")
    if indices.device != weight.device:
        raise ValueError(f"embedding: indices are on {indices.device}, weight on {weight.device}")
    try:  # the backend checks the range where the indices are
        return EmbeddingLookup.apply(weight, indices)
    except IndexError as error:
        raise IndexError(f"embedding: {error} (a table of {weight.shape[0]} rows)") from None
