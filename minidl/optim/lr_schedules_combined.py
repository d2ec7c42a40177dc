"""Schedulers that drive other schedulers or follow a metric: SequentialLR, ChainedScheduler and
ReduceLROnPlateau.

Their state is their own counters plus the state of each scheduler they drive, nested, so one
``state_dict`` restores the whole combination exactly.
"""

from __future__ import annotations

import bisect
import math

from ..validation import check_number

__all__ = ["SequentialLR", "ChainedScheduler", "ReduceLROnPlateau"]


def _check_schedulers(schedulers, optimizer=None):
    schedulers = list(schedulers)
    if not schedulers:
        raise ValueError("schedulers: expected at least one scheduler")
    optimizer = optimizer if optimizer is not None else schedulers[0].optimizer
    for i, scheduler in enumerate(schedulers):
        if getattr(scheduler, "optimizer", None) is not optimizer:
            raise ValueError(f"schedulers[{i}] drives a different optimizer than the others")
    return schedulers, optimizer


def _restart(scheduler) -> None:
    """Put ``scheduler`` at its epoch 0: PyTorch's ``step(0)`` (the closed form where the
    schedule has one)."""
    scheduler.step(0)


def _load_nested(owner: str, schedulers, states) -> None:
    if not isinstance(states, (list, tuple)) or len(states) != len(schedulers):
        raise ValueError(f"{owner} state dict: 'schedulers' must hold {len(schedulers)} states")
    for scheduler, state in zip(schedulers, states):
        scheduler.load_state_dict(state)


class SequentialLR:
    """Run ``schedulers[0]`` until ``milestones[0]``, then ``schedulers[1]`` (restarted at its
    epoch 0) until ``milestones[1]``, and so on -- e.g. a linear warm-up, then cosine decay."""

    def __init__(self, optimizer, schedulers, milestones, last_epoch: int = -1):
        self._schedulers, self.optimizer = _check_schedulers(schedulers, optimizer)
        milestones = list(milestones)
        if len(milestones) != len(self._schedulers) - 1:
            raise ValueError(f"milestones: expected {len(self._schedulers) - 1} milestones for "
                             f"{len(self._schedulers)} schedulers, got {len(milestones)}")
        for i, milestone in enumerate(milestones):
            check_number(f"milestones[{i}]", milestone, low=1, integer=True)
        if milestones != sorted(milestones):
            raise ValueError(f"milestones must be increasing, got {milestones}")
        self._milestones = milestones
        self.last_epoch = last_epoch + 1
        # Every scheduler applied its first rate when it was built; start over from the base
        # rates and let only the first one take its first step, as PyTorch does.
        for group in self.optimizer.param_groups:
            group["lr"] = group["initial_lr"]
        for scheduler in self._schedulers:
            scheduler.last_epoch -= 1
        first = self._schedulers[0]
        if hasattr(first, "_initial"):  # a chainable schedule: its first step keeps the rate
            first._initial = True
            try:
                first.step()
            finally:
                first._initial = False
        else:
            first.step()
        self._last_lr = first.get_last_lr()

    def step(self) -> None:
        """Advance one epoch in the scheduler whose stretch this is."""
        self.last_epoch += 1
        index = bisect.bisect_right(self._milestones, self.last_epoch)
        scheduler = self._schedulers[index]
        if index > 0 and self._milestones[index - 1] == self.last_epoch:
            _restart(scheduler)
        else:
            scheduler.step()
        self._last_lr = scheduler.get_last_lr()

    def get_last_lr(self) -> list[float]:
        """The rates the last step wrote, one per group."""
        return list(self._last_lr)

    def state_dict(self) -> dict:
        """Its counter and milestones, and the state of every scheduler it drives."""
        return {"last_epoch": self.last_epoch, "milestones": list(self._milestones),
                "last_lr": list(self._last_lr),
                "schedulers": [s.state_dict() for s in self._schedulers]}

    def load_state_dict(self, state_dict: dict) -> None:
        """Restore this scheduler and every scheduler it drives."""
        if not isinstance(state_dict, dict) or set(state_dict) != {
                "last_epoch", "milestones", "last_lr", "schedulers"}:
            raise ValueError("SequentialLR state dict must have exactly 'last_epoch', "
                             "'milestones', 'last_lr' and 'schedulers'")
        if list(state_dict["milestones"]) != self._milestones:
            raise ValueError(f"SequentialLR state dict: milestones {state_dict['milestones']} "
                             f"differ from this scheduler's {self._milestones}")
        check_number("last_epoch", state_dict["last_epoch"], low=0, integer=True)
        _load_nested("SequentialLR", self._schedulers, state_dict["schedulers"])
        self.last_epoch = int(state_dict["last_epoch"])
        self._last_lr = list(state_dict["last_lr"])


