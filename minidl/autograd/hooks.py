"""Hooks on tensors: functions that see (and may replace) a tensor's gradient during backward.

``x.register_hook(fn)`` asks the backward pass to call ``fn(grad)`` once the whole gradient of
``x`` is known (the sum over all of its consumers), before that gradient is used: stored in
``.grad`` for a leaf, or handed to the node that produced ``x``. A hook returning a tensor
replaces the gradient from there on (clipping, scaling); returning None leaves it as it was.
``x.retain_grad()`` is the same mechanism with a fixed job: keep the (hooked) gradient of a
non-leaf in ``.grad``, always after the other hooks, as in PyTorch.

Hooks are not state: nothing here is saved by ``state_dict`` or a checkpoint.
"""

from __future__ import annotations


class RemovableHandle:
    """What ``register_*hook`` returns: ``remove()`` unregisters the hook (twice is harmless)."""

    _next_key = 0

    def __init__(self, table: dict):
        self._table = table
        self.key = RemovableHandle._next_key
        RemovableHandle._next_key += 1

    def remove(self) -> None:
        self._table.pop(self.key, None)

    def __enter__(self) -> "RemovableHandle":
        return self

    def __exit__(self, *exc_info) -> bool:
        self.remove()
        return False


def add_hook(table: dict, hook, what: str = "register_hook") -> RemovableHandle:
    """Put ``hook`` into ``table`` (hooks run in registration order) and return its handle;
    ``what`` names the registering call in the error for a hook that is not callable."""
    if not callable(hook):
        raise TypeError(f"{what}: expected a callable, got {type(hook).__name__}")
    handle = RemovableHandle(table)
    table[handle.key] = hook
    return handle


class GradientHooks:
    """A tensor's hooks (``register_hook``) and whether it keeps its gradient (``retain_grad``).

    A tensor without either holds None instead of this object, so the backward pass pays one
    ``is None`` test per tensor for the feature.
    """

    __slots__ = ("hooks", "retains_grad")

    def __init__(self):
        self.hooks: dict = {}
        self.retains_grad = False

    def apply(self, tensor, grad):
        """Run the hooks on ``grad`` (a Tensor) in order; each may return a replacement."""
        for hook in list(self.hooks.values()):
            replaced = hook(grad)
            if replaced is None:
                continue
            if not hasattr(replaced, "shape") or tuple(replaced.shape) != tensor.shape:
                raise ValueError(f"tensor hook {getattr(hook, '__name__', hook)!r} returned "
                                 f"{_describe(replaced)} for a gradient of shape "
                                 f"{tensor.shape}; a hook must return None or a tensor of "
                                 f"the gradient's shape")
            grad = replaced
        return grad


def _describe(value) -> str:
    shape = getattr(value, "shape", None)
    return f"a value of shape {tuple(shape)}" if shape is not None else type(value).__name__
