"""MultiheadAttention, with PyTorch's parameters (``in_proj_weight`` (3E, E), ``in_proj_bias``,
``out_proj``; ``q/k/v_proj_weight`` when keys or values have other sizes), arguments,
defaults and mask conventions.

Each of H heads attends in its own E/H-dimensional slice of the projected queries, keys and
values; the heads' outputs are concatenated and mixed by ``out_proj``. Sequences are
(L, N, E) -- or (N, L, E) with ``batch_first=True`` -- as in PyTorch.

Masks follow ``nn.MultiheadAttention`` (the opposite of ``scaled_dot_product_attention``): in a
bool ``attn_mask`` or ``key_padding_mask``, True marks a pair or key that must NOT be attended.
Float masks are added to the scores. Both become one additive mask of -∞ and 0.
"""

from __future__ import annotations

import math

import numpy as np

from ...autograd.tensor import Tensor
from ...ops.attention import causal_mask
from ...ops.linalg import linear
from ...ops.nn_ops import dropout, softmax
from ...ops.shape import cat, where
from .. import init
from ..module import Module
from ..parameter import Parameter
from ..registry import register_module
from .linear import Linear


def _additive(mask: Tensor | None, dtype, name: str) -> Tensor | None:
    """A mask as scores to add: bool True (blocked) -> -∞, False -> 0; float masks as given."""
    if mask is None:
        return None
    if mask.dtype == np.bool_:
        zero = Tensor._wrap(mask.backend.zeros((), dtype), mask.device)
        return where(mask, -math.inf, zero)
    if mask.dtype.kind != "f":
        raise TypeError(f"MultiheadAttention: {name} must be bool or floating point, got "
                        f"{mask.dtype}")
    return mask


def _with_open_keys(mask: Tensor | None, count: int) -> Tensor | None:
    """An additive mask with ``count`` columns of 0 appended along the keys (its last axis)."""
    if mask is None or count == 0:
        return mask
    zeros = Tensor._wrap(mask.backend.zeros(mask.shape[:-1] + (count,), mask.dtype), mask.device)
    return cat([mask, zeros], axis=-1)


