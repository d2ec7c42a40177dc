"""Loss modules wrapping the functional losses."""

from __future__ import annotations

import numpy as np

from ...ops import nn_ops
from ..module import Module
from ..registry import register_module


@register_module
class CrossEntropyLoss(Module):
    """:func:`~minidl.nn.functional.cross_entropy` as a module; ``weight``: one float per
    class (a list, kept in the config)."""

    def __init__(self, reduction: str = "mean", ignore_index: int = -100,
                 label_smoothing: float = 0.0, weight=None):
        super().__init__()
        self.reduction, self.ignore_index = reduction, int(ignore_index)
        self.label_smoothing = float(label_smoothing)
        self.weight = _float_list(weight)

    def forward(self, logits, targets):
        return nn_ops.cross_entropy(logits, targets, self.weight, reduction=self.reduction,
                                    ignore_index=self.ignore_index,
                                    label_smoothing=self.label_smoothing)

    def get_config(self):
        return {"reduction": self.reduction, "ignore_index": self.ignore_index,
                "label_smoothing": self.label_smoothing, "weight": self.weight}


def _float_list(values):
    return None if values is None else [float(v) for v in np.asarray(values).reshape(-1)]


@register_module
class NLLLoss(Module):
    def __init__(self, reduction: str = "mean", ignore_index: int = -100, weight=None):
        super().__init__()
        self.reduction, self.ignore_index = reduction, int(ignore_index)
        self.weight = _float_list(weight)

    def forward(self, log_probs, targets):
        return nn_ops.nll_loss(log_probs, targets, self.weight, reduction=self.reduction,
                               ignore_index=self.ignore_index)

    def get_config(self):
        return {"reduction": self.reduction, "ignore_index": self.ignore_index,
                "weight": self.weight}


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
    """``pos_weight``: the weight of positive examples, one float per class (last axis) or one."""

    def __init__(self, reduction: str = "mean", pos_weight=None):
        super().__init__()
        self.reduction = reduction
        self.pos_weight = _float_list(pos_weight)

    def forward(self, logits, target):
        return nn_ops.binary_cross_entropy_with_logits(logits, target, reduction=self.reduction,
                                                       pos_weight=self.pos_weight)

    def get_config(self):
        return {"reduction": self.reduction, "pos_weight": self.pos_weight}
