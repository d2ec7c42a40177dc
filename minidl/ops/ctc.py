"""Connectionist temporal classification (CTC), the loss of speech and handwriting models.

A model emits, at each of T time steps, log-probabilities over C classes, one of them the
*blank*. An *alignment* picks one class per step; collapsing repeats and then dropping blanks
turns it into a label sequence. CTC's loss is -log p(target), p summing the probability of
every alignment that collapses to the target -- exponentially many, summed by dynamic
programming over the *extended* target l' = (blank, l1, blank, l2, ..., blank) of length
L = 2S + 1:

    α_t(s) = y_t(l'_s) · (α_{t-1}(s) + α_{t-1}(s-1) + skip_s·α_{t-1}(s-2)),
    skip_s = [l'_s ≠ blank and l'_s ≠ l'_{s-2}]

(an alignment stays on a symbol, moves to the next, or skips a blank between two different
labels), with α_0 non-zero only at s = 0, 1, and p = α_{T-1}(L-1) + α_{T-1}(L-2). β runs the
same recursion backwards from the end. Products of hundreds of probabilities underflow, so
both run in log space (sums become ``logaddexp``).

The gradient, from α and β: α_t(s)·β_t(s) (both including y_t(l'_s)) is the probability mass of
the alignments through symbol s at step t, so with lp = log y

    ∂(-log p)/∂lp_t(c) = -(1/p)·Σ_{s: l'_s = c} α_t(s)·β_t(s) / y_t(c).

(PyTorch returns this plus y_t(c), a term that a preceding ``log_softmax`` cancels; the two
agree on the gradient of the logits, which is what a model trains.)
"""

from __future__ import annotations

import numpy as np

from ..autograd.function import Function
from ..autograd.tensor import Tensor, as_tensor
from .nn_ops import _reduce_loss


def _logsumexp3(a, b, c):
    """log(eᵃ + eᵇ + eᶜ) elementwise, -inf when all three are."""
    top = np.maximum(np.maximum(a, b), c)
    finite = np.isfinite(top)
    shift = np.where(finite, top, 0.0)
    with np.errstate(divide="ignore"):
        total = np.log(np.exp(a - shift) + np.exp(b - shift) + np.exp(c - shift)) + shift
    return np.where(finite, total, -np.inf)


def _extended_targets(targets: np.ndarray, blank: int) -> np.ndarray:
    """(N, 2S+1): the targets with a blank before, between and after the labels."""
    batch, labels = targets.shape
    extended = np.full((batch, 2 * labels + 1), blank, dtype=np.int64)
    extended[:, 1::2] = targets
    return extended


def _shifted(values: np.ndarray, by: int) -> np.ndarray:
    """``values`` moved ``by`` places along the last axis (right for by > 0), -inf filling."""
    out = np.full_like(values, -np.inf)
    if by > 0:
        out[..., by:] = values[..., :-by]
    else:
        out[..., :by] = values[..., -by:]
    return out


