"""The backend seam: every differentiable op computes through a short list of array primitives.

A backend is an instance of a :class:`~minidl.backend.primitives.Backend` subclass: the contract
in :mod:`minidl.backend.primitives` lists every primitive with its signature, dtype rules,
aliasing and errors. Ops never touch arrays directly; they ask the tensor's device for its
backend and call primitives on it. Adding a device therefore means writing one class and
registering it (:func:`register_backend`), never editing the ops.

Two ideas are kept apart:

* the **device** a tensor lives on: ``"cpu"``, or a kind and an index such as ``"cuda:0"`` and
  ``"cuda:1"`` (``"cuda"`` means ``"cuda:0"``). Tensors on different devices never mix.
* the **backend** that computes for a kind of device. ``"cpu"`` has two: the Numba backend (the
  default) and the plain-NumPy reference it is tested against, chosen with
  ``MINIDL_CPU_BACKEND=numpy`` or :func:`use_cpu_backend` — a choice of implementation, not a
  different device. The variable is read once, when this module is imported, and again only at
  ``use_cpu_backend(None)``: every op asks for its backend, and a dictionary lookup in
  ``os.environ`` per op would be paid by every op for a choice made once per process.

Backends are imported lazily: ``import minidl`` must not import Numba (slow) or touch CUDA. The
first op on a tensor of a device imports that device's backend.
"""

from __future__ import annotations

import importlib
import os

from .primitives import ALL_PRIMITIVES, Backend

__all__ = ["Backend", "ALL_PRIMITIVES", "register_backend", "get_backend", "backends_by_name",
           "canonical_device", "parse_device", "use_cpu_backend", "registered_device_kinds",
           "Device", "set_current_index", "current_index"]

# Device kind -> a Backend instance, or "module:Class" to import on first use.
_registry: dict[str, object] = {
    "cuda": "minidl.backend.cuda:CudaBackend",
}
# The CPU's implementations, by the names MINIDL_CPU_BACKEND accepts.
_cpu_backends: dict[str, object] = {
    "numba": "minidl.backend.numba_cpu:NumbaCpuBackend",
    "numpy": "minidl.backend.reference:ReferenceBackend",
}
_by_device: dict[tuple, Backend] = {}  # (kind, index, implementation) -> backend, filled lazily
backends_by_name: dict = {}
"""What :func:`get_backend` answered, by the device as spelled ("cpu", "cuda:1"), for the
current CPU choice and CUDA device (a change of either empties it). Read-only outside this
module: :meth:`Function.apply <minidl.autograd.function.Function.apply>` looks its device up here
first, one dictionary lookup where a call of get_backend is one more Python frame per op."""


def register_backend(name: str, backend: Backend) -> None:
    """Make ``backend`` compute for devices named ``name`` (and ``name:0``, ``name:1``, ...).

    ``backend`` is an instance of a :class:`~minidl.backend.primitives.Backend` subclass that
    overrides every primitive; registering again replaces the previous one. ``"cpu"`` cannot be
    replaced (use :func:`use_cpu_backend` to choose between its implementations).
    """
    if not isinstance(name, str) or not name.isidentifier() or name == "cpu":
        raise ValueError(f"register_backend: name must be an identifier other than 'cpu', "
                         f"got {name!r}")
    if not isinstance(backend, Backend):
        raise TypeError(f"register_backend: backend must be a minidl.backend.Backend instance, "
                        f"got {type(backend).__name__}")
    missing = [p for p in ALL_PRIMITIVES if getattr(type(backend), p) is getattr(Backend, p)]
    if missing:
        raise TypeError(f"register_backend: {type(backend).__name__} does not implement "
                        f"{', '.join(missing)}")
    _registry[name] = backend
    for key in [key for key in _by_device if key[0] == name]:
        del _by_device[key]
    backends_by_name.clear()


def registered_device_kinds() -> list:
    """The device kinds a tensor can be put on: "cpu" and every registered backend's name."""
    return ["cpu"] + sorted(_registry)


def cpu_backend_from_environment() -> str:
    """The CPU implementation ``MINIDL_CPU_BACKEND`` names now: ``"numpy"`` for ``numpy`` (any
    case), else ``"numba"``."""
    return "numpy" if os.environ.get("MINIDL_CPU_BACKEND", "").lower() == "numpy" else "numba"


_cpu_choice: str = cpu_backend_from_environment()  # changed only by use_cpu_backend