class ChainedScheduler:
    """Step several schedulers together each time; their chainable factors multiply (e.g. a
    warm-up factor times a decay)."""

    def __init__(self, schedulers, optimizer=None):
        self._schedulers, self.optimizer = _check_schedulers(schedulers, optimizer)
        self._last_lr = [group["lr"] for group in self.optimizer.param_groups]

    def step(self) -> None:
        """Step every scheduler, in order."""
        for scheduler in self._schedulers:
            scheduler.step()
        self._last_lr = [group["lr"] for group in self.optimizer.param_groups]

    def get_last_lr(self) -> list[float]:
        """The groups' rates after the last step."""
        return list(self._last_lr)

    def state_dict(self) -> dict:
        """The state of every scheduler in the chain."""
        return {"last_lr": list(self._last_lr),
                "schedulers": [s.state_dict() for s in self._schedulers]}

    def load_state_dict(self, state_dict: dict) -> None:
        """Restore every scheduler in the chain."""
        if not isinstance(state_dict, dict) or set(state_dict) != {"last_lr", "schedulers"}:
            raise ValueError("ChainedScheduler state dict must have exactly 'last_lr' and "
                             "'schedulers'")
        _load_nested("ChainedScheduler", self._schedulers, state_dict["schedulers"])
        self._last_lr = list(state_dict["last_lr"])