@register_module
class MultiheadAttention(Module):
    """Attention of queries over keys/values in ``num_heads`` heads; returns
    ``(output, weights)``, weights averaged over heads unless ``average_attn_weights=False``,
    or None with ``need_weights=False``."""

    def __init__(self, embed_dim: int, num_heads: int, dropout: float = 0.0, bias: bool = True,
                 add_bias_kv: bool = False, add_zero_attn: bool = False, kdim: int | None = None,
                 vdim: int | None = None, batch_first: bool = False, dtype=np.float32):
        super().__init__()
        if num_heads < 1 or embed_dim % num_heads:
            raise ValueError(f"MultiheadAttention: num_heads={num_heads} must divide "
                             f"embed_dim={embed_dim}")
        if not 0.0 <= dropout <= 1.0:
            raise ValueError(f"MultiheadAttention: dropout must be in [0, 1], got {dropout}")
        self.embed_dim, self.num_heads = int(embed_dim), int(num_heads)
        self.head_dim = embed_dim // num_heads
        self.kdim = embed_dim if kdim is None else int(kdim)
        self.vdim = embed_dim if vdim is None else int(vdim)
        self.dropout, self.batch_first = float(dropout), bool(batch_first)
        self.same_dims = self.kdim == embed_dim and self.vdim == embed_dim
        if self.same_dims:
            self.in_proj_weight = Parameter(np.empty((3 * embed_dim, embed_dim), dtype))
            self.register_parameter("q_proj_weight", None)
            self.register_parameter("k_proj_weight", None)
            self.register_parameter("v_proj_weight", None)
            init.xavier_uniform_(self.in_proj_weight)
        else:
            self.register_parameter("in_proj_weight", None)
            self.q_proj_weight = Parameter(np.empty((embed_dim, embed_dim), dtype))
            self.k_proj_weight = Parameter(np.empty((embed_dim, self.kdim), dtype))
            self.v_proj_weight = Parameter(np.empty((embed_dim, self.vdim), dtype))
            for weight in (self.q_proj_weight, self.k_proj_weight, self.v_proj_weight):
                init.xavier_uniform_(weight)
        if bias:
            self.in_proj_bias = Parameter(np.zeros(3 * embed_dim, dtype))
        else:
            self.register_parameter("in_proj_bias", None)
        self.out_proj = Linear(embed_dim, embed_dim, bias=bias, dtype=dtype)
        if bias:
            init.zeros_(self.out_proj.bias)
        # add_bias_kv: one learned key and value appended to every sequence of keys/values
        # (a place to put attention that no real key should get); add_zero_attn: an all-zero
        # key and value appended after the projections (a score of 0 to every query).
        if add_bias_kv:
            self.bias_k = Parameter(np.empty((1, 1, embed_dim), dtype))
            self.bias_v = Parameter(np.empty((1, 1, embed_dim), dtype))
            init.xavier_normal_(self.bias_k)
            init.xavier_normal_(self.bias_v)
        else:
            self.register_parameter("bias_k", None)
            self.register_parameter("bias_v", None)
        self.add_zero_attn = bool(add_zero_attn)

    def _projections(self):
        e = self.embed_dim
        if self.same_dims:
            weights = [self.in_proj_weight[i * e:(i + 1) * e] for i in range(3)]
        else:
            weights = [self.q_proj_weight, self.k_proj_weight, self.v_proj_weight]
        biases = [None] * 3 if self.in_proj_bias is None else \
            [self.in_proj_bias[i * e:(i + 1) * e] for i in range(3)]
        return weights, biases

    def forward(self, query, key, value, key_padding_mask=None, need_weights: bool = True,
                attn_mask=None, average_attn_weights: bool = True, is_causal: bool = False):
        batched = query.ndim == 3
        if not batched:  # one unbatched sequence (L, E)
            query, key, value = (t.unsqueeze(1) for t in (query, key, value))
            if key_padding_mask is not None:
                key_padding_mask = key_padding_mask.unsqueeze(0)
        # The sequences stay in the layout they came in, (L, N, E) or (N, L, E): a projection
        # maps each position's vector alone, so it does not care, and reading (N, L, E) through
        # a transposed view would copy every input and output gradient into rows for the GEMMs.
        batch_first = self.batch_first and batched
        sequence_axis = 1 if batch_first else 0
        length, batch = query.shape[sequence_axis], query.shape[1 - sequence_axis]
        source = key.shape[sequence_axis]
        heads, head_dim = self.num_heads, self.head_dim
        if query.shape[2] != self.embed_dim or key.shape[2] != self.kdim \
                or value.shape[2] != self.vdim or value.shape[sequence_axis] != source:
            raise ValueError(f"MultiheadAttention: query {query.shape}, key {key.shape} and "
                             f"value {value.shape} do not fit embed_dim={self.embed_dim}, "
                             f"kdim={self.kdim}, vdim={self.vdim}")
        (wq, wk, wv), (bq, bk, bv) = self._projections()
        k, v = linear(key, wk, bk), linear(value, wv, bv)  # (S, N, E) or (N, S, E)
        if is_causal and attn_mask is None:
            attn_mask = ~causal_mask(length, source, query.device)  # True: blocked
        appended = []
        one_step = (batch, 1, self.embed_dim) if batch_first else (1, batch, self.embed_dim)
        if self.bias_k is not None:
            appended.append((self.bias_k.expand(*one_step), self.bias_v.expand(*one_step)))
        if self.add_zero_attn:
            zeros = Tensor._wrap(k.backend.zeros(one_step, k.dtype), k.device)
            appended.append((zeros, zeros))
        for extra_k, extra_v in appended:
            k, v = cat([k, extra_k], sequence_axis), cat([v, extra_v], sequence_axis)
        # -> (N, H, L, E/H): heads split off the feature axis. The batch keeps an axis of its own
        # throughout, so an exported graph works at any batch size.
        keys = source + len(appended)
        to_heads = (0, 2, 1, 3) if batch_first else (1, 2, 0, 3)
        # The queries are scaled by 1/√(E/H) before the heads are split off: the same products,
        # on the projection's row-major output rather than a permuted view of it (which the
        # backend can only multiply in one NumPy pass on one thread).
        q = linear(query, wq, bq) * (1.0 / math.sqrt(head_dim))
        q = q.reshape(query.shape[:2] + (heads, head_dim)).permute(to_heads)
        k = k.reshape(k.shape[:2] + (heads, head_dim)).permute(to_heads)
        v = v.reshape(v.shape[:2] + (heads, head_dim)).permute(to_heads)
        # The appended keys are attended by every query: masks get columns of 0 for them.
        mask = _with_open_keys(_additive(attn_mask, q.dtype, "attn_mask"), len(appended))
        if mask is not None and mask.ndim == 3:  # one (L, S) mask per (sample, head)
            mask = mask.reshape(batch, heads, length, keys)
        padding = _with_open_keys(_additive(key_padding_mask, q.dtype, "key_padding_mask"),
                                  len(appended))
        if padding is not None:
            padding = padding.reshape(batch, 1, 1, keys)
            mask = padding if mask is None else mask + padding
        scores = q @ k.transpose(2, 3)
        weights = softmax(scores if mask is None else scores + mask, -1)
        if self.training and self.dropout > 0.0:
            weights = dropout(weights, self.dropout, True)
        # (N, H, L, E/H) -> the input's layout, the heads concatenated along the features.
        out = (weights @ v).permute(to_heads if batch_first else (2, 0, 1, 3))
        out = self.out_proj(out.reshape(query.shape[:2] + (self.embed_dim,)))
        if not batched:
            out = out.squeeze(1)
        if not need_weights:
            return out, None
        if average_attn_weights:
            weights = weights.mean(axis=1)
        return out, weights if batched else weights.squeeze(0)

    def get_config(self):
        return {"embed_dim": self.embed_dim, "num_heads": self.num_heads,
                "dropout": self.dropout, "bias": self.in_proj_bias is not None,
                "add_bias_kv": self.bias_k is not None, "add_zero_attn": self.add_zero_attn,
                "kdim": self.kdim, "vdim": self.vdim, "batch_first": self.batch_first,
                "dtype": str(self.out_proj.weight.dtype)}