def use_cpu_backend(name: str | None) -> str:
    """Compute CPU tensors with ``"numba"`` (the default) or ``"numpy"`` (the reference); returns
    the previous choice, so that ``use_cpu_backend(previous)`` restores it.

    ``None`` reads the ``MINIDL_CPU_BACKEND`` environment variable again and follows it: the one
    way to make a change of the variable after ``import minidl`` take effect.
    """
    global _cpu_choice
    if name is not None and name not in _cpu_backends:
        raise ValueError(f"use_cpu_backend: expected one of {sorted(_cpu_backends)}, got {name!r}")
    previous = _cpu_choice
    _cpu_choice = cpu_backend_from_environment() if name is None else name
    backends_by_name.clear()  # "cpu" may now name the other implementation
    return previous


_current_index: dict = {}
"""The device a bare kind names, by kind ("cuda" -> 1 after ``md.cuda.set_device(1)``)."""


def set_current_index(kind: str, index: int) -> None:
    """Make the bare name ``kind`` ("cuda") mean device ``kind:index`` from now on."""
    _current_index[kind] = int(index)
    backends_by_name.clear()  # names as given ("cuda") may now mean another device


def current_index(kind: str) -> int:
    """The index a bare ``kind`` stands for: 0 unless :func:`set_current_index` changed it."""
    return _current_index.get(kind, 0)


def parse_device(device) -> tuple[str, int]:
    """``(kind, index)`` of a device name: "cpu" -> ("cpu", 0), "cuda" -> ("cuda", 0) (the
    current CUDA device: ``md.cuda.set_device`` changes it), "cuda:1" -> ("cuda", 1).
    ``ValueError`` for a malformed name or an unknown kind."""
    if device is None:
        return "cpu", 0
    name = str(device).strip().lower()
    kind, _, index = name.partition(":")
    if index == "":
        number = current_index(kind)
    elif index.isdigit():
        number = int(index)
    else:
        raise ValueError(f"invalid device {device!r}: expected 'kind' or 'kind:index' with a "
                         f"non-negative integer index")
    if kind != "cpu" and kind not in _registry:
        raise ValueError(f"unknown device {device!r}: expected one of "
                         f"{', '.join(registered_device_kinds())} (with an optional ':index')")
    if kind == "cpu" and number != 0:
        raise ValueError(f"invalid device {device!r}: there is one CPU device, 'cpu'")
    return kind, number


def canonical_device(device) -> str:
    """The one spelling of a device that tensors carry: "cpu", or "kind:index" ("cuda:1")."""
    kind, index = parse_device(device)
    return "cpu" if kind == "cpu" else f"{kind}:{index}"


class Device(str):
    """A device as an object, ``md.device`` (as ``torch.device``): ``md.device("cuda:1")`` or
    ``md.device("cuda", 1)``, with ``.type`` and ``.index``.

    It *is* the device's canonical name, a string, so it goes wherever a device name goes
    (``x.to(md.device("cuda"))``) and equals it (``md.device("cuda", 0) == "cuda:0"``).
    """

    def __new__(cls, kind, index: int | None = None):
        if index is not None:
            if ":" in str(kind):
                raise ValueError(f"device {kind!r} already has an index; got index={index!r} "
                                 f"too")
            if not isinstance(index, int) or isinstance(index, bool) or index < 0:
                raise ValueError(f"device index must be a non-negative int, got {index!r}")
            kind = f"{kind}:{index}"
        return super().__new__(cls, canonical_device(kind))

    @property
    def type(self) -> str:
        """The kind of device: "cpu" or "cuda"."""
        return str.__str__(self).partition(":")[0]

    @property
    def index(self) -> int | None:
        """The device's number among its kind; None for the CPU (as PyTorch)."""
        _, _, index = str.__str__(self).partition(":")
        return int(index) if index else None

    def __repr__(self) -> str:
        return f"device(type={self.type!r}, index={self.index})"


def _instantiate(entry, device) -> Backend:
    if isinstance(entry, Backend):
        return entry
    module_name, _, class_name = entry.partition(":")
    try:
        module = importlib.import_module(module_name)
    except (ImportError, RuntimeError) as error:  # a missing package, or no device
        kind = parse_device(device)[0]
        raise RuntimeError(f"device {kind!r} is not available (asked for {device!r}): "
                           f"{error}") from None
    return getattr(module, class_name)()


def get_backend(device="cpu") -> Backend:
    """The backend computing for ``device``, importing it on first use."""
    # Every op asks, so the answer is remembered by the name as given: one dictionary lookup
    # (a key of the name alone, as a change of the CPU choice forgets them all).
    backend = backends_by_name.get(device)
    if backend is not None:
        return backend
    choice = _cpu_choice
    kind, index = parse_device(device)
    implementation = choice if kind == "cpu" else None
    key = (kind, index, implementation)
    backend = _by_device.get(key)
    if backend is None:
        if kind == "cpu":
            backend = _instantiate(_cpu_backends[implementation], device)
        else:
            backend = _instantiate(_registry[kind], device).on_device(index)
        _by_device[key] = backend
    if isinstance(device, str):
        backends_by_name[device] = backend
    return backend
