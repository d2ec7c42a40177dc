"""Neural-network kernels (plain NumPy): softmax, fused softmax-cross-entropy, GELU, layer norm.

Each is a handful of array expressions written straight from its formula. They are "kernels"
rather than compositions of autograd ops because their gradients simplify a lot when derived as
a whole (softmax-CE's gradient is just ``softmax - target``) and because the fused forms are
numerically safer (log-softmax never takes the log of an underflowed probability).

All results keep the input's floating dtype; constants are Python floats so NumPy's promotion
rules never widen float32 to float64.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = [
    "softmax",
    "softmax_backward",
    "log_softmax",
    "softmax_cross_entropy_forward",
    "softmax_cross_entropy_backward",
    "gelu_forward",
    "gelu_backward",
    "layer_norm_forward",
    "layer_norm_backward",
    "batch_norm_forward",
    "batch_norm_backward",
]

# ---------------------------------------------------------------------------------------------
# softmax


def softmax(x: np.ndarray, axis: int) -> np.ndarray:
    """exp(x) / sum(exp(x)) along ``axis``.

    Softmax is unchanged by subtracting a constant from every entry, so subtracting the max makes
    the largest exponent exp(0) = 1: nothing overflows and the sum is at least 1.
    """
    if x.shape[axis] == 0:
        return x.copy()  # nothing to normalise (np.max of an empty axis would raise)
    shifted = x - np.max(x, axis=axis, keepdims=True)
    exps = np.exp(shifted)
    return exps / np.sum(exps, axis=axis, keepdims=True)


def softmax_backward(grad: np.ndarray, out: np.ndarray, axis: int) -> np.ndarray:
    """dL/dx for out = softmax(x): out ⊙ (grad - Σ grad ⊙ out) along ``axis``.

    The Jacobian of softmax is diag(out) - out outᵀ; applied to grad it is
    out ⊙ grad - out (outᵀ grad), so only one dot product per row is needed.
    """
    dot = np.sum(grad * out, axis=axis, keepdims=True)
    return out * (grad - dot)


def log_softmax(x: np.ndarray, axis: int) -> np.ndarray:
    """log(softmax(x)) = x - max - log(sum(exp(x - max))) along ``axis``, without forming softmax."""
    if x.shape[axis] == 0:
        return x.copy()
    shifted = x - np.max(x, axis=axis, keepdims=True)
    return shifted - np.log(np.sum(np.exp(shifted), axis=axis, keepdims=True))


# ---------------------------------------------------------------------------------------------
# softmax + cross-entropy, fused


def check_class_targets(targets: np.ndarray, num_classes: int, ignore_index: int) -> None:
    """Raise ValueError naming the first target outside [0, num_classes) that is not ignore_index."""
    bad = (targets != ignore_index) & ((targets < 0) | (targets >= num_classes))
    if np.any(bad):
        value = int(targets[np.argmax(bad)])
        raise ValueError(f"target {value} is out of range for {num_classes} classes")


CROSS_ENTROPY_REDUCTIONS = ("none", "sum", "mean")
"""What ``softmax_cross_entropy_forward`` may do with its per-row losses (PyTorch's names)."""


def check_cross_entropy_reduction(reduction) -> None:
    if reduction not in CROSS_ENTROPY_REDUCTIONS:
        raise ValueError(f"softmax_cross_entropy: reduction must be 'none', 'sum' or 'mean', "
                         f"got {reduction!r}")


def _kept_count(targets, ignore_index, dtype):
    """How many rows are not ignored, in the losses' floating ``dtype`` (exact below 2**24)."""
    return np.sum(np.not_equal(targets, ignore_index).astype(dtype, copy=False), dtype=dtype)


def reduce_cross_entropy(losses, targets, ignore_index, reduction):
    """The per-row ``losses`` as ``reduction`` asks: themselves, their sum, or their mean over
    the rows not ignored. With every row ignored the mean is 0/0 = nan, as PyTorch's; dividing
    by nan instead of 0 gives the same nan without NumPy's warning."""
    check_cross_entropy_reduction(reduction)
    if reduction == "none":
        return losses
    total = np.sum(losses, dtype=losses.dtype)
    if reduction == "sum":
        return total
    count = _kept_count(targets, ignore_index, losses.dtype)
    return np.true_divide(total, np.where(np.greater(count, 0), count, np.nan))


def cross_entropy_row_grads(grad, targets, ignore_index, reduction, dtype):
    """The gradient reaching each row's loss from the gradient of the ``reduction``'s result:
    grad itself per row ("none"), grad on every row ("sum"), grad / count ("mean"; the count at
    least 1, so rows that are all ignored get 0 rather than nan)."""
    check_cross_entropy_reduction(reduction)
    if reduction == "none":
        return grad
    if reduction == "mean":
        grad = np.true_divide(grad, np.maximum(_kept_count(targets, ignore_index, dtype), 1))
    return np.broadcast_to(grad, (len(targets),))


def softmax_cross_entropy_forward(logits: np.ndarray, targets: np.ndarray, ignore_index: int,
                                  label_smoothing: float, reduction: str = "none"):
    """Per-sample cross-entropy of ``logits`` (N, C) against class ``targets`` (N,).

    With label smoothing eps the target distribution is (1-eps)*onehot + eps/C, so::

        loss_i = -(1-eps) * logp[i, t_i] - eps/C * sum_c logp[i, c]

    Rows whose target equals ``ignore_index`` get loss 0. Returns ``(losses, log_probs)``, the
    losses reduced as ``reduction`` asks (:func:`reduce_cross_entropy`); the log probabilities are
    kept for the backward pass.
    """
    check_cross_entropy_reduction(reduction)
    n, num_classes = logits.shape
    check_class_targets(targets, num_classes, ignore_index)
    log_probs = log_softmax(logits, axis=1)
    kept = targets != ignore_index
    safe_targets = np.where(kept, targets, 0)  # any valid column; the row is zeroed below
    picked = log_probs[np.arange(n), safe_targets]
    eps = float(label_smoothing)
    losses = -(1.0 - eps) * picked
    if eps != 0.0:
        losses = losses - (eps / num_classes) * np.sum(log_probs, axis=1)
    losses = np.where(kept, losses, 0).astype(logits.dtype, copy=False)
    return reduce_cross_entropy(losses, targets, ignore_index, reduction), log_probs


def softmax_cross_entropy_backward(grad_losses, log_probs, targets, ignore_index, label_smoothing,
                                   reduction: str = "none") -> np.ndarray:
    """Gradient of the (reduced) losses with respect to the logits.

    d loss_i / d logits_i = softmax_i - target_distribution_i (the log-sum-exp's gradient is the
    softmax, the linear term's is the target), scaled by the incoming grad_i; ignored rows are 0.
    """
    n, num_classes = log_probs.shape
    grad_losses = cross_entropy_row_grads(grad_losses, targets, ignore_index, reduction,
                                          log_probs.dtype)
    eps = float(label_smoothing)
    kept = targets != ignore_index
    dlogits = np.exp(log_probs) - eps / num_classes
    dlogits[np.arange(n)[kept], targets[kept]] -= 1.0 - eps
    scale = np.where(kept, grad_losses, 0).astype(log_probs.dtype, copy=False)
    return dlogits * scale[:, None]


# ---------------------------------------------------------------------------------------------
# GELU
#
# Both curves are written so that nothing cancels for very negative x, where GELU -> 0:
# - exact: Phi(x) = (1 + erf(x/sqrt 2)) / 2 = erfc(-x/sqrt 2) / 2; "1 + erf" would subtract two
#   numbers near 1, erfc computes the small tail directly.
# - tanh: (1 + tanh(u)) / 2 = sigmoid(2u) = 1 / (1 + exp(-2u)), and 1 - tanh(u)^2 =
#   4 sigmoid(2u) sigmoid(-2u); exp may overflow to inf, which only makes a sigmoid exactly 0.

_SQRT_HALF = math.sqrt(0.5)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)
_TANH_SCALE = math.sqrt(2.0 / math.pi)
_TANH_CUBIC = 0.044715

