"""State trees: the plain data that state dicts, checkpoints and minidl files are made of.

Every stateful object in minidl hands out its state as a *tree*: dicts and lists (tuples too)
whose leaves are scalars (str, bytes, int, float, bool, None) and arrays.  A model's
``state_dict()``, an optimizer's, a data reader's, the user's metadata, ``md.save``'s value and
a file's header are all such trees.  This module is the one place that knows their rules:

* **what an array is** — :func:`as_array` turns a leaf into the NumPy array it stands for
  (an ndarray, a NumPy scalar as a 0-d array, or an *array holder*, below); :func:`is_array`
  tells a backend's array (NumPy, or a device buffer) from a scalar;
* **what a key may be** — a file's maps have str keys only; other keys (an optimizer keys its
  slots by int) survive in the stored form of :func:`to_storable`;
* **what a tree may hold, and how deep** — :func:`check_tree` walks a tree once, and the error
  it raises names the path of the offending field (``state/0/exp_avg``);
* **copying** — :func:`copy_state` (a rollback snapshot), :func:`copy_arrays_into` (a
  background save's snapshot), and :func:`to_plain` (plain data with tuples as lists).

Why it lives in ``io``: these rules are the file format's (SPEC.md, sections 3 and 9), and
``io`` is the bottom floor for state — it imports nothing above it (no autograd, nn or
optim), so every floor above (optim, nn, checkpoint) can use this module.  It therefore
cannot import ``Tensor`` either: a Tensor is recognised by a protocol instead.  A class whose
instances hold an array defines ``__state_array__(self) -> np.ndarray``, the NumPy array that
stands for the instance in a state tree; ``minidl.Tensor`` (and so ``nn.Parameter``) does,
returning its values.  No class names are compared and nothing is imported.

Copying arrays is also what makes a checkpoint a snapshot: later training steps update the
live arrays in place and must not leak into a checkpoint being written in the background.
A synchronous save needs no snapshot (training waits for it), so ``to_storable`` can also
leave the arrays as they are; :func:`copy_arrays_into` then makes the snapshot, reusing the
buffers of an earlier one when the shapes match (copying into memory that is already
mapped is several times faster than into freshly allocated pages).
"""

from __future__ import annotations

import functools
import os
from concurrent.futures import ThreadPoolExecutor
from typing import NamedTuple

import numpy as np

from . import layout

__all__ = [
    "ITEMS_MARKER", "SCALAR_TYPES", "ITEM_KEY_TYPES", "StateTreeError", "UnstorableError",
    "TreeSize", "as_array", "holds_array", "is_array", "check_tree", "check_plain_leaf",
    "check_storable_leaf", "to_plain", "to_storable", "from_storable", "copy_state",
    "copy_arrays_into",
]

# The scalars msgpack stores, hence the leaves a file's header may hold besides tensor
# references.  (bool is an int subclass, listed for the reader's sake.)
SCALAR_TYPES = (str, bytes, int, float, bool, type(None))
# Keys a map can have in the stored form of ``to_storable``, where they travel as values.
ITEM_KEY_TYPES = SCALAR_TYPES
# A dict whose keys are not all strings is stored as {ITEMS_MARKER: [[key, value], ...]}.
ITEMS_MARKER = "__dict_items__"
# msgpack integers: int64 for negatives, uint64 for the rest.
INT_RANGE = (-(1 << 63), (1 << 64) - 1)


class StateTreeError(ValueError):
    """A state tree breaks a rule; ``path`` names the field, ``problem`` says what is wrong."""

    def __init__(self, path: str, problem: str):
        self.path, self.problem = path, problem
        super().__init__(f"{path}: {problem}")


class UnstorableError(StateTreeError, TypeError):
    """A key or a leaf is of a type the tree may not hold.  A TypeError (the program handed
    over the wrong kind of object) that is also a ValueError (the state is invalid)."""


class TreeSize(NamedTuple):
    """What :func:`check_tree` counted: maps and lists, and their entries (a map's key and
    value count as two)."""

    containers: int
    items: int


# --------------------------------------------------------------------------------- arrays

def holds_array(value) -> bool:
    """Whether ``value`` is an array holder: its class defines ``__state_array__`` (a Tensor).

    Looked up on the class, so the class itself (``Tensor``) is not mistaken for an instance.
    """
    return getattr(type(value), "__state_array__", None) is not None


def as_array(value) -> np.ndarray | None:
    """The NumPy array a leaf stands for, without a copy where none is needed: an ndarray
    itself, a NumPy scalar as a 0-d array of its dtype, an array holder's
    ``__state_array__()``; None for anything else."""
    if isinstance(value, np.ndarray):
        return value
    if isinstance(value, np.generic):
        return np.asarray(value)
    to_array = getattr(type(value), "__state_array__", None)
    return None if to_array is None else to_array(value)


