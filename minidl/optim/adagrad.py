"""Adagrad and Adadelta: per-entry rates from the accumulated squared gradient."""

from __future__ import annotations

from ..backend import composed
from ..validation import check_number, check_settings
from .optimizer import Optimizer
from .composed_updates import check_slots, effective_grad, running_average_, step_

__all__ = ["Adagrad", "Adadelta"]


class Adagrad(Optimizer):
    """Adagrad (Duchi et al., 2011): ``s ← s + g²`` sums every squared gradient seen, and the
    step is ``lr·g / (sqrt(s) + eps)``, so entries with large past gradients slow down for good.
    ``lr_decay`` divides the rate by ``1 + (step - 1)·lr_decay``.

    State per parameter: ``"step"`` and ``"sum"`` (starting at ``initial_accumulator_value``).
    """

    def __init__(self, params, lr: float = 1e-2, lr_decay: float = 0.0,
                 weight_decay: float = 0.0, initial_accumulator_value: float = 0.0,
                 eps: float = 1e-10, *, maximize: bool = False):
        defaults = dict(lr=lr, lr_decay=lr_decay, weight_decay=weight_decay,
                        initial_accumulator_value=initial_accumulator_value, eps=eps,
                        maximize=maximize)
        self._check_hyperparameters(defaults)
        super().__init__(params, defaults)

    def _check_hyperparameters(self, group: dict) -> None:
        check_settings(group, non_negative=("lr", "lr_decay", "weight_decay",
                                            "initial_accumulator_value", "eps"),
                       flags=("maximize",))

    def _check_param_state(self, slots: dict, param, group: dict, where: str) -> None:
        check_slots("Adagrad", slots, where, ["sum"])

    def _update(self, param, grad, slots: dict, group: dict, be) -> None:
        if not slots:
            slots["step"] = 0
            slots["sum"] = be.full(param.data.shape, group["initial_accumulator_value"],
                                   param.data.dtype)
        slots["step"] += 1
        grad = effective_grad(be, param, grad, group)
        rate = group["lr"] / (1.0 + (slots["step"] - 1) * group["lr_decay"])
        be.assign_(slots["sum"], be.add(slots["sum"], be.mul(grad, grad)))
        root = be.math_function(slots["sum"], "sqrt")
        step_(be, param, be.div(grad, be.add(root, group["eps"])), rate)


class Adadelta(Optimizer):
    """Adadelta (Zeiler, 2012): a step whose units match the parameter's.

    ``v ← ρ·v + (1 - ρ)·g²`` as in RMSprop, and ``Δ = sqrt(u + eps)/sqrt(v + eps)·g`` where
    ``u ← ρ·u + (1 - ρ)·Δ²`` tracks the squared steps themselves: the ratio of the two RMS values
    turns a gradient back into a parameter-sized step. ``lr`` (default 1) scales it.

    State per parameter: ``"step"``, ``"square_avg"`` (v) and ``"acc_delta"`` (u).
    """

    def __init__(self, params, lr: float = 1.0, rho: float = 0.9, eps: float = 1e-6,
                 weight_decay: float = 0.0, *, maximize: bool = False):
        defaults = dict(lr=lr, rho=rho, eps=eps, weight_decay=weight_decay, maximize=maximize)
        self._check_hyperparameters(defaults)
        super().__init__(params, defaults)

    def _check_hyperparameters(self, group: dict) -> None:
        check_settings(group, non_negative=("lr", "eps", "weight_decay"), flags=("maximize",))
        check_number("rho", group["rho"], low=0.0, high=1.0)

    def _check_param_state(self, slots: dict, param, group: dict, where: str) -> None:
        check_slots("Adadelta", slots, where, ["square_avg", "acc_delta"])

    def _update(self, param, grad, slots: dict, group: dict, be) -> None:
        if not slots:
            slots["step"] = 0
            slots["square_avg"] = composed.zeros_like(be, param.data)
            slots["acc_delta"] = composed.zeros_like(be, param.data)
        slots["step"] += 1
        grad = effective_grad(be, param, grad, group)
        rho, eps = group["rho"], group["eps"]
        running_average_(be, slots["square_avg"], be.mul(grad, grad), rho)
        std = be.math_function(be.add(slots["square_avg"], eps), "sqrt")
        delta = be.mul(be.div(be.math_function(be.add(slots["acc_delta"], eps), "sqrt"), std), grad)
        running_average_(be, slots["acc_delta"], be.mul(delta, delta), rho)
        step_(be, param, delta, group["lr"])
