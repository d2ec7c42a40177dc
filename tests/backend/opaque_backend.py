"""A backend whose arrays are opaque boxes: the proof that nothing above the backend reaches
around the primitive list.

An :class:`OpaqueArray` exposes only the metadata the contract allows (``shape``, ``dtype``,
``ndim``, ``size``). It has no operators, no indexing, no ``__array__``, and NumPy refuses to
compute with it (``__array_ufunc__ = None``): any code that treats a backend array as a NumPy
array fails on it. Attribute probes that would be swallowed (``getattr(a, "flags", None)``) are
recorded in :data:`OpaqueBackend.violations` before they fail, so even a caught probe is seen.

:class:`OpaqueBackend` implements every primitive by unboxing its arguments, calling the NumPy
reference and boxing the results, and counts the only two crossings between host and "device":
``from_numpy`` and ``to_numpy``.
"""

from __future__ import annotations

import functools
import inspect
from collections import Counter

import numpy as np

import minidl.backend
from minidl.backend import composed, plan_steps
from minidl.backend.primitives import ALL_PRIMITIVES, Backend
from minidl.backend.reference import ReferenceBackend

NAME = "opaque"


class LeakError(AssertionError):
    """Code above the backend touched an array other than through a primitive."""


class OpaqueArray:
    """A device array nobody above the backend may look inside."""

    __slots__ = ("_value", "shape", "dtype", "ndim", "size", "__weakref__")
    __array_ufunc__ = None  # NumPy operators and ufuncs with this operand raise TypeError

    def __init__(self, value: np.ndarray):
        object.__setattr__(self, "_value", value)
        object.__setattr__(self, "shape", tuple(value.shape))
        object.__setattr__(self, "dtype", value.dtype)
        object.__setattr__(self, "ndim", value.ndim)
        object.__setattr__(self, "size", int(value.size))

    def __getattr__(self, name):
        OpaqueBackend.violations.append(f"attribute {name!r}")
        raise AttributeError(f"an opaque array has no attribute {name!r}")

    def __setattr__(self, name, value):
        OpaqueBackend.violations.append(f"setting {name!r}")
        raise LeakError(f"setting {name!r} on an opaque array")

    def _refuse(self, what):
        OpaqueBackend.violations.append(what)
        raise LeakError(f"{what} of an opaque array")

    def __array__(self, *args, **kwargs):
        self._refuse("conversion to NumPy")

    def __bool__(self):
        self._refuse("truth value")

    def __len__(self):
        self._refuse("len()")

    def __iter__(self):
        self._refuse("iteration")

    def __float__(self):
        self._refuse("float()")

    def __int__(self):
        self._refuse("int()")

    def __index__(self):
        self._refuse("use as an index")

    def __repr__(self):
        return f"OpaqueArray(shape={self.shape}, dtype={self.dtype})"


def _unbox(value):
    if isinstance(value, OpaqueArray):
        return value._value
    if isinstance(value, (tuple, list)):
        return type(value)(_unbox(v) for v in value)
    return value


def _box(value):
    if isinstance(value, (np.ndarray, np.generic)):
        return OpaqueArray(np.asarray(value))
    if isinstance(value, tuple):
        return tuple(_box(v) for v in value)
    return value


def _through_reference(name):
    contract = getattr(Backend, name)
    compute = getattr(ReferenceBackend, name)

    @functools.wraps(contract)
    def primitive(*args, **kwargs):
        for value in (*args, *kwargs.values()):
            if isinstance(value, np.ndarray):
                OpaqueBackend.violations.append(f"{name} got a host array")
        return _box(compute(*_unbox(args), **_unbox(kwargs)))
    primitive.__signature__ = inspect.signature(contract)
    return staticmethod(primitive)


class OpaqueBackend(Backend):
    """Every primitive, on boxes; host crossings counted in ``transfers``."""

    name = NAME
    transfers: Counter = Counter()
    violations: list = []

    for _name in ALL_PRIMITIVES:
        locals()[_name] = _through_reference(_name)
    del _name

    # A plan step is a host object holding arrays, not an array: it is made of this backend's
    # own primitives (composed), so a compiled plan's steps run on boxes too.
    plan_conv2d = composed.OfTheBackendClass(plan_steps.plan_conv2d, "plan_conv2d")
    plan_max_pool2d = composed.OfTheBackendClass(plan_steps.plan_max_pool2d, "plan_max_pool2d")
    plan_linear = composed.OfTheBackendClass(plan_steps.plan_linear, "plan_linear")

    @staticmethod
    def from_numpy(array):
        OpaqueBackend.transfers["from_numpy"] += 1
        return OpaqueArray(np.array(array, copy=True))

    @staticmethod
    def to_numpy(array):
        OpaqueBackend.transfers["to_numpy"] += 1
        return np.array(array._value, copy=True)

    def on_device(self, index):
        return self  # any number of devices: arrays do not need to know which

    @classmethod
    def reset(cls):
        """Forget the counts and violations so far."""
        cls.transfers.clear()
        cls.violations.clear()


def register() -> OpaqueBackend:
    """Register the opaque backend as device kind "opaque" (idempotent); returns it."""
    backend = minidl.backend.get_backend(NAME) if NAME in minidl.backend.registered_device_kinds() \
        else None
    if not isinstance(backend, OpaqueBackend):
        backend = OpaqueBackend()
        minidl.backend.register_backend(NAME, backend)
    return backend
