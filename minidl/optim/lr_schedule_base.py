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

from ..validation import check_number

__all__ = ["LRScheduler"]


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
