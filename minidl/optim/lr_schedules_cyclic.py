"""Schedules that rise and fall: CosineAnnealingWarmRestarts, CyclicLR and OneCycleLR.

Each is a closed form of the step counter (and, for the warm restarts, of the position in the
current cycle), so a restored scheduler gives exactly the rates of an uninterrupted one.
CyclicLR and OneCycleLR also cycle the momentum (SGD's ``momentum``, or β₁ of Adam's ``betas``)
opposite to the rate, as PyTorch does by default: a high rate with low momentum, and back.
"""

from __future__ import annotations

import math

from ..validation import check_flag, check_number
from .lr_schedule_base import LRScheduler
from .lr_schedules_decay import ScheduleWithoutClosedForm

__all__ = ["CosineAnnealingWarmRestarts", "CyclicLR", "OneCycleLR"]


def _per_group(name: str, value, optimizer) -> list[float]:
    groups = len(optimizer.param_groups)
    values = list(value) if isinstance(value, (list, tuple)) else [value] * groups
    if len(values) != groups:
        raise ValueError(f"{name}: expected {groups} values (one per parameter group), got "
                         f"{len(values)}")
    for i, v in enumerate(values):
        check_number(f"{name}[{i}]", v, low=0.0)
    return [float(v) for v in values]


def _momentum_key(optimizer) -> str:
    """Which group entry holds the momentum to cycle: SGD/RMSprop ``momentum`` or β₁ of
    ``betas``."""
    if "betas" in optimizer.defaults:
        return "betas"
    if "momentum" in optimizer.defaults:
        return "momentum"
    raise ValueError(f"cycle_momentum: {type(optimizer).__name__} has neither 'momentum' nor "
                     f"'betas'; pass cycle_momentum=False")


def _set_momentum(group: dict, key: str, value: float) -> None:
    if key == "betas":
        group["betas"] = (value, *group["betas"][1:])
    else:
        group["momentum"] = value


class CosineAnnealingWarmRestarts(LRScheduler):
    """Cosine annealing from the base rate to ``eta_min`` over ``T_0`` steps, then a restart;
    each cycle is ``T_mult`` times longer than the last (SGDR, Loshchilov & Hutter, 2017)::

        lr = eta_min + (base - eta_min) · (1 + cos(π · T_cur / T_i)) / 2

    ``step(epoch)`` accepts a fractional epoch (e.g. ``epoch + batch / batches``), as PyTorch.
    """

    hyperparameters = ("T_0", "T_mult", "eta_min", "T_i", "T_cur")

    def __init__(self, optimizer, T_0: int, T_mult: int = 1, eta_min: float = 0.0,
                 last_epoch: int = -1):
        self.T_0, self.T_mult, self.eta_min = T_0, T_mult, eta_min
        self.T_i, self.T_cur = T_0, last_epoch
        super().__init__(optimizer, last_epoch)

    def _check_hyperparameters(self, values: dict) -> None:
        check_number("T_0", values["T_0"], low=1, integer=True)
        check_number("T_mult", values["T_mult"], low=1, integer=True)
        check_number("eta_min", values["eta_min"], low=0.0)
        check_number("T_i", values["T_i"], low=1)
        check_number("T_cur", values["T_cur"], low=-1)

    def lr_at(self, base_lr: float, epoch) -> float:
        return self.eta_min + (base_lr - self.eta_min) * (
            1.0 + math.cos(math.pi * self.T_cur / self.T_i)) / 2.0

    def get_lr(self) -> list[float]:
        return [self.lr_at(base, self.last_epoch) for base in self.base_lrs]

    def step(self, epoch=None) -> None:
        """Advance one step (or jump to ``epoch``, possibly fractional) and apply the rate."""
        if epoch is None and self.last_epoch < 0:
            epoch = 0
        if epoch is None:
            epoch = self.last_epoch + 1
            self.T_cur += 1
            if self.T_cur >= self.T_i:
                self.T_cur -= self.T_i
                self.T_i *= self.T_mult
        else:
            check_number("epoch", epoch, low=0)
            if epoch >= self.T_0:
                if self.T_mult == 1:
                    self.T_cur = epoch % self.T_0
                else:
                    # Cycles end at T_0·(T_mult^n - 1)/(T_mult - 1): find the n we are in.
                    n = int(math.log(epoch / self.T_0 * (self.T_mult - 1) + 1, self.T_mult))
                    self.T_cur = epoch - self.T_0 * (self.T_mult ** n - 1) / (self.T_mult - 1)
                    self.T_i = self.T_0 * self.T_mult ** n
            else:
                self.T_i, self.T_cur = self.T_0, epoch
        self.last_epoch = math.floor(epoch)
        lrs = self.get_lr()
        for group, lr in zip(self.optimizer.param_groups, lrs):
            group["lr"] = lr
        self._last_lr = lrs


