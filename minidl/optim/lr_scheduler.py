"""Every learning-rate schedule, importable from here as from ``torch.optim.lr_scheduler``.

The base class and how a schedule steps are in ``lr_schedule_base.py``. The schedules with a
simple closed form are defined here (``StepLR``, ``MultiStepLR``, ``ExponentialLR``,
``CosineAnnealingLR``, ``LinearLR``); the others live in modules by family: decay by a function
of the epoch (``lr_schedules_decay.py``), cycles and one-cycle (``lr_schedules_cyclic.py``),
schedulers built from schedulers and ``ReduceLROnPlateau`` (``lr_schedules_combined.py``).
"""

from __future__ import annotations

import math

from ..validation import check_number
from .lr_schedule_base import LRScheduler
from .lr_schedules_combined import ChainedScheduler, ReduceLROnPlateau, SequentialLR
from .lr_schedules_cyclic import CosineAnnealingWarmRestarts, CyclicLR, OneCycleLR
from .lr_schedules_decay import LambdaLR, MultiplicativeLR, PolynomialLR

__all__ = ["LRScheduler", "StepLR", "MultiStepLR", "ExponentialLR", "CosineAnnealingLR",
           "LinearLR", "LambdaLR", "MultiplicativeLR", "PolynomialLR",
           "CosineAnnealingWarmRestarts", "CyclicLR", "OneCycleLR", "SequentialLR",
           "ChainedScheduler", "ReduceLROnPlateau"]


