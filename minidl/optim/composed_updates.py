"""What the optimizers written with elementwise primitives share: the effective gradient, the
running averages, and checking a restored state's slots.

SGD and Adam have one fused backend primitive each. The optimizers added after them (RMSprop,
Adagrad, Adadelta, NAdam, RAdam) are composed from the generic elementwise primitives instead:
a few passes over each parameter rather than one, but every device that implements the
primitive list runs them unchanged, and the formulas read as written in their papers.
"""

from __future__ import annotations

import numbers

from ..backend import composed
from ..io.state_tree import is_array


def effective_grad(backend, param, grad, group: dict):
    """The gradient the update follows: negated with ``maximize``, plus the L2 term
    ``weight_decay·param`` (coupled weight decay)."""
    if group.get("maximize"):
        grad = composed.neg(backend, grad)
    if group["weight_decay"] and not group.get("decoupled_weight_decay"):
        grad = backend.add(grad, backend.mul(param.data, group["weight_decay"]))
    return grad


def decay_weights(backend, param, group: dict) -> None:
    """Decoupled weight decay (AdamW's): param ← param·(1 - lr·weight_decay)."""
    if group["weight_decay"] and group.get("decoupled_weight_decay"):
        backend.assign_(param.data, backend.mul(param.data, 1.0 - group["lr"] *
                                                group["weight_decay"]))


def running_average_(backend, average, value, keep: float) -> None:
    """average ← keep·average + (1 - keep)·value, in place (an exponential moving average)."""
    backend.assign_(average, backend.add(backend.mul(average, keep),
                                         backend.mul(value, 1.0 - keep)))


def step_(backend, param, direction, scale: float) -> None:
    """param ← param - scale·direction, in place."""
    backend.assign_(param.data, backend.sub(param.data, backend.mul(direction, scale)))


def check_slots(optimizer: str, slots: dict, where: str, arrays, scalars=("step",),
                optional=()) -> None:
    """A restored state has exactly the expected slots: ``arrays`` (plus any ``optional`` ones)
    and the whole-number-or-float ``scalars``; an empty dict is a parameter not stepped yet."""
    known = set(arrays) | set(scalars) | set(optional)
    for name in slots:
        if name not in known:
            raise ValueError(f"{where} has an unknown slot {name!r} for {optimizer}")
    if not slots:
        return
    for name in (*arrays, *scalars):
        if name not in slots:
            raise ValueError(f"{where} is missing slot {name!r}")
    for name in (*arrays, *optional):
        if name in slots and not is_array(slots[name]):
            raise ValueError(f"{where} slot {name!r} must be an array")
    for name in scalars:
        value = slots[name]
        if isinstance(value, bool) or not isinstance(value, numbers.Real) or value < 0:
            raise ValueError(f"{where} slot {name!r} must be a number >= 0, got {value!r}")
    if "step" in slots:
        if slots["step"] != int(slots["step"]):
            raise ValueError(f"{where} slot 'step' must be a whole number, got {slots['step']!r}")
        slots["step"] = int(slots["step"])  # PyTorch stores it as a float
