"""Learning-rate schedules: the learning rate as a function of how many times ``step()`` ran.

A scheduler remembers each group's starting rate (``group["initial_lr"]``, kept in the
optimizer so it is checkpointed with it, and copied to ``base_lrs``) and a counter
``last_epoch``. Every ``step()`` advances the counter and writes the new rate into
``group["lr"]``, which the optimizer reads on its next step. Despite the name (kept for
PyTorch users), an "epoch" is simply one call to ``step()``: once per batch or once per epoch,
as the training loop chooses.

Each ``step()`` follows PyTorch's *chainable* form: the new rate is computed from the group's
current ``lr`` (times a factor, or the next point of a curve through it), not from the base rate.
That is what lets two schedulers drive one optimizer: a ``LinearLR`` warm-up and a
``CosineAnnealingLR`` stepped together multiply their factors, where closed forms evaluated from
``base_lrs`` would each overwrite the other's rate. Each schedule also keeps its closed form
``lr_at(base_lr, epoch)`` (PyTorch's ``_get_closed_form_lr``), used by ``step(epoch)``. Since the
chain continues from ``group["lr"]``, a resumed run needs the optimizer's state (which holds the
rates) as well as the scheduler's; construct both, then load both, as in PyTorch.
"""

from __future__ import annotations

import math

from ..validation import check_number

__all__ = ["LRScheduler", "StepLR", "MultiStepLR", "ExponentialLR", "CosineAnnealingLR",
           "LinearLR"]


