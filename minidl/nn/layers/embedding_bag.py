"""EmbeddingBag: the sum, mean or max of a bag of embeddings, without the (bags, length, dim)
tensor of a padded ``Embedding`` followed by a reduction -- for bag-of-words and recommender
features, PyTorch's layer."""

from __future__ import annotations

import numpy as np

from ...autograd.tensor import Tensor
from ...ops import elementwise as ew
from ...ops.nn_ops import embedding
from ...ops.shape import where
from .. import init
from ..module import Module
from ..parameter import Parameter
from ..registry import register_module

MODES = ("sum", "mean", "max")


def _bags_from_offsets(indices: np.ndarray, offsets: np.ndarray, include_last_offset: bool):
    """(B, L) positions into ``indices`` for each bag, and where they are real (not padding)."""
    if offsets.ndim != 1 or not len(offsets) or offsets[0] != 0 \
            or (np.diff(offsets) < 0).any() or offsets[-1] > len(indices):
        raise ValueError(f"EmbeddingBag: offsets must start at 0 and increase up to the "
                         f"{len(indices)} indices, got {offsets.tolist()}")
    ends = np.append(offsets[1:], len(indices)) if not include_last_offset else offsets[1:]
    starts = offsets if not include_last_offset else offsets[:-1]
    width = max(int((ends - starts).max(initial=0)), 1)
    positions = starts[:, None] + np.arange(width)[None, :]
    real = positions < ends[:, None]
    return np.where(real, positions, 0), real


@register_module
class EmbeddingBag(Module):
    """For each bag of indices, the ``mode`` ("sum", "mean" or "max") of their rows of
    ``weight`` (num_embeddings, embedding_dim); init N(0, 1).

    ``forward(input, offsets=None, per_sample_weights=None)``: a 2-d ``input`` is one bag per
    row; a 1-d one is cut into bags starting at ``offsets``. Indices equal to ``padding_idx``
    are left out of their bag (and of its mean's count); an empty bag gives zeros.
    ``per_sample_weights`` (input's shape) scale each row, with mode "sum" only.
    """

    def __init__(self, num_embeddings: int, embedding_dim: int, mode: str = "mean",
                 padding_idx: int | None = None, include_last_offset: bool = False,
                 dtype=np.float32, generator=None):
        super().__init__()
        if mode not in MODES:
            raise ValueError(f"EmbeddingBag: mode must be one of {MODES}, got {mode!r}")
        if padding_idx is not None and not -num_embeddings <= padding_idx < num_embeddings:
            raise ValueError(f"EmbeddingBag: padding_idx {padding_idx} is out of range for "
                             f"{num_embeddings} embeddings")
        self.num_embeddings, self.embedding_dim = int(num_embeddings), int(embedding_dim)
        self.mode, self.include_last_offset = mode, bool(include_last_offset)
        self.padding_idx = None if padding_idx is None else padding_idx % num_embeddings
        self.weight = Parameter(init.new_storage((num_embeddings, embedding_dim), dtype))
        init.normal_(self.weight, generator=generator)
        # Under skip_init the weight is a read-only placeholder that a loader replaces.
        if self.padding_idx is not None and not init.init_skipped():
            self.weight.backend.setitem_(self.weight.data, (self.padding_idx,), 0)

    def forward(self, input, offsets=None, per_sample_weights=None):
        if not isinstance(input, Tensor):
            input = Tensor(np.asarray(input), device=self.weight.device)
        if per_sample_weights is not None and self.mode != "sum":
            raise ValueError(f"EmbeddingBag: per_sample_weights need mode='sum', not "
                             f"{self.mode!r}")
        rows = embedding(input, self.weight, self.padding_idx)
        real = None if self.padding_idx is None else input != self.padding_idx
        if per_sample_weights is not None:
            rows = rows * per_sample_weights.unsqueeze(-1)
        if input.ndim == 1:
            if offsets is None:
                raise ValueError("EmbeddingBag: a 1-d input needs offsets")
            host_offsets = np.asarray(offsets.numpy() if isinstance(offsets, Tensor)
                                      else offsets, dtype=np.int64)
            positions, in_bag = _bags_from_offsets(input.numpy(), host_offsets,
                                                   self.include_last_offset)
            rows = rows[positions]
            mask = Tensor(in_bag).to(input.device)
            real = mask if real is None else real[positions] & mask
        elif input.ndim != 2:
            raise ValueError(f"EmbeddingBag: input must be 2-d (bags, length) or 1-d with "
                             f"offsets, got shape {input.shape}")
        elif offsets is not None:
            raise ValueError("EmbeddingBag: offsets apply to a 1-d input only")
        return self._reduce(rows, real)

    def _reduce(self, rows, real):
        """The mode over axis 1 of (B, L, D) rows, counting only the ``real`` ones (B, L)."""
        if real is None:
            if self.mode == "sum":
                return rows.sum(1)
            return rows.mean(1) if self.mode == "mean" else rows.amax(1)
        real = real.unsqueeze(-1)
        count = real.astype(rows.dtype).sum(1)
        if self.mode == "max":
            top = where(real, rows, -np.inf).amax(1)
            return where(count > 0, top, 0.0)
        total = where(real, rows, 0.0).sum(1)
        return total if self.mode == "sum" else total / ew.maximum(count, 1.0)

    def get_config(self):
        return {"num_embeddings": self.num_embeddings, "embedding_dim": self.embedding_dim,
                "mode": self.mode, "padding_idx": self.padding_idx,
                "include_last_offset": self.include_last_offset,
                "dtype": str(self.weight.dtype)}