def ctc_alpha_beta(log_probs, extended, input_lengths, extended_lengths, blank):
    """Log α and log β, each (T, N, L), and -log p per sample (N,), in float64 on the host.

    Positions past a sample's input length or extended length stay at -inf.
    """
    steps, batch, _ = log_probs.shape
    width = extended.shape[1]
    rows = np.arange(batch)[:, None]
    emit = log_probs[:, rows, extended]  # (T, N, L): lp_t(l'_s)
    inside = np.arange(width)[None, :] < extended_lengths[:, None]
    # The skip s-2 -> s is allowed onto a label that differs from the label two places back.
    skip = (extended != blank) & (extended != _shifted(extended.astype(float), 2))
    skip[:, :2] = False
    alpha = np.full((steps, batch, width), -np.inf)
    beta = np.full((steps, batch, width), -np.inf)
    start = np.full((batch, width), -np.inf)
    start[:, :2] = emit[0, :, :2]
    alpha[0] = np.where(inside, start, -np.inf)
    for t in range(1, steps):
        previous = alpha[t - 1]
        moved = _logsumexp3(previous, _shifted(previous, 1),
                            np.where(skip, _shifted(previous, 2), -np.inf))
        alpha[t] = np.where(inside & (t < input_lengths)[:, None], moved + emit[t], -np.inf)
    # β's recursion mirrors α's: from s to s+1 or, where s+2 may be skipped to, s+2.
    skip_from = np.zeros_like(skip)
    skip_from[:, :-2] = skip[:, 2:]
    last = extended_lengths[:, None] - 1
    columns = np.arange(width)[None, :]
    for t in range(steps - 1, -1, -1):
        ends_here = (t == input_lengths - 1)[:, None]
        end = np.where((columns == last) | (columns == last - 1), emit[t], -np.inf)
        if t + 1 < steps:
            following = beta[t + 1]
            moved = _logsumexp3(following, _shifted(following, -1),
                                np.where(skip_from, _shifted(following, -2), -np.inf)) + emit[t]
        else:
            moved = np.full((batch, width), -np.inf)
        active = (t < input_lengths - 1)[:, None]
        beta[t] = np.where(inside & ends_here, end, np.where(inside & active, moved, -np.inf))
    final = alpha[input_lengths - 1, np.arange(batch)]  # (N, L)
    ends = np.stack([final[np.arange(batch), extended_lengths - 1],
                     final[np.arange(batch), np.maximum(extended_lengths - 2, 0)]])
    ends[1, extended_lengths < 2] = -np.inf  # an empty target ends only on its one blank
    return alpha, beta, -np.logaddexp(ends[0], ends[1])


class CTCLossFunction(Function):
    """-log p(target | log_probs) per sample, (N,), from (T, N, C) log-probabilities; see the
    module docstring for the recursion and the gradient."""

    def forward(self, log_probs, *, targets, input_lengths, target_lengths, blank,
                zero_infinity):
        be = self.backend
        lp = be.to_numpy(log_probs).astype(np.float64)
        extended = _extended_targets(targets, blank)
        alpha, beta, nll = ctc_alpha_beta(lp, extended, input_lengths, 2 * target_lengths + 1,
                                          blank)
        self.dtype = be.to_numpy(log_probs).dtype
        self.lp, self.extended, self.nll = lp, extended, nll
        self.alpha, self.beta = alpha, beta
        self.infinite = ~np.isfinite(nll) if zero_infinity else np.zeros(len(nll), bool)
        return be.from_numpy(np.where(self.infinite, 0.0, nll).astype(self.dtype))

    def backward(self, grad):
        be = self.backend
        steps, batch, classes = self.lp.shape
        # Occupancy Σ_{s: l'_s = c} α_t(s)β_t(s)/p, gathered per class; then divided by y_t(c).
        with np.errstate(invalid="ignore"):
            mass = np.exp(self.alpha + self.beta + self.nll[None, :, None])
        mass = np.nan_to_num(mass, nan=0.0, posinf=0.0)
        occupancy = np.zeros((steps, batch, classes))
        labels = np.broadcast_to(self.extended[None], mass.shape)
        t_index = np.broadcast_to(np.arange(steps)[:, None, None], mass.shape)
        n_index = np.broadcast_to(np.arange(batch)[None, :, None], mass.shape)
        np.add.at(occupancy, (t_index, n_index, labels), mass)
        with np.errstate(divide="ignore"):
            local = -np.exp(np.log(occupancy) - self.lp)
        local[:, self.infinite | ~np.isfinite(self.nll), :] = 0.0
        upstream = be.to_numpy(grad).astype(np.float64)
        return be.from_numpy((local * upstream[None, :, None]).astype(self.dtype)),