class LRScheduler:
    """Base class: subclasses define ``chained_lr`` (one step from the current rate) and
    ``lr_at`` (the closed form), and list their hyperparameters.

    ``last_epoch=-1`` starts a fresh schedule (and records ``group["initial_lr"]``); a larger
    value resumes one, which requires ``initial_lr`` to be in every group already. Construction
    applies the rate of epoch ``last_epoch + 1`` at once, like PyTorch.
    """

    #: Names of the attributes that define the schedule; they go into ``state_dict``.
    hyperparameters: tuple[str, ...] = ()

    def __init__(self, optimizer, last_epoch: int = -1):
        if not hasattr(optimizer, "param_groups"):
            raise TypeError(f"{type(optimizer).__name__} is not an optimizer")
        check_number("last_epoch", last_epoch, low=-1, integer=True)
        self._check_hyperparameters(self._hyperparameter_values())
        self.optimizer = optimizer
        for g, group in enumerate(optimizer.param_groups):
            if last_epoch == -1:
                group.setdefault("initial_lr", group["lr"])
            elif "initial_lr" not in group:
                raise ValueError(f"param_groups[{g}] has no 'initial_lr': to resume a schedule "
                                 "(last_epoch != -1) the optimizer must come from a checkpoint "
                                 "made while a scheduler was attached")
        self.base_lrs = [group["initial_lr"] for group in optimizer.param_groups]
        self.last_epoch = int(last_epoch)
        self._last_lr: list[float] = []
        # The constructor's step applies the first rate; a resumed schedule (last_epoch given)
        # keeps the groups' current rates there instead of applying another step's factor.
        self._initial = True
        try:
            self.step()
        finally:
            self._initial = False

    # -- the schedule --------------------------------------------------------------------------

    def lr_at(self, base_lr: float, epoch: int) -> float:
        """The closed form: the rate of a group starting at ``base_lr``, after ``epoch`` steps."""
        raise NotImplementedError

    def chained_lr(self, lr: float, base_lr: float, epoch: int) -> float:
        """The rate at ``epoch`` given the group's current rate ``lr`` (the chainable form)."""
        raise NotImplementedError

    def get_lr(self) -> list[float]:
        """The rate of every group at the current ``last_epoch``, from the groups' current rates."""
        return [self.chained_lr(group["lr"], base_lr, self.last_epoch)
                for group, base_lr in zip(self.optimizer.param_groups, self.base_lrs)]

    def step(self, epoch: int | None = None) -> None:
        """Advance one epoch and write the new rates into the optimizer's groups.

        ``step(epoch)`` (deprecated in PyTorch, kept for ported code) jumps to ``epoch`` and
        uses the closed form, ignoring the groups' current rates.
        """
        if epoch is None:
            self.last_epoch += 1
            lrs = self.get_lr()
        else:
            check_number("epoch", epoch, low=0, integer=True)
            self.last_epoch = int(epoch)
            lrs = [self.lr_at(base_lr, self.last_epoch) for base_lr in self.base_lrs]
        for group, lr in zip(self.optimizer.param_groups, lrs):
            group["lr"] = lr
        self._last_lr = lrs

    def get_last_lr(self) -> list[float]:
        """The rates the last ``step()`` wrote, one per group."""
        return list(self._last_lr)

    # -- checkpoints ---------------------------------------------------------------------------

    def _hyperparameter_values(self) -> dict:
        return {name: getattr(self, name) for name in self.hyperparameters}

    def _check_hyperparameters(self, values: dict) -> None:
        """Raise ValueError naming the first invalid hyperparameter."""

    def state_dict(self) -> dict:
        """Plain data: the counter, the base and last rates, and the schedule's hyperparameters."""
        state = {"last_epoch": self.last_epoch, "base_lrs": list(self.base_lrs),
                 "last_lr": list(self._last_lr)}
        for name, value in self._hyperparameter_values().items():
            state[name] = list(value) if isinstance(value, (list, tuple)) else value
        return state

    def load_state_dict(self, state_dict: dict) -> None:
        """Restore ``state_dict`` (checked first; on error nothing changes).

        Like PyTorch, this restores the scheduler only; the groups' current ``lr`` comes back with
        the optimizer's own state dict.
        """
        if not isinstance(state_dict, dict):
            raise ValueError("a scheduler state dict must be a dict")
        expected = {"last_epoch", "base_lrs", "last_lr", *self.hyperparameters}
        if set(state_dict) != expected:
            missing = sorted(expected - set(state_dict))
            extra = sorted(map(str, set(state_dict) - expected))
            raise ValueError(f"{type(self).__name__} state dict: missing keys {missing}, "
                             f"unexpected keys {extra}")
        check_number("last_epoch", state_dict["last_epoch"], low=-1, integer=True)
        groups = len(self.optimizer.param_groups)
        for key in ("base_lrs", "last_lr"):
            values = state_dict[key]
            if not isinstance(values, (list, tuple)) or len(values) != groups:
                raise ValueError(f"{key} must be a list of {groups} rates (one per parameter "
                                 f"group), got {values!r}")
            for i, value in enumerate(values):
                check_number(f"{key}[{i}]", value)
        hyper = {name: state_dict[name] for name in self.hyperparameters}
        self._check_hyperparameters(hyper)
        self.last_epoch = int(state_dict["last_epoch"])
        self.base_lrs = list(state_dict["base_lrs"])
        self._last_lr = list(state_dict["last_lr"])
        for name, value in hyper.items():
            setattr(self, name, list(value) if isinstance(value, (list, tuple)) else value)

    def __repr__(self) -> str:
        settings = ", ".join(f"{k}={v!r}" for k, v in self._hyperparameter_values().items())
        return f"{type(self).__name__}({settings}, last_epoch={self.last_epoch})"


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


# The other schedules live in modules by family; they are importable from here, as in PyTorch.
from .lr_schedules_combined import ChainedScheduler, ReduceLROnPlateau, SequentialLR  # noqa: E402
from .lr_schedules_cyclic import CosineAnnealingWarmRestarts, CyclicLR, OneCycleLR  # noqa: E402
from .lr_schedules_decay import LambdaLR, MultiplicativeLR, PolynomialLR  # noqa: E402

__all__ += ["LambdaLR", "MultiplicativeLR", "PolynomialLR", "CosineAnnealingWarmRestarts",
            "CyclicLR", "OneCycleLR", "SequentialLR", "ChainedScheduler", "ReduceLROnPlateau"]
