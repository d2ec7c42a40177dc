"""Optimizers and learning-rate schedules.

An optimizer turns gradients into parameter updates; the arithmetic itself lives in the
backend primitives ``sgd_update`` and ``adam_update`` (one fused pass per parameter), so every
device supplies its own kernel while this package stays device-neutral. RMSprop, Adagrad,
Adadelta, NAdam, RAdam and Adamax are composed from the elementwise primitives
(``composed_updates.py``); LBFGS works on the parameters flattened into one host vector
(``lbfgs.py``). Optimizers and schedulers checkpoint through ``state_dict()`` /
``load_state_dict()``.
"""

from . import lr_scheduler
from .adagrad import Adadelta, Adagrad
from .adam import Adam, AdamW
from .adam_variants import Adamax, NAdam, RAdam
from .lbfgs import LBFGS
from .optimizer import Optimizer
from .rmsprop import RMSprop
from .sgd import SGD
from .zero import ZeroRedundancyOptimizer

__all__ = ["Optimizer", "SGD", "Adam", "AdamW", "RMSprop", "Adagrad", "Adadelta", "NAdam",
           "RAdam", "Adamax", "LBFGS", "lr_scheduler", "ZeroRedundancyOptimizer"]
