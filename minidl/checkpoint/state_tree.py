"""Object states as storable trees, and private copies of them.

``state_dict()`` returns plain Python data, but not always data a minidl header can hold:
the optimizer keys its slots by *int* parameter index, and a module hands out its *live*
arrays.  Two small conversions close the gap:

* :func:`to_storable` copies a state into a tree with str-keyed dicts only (every array
  copied), and :func:`from_storable` undoes it.  A dict whose keys are not all strings is
  stored as ``{ITEMS_MARKER: [[key, value], ...]}``; a str-keyed dict that happens to have
  exactly that one key is wrapped the same way, so decoding is never ambiguous.
* :func:`copy_state` makes an independent copy that keeps every container type, used to
  roll an object back after a failed restore.

Copying arrays is also what makes a checkpoint a snapshot: later training steps update the
live arrays in place and must not leak into a checkpoint being written in the background.
"""

from __future__ import annotations

import numpy as np

from minidl.autograd.tensor import Tensor

ITEMS_MARKER = "__dict_items__"

# Keys a msgpack map can hold once wrapped as [key, value] pairs.
_KEY_TYPES = (str, int, float, bool, bytes, type(None))


def _as_array_copy(value) -> np.ndarray | None:
    """A private NumPy copy of an array or Tensor-like value, or None for anything else."""
    if isinstance(value, np.ndarray):
        return np.array(value, copy=True)
    if isinstance(value, np.generic):
        return np.array(value)  # 0-d array of the same dtype, as the io layer stores scalars
    if isinstance(value, Tensor):
        return np.array(value.numpy(), copy=True)
    return None


def to_storable(state, where: str = "state"):
    """A copy of ``state`` whose dicts all have str keys and whose arrays are private copies.

    Raises TypeError for a dict key that msgpack cannot hold; other unstorable leaves are
    reported later by ``encode_value`` with their path.
    """
    array = _as_array_copy(state)
    if array is not None:
        return array
    if isinstance(state, dict):
        keys = list(state)
        if all(isinstance(k, str) for k in keys) and keys != [ITEMS_MARKER]:
            return {k: to_storable(v, f"{where}/{k}") for k, v in state.items()}
        pairs = []
        for k, v in state.items():
            if not isinstance(k, _KEY_TYPES):
                raise TypeError(f"{where}: dict key {k!r} of type {type(k).__name__} cannot be "
                                "saved (keys must be str, int, float, bool, bytes or None)")
            pairs.append([k, to_storable(v, f"{where}/{k}")])
        return {ITEMS_MARKER: pairs}
    if isinstance(state, (list, tuple)):
        return [to_storable(v, f"{where}/{i}") for i, v in enumerate(state)]
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
    """An independent copy of a state, same container types, arrays copied.

    Unlike ``copy.deepcopy`` it never copies objects it does not understand (they are
    shared), which keeps it cheap and safe for arbitrary user state.
    """
    array = _as_array_copy(state)
    if array is not None:
        return array
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