_erfc = np.vectorize(math.erfc, otypes=[np.float64])


def check_gelu_approximate(approximate: str) -> None:
    """Refuse a GELU ``approximate`` other than PyTorch's two: ``"none"`` (exact, with erf) and
    ``"tanh"``; every backend's GELU kernels check it the same way."""
    if approximate not in ("none", "tanh"):
        raise ValueError(f"gelu approximate must be 'none' or 'tanh', got {approximate!r}")


def _normal_cdf(x):
    return 0.5 * _erfc(-_SQRT_HALF * np.asarray(x, dtype=np.float64))


def _sigmoid(z):
    with np.errstate(over="ignore"):
        return 1.0 / (1.0 + np.exp(-z))


def _tanh_inner(x):
    """u(x) = sqrt(2/pi) * (x + 0.044715 x^3), the argument of tanh in the approximation."""
    return _TANH_SCALE * (x + _TANH_CUBIC * x * x * x)


def gelu_forward(x: np.ndarray, approximate: str) -> np.ndarray:
    """GELU(x) = x * Phi(x), Phi the standard normal CDF.

    "none": Phi(x) = (1 + erf(x/sqrt 2)) / 2 exactly. "tanh": Phi(x) ~ (1 + tanh(u)) / 2 with
    u = sqrt(2/pi) * (x + 0.044715 x^3), the cheaper approximation GPT-2 and PyTorch offer.
    """
    check_gelu_approximate(approximate)
    if approximate == "tanh":
        return x * _sigmoid(2.0 * _tanh_inner(x))
    return (x * _normal_cdf(x)).astype(x.dtype, copy=False)


