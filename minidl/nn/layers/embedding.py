"""Embedding: a learned lookup table of vectors, indexed by integers."""

from __future__ import annotations

import numpy as np

from ...autograd.tensor import Tensor
from ...ops.nn_ops import embedding
from .. import init
from ..module import Module
from ..parameter import Parameter
from ..registry import register_module


@register_module
class Embedding(Module):
    """Row i of ``weight`` (num_embeddings, embedding_dim) for each index i; init N(0, 1).

    ``padding_idx``'s row starts at zero and receives no gradient, but is looked up as stored
    (as in PyTorch: a row loaded or edited to other values returns those values).
    """

    def __init__(self, num_embeddings: int, embedding_dim: int, padding_idx: int | None = None,
                 dtype=np.float32, generator=None):
        super().__init__()
        if padding_idx is not None and not -num_embeddings <= padding_idx < num_embeddings:
            raise ValueError(f"Embedding: padding_idx {padding_idx} is out of range for "
                             f"{num_embeddings} embeddings")
        self.num_embeddings, self.embedding_dim = int(num_embeddings), int(embedding_dim)
        self.padding_idx = None if padding_idx is None else padding_idx % num_embeddings
        self.weight = Parameter(init.new_storage((num_embeddings, embedding_dim), dtype))
        init.normal_(self.weight, generator=generator)
        # Under skip_init the weight is a read-only placeholder that a loader replaces.
        if self.padding_idx is not None and not init.init_skipped():
            self.weight.backend.setitem_(self.weight.data, (self.padding_idx,), 0)

    def forward(self, indices):
        if not isinstance(indices, Tensor):
            indices = Tensor(np.asarray(indices), device=self.weight.device)
        return embedding(indices, self.weight, self.padding_idx)

    def get_config(self):
        return {"num_embeddings": self.num_embeddings, "embedding_dim": self.embedding_dim,
                "padding_idx": self.padding_idx, "dtype": str(self.weight.dtype)}