def is_array(value) -> bool:
    """Whether ``value`` is a backend array (a NumPy array, or a device's buffer), as the
    slots of an optimizer hold them.  Arrays have a shape; NumPy scalars have one too, but they
    are plain numbers."""
    return hasattr(value, "shape") and not isinstance(value, np.generic)


# ------------------------------------------------------------------------------ validation

def _join(where: str, keys) -> str:
    return "/".join([where, *map(str, keys)])


def check_plain_leaf(value, path: str) -> None:
    """A leaf a file's header can hold: a msgpack scalar, an int within 64 bits."""
    if not isinstance(value, SCALAR_TYPES):
        raise UnstorableError(path, f"a {type(value).__name__} is not plain data (allowed: "
                                    "str, bytes, int, float, bool, None)")
    if isinstance(value, int) and not INT_RANGE[0] <= value <= INT_RANGE[1]:
        raise StateTreeError(path, f"integer {value} does not fit in 64 bits")


def check_storable_leaf(value, path: str) -> None:
    """A leaf ``md.save`` and a checkpoint can store: a plain scalar, or an array (an
    ndarray, a NumPy scalar, an array holder such as a Tensor).  A bytearray is bytes."""
    if isinstance(value, (np.ndarray, np.generic, bytearray)) or holds_array(value):
        return
    if not isinstance(value, SCALAR_TYPES):
        raise UnstorableError(path, f"cannot save a {type(value).__name__}; allowed: dict, "
                                    "list, tuple, ndarray, Tensor, str, int, float, bool, None, "
                                    "bytes")
    check_plain_leaf(value, path)


def _entries(node):
    return iter(node.items()) if isinstance(node, dict) else enumerate(node)


def check_tree(tree, where: str = "value", *, check_leaf=check_plain_leaf,
               key_types: tuple = (str,), max_depth: int = layout.MAX_NESTING) -> TreeSize:
    """Check a whole tree, or raise naming the path of the first field that breaks a rule.

    Maps (dicts) must have keys of ``key_types`` (:class:`UnstorableError` otherwise); maps
    and lists (tuples too) may nest ``max_depth`` deep, the root counting as 1
    (:class:`StateTreeError` beyond); every other node is a leaf, which ``check_leaf(value,
    path)`` accepts or refuses.  Paths are ``where`` and the keys below it, joined by ``/``.

    The walk is depth first with one iterator per open level, so its memory grows with the
    nesting (at most ``max_depth``), never with the number of items: it is safe on a header
    a hostile file decoded.  Returns the number of containers and items it saw.
    """
    if not isinstance(tree, (dict, list, tuple)):
        check_leaf(tree, where)
        return TreeSize(0, 0)
    containers, items = 1, len(tree) * (2 if isinstance(tree, dict) else 1)
    keys: list = []                      # the path from the root to the open container
    open_levels = [(_entries(tree), isinstance(tree, dict))]
    while open_levels:
        entries, is_map = open_levels[-1]
        for key, node in entries:        # resumes where this level's iterator stopped
            if is_map and not isinstance(key, key_types):
                raise UnstorableError(_join(where, keys), f"dict key {key!r} of type "
                                      f"{type(key).__name__} is not allowed (keys must be "
                                      f"{' or '.join(t.__name__ for t in key_types)})")
            node_is_map = isinstance(node, dict)
            if node_is_map or isinstance(node, (list, tuple)):
                if len(open_levels) + 1 > max_depth:
                    raise StateTreeError(_join(where, keys + [key]),
                                         f"nested deeper than {max_depth} levels")
                containers += 1
                items += len(node) * (2 if node_is_map else 1)
                keys.append(key)
                open_levels.append((_entries(node), node_is_map))
                break
            check_leaf(node, _join(where, keys + [key]))
        else:
            open_levels.pop()
            if keys:
                keys.pop()
    return TreeSize(containers, items)


# --------------------------------------------------------------------------------- copies

def to_plain(value, where: str):
    """``value`` as plain data: NumPy scalars as Python numbers, tuples as lists, dicts and
    lists copied.  :class:`UnstorableError` naming the path for anything else."""
    if isinstance(value, SCALAR_TYPES):
        return value
    if isinstance(value, np.generic) and value.shape == ():
        return value.item()
    if isinstance(value, (list, tuple)):
        return [to_plain(item, f"{where}/{i}") for i, item in enumerate(value)]
    if isinstance(value, dict):
        return {key: to_plain(item, f"{where}/{key}") for key, item in value.items()}
    raise UnstorableError(where, f"{value!r} is not plain data (int, float, bool, str, None, "
                                 "list, dict) and cannot go into a state dict")