class ReduceLROnPlateau:
    """Multiply the rate by ``factor`` when a metric has not improved for ``patience`` epochs.

    Call ``step(metric)`` once per evaluation. "Improved" means below ``best·(1 - threshold)``
    in mode "min" with ``threshold_mode="rel"`` (``best - threshold`` with "abs"; mirrored for
    "max"). After a reduction, ``cooldown`` epochs pass before bad epochs count again; rates
    never go below ``min_lr`` and changes smaller than ``eps`` are skipped.
    """

    _SETTINGS = ("mode", "factor", "patience", "threshold", "threshold_mode", "cooldown",
                 "min_lrs", "eps")
    _COUNTERS = ("best", "num_bad_epochs", "cooldown_counter", "last_epoch")

    def __init__(self, optimizer, mode: str = "min", factor: float = 0.1, patience: int = 10,
                 threshold: float = 1e-4, threshold_mode: str = "rel", cooldown: int = 0,
                 min_lr=0.0, eps: float = 1e-8):
        if not hasattr(optimizer, "param_groups"):
            raise TypeError(f"{type(optimizer).__name__} is not an optimizer")
        self.optimizer = optimizer
        groups = len(optimizer.param_groups)
        min_lrs = list(min_lr) if isinstance(min_lr, (list, tuple)) else [min_lr] * groups
        if len(min_lrs) != groups:
            raise ValueError(f"min_lr: expected {groups} values, got {len(min_lrs)}")
        self.mode, self.factor, self.patience = mode, factor, patience
        self.threshold, self.threshold_mode, self.cooldown = threshold, threshold_mode, cooldown
        self.min_lrs, self.eps = [float(v) for v in min_lrs], eps
        self._check(self.__dict__)
        self.best = math.inf if mode == "min" else -math.inf
        self.num_bad_epochs = self.cooldown_counter = self.last_epoch = 0
        self._last_lr = [group["lr"] for group in optimizer.param_groups]

    @staticmethod
    def _check(values: dict) -> None:
        if values["mode"] not in ("min", "max"):
            raise ValueError(f"mode must be 'min' or 'max', got {values['mode']!r}")
        if values["threshold_mode"] not in ("rel", "abs"):
            raise ValueError(f"threshold_mode must be 'rel' or 'abs', got "
                             f"{values['threshold_mode']!r}")
        check_number("factor", values["factor"], low=0.0, high=1.0, high_open=True)
        check_number("patience", values["patience"], low=0, integer=True)
        check_number("threshold", values["threshold"], low=0.0)
        check_number("cooldown", values["cooldown"], low=0, integer=True)
        check_number("eps", values["eps"], low=0.0)
        for i, value in enumerate(values["min_lrs"]):
            check_number(f"min_lrs[{i}]", value, low=0.0)

    def _is_better(self, value: float) -> bool:
        if self.mode == "min":
            return value < (self.best * (1.0 - self.threshold) if self.threshold_mode == "rel"
                            else self.best - self.threshold)
        return value > (self.best * (1.0 + self.threshold) if self.threshold_mode == "rel"
                        else self.best + self.threshold)

    def step(self, metrics) -> None:
        """Record one evaluation of the metric (a number or 0-d tensor) and reduce if due."""
        value = float(metrics.item() if hasattr(metrics, "item") else metrics)
        self.last_epoch += 1
        if self._is_better(value):
            self.best, self.num_bad_epochs = value, 0
        else:
            self.num_bad_epochs += 1
        if self.cooldown_counter > 0:
            self.cooldown_counter -= 1
            self.num_bad_epochs = 0
        if self.num_bad_epochs > self.patience:
            for group, floor in zip(self.optimizer.param_groups, self.min_lrs):
                old = float(group["lr"])
                new = max(old * self.factor, floor)
                if old - new > self.eps:
                    group["lr"] = new
            self.cooldown_counter, self.num_bad_epochs = self.cooldown, 0
        self._last_lr = [group["lr"] for group in self.optimizer.param_groups]

    @property
    def in_cooldown(self) -> bool:
        """Whether bad epochs are being ignored after a reduction."""
        return self.cooldown_counter > 0

    def get_last_lr(self) -> list[float]:
        """The groups' rates after the last step."""
        return list(self._last_lr)

    def state_dict(self) -> dict:
        """Settings and counters (best value, bad epochs, cooldown), plain data."""
        state = {name: getattr(self, name) for name in self._SETTINGS + self._COUNTERS}
        state["min_lrs"] = list(self.min_lrs)
        state["last_lr"] = list(self._last_lr)
        return state

    def load_state_dict(self, state_dict: dict) -> None:
        """Restore (checked first; on error nothing changes)."""
        expected = {*self._SETTINGS, *self._COUNTERS, "last_lr"}
        if not isinstance(state_dict, dict) or set(state_dict) != expected:
            got = sorted(state_dict) if isinstance(state_dict, dict) else state_dict
            raise ValueError(f"ReduceLROnPlateau state dict: expected keys {sorted(expected)}, "
                             f"got {got}")
        self._check(state_dict)
        if len(state_dict["min_lrs"]) != len(self.optimizer.param_groups):
            raise ValueError("ReduceLROnPlateau state dict: one min_lr per group expected")
        best = state_dict["best"]
        if isinstance(best, bool) or not isinstance(best, (int, float)) or math.isnan(best):
            raise ValueError(f"ReduceLROnPlateau state dict: best must be a number, got {best!r}")
        for name in ("num_bad_epochs", "cooldown_counter", "last_epoch"):
            check_number(name, state_dict[name], low=0, integer=True)
        for name in self._SETTINGS + self._COUNTERS:
            setattr(self, name, state_dict[name])
        self.min_lrs = list(self.min_lrs)
        self._last_lr = list(state_dict["last_lr"])
