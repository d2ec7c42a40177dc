"""``save`` and ``load``: nested Python values holding arrays, as minidl files.

A value is a tree of dicts (str keys), lists/tuples, arrays/Tensors and msgpack scalars
(str, int, float, bool, None, bytes).  To store it, every array is moved into the tensor
index and replaced in the tree by a ``TensorRef`` naming it; the tree itself becomes the
header's ``metadata["value"]``.  Loading reverses this.  What comes back:

* arrays as NumPy arrays (Tensors too), with dtype and shape exactly as saved;
* tuples as lists (msgpack has a single sequence type);
* NumPy scalars (``np.float32(1)``) as 0-d arrays of the same dtype;
* everything else exactly, floats bit for bit (NaN, inf and -0.0 included).
"""

from __future__ import annotations

import os

import numpy as np

from . import layout
from .errors import CorruptFileError, WrongKindError
from .header import TensorRef
from .reader import FileHeader, read_contents
from .state_tree import as_array, check_storable_leaf, check_tree
from .writer import write_file


def encode_value(value) -> tuple[object, dict[str, np.ndarray]]:
    """Split a value into (tree with TensorRefs, {name: array}); TypeError if unstorable.

    The value is checked whole first (:func:`~minidl.io.state_tree.check_tree`: str keys,
    storable leaves, depth), so an error names the path of the offending field and nothing
    was converted.  Tensor names are the path to the array in the tree (``"layers/0/w"``),
    made unique.
    """
    # The header adds two levels (root map, metadata map) around the value.
    check_tree(value, "value", check_leaf=check_storable_leaf,
               max_depth=layout.MAX_NESTING - 2)
    tensors: dict[str, np.ndarray] = {}

    def name_for(path: list[str]) -> str:
        base = "/".join(path) or "value"
        name, n = base, 1
        while name in tensors:
            n += 1
            name = f"{base}#{n}"
        return name

    def encode(node, path):
        if isinstance(node, dict):
            return {key: encode(item, path + [key]) for key, item in node.items()}
        if isinstance(node, (list, tuple)):
            return [encode(item, path + [str(i)]) for i, item in enumerate(node)]
        array = as_array(node)
        if array is not None:
            name = name_for(path)
            tensors[name] = array
            return TensorRef(name)
        if isinstance(node, bytearray):
            return bytes(node)
        if isinstance(node, int) and not isinstance(node, bool):
            return int(node)  # an int subclass (IntEnum) as the plain int it is
        return node

    return encode(value, []), tensors


def decode_value(path, tree, tensors: dict[str, np.ndarray]):
    """Replace each TensorRef by its array; every tensor must be referenced exactly once."""
    used: set[str] = set()

    def decode(node):
        if isinstance(node, TensorRef):
            if node.name not in tensors:
                raise CorruptFileError(path, f"value refers to a missing tensor {node.name!r}")
            if node.name in used:
                raise CorruptFileError(path, f"tensor {node.name!r} is referenced twice")
            used.add(node.name)
            return tensors[node.name]
        if isinstance(node, dict):
            return {k: decode(v) for k, v in node.items()}
        if isinstance(node, list):
            return [decode(v) for v in node]
        return node

    result = decode(tree)  # depth is bounded by the header check
    unused = [name for name in tensors if name not in used]
    if unused:
        raise CorruptFileError(path, f"tensor(s) {', '.join(map(repr, unused[:5]))} are not "
                                     "part of the value")
    return result


def save(value, path, *, key: bytes | None = None, durable: bool = True) -> None:
    """Save a nested value (dicts, lists, arrays/Tensors, msgpack scalars) to ``path``.

    Written atomically: ``path`` holds either the old file or the complete new one.
    ``key`` (16/24/32 bytes) encrypts the file with AES-GCM.
    """
    tree, tensors = encode_value(value)
    write_file(path, {"value": tree}, tensors, kind="values", key=key, durable=durable)


def load(path, *, mmap: bool = False, verify: bool = True, key: bytes | None = None):
    """Load what ``save`` stored: the same structure, with NumPy arrays.

    Every checksum is verified, also with ``mmap=True`` (read-only arrays mapped from the
    file, zero-copy).  ``verify=False`` trusts the tensor bytes unread (the header is
    still checked): only for files known to be sound.  A training checkpoint loads as its
    plain contents (see :func:`stored_value`).  A model file is refused: its meaning belongs
    to ``minidl.model_files`` (``minidl.load`` reads it as its spec and weights).
    Any problem with the file raises a ``CheckpointError`` naming it.
    """
    path = os.fspath(path)
    info, tensors = read_contents(path, mmap=mmap, verify=verify, key=key)
    return stored_value(path, info, tensors)


def stored_value(path, info: FileHeader, tensors: dict[str, np.ndarray]):
    """The value a file read by ``read_contents`` holds, its TensorRefs replaced by arrays.

    A ``"values"`` file holds ``metadata["value"]``; a training checkpoint's metadata is a
    value itself, ``{"step": ..., "metadata": {...}, "objects": {"model": {name: array},
    "optimizer": {...}, ...}, ...}`` (``Checkpoint.restore`` puts it back into live objects).
    Any other file stores no value here and raises ``WrongKindError``.
    """
    metadata = info.metadata
    if info.kind == "checkpoint" and isinstance(metadata.get("objects"), dict):
        return decode_value(path, metadata, tensors)
    if "value" not in metadata:
        raise WrongKindError(path, f"is a {info.kind!r} file without a stored value; "
                                   "read it with minidl.io.read_file")
    return decode_value(path, metadata["value"], tensors)
