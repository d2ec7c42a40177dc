"""Switching gradient recording on and off (``with md.no_grad(): ...``)."""

from __future__ import annotations

import functools
import threading

class _ThreadGradMode(threading.local):
    """The grad mode of each thread: ``enabled`` until a thread sets it. A class attribute
    rather than ``getattr(local, "enabled", True)``, whose miss raises and catches an
    AttributeError inside, ~10x slower; every op reads it (Function.apply reads it directly,
    one call less per op)."""
    enabled = True


_mode = _ThreadGradMode()


def is_grad_enabled() -> bool:
    """Whether ops being run now record a graph for ``backward``."""
    return _mode.enabled


def set_grad_enabled(enabled: bool) -> None:
    """Turn graph recording on or off for the current thread."""
    _mode.enabled = bool(enabled)


class _GradMode:
    enabled: bool

    # The thread's mode read and written directly (is_grad_enabled and set_grad_enabled,
    # inline): ``with md.no_grad(): model(x)`` enters and leaves once per inference call.
    def __enter__(self):
        self._previous = _mode.enabled
        _mode.enabled = self.enabled
        return self

    def __exit__(self, *exc_info):
        _mode.enabled = self._previous
        return False

    def __call__(self, function):
        """Use as a decorator: run ``function`` in this mode."""
        @functools.wraps(function)
        def wrapper(*args, **kwargs):
            with type(self)():
                return function(*args, **kwargs)
        return wrapper


class no_grad(_GradMode):
    """Context manager (or decorator) in which ops record no graph: for inference and updates."""
    enabled = False


class enable_grad(_GradMode):
    """Context manager (or decorator) that turns graph recording back on inside ``no_grad``."""
    enabled = True


class inference_mode(_GradMode):
    """``torch.inference_mode``: a context manager (or decorator) for pure inference, in which
    ops record no graph. ``inference_mode(False)`` leaves recording as it is outside.

    PyTorch also skips version counting there; minidl's counters cost one increment per
    in-place edit, so the mode is exactly ``no_grad``.
    """

    def __init__(self, mode: bool = True):
        self.mode = bool(mode)

    def __enter__(self):
        self._previous = _mode.enabled
        if self.mode:
            _mode.enabled = False
        return self

    def __call__(self, function):
        @functools.wraps(function)
        def wrapper(*args, **kwargs):
            with inference_mode(self.mode):
                return function(*args, **kwargs)
        return wrapper