class CyclicLR(ScheduleWithoutClosedForm):
    """Cycle the rate between ``base_lr`` and ``max_lr`` (Smith, 2017): up over
    ``step_size_up`` steps, down over ``step_size_down``; call ``step()`` after every batch.

    ``mode`` "triangular" keeps the amplitude, "triangular2" halves it every cycle, "exp_range"
    scales it by ``gamma**step``. A custom ``scale_fn`` (with ``scale_mode`` "cycle" or
    "iterations") is user code: not in ``state_dict``, pass it again to resume.
    """

    hyperparameters = ("max_lrs", "total_size", "step_ratio", "mode", "gamma", "scale_mode",
                       "cycle_momentum", "base_momentums", "max_momentums")

    def __init__(self, optimizer, base_lr, max_lr, step_size_up: int = 2000,
                 step_size_down: int | None = None, mode: str = "triangular",
                 gamma: float = 1.0, scale_fn=None, scale_mode: str = "cycle",
                 cycle_momentum: bool = True, base_momentum=0.8, max_momentum=0.9,
                 last_epoch: int = -1):
        check_number("step_size_up", step_size_up, low=0.0, low_open=True)
        down = step_size_up if step_size_down is None else step_size_down
        check_number("step_size_down", down, low=0.0, low_open=True)
        if scale_fn is None and mode not in ("triangular", "triangular2", "exp_range"):
            raise ValueError(f"mode must be 'triangular', 'triangular2' or 'exp_range', got "
                             f"{mode!r}")
        base_lrs = _per_group("base_lr", base_lr, optimizer)
        self.max_lrs = _per_group("max_lr", max_lr, optimizer)
        self.total_size = float(step_size_up + down)
        self.step_ratio = step_size_up / self.total_size
        self.mode, self.gamma, self.scale_fn = mode, gamma, scale_fn
        self.scale_mode = scale_mode if scale_fn is not None else \
            ("iterations" if mode == "exp_range" else "cycle")
        self.cycle_momentum = cycle_momentum
        self.base_momentums = self.max_momentums = []
        if last_epoch == -1:
            for lr, group in zip(base_lrs, optimizer.param_groups):
                group["lr"] = lr
        if cycle_momentum:
            self._momentum = _momentum_key(optimizer)
            self.base_momentums = _per_group("base_momentum", base_momentum, optimizer)
            self.max_momentums = _per_group("max_momentum", max_momentum, optimizer)
            if last_epoch == -1:
                for momentum, group in zip(self.max_momentums, optimizer.param_groups):
                    _set_momentum(group, self._momentum, momentum)
        super().__init__(optimizer, last_epoch)

    def _check_hyperparameters(self, values: dict) -> None:
        if values["scale_mode"] not in ("cycle", "iterations"):
            raise ValueError(f"scale_mode must be 'cycle' or 'iterations', got "
                             f"{values['scale_mode']!r}")
        check_number("gamma", values["gamma"], low=0.0, low_open=True)
        check_flag("cycle_momentum", values["cycle_momentum"])
        check_number("total_size", values["total_size"], low=0.0, low_open=True)
        check_number("step_ratio", values["step_ratio"], low=0.0, high=1.0)

    def _scale(self, x: float) -> float:
        if self.scale_fn is not None:
            return self.scale_fn(x)
        if self.mode == "triangular":
            return 1.0
        if self.mode == "triangular2":
            return 1.0 / (2.0 ** (x - 1))
        return self.gamma ** x

    def _position(self) -> tuple[float, float]:
        """(where in the up-down triangle we are, 0..1..0; the scale_fn argument)."""
        cycle = math.floor(1 + self.last_epoch / self.total_size)
        x = 1.0 + self.last_epoch / self.total_size - cycle
        height = x / self.step_ratio if x <= self.step_ratio else (x - 1) / (self.step_ratio - 1)
        return height, self._scale(cycle if self.scale_mode == "cycle" else self.last_epoch)

    def get_lr(self) -> list[float]:
        height, scale = self._position()
        if self.cycle_momentum:
            for group, low, high in zip(self.optimizer.param_groups, self.base_momentums,
                                        self.max_momentums):
                _set_momentum(group, self._momentum, high - (high - low) * height * scale)
        return [base + (top - base) * height * scale
                for base, top in zip(self.base_lrs, self.max_lrs)]


