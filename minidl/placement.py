"""Choosing the device that loaded values land on: ``map_location`` and ``device=``.

Files hold plain arrays and say nothing about devices, so a checkpoint written from GPU tensors
is the same file as one written from CPU tensors, and either loads anywhere. Where the values
go is the loader's choice, made here, above the file format (which knows nothing of tensors).
"""

from __future__ import annotations

import numpy as np

from .backend import canonical_device, get_backend

__all__ = ["check_device", "to_device", "load", "load_model"]


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


def load(path, *, map_location=None, mmap: bool = False, verify: bool | None = None,
         key: bytes | None = None):
    """:func:`minidl.io.load`, with PyTorch's ``map_location``.

    Without it (or with ``"cpu"``) arrays come back as NumPy arrays, as the file holds them; with
    another device (``"cuda:0"``) every array comes back as a Tensor on that device. The device
    is checked before the file is read.
    """
    from .io import load as load_file
    device = None if map_location is None else check_device(map_location)
    value = load_file(path, mmap=mmap, verify=verify, key=key)
    return value if device in (None, "cpu") else to_device(value, device)


def load_model(path, *, device=None, key: bytes | None = None, mmap: bool = False,
               verify: bool | None = None):
    """:func:`minidl.model_files.load_model`, with the model's parameters and buffers put on
    ``device``."""
    from .model_files import load_model as load_model_file
    device = None if device is None else check_device(device)
    model = load_model_file(path, key=key, mmap=mmap, verify=verify)
    if device not in (None, "cpu") and callable(getattr(model, "to", None)):
        model.to(device)
    return model
