"""Choosing the device that loaded values land on: ``map_location`` and ``device=``.

Files hold plain arrays and say nothing about devices, so a checkpoint written from GPU tensors
is the same file as one written from CPU tensors, and either loads anywhere. Where the values
go is the loader's choice, made here, above the file format (which knows nothing of tensors):
``md.load`` and ``md.load_model`` (``minidl.model_files``) read, and this module places.
"""

from __future__ import annotations

import numpy as np

from .backend import canonical_device, get_backend

__all__ = ["check_device", "check_map_location", "mapped_device", "apply_map_location",
           "to_device"]


def check_device(device) -> str:
    """The canonical name of ``device`` once its backend is known to work (else its error)."""
    name = canonical_device(device)
    get_backend(name)
    return name


def to_device(value, device):
    """``value`` with every array and Tensor in it (nested dicts and lists) as a Tensor on
    ``device``; everything else unchanged."""
    from .autograd.tensor import Tensor
    if isinstance(value, np.ndarray):
        return Tensor(value).to(device) if device != "cpu" else Tensor(value)
    if isinstance(value, Tensor):
        return value.to(device)
    if isinstance(value, dict):
        return {key: to_device(item, device) for key, item in value.items()}
    if isinstance(value, list):
        return [to_device(item, device) for item in value]
    return value


FILE_LOCATION = "cpu"
"""Where a file's arrays are before ``map_location`` moves them: files hold plain host arrays
and record no device, so every array is read as being on the CPU."""


def check_map_location(map_location):
    """``map_location`` with its devices checked: None, a device name, a dict of device names
    (keys and values) or a callable; ``ValueError``/``TypeError`` naming what is wrong. Checked
    before a file is read, so that a typo in a device costs no read."""
    if map_location is None or callable(map_location):
        return map_location
    if isinstance(map_location, dict):
        checked = {}
        for source, target in map_location.items():
            try:
                checked[canonical_device(source)] = check_device(target)
            except (ValueError, TypeError) as error:
                raise ValueError(f"map_location: entry {source!r}: {target!r} is not a pair "
                                 f"of devices ({error})") from None
        return checked
    if not isinstance(map_location, str):
        raise TypeError(f"map_location must be a device name ('cpu', 'cuda:0'), a dict "
                        f"mapping device names or a callable, got "
                        f"{type(map_location).__name__}")
    return check_device(map_location)


def mapped_device(map_location, value, location: str) -> str:
    """Where ``value``, which would land on ``location``, goes under a checked
    ``map_location``: PyTorch's rules. None keeps ``location``; a device name is that device;
    a dict sends its keys to its values and keeps other locations; a callable ``f(value,
    location)`` decides by what it returns (a Tensor: its device; a NumPy array: ``"cpu"``)."""
    if map_location is None:
        return location
    if isinstance(map_location, dict):
        return map_location.get(location, location)
    if not callable(map_location):
        return map_location
    from .autograd.tensor import Tensor
    result = map_location(value, location)
    if isinstance(result, Tensor):
        return result.device
    if isinstance(result, np.ndarray):
        return "cpu"
    raise TypeError(f"map_location: the callable returned {type(result).__name__} for a value "
                    f"on {location!r}; expected a Tensor or a NumPy array")


def _map_arrays(value, function):
    """``value`` with ``function`` applied to every NumPy array in it (nested dicts, lists)."""
    if isinstance(value, np.ndarray):
        return function(value)
    if isinstance(value, dict):
        return {key: _map_arrays(item, function) for key, item in value.items()}
    if isinstance(value, list):
        return [_map_arrays(item, function) for item in value]
    return value


def apply_map_location(value, map_location):
    """``value``, as read from a file, with its arrays placed as PyTorch's ``map_location`` says.

    ``map_location`` is what :func:`check_map_location` returned. None (or ``"cpu"``) leaves
    the arrays as NumPy arrays, as the file holds them; another device turns every array into
    a Tensor on that device; a dict maps where arrays are (``"cpu"``: ``{"cpu": "cuda:0"}``;
    other keys match nothing) to where they go; a callable ``f(array, "cpu")`` returns what
    replaces each array (an array, a Tensor).
    """
    if callable(map_location):  # its results are what comes back, not just where they go
        return _map_arrays(value, lambda array: map_location(array, FILE_LOCATION))
    device = mapped_device(map_location, None, FILE_LOCATION)
    return value if device == "cpu" else to_device(value, device)
