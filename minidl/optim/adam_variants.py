"""NAdam, RAdam and Adamax: Adam with Nesterov momentum, with a rectified warm-up, and with
the infinity norm in place of the squared-gradient average."""

from __future__ import annotations

import math

from ..backend import composed
from ..validation import check_number
from .adam import check_adam_family
from .optimizer import Optimizer
from .composed_updates import (check_slots, decay_weights, effective_grad, running_average_,
                           step_)

__all__ = ["NAdam", "RAdam", "Adamax"]


class NAdam(Optimizer):
    """NAdam (Dozat, 2016): Adam whose momentum step looks ahead, as Nesterov's does.

    The momentum coefficient warms up, ``μ_t = β₁(1 - ½·0.96^(t·momentum_decay))``, and the
    step mixes the current gradient and the moment estimate ``m`` with the next step's
    coefficient: ``lr·[(1 - μ_t)/(1 - Πμ)·g + μ_{t+1}/(1 - Πμ·μ_{t+1})·m] / (sqrt(v̂) + eps)``.

    State per parameter: ``"step"``, ``"mu_product"`` (Πμ, a number), ``"exp_avg"``,
    ``"exp_avg_sq"``.
    """

    def __init__(self, params, lr: float = 2e-3, betas=(0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0, momentum_decay: float = 4e-3,
                 decoupled_weight_decay: bool = False, *, maximize: bool = False):
        defaults = dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay,
                        momentum_decay=momentum_decay,
                        decoupled_weight_decay=decoupled_weight_decay, maximize=maximize)
        self._check_hyperparameters(defaults)
        super().__init__(params, defaults)

    def _check_hyperparameters(self, group: dict) -> None:
        check_adam_family(group)
        check_number("momentum_decay", group["momentum_decay"], low=0.0)

    def _check_param_state(self, slots: dict, param, group: dict, where: str) -> None:
        check_slots("NAdam", slots, where, ["exp_avg", "exp_avg_sq"], ("step", "mu_product"))
        if slots:
            slots["mu_product"] = float(slots["mu_product"])

    def _update(self, param, grad, slots: dict, group: dict, be) -> None:
        if not slots:
            slots.update(step=0, mu_product=1.0, exp_avg=composed.zeros_like(be, param.data),
                         exp_avg_sq=composed.zeros_like(be, param.data))
        slots["step"] += 1
        step, lr, eps = slots["step"], group["lr"], group["eps"]
        beta1, beta2 = group["betas"]
        decay_weights(be, param, group)
        grad = effective_grad(be, param, grad, group)
        mu = beta1 * (1.0 - 0.5 * 0.96 ** (step * group["momentum_decay"]))
        mu_next = beta1 * (1.0 - 0.5 * 0.96 ** ((step + 1) * group["momentum_decay"]))
        slots["mu_product"] *= mu
        product = slots["mu_product"]
        running_average_(be, slots["exp_avg"], grad, beta1)
        running_average_(be, slots["exp_avg_sq"], be.mul(grad, grad), beta2)
        corrected_square = be.div(slots["exp_avg_sq"], 1.0 - beta2 ** step)
        denom = be.add(be.math_function(corrected_square, "sqrt"), eps)
        step_(be, param, be.div(grad, denom), lr * (1.0 - mu) / (1.0 - product))
        step_(be, param, be.div(slots["exp_avg"], denom), lr * mu_next / (1.0 - product * mu_next))


