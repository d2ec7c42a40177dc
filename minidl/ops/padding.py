"""Padding by gathering: ``pad`` in PyTorch's four modes, and ``pixel_shuffle``.

Every mode is one index array per padded axis, gathered from the input: output position i of
an axis of size n reads input position

* ``replicate``: clip(i, 0, n - 1) -- the edge repeats;
* ``reflect``: i mirrored at both edges without repeating them (…, 2, 1, 0, 1, 2, …);
* ``circular``: i mod n -- the other end wraps round;
* ``constant``: anything (the edge is used), then a mask puts ``value`` outside [0, n).

So the gradient is the gather's (each input position receives the gradient of every output
that read it, which for reflect and replicate is more than one) and an exported model writes
``Gather`` and ``Where``, whatever the batch size. Negative padding crops, as in PyTorch.
"""

from __future__ import annotations

import numpy as np

from ..autograd.tensor import Tensor
from .shape import where

PAD_MODES = ("constant", "reflect", "replicate", "circular")


def _source_positions(size: int, before: int, after: int, mode: str, axis: int) -> np.ndarray:
    positions = np.arange(-before, size + after)
    if len(positions) <= 0:
        raise ValueError(f"pad: padding ({before}, {after}) leaves nothing of axis {axis} "
                         f"(size {size})")
    if mode == "reflect":
        if before >= size or after >= size:
            raise ValueError(f"pad: reflect padding ({before}, {after}) must be smaller than the "
                             f"size {size} of axis {axis}")
        period = 2 * (size - 1) if size > 1 else 1
        positions = np.abs(positions) % period
        return np.where(positions > size - 1, period - positions, positions)
    if mode == "circular":
        if before > size or after > size:
            raise ValueError(f"pad: circular padding ({before}, {after}) must not exceed the "
                             f"size {size} of axis {axis}")
        return positions % size
    return np.clip(positions, 0, size - 1)


def pad(input: Tensor, pad, mode: str = "constant", value: float = 0.0) -> Tensor:
    """PyTorch's ``F.pad``: ``pad = (last_before, last_after, second_last_before, ...)`` pads
    the last ``len(pad) // 2`` axes."""
    pad = tuple(int(p) for p in pad)
    if len(pad) % 2 or len(pad) // 2 > input.ndim:
        raise ValueError(f"pad: expected pairs for at most {input.ndim} axes, got {pad}")
    if mode not in PAD_MODES:
        raise ValueError(f"pad: mode must be one of {PAD_MODES}, got {mode!r}")
    out = input
    inside = None  # where the output reads real input (constant mode only)
    for k in range(len(pad) // 2):
        axis = input.ndim - 1 - k
        before, after = pad[2 * k], pad[2 * k + 1]
        if before == after == 0:
            continue
        size = input.shape[axis]
        positions = _source_positions(size, before, after, mode, axis)
        out = out[(slice(None),) * axis + (positions,)]
        if mode == "constant":
            read = np.arange(-before, size + after)
            shape = [1] * input.ndim
            shape[axis] = len(read)
            mask = ((read >= 0) & (read < size)).reshape(shape)
            inside = mask if inside is None else inside & mask
    if inside is not None and not inside.all():
        out = where(Tensor(inside).to(out.device), out, value)
    return out


def pixel_shuffle(input: Tensor, upscale_factor: int) -> Tensor:
    """(..., C·r², H, W) -> (..., C, H·r, W·r): each group of r² channels becomes an r × r block
    of pixels (the sub-pixel convolution of Shi et al. 2016)."""
    r = int(upscale_factor)
    if r < 1 or input.ndim < 3 or input.shape[-3] % (r * r):
        raise ValueError(f"pixel_shuffle: the channel axis of shape {input.shape} must be "
                         f"divisible by upscale_factor² = {r * r}")
    *lead, channels, height, width = input.shape
    c = channels // (r * r)
    n = len(lead)
    split = input.reshape(*lead, c, r, r, height, width)
    # (…, c, r_h, r_w, H, W) -> (…, c, H, r_h, W, r_w): row h·r + i reads channel block (i, j).
    order = tuple(range(n)) + (n, n + 3, n + 1, n + 4, n + 2)
    return split.permute(*order).reshape(*lead, c, height * r, width * r)