def to_storable(state, where: str = "state", copy_arrays: bool = True):
    """A copy of ``state`` whose dicts all have str keys; arrays are private copies unless
    ``copy_arrays=False`` (then they are the live arrays, Tensors as their NumPy arrays).

    A dict whose keys are not all strings becomes ``{ITEMS_MARKER: [[key, value], ...]}``; a
    str-keyed dict that happens to have exactly that one key is wrapped the same way, so
    decoding is never ambiguous.  Raises :class:`UnstorableError` for a key msgpack cannot
    hold; other unstorable leaves are reported by ``encode_value`` with their path.
    """
    array = as_array(state)
    if array is not None:
        return np.array(array, copy=True) if copy_arrays else array
    if isinstance(state, dict):
        keys = list(state)
        if all(isinstance(k, str) for k in keys) and keys != [ITEMS_MARKER]:
            return {k: to_storable(v, f"{where}/{k}", copy_arrays) for k, v in state.items()}
        pairs = []
        for k, v in state.items():
            if not isinstance(k, ITEM_KEY_TYPES):
                raise UnstorableError(where, f"dict key {k!r} of type {type(k).__name__} cannot "
                                             "be saved (keys must be str, int, float, bool, "
                                             "bytes or None)")
            pairs.append([k, to_storable(v, f"{where}/{k}", copy_arrays)])
        return {ITEMS_MARKER: pairs}
    if isinstance(state, (list, tuple)):
        return [to_storable(v, f"{where}/{i}", copy_arrays) for i, v in enumerate(state)]
    return state


def from_storable(tree):
    """Undo :func:`to_storable`: dicts with their original keys (tuples come back as lists)."""
    if isinstance(tree, dict):
        if list(tree) == [ITEMS_MARKER] and isinstance(tree[ITEMS_MARKER], list):
            pairs = tree[ITEMS_MARKER]
            if not all(isinstance(p, list) and len(p) == 2 for p in pairs):
                raise ValueError("malformed dict item list in the saved state")
            result = {}
            for key, value in pairs:
                if isinstance(key, (dict, list)):
                    raise ValueError("malformed dict key in the saved state")
                result[key] = from_storable(value)
            return result
        return {k: from_storable(v) for k, v in tree.items()}
    if isinstance(tree, list):
        return [from_storable(v) for v in tree]
    return tree


def copy_state(state):
    """An independent copy of a state, same container types, arrays copied (Tensors as NumPy
    arrays, NumPy scalars as 0-d arrays).

    Unlike ``copy.deepcopy`` it never copies objects it does not understand (they are
    shared), which keeps it cheap and safe for arbitrary user state.
    """
    array = as_array(state)
    if array is not None:
        return np.array(array, copy=True)
    if isinstance(state, dict):
        try:
            copied = type(state)()  # keeps OrderedDict and friends
        except TypeError:  # a dict subclass whose constructor needs arguments
            copied = {}
        for k, v in state.items():
            copied[k] = copy_state(v)
        return copied
    if isinstance(state, list):
        return [copy_state(v) for v in state]
    if isinstance(state, tuple):
        return tuple(copy_state(v) for v in state)
    return state


# Arrays above this size are copied in slices by a few threads: one thread does not
# saturate memory bandwidth, and this copy is the whole stall of a background save.
_PARALLEL_COPY_BYTES = 16 << 20
_COPY_THREADS = min(4, os.cpu_count() or 1)


@functools.lru_cache(maxsize=None)
def _copy_pool() -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=_COPY_THREADS, thread_name_prefix="minidl-snapshot")


def _copy(target: np.ndarray, source: np.ndarray) -> None:
    if (source.nbytes < _PARALLEL_COPY_BYTES or _COPY_THREADS == 1
            or not (target.flags.c_contiguous and source.flags.c_contiguous)):
        np.copyto(target, source)
        return
    flat_target, flat_source = target.reshape(-1), source.reshape(-1)
    step = -(-flat_source.size // _COPY_THREADS)
    slices = [slice(start, start + step) for start in range(0, flat_source.size, step)]
    # NumPy releases the GIL while copying, so the slices really run side by side.
    list(_copy_pool().map(lambda s: np.copyto(flat_target[s], flat_source[s]), slices))


def copy_arrays_into(arrays: dict[str, np.ndarray],
                     spare: dict[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
    """Private copies of ``arrays``, written into ``spare[name]`` where that buffer has the
    same shape and dtype (and is not the source itself), else freshly allocated."""
    spare = spare or {}
    copies = {}
    for name, array in arrays.items():
        buffer = spare.get(name)
        if (buffer is None or buffer.shape != array.shape or buffer.dtype != array.dtype
                or not buffer.flags.writeable or np.may_share_memory(buffer, array)):
            buffer = np.empty_like(array, order="C")
        _copy(buffer, array)
        copies[name] = buffer
    return copies