def _lengths(values, name: str, batch: int, limit: int, limit_name: str,
             minimum: int = 0) -> np.ndarray:
    array = np.asarray(values.numpy() if isinstance(values, Tensor) else values).reshape(-1)
    if array.dtype.kind not in "iu" or array.shape != (batch,):
        raise ValueError(f"ctc_loss: {name} must hold {batch} integers (one per sample), got "
                         f"{array.dtype} of shape {array.shape}")
    if (array < minimum).any() or (array > limit).any():
        raise ValueError(f"ctc_loss: {name} must lie in [{minimum}, {limit}] ({limit_name}), got "
                         f"{array.tolist()}")
    return array.astype(np.int64)


def ctc_loss(log_probs: Tensor, targets, input_lengths, target_lengths, blank: int = 0,
             reduction: str = "mean", zero_infinity: bool = False) -> Tensor:
    """PyTorch's ``ctc_loss``. ``log_probs``: (T, N, C) log-probabilities (``log_softmax``
    over C), or (T, C) for one sample. ``targets``: (N, S) labels padded past each
    ``target_lengths[n]``, or all targets concatenated in 1-D. ``input_lengths``: the valid
    steps of each sample. ``reduction="mean"`` divides each loss by its target length, then
    averages over the batch; ``zero_infinity`` zeroes the loss (and gradient) of a target no
    alignment can produce (too long for its input).
    """
    unbatched = log_probs.ndim == 2
    if unbatched:
        log_probs = log_probs.unsqueeze(1)
    if log_probs.ndim != 3:
        raise ValueError(f"ctc_loss: log_probs must be (T, N, C), got shape {log_probs.shape}")
    steps, batch, classes = log_probs.shape
    if not 0 <= blank < classes:
        raise ValueError(f"ctc_loss: blank={blank} is not one of the {classes} classes")
    targets = np.asarray(targets.numpy() if isinstance(targets, Tensor) else targets)
    if unbatched and targets.ndim == 1:
        targets = targets[None]
    input_lengths = _lengths(input_lengths, "input_lengths", batch, steps, "the T of log_probs",
                             minimum=1)
    if targets.ndim == 1:
        target_lengths = _lengths(target_lengths, "target_lengths", batch, len(targets),
                                  "the concatenated targets' length")
        if target_lengths.sum() != len(targets):
            raise ValueError(f"ctc_loss: concatenated targets hold {len(targets)} labels, "
                             f"target_lengths sum to {target_lengths.sum()}")
        padded = np.full((batch, max(int(target_lengths.max(initial=0)), 1)), blank, np.int64)
        offsets = np.concatenate([[0], np.cumsum(target_lengths)])
        for n in range(batch):
            padded[n, :target_lengths[n]] = targets[offsets[n]:offsets[n + 1]]
        targets = padded
    elif targets.ndim == 2 and len(targets) == batch:
        target_lengths = _lengths(target_lengths, "target_lengths", batch, targets.shape[1],
                                  "the S of targets")
        targets = targets.astype(np.int64)
    else:
        raise ValueError(f"ctc_loss: targets must be (N, S) or 1-D concatenated, got shape "
                         f"{targets.shape} for a batch of {batch}")
    for n in range(batch):
        used = targets[n, :target_lengths[n]]
        if ((used < 0) | (used >= classes) | (used == blank)).any():
            raise ValueError(f"ctc_loss: targets of sample {n} must be classes in [0, {classes})"
                             f" other than blank={blank}, got {used.tolist()}")
    losses = CTCLossFunction.apply(log_probs, targets=targets, input_lengths=input_lengths,
                                   target_lengths=target_lengths, blank=int(blank),
                                   zero_infinity=bool(zero_infinity))
    if reduction == "mean":
        divisor = as_tensor(np.maximum(target_lengths, 1).astype(log_probs.dtype))
        return (losses / divisor.to(log_probs.device)).mean()
    if unbatched and reduction == "none":
        return losses.reshape(())
    return _reduce_loss("ctc_loss", losses, reduction)
