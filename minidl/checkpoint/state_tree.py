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
A synchronous save needs no snapshot (training waits for it), so ``to_storable`` can also
leave the arrays as they are; :func:`copy_arrays_into` then makes the snapshot, reusing the
buffers of an earlier one when the shapes match (copying into memory that is already
mapped is several times faster than into freshly allocated pages).
"""

from __future__ import annotations

import functools
import os
from concurrent.futures import ThreadPoolExecutor

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


def _as_array(value) -> np.ndarray | None:
    """The NumPy array behind an array or Tensor value (no copy), or None."""
    if isinstance(value, np.ndarray):
        return value
    if isinstance(value, np.generic):
        return np.array(value)
    if isinstance(value, Tensor):
        return value.numpy()
    return None


def to_storable(state, where: str = "state", copy_arrays: bool = True):
    """A copy of ``state`` whose dicts all have str keys; arrays are private copies unless
    ``copy_arrays=False`` (then they are the live arrays, Tensors as their NumPy arrays).

    Raises TypeError for a dict key that msgpack cannot hold; other unstorable leaves are
    reported later by ``encode_value`` with their path.
    """
    array = _as_array_copy(state) if copy_arrays else _as_array(state)
    if array is not None:
        return array
    if isinstance(state, dict):
        keys = list(state)
        if all(isinstance(k, str) for k in keys) and keys != [ITEMS_MARKER]:
            return {k: to_storable(v, f"{where}/{k}", copy_arrays) for k, v in state.items()}
        pairs = []
        for k, v in state.items():
            if not isinstance(k, _KEY_TYPES):
                raise TypeError(f"{where}: dict key {k!r} of type {type(k).__name__} cannot be "
                                "saved (keys must be str, int, float, bool, bytes or None)")
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
