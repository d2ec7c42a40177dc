"""The backend seam: every differentiable op computes through a short list of array primitives.

A backend is a module exposing the same primitive names (see :mod:`minidl.backend.primitives`),
working on its own kind of array. Ops never touch arrays directly; they ask the tensor's device for
its backend and call primitives on it. Adding a device therefore means writing one module, never
editing the ops.

Backends are imported lazily: ``import minidl`` must not import Numba (slow) or touch CUDA. The
first op on a tensor of a device imports that device's backend.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType

# Device name -> module implementing the primitives for it. "cpu" is the Numba-accelerated backend;
# "cpu:numpy" is the plain-NumPy reference it is tested against (and a fallback for debugging).
_BACKEND_MODULES = {
    "cpu": "minidl.backend.numba_cpu",
    "cpu:numpy": "minidl.backend.reference",
    "cuda": "minidl.backend.cuda",
}

_loaded: dict[str, ModuleType] = {}


def _cpu_backend_choice() -> str:
    # MINIDL_CPU_BACKEND=numpy routes all "cpu" tensors through the reference backend.
    return "cpu:numpy" if os.environ.get("MINIDL_CPU_BACKEND", "").lower() == "numpy" else "cpu"


def canonical_device(device) -> str:
    """Normalise a user-facing device name ("cpu", "cuda", "cuda:0") to a backend key."""
    if device is None:
        return "cpu"
    name = str(device).lower()
    if name in ("cpu", "cpu:0"):
        return "cpu"
    if name == "cpu:numpy":
        return name
    if name == "cuda" or name.startswith("cuda:"):
        return "cuda"
    raise ValueError(f"unknown device {device!r}: expected 'cpu' or 'cuda'")


def get_backend(device: str = "cpu") -> ModuleType:
    """Return the backend module for ``device``, importing it on first use."""
    key = canonical_device(device)
    if key == "cpu":
        key = _cpu_backend_choice()
    module = _loaded.get(key)
    if module is None:
        try:
            module = importlib.import_module(_BACKEND_MODULES[key])
        except ImportError as error:
            raise RuntimeError(f"device {device!r} is not available: {error}") from None
        _loaded[key] = module
    return module


def reference_backend() -> ModuleType:
    """The plain-NumPy backend every fast kernel is checked against."""
    return get_backend("cpu:numpy")
