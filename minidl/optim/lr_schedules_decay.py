"""Schedules given by a user function or a polynomial: LambdaLR, MultiplicativeLR, PolynomialLR.

``LambdaLR`` and ``MultiplicativeLR`` call functions the user wrote. A function is code, which
a checkpoint never stores (loading a file must never run code from it), so their state is the
step counter and the rates alone: to resume, build the scheduler again with the same function
and then ``load_state_dict`` -- as in PyTorch, where functions are left out of the state too.
"""

from __future__ import annotations

from ..validation import check_number
from .lr_schedule_base import LRScheduler

__all__ = ["LambdaLR", "MultiplicativeLR", "PolynomialLR", "ScheduleWithoutClosedForm"]


class ScheduleWithoutClosedForm(LRScheduler):
    """A schedule whose ``step(epoch)`` evaluates ``get_lr()`` at ``epoch``, as PyTorch does for
    schedules that define no closed form (so a chained one continues from the current rates)."""

    def step(self, epoch: int | None = None) -> None:
        """Advance one epoch, or jump to ``epoch``; write the rates into the groups."""
        if epoch is None:
            return super().step()
        check_number("epoch", epoch, low=0, integer=True)
        self.last_epoch = int(epoch)
        lrs = self.get_lr()
        for group, lr in zip(self.optimizer.param_groups, lrs):
            group["lr"] = lr
        self._last_lr = lrs


def _one_per_group(name: str, functions, optimizer) -> list:
    groups = len(optimizer.param_groups)
    if not isinstance(functions, (list, tuple)):
        functions = [functions] * groups
    if len(functions) != groups:
        raise ValueError(f"{name}: expected {groups} functions (one per parameter group), got "
                         f"{len(functions)}")
    for i, function in enumerate(functions):
        if not callable(function):
            raise TypeError(f"{name}[{i}] must be callable, got {type(function).__name__}")
    return list(functions)


class LambdaLR(ScheduleWithoutClosedForm):
    """``lr = base_lr · lr_lambda(epoch)``; ``lr_lambda`` is one function or one per group.

    The functions are not part of ``state_dict``: pass the same ones again when rebuilding the
    scheduler to resume, then call ``load_state_dict``.
    """

    def __init__(self, optimizer, lr_lambda, last_epoch: int = -1):
        self.lr_lambdas = _one_per_group("lr_lambda", lr_lambda, optimizer)
        super().__init__(optimizer, last_epoch)

    def lr_at(self, base_lr: float, epoch: int, group: int = 0) -> float:
        return base_lr * self.lr_lambdas[group](epoch)

    def get_lr(self) -> list[float]:
        return [self.lr_at(base, self.last_epoch, g) for g, base in enumerate(self.base_lrs)]


class MultiplicativeLR(ScheduleWithoutClosedForm):
    """Multiply each group's current rate by ``lr_lambda(epoch)`` at every step after the first.

    The rate is a running product, so it continues from the groups' current rates: a resumed
    run restores the optimizer (which holds them) as well as this scheduler. The functions are
    not part of ``state_dict`` (see :class:`LambdaLR`).
    """

    def __init__(self, optimizer, lr_lambda, last_epoch: int = -1):
        self.lr_lambdas = _one_per_group("lr_lambda", lr_lambda, optimizer)
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        groups = self.optimizer.param_groups
        if self.last_epoch <= 0:
            return [group["lr"] for group in groups]
        return [group["lr"] * self.lr_lambdas[g](self.last_epoch)
                for g, group in enumerate(groups)]


class PolynomialLR(LRScheduler):
    """Decay to 0 over ``total_iters`` steps as ``base · (1 - epoch/total_iters)^power``, then
    hold.

    Each step multiplies the current rate by the ratio of consecutive values of that curve
    (PyTorch's chainable form), so it composes with other schedulers on one optimizer.
    """

    hyperparameters = ("total_iters", "power")

    def __init__(self, optimizer, total_iters: int = 5, power: float = 1.0,
                 last_epoch: int = -1):
        self.total_iters, self.power = total_iters, power
        super().__init__(optimizer, last_epoch)

    def _check_hyperparameters(self, values: dict) -> None:
        check_number("total_iters", values["total_iters"], low=1, integer=True)
        check_number("power", values["power"], low=0.0)

    def lr_at(self, base_lr: float, epoch: int) -> float:
        return base_lr * (1.0 - min(self.total_iters, epoch) / self.total_iters) ** self.power

    def get_lr(self) -> list[float]:
        groups, epoch = self.optimizer.param_groups, self.last_epoch
        if epoch == 0 or epoch > self.total_iters:
            return [group["lr"] for group in groups]
        factor = ((1.0 - epoch / self.total_iters) /
                  (1.0 - (epoch - 1) / self.total_iters)) ** self.power
        return [group["lr"] * factor for group in groups]
