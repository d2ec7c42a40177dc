"""RMSprop: steps divided by a running root-mean-square of the gradient."""

from __future__ import annotations

from ..backend import composed
from ..validation import check_settings
from .optimizer import Optimizer
from .composed_updates import check_slots, effective_grad, running_average_, step_

__all__ = ["RMSprop"]


class RMSprop(Optimizer):
    """RMSprop (Hinton's lecture notes), as PyTorch defines it.

    ``v ← α·v + (1 - α)·g²`` tracks the mean squared gradient, and the step is
    ``lr·g / (sqrt(v) + eps)``, so every entry moves at a rate normalised by its own recent
    gradient scale. ``centered=True`` also tracks the mean gradient ``ḡ`` and divides by the
    standard deviation ``sqrt(v - ḡ²)`` instead. With ``momentum`` the normalised gradient is
    accumulated in a buffer ``b ← momentum·b + g/(…)`` and the step is ``lr·b``.

    State per parameter: ``"step"``, ``"square_avg"``, and ``"momentum_buffer"`` (momentum > 0),
    ``"grad_avg"`` (centered) -- PyTorch's names.
    """

    def __init__(self, params, lr: float = 1e-2, alpha: float = 0.99, eps: float = 1e-8,
                 weight_decay: float = 0.0, momentum: float = 0.0, centered: bool = False,
                 *, maximize: bool = False):
        defaults = dict(lr=lr, alpha=alpha, eps=eps, weight_decay=weight_decay,
                        momentum=momentum, centered=centered, maximize=maximize)
        self._check_hyperparameters(defaults)
        super().__init__(params, defaults)

    def _check_hyperparameters(self, group: dict) -> None:
        check_settings(group, non_negative=("lr", "alpha", "eps", "weight_decay", "momentum"),
                       flags=("centered", "maximize"))

    def _check_param_state(self, slots: dict, param, group: dict, where: str) -> None:
        arrays = ["square_avg"] + (["momentum_buffer"] if group["momentum"] > 0 else []) \
            + (["grad_avg"] if group["centered"] else [])
        check_slots("RMSprop", slots, where, arrays, optional=("momentum_buffer", "grad_avg"))

    def _update(self, param, grad, slots: dict, group: dict, be) -> None:
        if not slots:
            slots["step"] = 0
            slots["square_avg"] = composed.zeros_like(be, param.data)
        if group["momentum"] > 0 and "momentum_buffer" not in slots:
            slots["momentum_buffer"] = composed.zeros_like(be, param.data)
        if group["centered"] and "grad_avg" not in slots:
            slots["grad_avg"] = composed.zeros_like(be, param.data)
        slots["step"] += 1
        grad = effective_grad(be, param, grad, group)
        running_average_(be, slots["square_avg"], be.mul(grad, grad), group["alpha"])
        if group["centered"]:
            running_average_(be, slots["grad_avg"], grad, group["alpha"])
            mean = slots["grad_avg"]
            scale = be.math_function(be.sub(slots["square_avg"], be.mul(mean, mean)), "sqrt")
        else:
            scale = be.math_function(slots["square_avg"], "sqrt")
        normalized = be.div(grad, be.add(scale, group["eps"]))
        if group["momentum"] > 0:
            buffer = slots["momentum_buffer"]
            be.assign_(buffer, be.add(be.mul(buffer, group["momentum"]), normalized))
            normalized = buffer
        step_(be, param, normalized, group["lr"])
