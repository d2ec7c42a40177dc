"""Checks of arguments and saved fields that every package shares.

Each check raises ``ValueError`` whose message starts with the name it was given (an argument,
``"state field 'epoch'"``, ``"param_groups[0]['lr']"``), so a user reads at once which value is
wrong and why.  The module imports nothing but the standard library: data readers,
optimizers, schedulers and checkpoints, on every floor, use the same rules.

Integers are ``numbers.Integral`` values, so NumPy integers (``np.int64(3)``, what indexing
an array gives) are accepted; ``bool`` is refused although Python counts it as an int
(``batch_size=True`` is a mistake, not 1).
"""

from __future__ import annotations

import math
import numbers

import numpy as np

__all__ = ["check_number", "check_flag", "check_non_negative_int", "check_settings"]


def check_number(name: str, value, *, low=None, high=None, low_open=False, high_open=False,
                 integer=False) -> None:
    """Raise ValueError naming ``name`` unless ``value`` is a finite real number in the range."""
    kind = numbers.Integral if integer else numbers.Real
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, kind):
        what = "an integer" if integer else "a real number"
        raise ValueError(f"{name} must be {what}, got {value!r}")
    # Integers are always finite (and a huge one would overflow math.isfinite's float).
    if not isinstance(value, numbers.Integral) and not math.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value!r}")
    if low is not None and (value < low or (low_open and value == low)):
        raise ValueError(f"{name} must be {'>' if low_open else '>='} {low}, got {value!r}")
    if high is not None and (value > high or (high_open and value == high)):
        raise ValueError(f"{name} must be {'<' if high_open else '<='} {high}, got {value!r}")


def check_flag(name: str, value) -> None:
    """Raise ValueError naming ``name`` unless ``value`` is a bool."""
    if not isinstance(value, (bool, np.bool_)):
        raise ValueError(f"{name} must be True or False, got {value!r}")


def check_non_negative_int(name: str, value, *, minimum: int = 0) -> int:
    """``value`` as a Python int, or ValueError naming ``name`` unless it is an integer
    ``>= minimum`` (0 by default: a count, a position, a step, a seed; 1 for a size)."""
    check_number(name, value, low=minimum, integer=True)
    return int(value)


def check_settings(settings: dict, *, non_negative=(), flags=()) -> None:
    """The usual rules for a dict of named settings (an optimizer's parameter group): each
    name in ``non_negative`` a finite real number >= 0 (rates, decays, epsilons), each name in
    ``flags`` True or False."""
    for name in non_negative:
        check_number(name, settings[name], low=0.0)
    for name in flags:
        check_flag(name, settings[name])
