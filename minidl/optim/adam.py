"""Adam and AdamW: steps scaled per entry by running estimates of the gradient's moments."""

from __future__ import annotations

from ..backend import composed, get_backend
from ..validation import check_flag, check_number, check_settings
from .optimizer import Optimizer
from .composed_updates import check_slots

__all__ = ["Adam", "AdamW"]


def check_adam_family(group: dict, flags=("decoupled_weight_decay", "maximize")) -> None:
    """The hyperparameters every Adam-style optimizer (Adam, AdamW, NAdam, RAdam, Adamax)
    shares, with its on/off ``flags``."""
    check_settings(group, non_negative=("lr", "eps", "weight_decay"), flags=flags)
    betas = group["betas"]
    if not isinstance(betas, (tuple, list)) or len(betas) != 2:
        raise ValueError(f"betas must be a pair (beta1, beta2), got {betas!r}")
    check_number("betas[0]", betas[0], low=0.0, high=1.0, high_open=True)
    check_number("betas[1]", betas[1], low=0.0, high=1.0, high_open=True)


class Adam(Optimizer):
    """Adam (Kingma & Ba, 2015), optionally with AMSGrad and decoupled weight decay.

    Each entry keeps ``m``, a running mean of its gradient, and ``v``, a running mean of the
    squared gradient. The step is ``lr * m / (sqrt(v) + eps)`` (after correcting both for
    starting at zero), so every entry moves by about ``lr`` regardless of its gradient's scale:
    large, noisy gradients are damped and small, steady ones amplified.

    ``weight_decay`` adds ``weight_decay * param`` to the gradient (an L2 penalty, which then
    gets rescaled by ``1/sqrt(v)`` like the rest of the gradient), unless
    ``decoupled_weight_decay=True`` (AdamW), which instead shrinks the weight directly by
    ``lr * weight_decay`` each step. ``amsgrad=True`` divides by the largest ``v`` seen so far,
    so the effective step size never grows. See the backend primitive ``adam_update``.

    State per parameter: ``"step"`` (int, updates done), ``"exp_avg"`` (m), ``"exp_avg_sq"``
    (v) and, with amsgrad, ``"max_exp_avg_sq"``.
    """

    def __init__(self, params, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0, amsgrad: bool = False, *, maximize: bool = False,
                 decoupled_weight_decay: bool = False):
        defaults = dict(lr=lr, betas=tuple(betas) if isinstance(betas, list) else betas, eps=eps,
                        weight_decay=weight_decay, amsgrad=amsgrad, maximize=maximize,
                        decoupled_weight_decay=decoupled_weight_decay)
        self._check_hyperparameters(defaults)
        super().__init__(params, defaults)

    def _check_hyperparameters(self, group: dict) -> None:
        check_adam_family(group)
        check_flag("amsgrad", group["amsgrad"])

    def _check_param_state(self, slots: dict, param, group: dict, where: str) -> None:
        check_slots(type(self).__name__, slots, where, arrays=("exp_avg", "exp_avg_sq"),
                    optional=("max_exp_avg_sq",))
        if group["amsgrad"] and slots and slots["step"] > 0 and "max_exp_avg_sq" not in slots:
            raise ValueError(f"{where} is missing slot 'max_exp_avg_sq' (amsgrad is on)")

    def _advance(self, param, slots: dict, group: dict, backend) -> tuple:
        """Count the step in ``slots`` (made on the first) and return its state arrays:
        (exp_avg, exp_avg_sq, max_exp_avg_sq or None)."""
        if not slots:
            # m and v start at zero; bias correction in the kernel accounts for that.
            slots["step"] = 0
            slots["exp_avg"] = composed.zeros_like(backend, param.data)
            slots["exp_avg_sq"] = composed.zeros_like(backend, param.data)
        if group["amsgrad"] and "max_exp_avg_sq" not in slots:
            slots["max_exp_avg_sq"] = composed.zeros_like(backend, param.data)
        slots["step"] += 1
        return (slots["exp_avg"], slots["exp_avg_sq"],
                slots.get("max_exp_avg_sq") if group["amsgrad"] else None)

    def _settings(self, group: dict, step: int) -> tuple:
        beta1, beta2 = group["betas"]
        return (step, group["lr"], beta1, beta2, group["eps"], group["weight_decay"],
                group["decoupled_weight_decay"], group["amsgrad"], group["maximize"])

    def _update(self, param, grad, slots: dict, group: dict, backend) -> None:
        state = self._advance(param, slots, group, backend)
        backend.adam_update(param.data, grad, *state, *self._settings(group, slots["step"]))

    def _update_group(self, updates: list, group: dict) -> None:
        # One multi-tensor call per device and step count (normally one for the whole group;
        # a parameter that missed steps without a gradient has a count of its own).
        calls: dict = {}
        for param, grad, slots in updates:
            state = self._advance(param, slots, group, get_backend(param.device))
            arrays = calls.setdefault((param.device, slots["step"]), ([], [], [], [], []))
            for column, array in zip(arrays, (param.data, grad, *state)):
                column.append(array)
        for (device, step), arrays in calls.items():
            get_backend(device).adam_update_group(*arrays, *self._settings(group, step))


class AdamW(Adam):
    """Adam with decoupled weight decay (Loshchilov & Hutter, 2019).

    Instead of adding an L2 term to the gradient — which Adam would then rescale, so parameters
    with large gradients would barely be regularised — every step multiplies the weights by
    ``1 - lr * weight_decay`` before the Adam update. Default ``weight_decay`` is 0.01.
    """

    def __init__(self, params, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 1e-2, amsgrad: bool = False, *, maximize: bool = False):
        super().__init__(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                         amsgrad=amsgrad, maximize=maximize, decoupled_weight_decay=True)
