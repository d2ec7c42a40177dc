"""Turning a list of samples into one batch, as PyTorch's ``default_collate`` does.

Collation happens in two steps so that the heavy one can run in a worker process:
:func:`collate_arrays` stacks the samples into NumPy arrays (kept in the sample's structure:
tuple, list, dict), and :func:`to_tensors` wraps those arrays as Tensors in the main process.
"""

from __future__ import annotations

import numbers

import numpy as np

from ..autograd.tensor import Tensor


def collate_arrays(samples):
    """Stack a list of samples field by field into NumPy arrays with a leading batch axis.

    A sample is a Tensor, an array, a number, a string, or a tuple/list/dict of them; the batch
    has the same structure. Python floats become float32 (minidl's default float), ints int64,
    strings stay a list.
    """
    if not samples:
        raise ValueError("collate: cannot make a batch of zero samples")
    first = samples[0]
    if isinstance(first, (Tensor, np.ndarray)):
        return np.stack([np.asarray(s) for s in samples])
    if isinstance(first, (bool, np.bool_)):
        return np.asarray(samples, dtype=np.bool_)
    if isinstance(first, numbers.Integral):
        return np.asarray(samples, dtype=np.int64)
    if isinstance(first, numbers.Real):
        return np.asarray(samples, dtype=np.float32)
    if isinstance(first, (str, bytes)):
        return list(samples)
    if isinstance(first, dict):
        return {key: collate_arrays([s[key] for s in samples]) for key in first}
    if isinstance(first, (tuple, list)):
        if any(len(s) != len(first) for s in samples):
            raise ValueError("collate: every sample must have the same number of fields")
        return tuple(collate_arrays(list(field)) for field in zip(*samples))
    raise TypeError(f"collate: cannot batch samples of type {type(first).__name__}; pass a "
                    f"collate_fn")


def to_tensors(batch):
    """The same structure with every NumPy array wrapped as a Tensor (strings stay as they are)."""
    if isinstance(batch, np.ndarray):
        return Tensor(batch)
    if isinstance(batch, dict):
        return {key: to_tensors(value) for key, value in batch.items()}
    if isinstance(batch, tuple):
        return tuple(to_tensors(part) for part in batch)
    return batch


def default_collate(samples):
    """PyTorch's ``default_collate``: a list of samples -> one batch of Tensors."""
    return to_tensors(collate_arrays(samples))
