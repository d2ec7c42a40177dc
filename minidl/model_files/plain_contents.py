"""``md.load``: any minidl file as plain contents -- arrays, lists, dicts -- placed on a device.

The bottom floor reads the bytes and knows what a ``"values"`` file and a training checkpoint
store (``minidl.io.stored_value``); what a ``"model"`` file holds is model-file meaning and is
read here (:func:`~minidl.model_files.model_file.model_contents`). Where the arrays land is
``minidl.placement``'s ``map_location``. The file is opened and its header parsed once.
"""

from __future__ import annotations

import os

from ..io.reader import read_contents
from ..io.values import stored_value
from .model_file import MODEL_KIND, model_contents
from ..placement import apply_map_location, check_map_location


def load(path, *, map_location=None, mmap: bool = False, verify: bool | None = None,
         key: bytes | None = None):
    """What a minidl file holds, as plain values, with PyTorch's ``map_location``.

    A ``"values"`` file gives back what ``md.save`` stored; a training checkpoint its plain
    contents, ``{"step": ..., "metadata": {...}, "objects": {"model": {name: array}, ...}}``;
    a model file ``{"spec": <topology as data>, "state_dict": {name: array}}`` (no module is
    built: ``md.load_model`` does that). Every checksum is verified, also with ``mmap=True``
    (read-only arrays mapped from the file, zero-copy); ``verify=False`` trusts the tensor
    bytes unread (the header is still checked). ``key`` decrypts an encrypted file.

    Without ``map_location`` (or with ``"cpu"``) arrays come back as NumPy arrays, as the file
    holds them; with another device (``"cuda:0"``, ``md.device("cuda")``) every array comes
    back as a Tensor on that device. As in PyTorch, it may also be a dict mapping where arrays
    are to where they go (arrays read from a file are on ``"cpu"``: ``{"cpu": "cuda:0"}``;
    other keys match nothing), or a callable ``f(array, location)`` whose result (an array, a
    Tensor) replaces each array, ``location`` being ``"cpu"``. Devices are checked before the
    file is read. Any problem with the file raises a ``CheckpointError`` naming it.
    """
    map_location = check_map_location(map_location)
    path = os.fspath(path)
    info, tensors = read_contents(path, mmap=mmap, verify=verify, key=key)
    if info.kind == MODEL_KIND:
        value = model_contents(path, info.metadata, tensors)
    else:
        value = stored_value(path, info, tensors)
    return apply_map_location(value, map_location)
