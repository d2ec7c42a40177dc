"""Channel dropout (Dropout1d, Dropout2d): dropping whole channels of convolutional features.

Neighbouring positions of a feature map are strongly correlated, so zeroing single elements
barely regularises a convolution (the neighbours carry the same signal). Channel dropout zeroes
a whole channel of a sample at once -- one Bernoulli draw per (sample, channel), broadcast over
the positions -- and scales the kept channels by 1/(1-p), as Tompson et al. (2015) proposed.
"""

from __future__ import annotations

from ..autograd.tensor import Tensor
from ..random import resolve


def channel_dropout(x: Tensor, p: float, training: bool, spatial_axes: int,
                    generator=None) -> Tensor:
    """Zero each channel of each sample with probability ``p`` (the channel axis is the one
    before the last ``spatial_axes`` axes; an input without a batch axis is one sample)."""
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"channel dropout: p must be in [0, 1], got {p}")
    if x.ndim not in (spatial_axes + 1, spatial_axes + 2):
        raise ValueError(f"channel dropout: expected {spatial_axes + 1}-d (C, ...) or "
                         f"{spatial_axes + 2}-d (N, C, ...) input, got shape {x.shape}")
    if not training or p == 0.0:
        return x
    if p == 1.0:
        return x * 0.0
    be = x.backend
    mask_shape = x.shape[:x.ndim - spatial_axes] + (1,) * spatial_axes
    keep = resolve(generator).bernoulli(1.0 - p, mask_shape, device=x.device)
    mask = be.where(keep, be.full((), 1.0 / (1.0 - p), x.dtype), be.zeros((), x.dtype))
    return x * Tensor._wrap(mask, x.device)