def gelu_backward(grad: np.ndarray, x: np.ndarray, approximate: str) -> np.ndarray:
    """grad * GELU'(x).

    Exact: d/dx [x Phi(x)] = Phi(x) + x phi(x), phi(x) = exp(-x^2/2) / sqrt(2 pi).
    Tanh: with t = tanh(u), d/dx = (1+t)/2 + x/2 * (1 - t^2) * u'(x), u'(x) = sqrt(2/pi) *
    (1 + 3*0.044715 x^2); in sigmoid form (1+t)/2 = s(2u) and (1 - t^2)/2 = 2 s(2u) s(-2u).
    """
    check_gelu_approximate(approximate)
    if approximate == "tanh":
        u = _tanh_inner(x)
        rising, falling = _sigmoid(2.0 * u), _sigmoid(-2.0 * u)
        du_dx = _TANH_SCALE * (1.0 + 3.0 * _TANH_CUBIC * x * x)
        return grad * (rising + 2.0 * x * rising * falling * du_dx)
    pdf = _INV_SQRT_2PI * np.exp(-0.5 * np.asarray(x, dtype=np.float64) ** 2)
    return (grad * (_normal_cdf(x) + x * pdf)).astype(x.dtype, copy=False)


# ---------------------------------------------------------------------------------------------
# layer norm


def layer_norm_forward(x: np.ndarray, weight, bias, eps: float):
    """Normalise each row of ``x`` (M, D) to zero mean and unit (biased) variance, then scale/shift.

    y = (x - mean) * rstd * weight + bias, rstd = 1 / sqrt(var + eps). Returns ``(y, mean, rstd)``
    with mean and rstd of shape (M,), kept for the backward pass.
    """
    # The statistics and the normalised row in float64, as the Numba kernel (and PyTorch's
    # accumulation) does: a float32 mean of a constant row can be off by an ulp, and that error,
    # scaled by rstd = 1/sqrt(eps) ≈ 316, would turn the exact 0 output into ~1e-4.
    wide = x.astype(np.float64)
    mean = np.mean(wide, axis=1)
    centered = wide - mean[:, None]
    variance = np.mean(centered * centered, axis=1)
    rstd = 1.0 / np.sqrt(variance + float(eps))
    y = centered * rstd[:, None]
    if weight is not None:
        y = y * weight
    if bias is not None:
        y = y + bias
    return (y.astype(x.dtype, copy=False), mean.astype(x.dtype, copy=False),
            rstd.astype(x.dtype, copy=False))