class OneCycleLR(ScheduleWithoutClosedForm):
    """The 1cycle policy (Smith & Topin, 2018): warm up from ``max_lr/div_factor`` to ``max_lr``
    over ``pct_start`` of ``total_steps``, then anneal to ``initial_lr/final_div_factor``
    (``three_phase``: back down to the initial rate first, then to the minimum). Momentum
    cycles the other way between ``max_momentum`` and ``base_momentum``. ``anneal_strategy``
    is "cos" or "linear". Give ``total_steps``, or ``epochs`` and ``steps_per_epoch``.
    """

    hyperparameters = ("total_steps", "pct_start", "anneal_strategy", "cycle_momentum",
                       "three_phase")

    def __init__(self, optimizer, max_lr, total_steps: int | None = None,
                 epochs: int | None = None, steps_per_epoch: int | None = None,
                 pct_start: float = 0.3, anneal_strategy: str = "cos",
                 cycle_momentum: bool = True, base_momentum=0.85, max_momentum=0.95,
                 div_factor: float = 25.0, final_div_factor: float = 1e4,
                 three_phase: bool = False, last_epoch: int = -1):
        if total_steps is None:
            if epochs is None or steps_per_epoch is None:
                raise ValueError("OneCycleLR: give total_steps, or epochs and steps_per_epoch")
            check_number("epochs", epochs, low=1, integer=True)
            check_number("steps_per_epoch", steps_per_epoch, low=1, integer=True)
            total_steps = epochs * steps_per_epoch
        self.total_steps, self.pct_start = total_steps, pct_start
        self.anneal_strategy, self.cycle_momentum = anneal_strategy, cycle_momentum
        self.three_phase = three_phase
        self._check_hyperparameters(self._hyperparameter_values())
        check_number("div_factor", div_factor, low=0.0, low_open=True)
        check_number("final_div_factor", final_div_factor, low=0.0, low_open=True)
        max_lrs = _per_group("max_lr", max_lr, optimizer)
        if last_epoch == -1:
            # The schedule's endpoints live in the groups, so the optimizer's state keeps them.
            for top, group in zip(max_lrs, optimizer.param_groups):
                group["initial_lr"] = top / div_factor
                group["max_lr"] = top
                group["min_lr"] = group["initial_lr"] / final_div_factor
        if cycle_momentum:
            self._momentum = _momentum_key(optimizer)
            if last_epoch == -1:
                for group, low, high in zip(
                        optimizer.param_groups, _per_group("base_momentum", base_momentum,
                                                           optimizer),
                        _per_group("max_momentum", max_momentum, optimizer)):
                    _set_momentum(group, self._momentum, high)
                    group["max_momentum"], group["base_momentum"] = high, low
        super().__init__(optimizer, last_epoch)

    def _check_hyperparameters(self, values: dict) -> None:
        check_number("total_steps", values["total_steps"], low=1, integer=True)
        check_number("pct_start", values["pct_start"], low=0.0, high=1.0)
        if values["anneal_strategy"] not in ("cos", "linear"):
            raise ValueError(f"anneal_strategy must be 'cos' or 'linear', got "
                             f"{values['anneal_strategy']!r}")
        check_flag("cycle_momentum", values["cycle_momentum"])
        check_flag("three_phase", values["three_phase"])

    def _phases(self) -> list[tuple[float, str, str, str, str]]:
        """(last step, start rate, end rate, start momentum, end momentum) of each phase."""
        warm = float(self.pct_start * self.total_steps) - 1
        if self.three_phase:
            return [(warm, "initial_lr", "max_lr", "max_momentum", "base_momentum"),
                    (2 * warm, "max_lr", "initial_lr", "base_momentum", "max_momentum"),
                    (self.total_steps - 1, "initial_lr", "min_lr", "max_momentum",
                     "max_momentum")]
        return [(warm, "initial_lr", "max_lr", "max_momentum", "base_momentum"),
                (self.total_steps - 1, "max_lr", "min_lr", "base_momentum", "max_momentum")]

    def _anneal(self, start: float, end: float, fraction: float) -> float:
        if self.anneal_strategy == "cos":
            return end + (start - end) / 2.0 * (math.cos(math.pi * fraction) + 1)
        return (end - start) * fraction + start

    def get_lr(self) -> list[float]:
        step = self.last_epoch
        if step > self.total_steps:
            raise ValueError(f"OneCycleLR: stepped {step} times, but total_steps is "
                             f"{self.total_steps}")
        phases = self._phases()
        lrs = []
        for group in self.optimizer.param_groups:
            start = 0.0
            for i, (end, lr_from, lr_to, m_from, m_to) in enumerate(phases):
                if step <= end or i == len(phases) - 1:
                    fraction = (step - start) / (end - start)
                    lrs.append(self._anneal(group[lr_from], group[lr_to], fraction))
                    if self.cycle_momentum:
                        _set_momentum(group, self._momentum,
                                      self._anneal(group[m_from], group[m_to], fraction))
                    break
                start = end
        return lrs
