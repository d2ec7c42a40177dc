"""Scaled dot-product attention, composed from matmul, softmax and masking ops.

For queries Q (…, L, E), keys K (…, S, E) and values V (…, S, Ev)::

    attention(Q, K, V) = softmax(Q Kᵀ · scale + mask) V,   scale = 1/√E by default

Row i of the softmax says how much query i reads from each key. A mask removes pairs before the
softmax: a bool mask keeps the pairs where it is True (the others get -∞, so weight 0); a float
mask is added to the scores. ``is_causal`` keeps key j only for queries i >= j (a language
model must not read the future). Built from ops, the gradient is the chain of their rules, and
an ONNX export writes the MatMul/Softmax graph.
"""

from __future__ import annotations

import math

import numpy as np

from ..autograd.tensor import Tensor
from .nn_ops import dropout, softmax
from .shape import where


def causal_mask(queries: int, keys: int, device: str) -> Tensor:
    """The (queries, keys) bool mask that lets query i see keys 0..i (PyTorch's alignment: the
    top-left corner)."""
    return Tensor(np.tril(np.ones((queries, keys), np.bool_)), device=device)


def apply_mask(scores: Tensor, mask: Tensor | None) -> Tensor:
    """Scores with ``mask`` applied: bool masks keep True pairs, float masks are added."""
    if mask is None:
        return scores
    if mask.dtype == np.bool_:
        return where(mask, scores, -math.inf)
    if mask.dtype.kind != "f":
        raise TypeError(f"attention: a mask must be bool or floating point, got {mask.dtype}")
    return scores + mask


def scaled_dot_product_attention(query: Tensor, key: Tensor, value: Tensor,
                                 attn_mask: Tensor | None = None, dropout_p: float = 0.0,
                                 is_causal: bool = False, scale: float | None = None,
                                 generator=None) -> Tensor:
    """Attention of ``query`` (…, L, E) over ``key`` (…, S, E) and ``value`` (…, S, Ev), as
    PyTorch's ``F.scaled_dot_product_attention``; ``dropout_p`` drops attention weights (the
    caller passes 0 in evaluation, as in PyTorch)."""
    if query.ndim < 2 or key.ndim < 2 or value.ndim < 2:
        raise ValueError(f"scaled_dot_product_attention: query, key and value need at least 2 "
                         f"dimensions, got shapes {query.shape}, {key.shape}, {value.shape}")
    if query.shape[-1] != key.shape[-1] or key.shape[-2] != value.shape[-2]:
        raise ValueError(f"scaled_dot_product_attention: query {query.shape}, key {key.shape} "
                         f"and value {value.shape} do not fit (need query[-1] == key[-1] and "
                         f"key[-2] == value[-2])")
    if is_causal and attn_mask is not None:
        raise ValueError("scaled_dot_product_attention: give attn_mask or is_causal, not both")
    scale = 1.0 / math.sqrt(query.shape[-1]) if scale is None else float(scale)
    scores = (query @ key.transpose(-2, -1)) * scale
    if is_causal:
        attn_mask = causal_mask(query.shape[-2], key.shape[-2], query.device)
    weights = softmax(apply_mask(scores, attn_mask), -1)
    if dropout_p > 0.0:
        weights = dropout(weights, dropout_p, True, generator)
    return weights @ value