def layer_norm_backward(grad: np.ndarray, x: np.ndarray, mean, rstd, weight):
    """Gradients of layer norm: ``(dx, dweight, dbias)``.

    With xhat = (x - mean) * rstd and g = grad * weight, differentiating through mean and rstd
    gives, per row of length D::

        dx = rstd * (g - mean(g) - xhat * mean(g * xhat))

    (the two subtracted terms remove the components along 1 and along xhat that the normalisation
    cannot change). dweight = sum_rows(grad * xhat), dbias = sum_rows(grad); both are None when
    there is no weight.
    """
    # In float64, as the forward and the kernels: in a short row the two subtracted means
    # nearly cancel g (a row of two has dx[0] = -dx[1] exactly), and float32 arithmetic keeps
    # little more than the rounding of that difference.
    wide = grad.astype(np.float64)
    rstd = rstd.astype(np.float64)
    xhat = (x - mean[:, None].astype(np.float64)) * rstd[:, None]
    g = wide * weight if weight is not None else wide
    dx = rstd[:, None] * (
        g - np.mean(g, axis=1, keepdims=True) - xhat * np.mean(g * xhat, axis=1, keepdims=True)
    )
    dx = dx.astype(x.dtype, copy=False)
    if weight is None:
        return dx, None, None
    return dx, np.sum(wide * xhat, axis=0).astype(x.dtype), np.sum(wide, axis=0).astype(x.dtype)


# ---------------------------------------------------------------------------------------------
# batch norm: layer norm's twin, normalising each channel (axis 1 of (N, C, S)) instead of each row


def batch_norm_forward(x: np.ndarray, weight, bias, mean, var, eps: float):
    """Normalise each channel of ``x`` (N, C, S): y = (x - mean)·rstd·weight + bias.

    With ``mean``/``var`` None they are the batch's: the mean and the biased variance of the N·S
    values of each channel (two passes: the variance of the centred values, which does not lose
    digits as E[x²] - E[x]² does). As in layer norm the arithmetic is float64, so the Numba
    kernel's float64 accumulators agree with it to rounding. Returns ``(y, mean, var, rstd)``.
    """
    wide = x.astype(np.float64)
    if mean is None:
        mean = np.mean(wide, axis=(0, 2))
        centered = wide - mean[:, None]
        var = np.mean(centered * centered, axis=(0, 2))
    else:
        mean, var = np.asarray(mean, np.float64), np.asarray(var, np.float64)
        centered = wide - mean[:, None]
    rstd = 1.0 / np.sqrt(var + float(eps))
    # (x - mean)·(rstd·weight) + bias, in this order: the Numba kernel's, so that with given
    # statistics the two give the same values (the backend may run either, see numba_cpu.loading).
    scale = rstd if weight is None else rstd * weight
    y = centered * scale[:, None]
    if bias is not None:
        y = y + bias[:, None]
    return tuple(a.astype(x.dtype, copy=False) for a in (y, mean, var, rstd))


def batch_norm_backward(grad: np.ndarray, x: np.ndarray, mean, rstd, weight, batch_stats: bool):
    """Gradients of batch norm: ``(dx, dweight, dbias)``.

    With x̂ = (x - mean)·rstd and m = N·S values per channel, dweight = Σ grad·x̂ and
    dbias = Σ grad over each channel. With batch statistics mean and rstd depend on x, and
    dx = weight·rstd·(grad - Σgrad/m - x̂·Σ(grad·x̂)/m) (layer norm's formula, per channel);
    with fixed statistics dx = weight·rstd·grad.
    """
    wide = grad.astype(np.float64)
    rstd = rstd.astype(np.float64)
    xhat = (x - mean[:, None].astype(np.float64)) * rstd[:, None]
    sum_g = np.sum(wide, axis=(0, 2))
    sum_gx = np.sum(wide * xhat, axis=(0, 2))
    scale = rstd if weight is None else rstd * weight
    if batch_stats:
        count = x.shape[0] * x.shape[2]
        dx = scale[:, None] * (wide - sum_g[:, None] / count - xhat * (sum_gx / count)[:, None])
    else:
        dx = scale[:, None] * wide
    dx = dx.astype(x.dtype, copy=False)
    if weight is None:
        return dx, None, None
    return dx, sum_gx.astype(x.dtype), sum_g.astype(x.dtype)
