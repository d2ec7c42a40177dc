"""Optimizers and learning-rate schedules.

An optimizer turns gradients into parameter updates; the arithmetic itself lives in the
backend primitives ``sgd_update`` and ``adam_update`` (one fused pass per parameter), so every
device supplies its own kernel while this package stays device-neutral. Optimizers and
schedulers checkpoint through ``state_dict()`` / ``load_state_dict()``.
"""

from . import lr_scheduler
from .adam import Adam, AdamW
from .optimizer import Optimizer
from .sgd import SGD
from .zero import ZeroRedundancyOptimizer

__all__ = ["Optimizer", "SGD", "Adam", "AdamW", "lr_scheduler",
           "ZeroRedundancyOptimizer"]
