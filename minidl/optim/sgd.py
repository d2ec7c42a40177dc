"""Stochastic gradient descent, with optional (Nesterov) momentum and weight decay."""

from __future__ import annotations

from ..backend import composed, get_backend
from ..io.state_tree import is_array
from ..validation import check_number, check_settings
from .optimizer import Optimizer

__all__ = ["SGD"]


class SGD(Optimizer):
    """Stochastic gradient descent: ``param -= lr * g``, where ``g`` is the gradient, optionally
    smoothed by momentum.

    Momentum keeps a running buffer ``b = momentum * b + (1 - dampening) * grad`` and steps along
    it, so consistent gradient directions accumulate speed while oscillating ones cancel.
    ``nesterov=True`` steps along ``grad + momentum * b`` instead: the gradient plus where the
    momentum is about to carry us. ``weight_decay`` adds ``weight_decay * param`` to the gradient
    (an L2 penalty). See the backend primitive ``sgd_update`` for the exact formula.

    State per parameter: ``"momentum_buffer"`` (only when ``momentum != 0``).
    """

    def __init__(self, params, lr: float = 1e-3, momentum: float = 0.0, dampening: float = 0.0,
                 weight_decay: float = 0.0, nesterov: bool = False, *, maximize: bool = False):
        defaults = dict(lr=lr, momentum=momentum, dampening=dampening,
                        weight_decay=weight_decay, nesterov=nesterov, maximize=maximize)
        self._check_hyperparameters(defaults)
        super().__init__(params, defaults)

    def _check_hyperparameters(self, group: dict) -> None:
        check_settings(group, non_negative=("lr", "momentum", "weight_decay"),
                       flags=("nesterov", "maximize"))
        check_number("dampening", group["dampening"])
        if group["nesterov"] and (group["momentum"] <= 0 or group["dampening"] != 0):
            raise ValueError("nesterov momentum needs momentum > 0 and dampening == 0")

    def _check_param_state(self, slots: dict, param, group: dict, where: str) -> None:
        for name, value in slots.items():
            if name != "momentum_buffer":
                raise ValueError(f"{where} has an unknown slot {name!r} for SGD")
        if slots.get("momentum_buffer", 0) is None:
            del slots["momentum_buffer"]  # PyTorch writes None for "no buffer yet"
        elif "momentum_buffer" in slots and not is_array(slots["momentum_buffer"]):
            raise ValueError(f"{where} slot 'momentum_buffer' must be an array")

    def _momentum_buffer(self, param, slots: dict, group: dict, backend) -> tuple:
        """(the momentum buffer or None, whether this is its first step)."""
        if group["momentum"] == 0:
            return None, False
        buffer = slots.get("momentum_buffer")
        if buffer is not None:
            return buffer, False
        # The buffer starts as a copy of the first gradient; the kernel fills it.
        slots["momentum_buffer"] = composed.zeros_like(backend, param.data)
        return slots["momentum_buffer"], True

    def _settings(self, group: dict, first_step: bool) -> tuple:
        return (group["lr"], group["momentum"], group["dampening"], group["weight_decay"],
                group["nesterov"], group["maximize"], first_step)

    def _update(self, param, grad, slots: dict, group: dict, backend) -> None:
        buffer, first_step = self._momentum_buffer(param, slots, group, backend)
        backend.sgd_update(param.data, grad, buffer, *self._settings(group, first_step))

    def _update_group(self, updates: list, group: dict) -> None:
        # One multi-tensor call per device and first-step flag (normally one for the group).
        calls: dict = {}
        for param, grad, slots in updates:
            backend = get_backend(param.device)
            buffer, first_step = self._momentum_buffer(param, slots, group, backend)
            params, grads, buffers = calls.setdefault((param.device, first_step), ([], [], []))
            params.append(param.data)
            grads.append(grad)
            buffers.append(buffer)
        for (device, first_step), arrays in calls.items():
            get_backend(device).sgd_update_group(*arrays, *self._settings(group, first_step))
