"""Normalisation within each sample: group norm and instance norm.

Both are batch normalisation applied to a reshaped input. Folding the batch into the channels,
(N, C, ...) -> (1, N·G, ...), makes every (sample, group) pair a "channel" of its own, so the
fused batch-norm op computes its mean and variance over exactly that sample's group, with the
same one-node forward and backward. Instance norm is group norm with one channel per group.
"""

from __future__ import annotations

import math

from ..autograd.tensor import Tensor
from .nn_ops import BatchNormFunction, batch_norm


def _channel_shape(x: Tensor) -> tuple:
    return (1, x.shape[1]) + (1,) * (x.ndim - 2)


def _affine(x: Tensor, weight: Tensor | None, bias: Tensor | None) -> Tensor:
    if weight is not None:
        x = x * weight.reshape(_channel_shape(x))
    if bias is not None:
        x = x + bias.reshape(_channel_shape(x))
    return x


def _check_per_channel(op: str, x: Tensor, **tensors) -> None:
    for name, t in tensors.items():
        if t is not None and t.shape != (x.shape[1],):
            raise ValueError(f"{op}: {name} has shape {t.shape}, expected ({x.shape[1]},) for "
                             f"input of shape {x.shape}")


def group_norm(x: Tensor, num_groups: int, weight: Tensor | None = None,
               bias: Tensor | None = None, eps: float = 1e-5) -> Tensor:
    """Normalise each sample's channels in ``num_groups`` groups (biased variance), then scale
    and shift per channel, as PyTorch's ``F.group_norm``."""
    if x.ndim < 2:
        raise ValueError(f"group_norm: input must be at least 2-D (N, C, ...), got {x.shape}")
    n, channels = x.shape[:2]
    if num_groups < 1 or channels % num_groups:
        raise ValueError(f"group_norm: num_groups={num_groups} must divide the {channels} "
                         f"channels")
    _check_per_channel("group_norm", x, weight=weight, bias=bias)
    if x.numel() == 0:  # nothing to normalise: an empty result, still in the graph
        return _affine(x * 1.0, weight, bias)
    if n * (channels // num_groups) * math.prod(x.shape[2:]) == 1:
        # PyTorch's check (a batch norm's "one value per channel" applied to the folded
        # (N·C/G, G, ...) view): one sample, one channel per group and no spatial extent
        raise ValueError(f"group_norm: expected more than 1 value per channel when training, "
                         f"got input of shape {x.shape} with {num_groups} groups")
    folded = x.reshape(1, n * num_groups, -1)
    # Straight to the fused op, past batch_norm's "more than 1 value per channel" check: a
    # group of one value normalises to 0 (x - mean = 0), as PyTorch's group_norm returns.
    normalized = BatchNormFunction.apply(folded, mean=None, var=None, eps=eps,
                                         batch_stats=True).reshape(x.shape)
    return _affine(normalized, weight, bias)


def instance_norm(x: Tensor, running_mean: Tensor | None = None,
                  running_var: Tensor | None = None, weight: Tensor | None = None,
                  bias: Tensor | None = None, use_input_stats: bool = True,
                  momentum: float = 0.1, eps: float = 1e-5) -> Tensor:
    """Normalise each channel of each sample over its spatial axes, as PyTorch's
    ``F.instance_norm``.

    With running statistics and ``use_input_stats``, they move towards the batch's average of
    the per-sample statistics (unbiased variance), as PyTorch does; without ``use_input_stats``
    the running statistics normalise instead.
    """
    if x.ndim < 3:
        raise ValueError(f"instance_norm: input must be (N, C, ...) with spatial axes, got "
                         f"{x.shape}")
    _check_per_channel("instance_norm", x, running_mean=running_mean, running_var=running_var,
                       weight=weight, bias=bias)
    if not use_input_stats:
        return _affine(batch_norm(x, running_mean, running_var, None, None, False, momentum, eps),
                       weight, bias)
    n, channels = x.shape[:2]
    folded = x.reshape(1, n * channels, -1)
    tracked = [t for t in (running_mean, running_var) if t is not None]
    # Every sample gets its own copy of the running statistics to move; the copies' average is
    # the update: mean over n of (1 - m)·r + m·s_n = (1 - m)·r + m·mean(s_n).
    copies = [Tensor._wrap(x.backend.copy(x.backend.reshape(
        x.backend.broadcast_to(t.data, (n, channels)), (n * channels,))), x.device)
        for t in tracked]
    by_name = dict(zip([id(t) for t in tracked], copies))
    normalized = batch_norm(folded, by_name.get(id(running_mean)), by_name.get(id(running_var)),
                            None, None, True, momentum, eps).reshape(x.shape)
    be = x.backend
    for target, copy in zip(tracked, copies):
        average = be.div(be.sum(be.reshape(copy.data, (n, channels)), axis=0), float(n))
        be.assign_(target.data, be.astype(average, target.dtype))
    return _affine(normalized, weight, bias)