class RAdam(Optimizer):
    """RAdam (Liu et al., 2020): Adam with the variance of its adaptive rate rectified.

    Early on, ``v`` rests on too few gradients for ``1/sqrt(v)`` to be trusted. With
    ``ρ∞ = 2/(1 - β₂) - 1`` and ``ρ_t = ρ∞ - 2t·β₂ᵗ/(1 - β₂ᵗ)`` (the length of the approximated
    moving average), steps with ``ρ_t <= 5`` are plain momentum steps ``lr·m̂``; later ones are
    Adam steps scaled by ``r_t = sqrt((ρ_t-4)(ρ_t-2)ρ∞ / ((ρ∞-4)(ρ∞-2)ρ_t))``.

    State per parameter: ``"step"``, ``"exp_avg"``, ``"exp_avg_sq"``.
    """

    def __init__(self, params, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0, decoupled_weight_decay: bool = False, *,
                 maximize: bool = False):
        defaults = dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay,
                        decoupled_weight_decay=decoupled_weight_decay, maximize=maximize)
        self._check_hyperparameters(defaults)
        super().__init__(params, defaults)

    def _check_hyperparameters(self, group: dict) -> None:
        check_adam_family(group)

    def _check_param_state(self, slots: dict, param, group: dict, where: str) -> None:
        check_slots("RAdam", slots, where, ["exp_avg", "exp_avg_sq"])

    def _update(self, param, grad, slots: dict, group: dict, be) -> None:
        if not slots:
            slots.update(step=0, exp_avg=composed.zeros_like(be, param.data),
                         exp_avg_sq=composed.zeros_like(be, param.data))
        slots["step"] += 1
        step, lr = slots["step"], group["lr"]
        beta1, beta2 = group["betas"]
        decay_weights(be, param, group)
        grad = effective_grad(be, param, grad, group)
        running_average_(be, slots["exp_avg"], grad, beta1)
        running_average_(be, slots["exp_avg_sq"], be.mul(grad, grad), beta2)
        corrected = be.div(slots["exp_avg"], 1.0 - beta1 ** step)
        correction2 = 1.0 - beta2 ** step
        rho_inf = 2.0 / (1.0 - beta2) - 1.0
        rho = rho_inf - 2.0 * step * beta2 ** step / correction2
        if rho <= 5.0:
            step_(be, param, corrected, lr)
            return
        rect = math.sqrt((rho - 4) * (rho - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho))
        root = be.math_function(slots["exp_avg_sq"], "sqrt")
        adaptive = be.div(math.sqrt(correction2), be.add(root, group["eps"]))
        step_(be, param, be.mul(corrected, adaptive), lr * rect)


class Adamax(Optimizer):
    """Adamax (Kingma & Ba, 2015, section 7): Adam with the L2 norm of past gradients replaced
    by the infinity norm.

    ``m ← β₁m + (1 - β₁)g`` as in Adam, but ``u ← max(β₂u, |g| + eps)`` -- an exponentially
    weighted maximum, which needs no bias correction -- and the step is
    ``lr/(1 - β₁ᵗ) · m/u``. ``weight_decay`` adds the L2 term to the gradient.

    State per parameter: ``"step"``, ``"exp_avg"`` (m), ``"exp_inf"`` (u).
    """

    def __init__(self, params, lr: float = 2e-3, betas=(0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0, *, maximize: bool = False):
        defaults = dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay,
                        maximize=maximize)
        self._check_hyperparameters(defaults)
        super().__init__(params, defaults)

    def _check_hyperparameters(self, group: dict) -> None:
        check_adam_family(group, flags=("maximize",))

    def _check_param_state(self, slots: dict, param, group: dict, where: str) -> None:
        check_slots("Adamax", slots, where, ["exp_avg", "exp_inf"])

    def _update(self, param, grad, slots: dict, group: dict, be) -> None:
        if not slots:
            slots.update(step=0, exp_avg=composed.zeros_like(be, param.data),
                         exp_inf=composed.zeros_like(be, param.data))
        slots["step"] += 1
        beta1, beta2 = group["betas"]
        grad = effective_grad(be, param, grad, group)
        running_average_(be, slots["exp_avg"], grad, beta1)
        be.assign_(slots["exp_inf"], be.maximum(be.mul(slots["exp_inf"], beta2),
                                                be.add(be.abs(grad), group["eps"])))
        step_(be, param, be.div(slots["exp_avg"], slots["exp_inf"]),
              group["lr"] / (1.0 - beta1 ** slots["step"]))
