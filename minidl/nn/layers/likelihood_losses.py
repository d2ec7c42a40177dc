"""Losses that are negative log-likelihoods or divergences of distributions: binary cross
entropy on probabilities, KL divergence, Gaussian NLL and CTC (modules over
:mod:`minidl.ops.losses` and :mod:`minidl.ops.ctc`)."""

from __future__ import annotations

from ...ops import ctc, losses
from ..registry import register_module
from .distance_losses import ConfiguredLoss
from .loss import _float_list


@register_module
class BCELoss(ConfiguredLoss):
    """:func:`~minidl.nn.functional.binary_cross_entropy` as a module; ``weight`` rescales each
    element's loss (broadcast against the input; kept in the config as a list)."""

    settings = ("weight", "reduction")

    def __init__(self, weight=None, reduction: str = "mean"):
        super().__init__()
        self.weight, self.reduction = _float_list(weight), reduction

    def forward(self, input, target):
        return losses.binary_cross_entropy(input, target, self.weight, self.reduction)


@register_module
class KLDivLoss(ConfiguredLoss):
    """:func:`~minidl.nn.functional.kl_div` as a module: ``loss(log_q, target)``."""

    settings = ("reduction", "log_target")

    def __init__(self, reduction: str = "mean", log_target: bool = False):
        super().__init__()
        self.reduction, self.log_target = reduction, bool(log_target)

    def forward(self, input, target):
        return losses.kl_div(input, target, self.reduction, self.log_target)


@register_module
class GaussianNLLLoss(ConfiguredLoss):
    """:func:`~minidl.nn.functional.gaussian_nll_loss` as a module: ``loss(mean, target, var)``."""

    settings = ("full", "eps", "reduction")

    def __init__(self, *, full: bool = False, eps: float = 1e-6, reduction: str = "mean"):
        super().__init__()
        self.full, self.eps, self.reduction = bool(full), float(eps), reduction

    def forward(self, input, target, var):
        return losses.gaussian_nll_loss(input, target, var, self.full, self.eps, self.reduction)


@register_module
class CTCLoss(ConfiguredLoss):
    """:func:`~minidl.nn.functional.ctc_loss` as a module:
    ``loss(log_probs, targets, input_lengths, target_lengths)``."""

    settings = ("blank", "reduction", "zero_infinity")

    def __init__(self, blank: int = 0, reduction: str = "mean", zero_infinity: bool = False):
        super().__init__()
        self.blank, self.reduction = int(blank), reduction
        self.zero_infinity = bool(zero_infinity)

    def forward(self, log_probs, targets, input_lengths, target_lengths):
        return ctc.ctc_loss(log_probs, targets, input_lengths, target_lengths, self.blank,
                            self.reduction, self.zero_infinity)
