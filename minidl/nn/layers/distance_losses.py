"""Losses of a distance between prediction and target (L1, smooth L1, Huber) and the
metric-learning losses on pairs and triplets of embeddings (cosine embedding, margin ranking,
triplet margin): modules over :mod:`minidl.ops.losses`."""

from __future__ import annotations

from ...ops import losses
from ..module import Module
from ..registry import register_module


class ConfiguredLoss(Module):
    """A loss module whose constructor arguments are plain attributes named in ``settings``;
    ``get_config`` returns them, so a saved model rebuilds the loss with no user code."""

    settings: tuple[str, ...] = ("reduction",)

    def get_config(self):
        return {name: getattr(self, name) for name in self.settings}


@register_module
class L1Loss(ConfiguredLoss):
    """:func:`~minidl.nn.functional.l1_loss` as a module."""

    def __init__(self, reduction: str = "mean"):
        super().__init__()
        self.reduction = reduction

    def forward(self, input, target):
        return losses.l1_loss(input, target, self.reduction)


@register_module
class SmoothL1Loss(ConfiguredLoss):
    """:func:`~minidl.nn.functional.smooth_l1_loss` as a module."""

    settings = ("reduction", "beta")

    def __init__(self, reduction: str = "mean", beta: float = 1.0):
        super().__init__()
        self.reduction, self.beta = reduction, float(beta)

    def forward(self, input, target):
        return losses.smooth_l1_loss(input, target, self.reduction, self.beta)


@register_module
class HuberLoss(ConfiguredLoss):
    """:func:`~minidl.nn.functional.huber_loss` as a module."""

    settings = ("reduction", "delta")

    def __init__(self, reduction: str = "mean", delta: float = 1.0):
        super().__init__()
        self.reduction, self.delta = reduction, float(delta)

    def forward(self, input, target):
        return losses.huber_loss(input, target, self.reduction, self.delta)


@register_module
class CosineEmbeddingLoss(ConfiguredLoss):
    """:func:`~minidl.nn.functional.cosine_embedding_loss` as a module: ``loss(x1, x2, y)``."""

    settings = ("margin", "reduction")

    def __init__(self, margin: float = 0.0, reduction: str = "mean"):
        super().__init__()
        self.margin, self.reduction = float(margin), reduction

    def forward(self, input1, input2, target):
        return losses.cosine_embedding_loss(input1, input2, target, self.margin, self.reduction)


@register_module
class MarginRankingLoss(ConfiguredLoss):
    """:func:`~minidl.nn.functional.margin_ranking_loss` as a module: ``loss(x1, x2, y)``."""

    settings = ("margin", "reduction")

    def __init__(self, margin: float = 0.0, reduction: str = "mean"):
        super().__init__()
        self.margin, self.reduction = float(margin), reduction

    def forward(self, input1, input2, target):
        return losses.margin_ranking_loss(input1, input2, target, self.margin, self.reduction)


@register_module
class TripletMarginLoss(ConfiguredLoss):
    """:func:`~minidl.nn.functional.triplet_margin_loss` as a module:
    ``loss(anchor, positive, negative)``."""

    settings = ("margin", "p", "eps", "swap", "reduction")

    def __init__(self, margin: float = 1.0, p: float = 2.0, eps: float = 1e-6,
                 swap: bool = False, reduction: str = "mean"):
        super().__init__()
        self.margin, self.p, self.eps = float(margin), float(p), float(eps)
        self.swap, self.reduction = bool(swap), reduction

    def forward(self, anchor, positive, negative):
        return losses.triplet_margin_loss(anchor, positive, negative, self.margin, self.p,
                                          self.eps, self.swap, self.reduction)