class StepLR(LRScheduler):
    """Multiply the rate by ``gamma`` every ``step_size`` epochs: ``base * gamma**(epoch // step_size)``."""

    hyperparameters = ("step_size", "gamma")

    def __init__(self, optimizer, step_size: int, gamma: float = 0.1, last_epoch: int = -1):
        self.step_size, self.gamma = step_size, gamma
        super().__init__(optimizer, last_epoch)

    def _check_hyperparameters(self, values: dict) -> None:
        check_number("step_size", values["step_size"], low=1, integer=True)
        check_number("gamma", values["gamma"], low=0.0, low_open=True)

    def lr_at(self, base_lr: float, epoch: int) -> float:
        return base_lr * self.gamma ** (epoch // self.step_size)

    def chained_lr(self, lr: float, base_lr: float, epoch: int) -> float:
        return lr * self.gamma if epoch and epoch % self.step_size == 0 else lr


class MultiStepLR(LRScheduler):
    """Multiply the rate by ``gamma`` at each milestone epoch: ``base * gamma**(milestones passed)``.

    A milestone listed twice counts twice.
    """

    hyperparameters = ("milestones", "gamma")

    def __init__(self, optimizer, milestones, gamma: float = 0.1, last_epoch: int = -1):
        self.milestones, self.gamma = list(milestones), gamma
        super().__init__(optimizer, last_epoch)

    def _check_hyperparameters(self, values: dict) -> None:
        milestones = values["milestones"]
        if not isinstance(milestones, (list, tuple)):
            raise ValueError(f"milestones must be a list of epochs, got {milestones!r}")
        for i, milestone in enumerate(milestones):
            check_number(f"milestones[{i}]", milestone, low=0, integer=True)
        check_number("gamma", values["gamma"], low=0.0, low_open=True)

    def lr_at(self, base_lr: float, epoch: int) -> float:
        # At epoch == milestone the decay already applies; order does not matter.
        passed = sum(1 for milestone in self.milestones if milestone <= epoch)
        return base_lr * self.gamma ** passed

    def chained_lr(self, lr: float, base_lr: float, epoch: int) -> float:
        reached = self.milestones.count(epoch)
        return lr * self.gamma ** reached if reached else lr


class ExponentialLR(LRScheduler):
    """Multiply the rate by ``gamma`` every epoch: ``base * gamma**epoch``."""

    hyperparameters = ("gamma",)

    def __init__(self, optimizer, gamma: float, last_epoch: int = -1):
        self.gamma = gamma
        super().__init__(optimizer, last_epoch)

    def _check_hyperparameters(self, values: dict) -> None:
        check_number("gamma", values["gamma"], low=0.0, low_open=True)

    def lr_at(self, base_lr: float, epoch: int) -> float:
        return base_lr * self.gamma ** epoch

    def chained_lr(self, lr: float, base_lr: float, epoch: int) -> float:
        return lr if self._initial else lr * self.gamma


class CosineAnnealingLR(LRScheduler):
    """Follow half a cosine from the base rate down to ``eta_min`` over ``T_max`` epochs::

        lr = eta_min + (base - eta_min) * (1 + cos(pi * epoch / T_max)) / 2

    The rate falls slowly at first, fastest midway and gently again near the end. Past ``T_max``
    the cosine continues, so the rate climbs back up (a warm restart every ``2 * T_max``).
    """

    hyperparameters = ("T_max", "eta_min")

    def __init__(self, optimizer, T_max: int, eta_min: float = 0.0, last_epoch: int = -1):
        self.T_max, self.eta_min = T_max, eta_min
        super().__init__(optimizer, last_epoch)

    def _check_hyperparameters(self, values: dict) -> None:
        check_number("T_max", values["T_max"], low=1, integer=True)
        check_number("eta_min", values["eta_min"], low=0.0)

    def lr_at(self, base_lr: float, epoch: int) -> float:
        cosine = (1.0 + math.cos(math.pi * epoch / self.T_max)) / 2.0
        return self.eta_min + (base_lr - self.eta_min) * cosine

    def chained_lr(self, lr: float, base_lr: float, epoch: int) -> float:
        # One step along the curve through the current rate: the distance above eta_min shrinks
        # by the ratio of consecutive (1 + cos) values. At the bottom of the curve (epoch
        # T_max + 1, and every 2·T_max after) that ratio is 0/0, so PyTorch adds the rise of
        # the first step of the climb instead.
        if self._initial:
            return lr
        if (epoch - 1 - self.T_max) % (2 * self.T_max) == 0:
            return lr + (base_lr - self.eta_min) * (1.0 - math.cos(math.pi / self.T_max)) / 2.0
        ratio = (1.0 + math.cos(math.pi * epoch / self.T_max)) / (
            1.0 + math.cos(math.pi * (epoch - 1) / self.T_max))
        return ratio * (lr - self.eta_min) + self.eta_min


class LinearLR(LRScheduler):
    """Warm-up: scale the rate linearly from ``start_factor`` to ``end_factor`` of the base over
    ``total_iters`` epochs, then hold it::

        lr = base * (start_factor + (end_factor - start_factor) * min(epoch, total_iters) / total_iters)
    """

    hyperparameters = ("start_factor", "end_factor", "total_iters")

    def __init__(self, optimizer, start_factor: float = 1.0 / 3, end_factor: float = 1.0,
                 total_iters: int = 5, last_epoch: int = -1):
        self.start_factor, self.end_factor, self.total_iters = start_factor, end_factor, total_iters
        super().__init__(optimizer, last_epoch)

    def _check_hyperparameters(self, values: dict) -> None:
        # A zero start factor would make the first rate 0 (PyTorch forbids it too).
        check_number("start_factor", values["start_factor"], low=0.0, high=1.0, low_open=True)
        check_number("end_factor", values["end_factor"], low=0.0, high=1.0)
        check_number("total_iters", values["total_iters"], low=1, integer=True)

    def lr_at(self, base_lr: float, epoch: int) -> float:
        progress = min(epoch, self.total_iters) / self.total_iters
        return base_lr * (self.start_factor + (self.end_factor - self.start_factor) * progress)

    def chained_lr(self, lr: float, base_lr: float, epoch: int) -> float:
        # The factor goes from f(e-1) to f(e) = start + (end - start)·e/T, so the rate is
        # multiplied by f(e)/f(e-1) = 1 + (end - start) / (T·start + (e-1)·(end - start)).
        if epoch == 0:
            return lr * self.start_factor
        if self._initial or epoch > self.total_iters:
            return lr
        change = self.end_factor - self.start_factor
        return lr * (1.0 + change / (self.total_iters * self.start_factor + (epoch - 1) * change))
