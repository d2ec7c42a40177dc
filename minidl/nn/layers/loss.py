"""Loss modules wrapping the functional losses."""

from __future__ import annotations

from ...ops import nn_ops
from ..module import Module
from ..registry import register_module


@register_module
class CrossEntropyLoss(Module):
    def __init__(self, reduction: str = "mean", ignore_index: int = -100,
                 label_smoothing: float = 0.0):
        super().__init__()
        self.reduction, self.ignore_index = reduction, int(ignore_index)
        self.label_smoothing = float(label_smoothing)

    def forward(self, logits, targets):
        return nn_ops.cross_entropy(logits, targets, self.reduction, self.ignore_index,
                                    self.label_smoothing)

    def get_config(self):
        return {"reduction": self.reduction, "ignore_index": self.ignore_index,
                "label_smoothing": self.label_smoothing}


@register_module
class NLLLoss(Module):
    def __init__(self, reduction: str = "mean", ignore_index: int = -100):
        super().__init__()
        self.reduction, self.ignore_index = reduction, int(ignore_index)

    def forward(self, log_probs, targets):
        return nn_ops.nll_loss(log_probs, targets, self.reduction, self.ignore_index)

    def get_config(self):
        return {"reduction": self.reduction, "ignore_index": self.ignore_index}


@register_module
class MSELoss(Module):
    def __init__(self, reduction: str = "mean"):
        super().__init__()
        self.reduction = reduction

    def forward(self, prediction, target):
        return nn_ops.mse_loss(prediction, target, self.reduction)

    def get_config(self):
        return {"reduction": self.reduction}


@register_module
class BCEWithLogitsLoss(Module):
    def __init__(self, reduction: str = "mean"):
        super().__init__()
        self.reduction = reduction

    def forward(self, logits, target):
        return nn_ops.binary_cross_entropy_with_logits(logits, target, self.reduction)

    def get_config(self):
        return {"reduction": self.reduction}
