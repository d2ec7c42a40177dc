"""Dropout: random zeroing during training, identity in evaluation."""

from __future__ import annotations

from ...ops.nn_ops import dropout
from ..module import Module
from ..registry import register_module


@register_module
class Dropout(Module):
    """Zero each element with probability ``p`` in training mode, scaling the rest by 1/(1-p).

    Masks come from ``generator`` (default: the global generator), so a checkpoint that saves
    the generator's state reproduces them exactly after a restart.
    """

    def __init__(self, p: float = 0.5, generator=None):
        super().__init__()
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"Dropout: p must be in [0, 1], got {p}")
        self.p, self.generator = float(p), generator

    def forward(self, x):
        return dropout(x, self.p, self.training, self.generator)

    def get_config(self):
        return {"p": self.p}
