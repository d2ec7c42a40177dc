"""What ``fit``, ``evaluate`` and ``predict`` accept as data, turned into batches.

* arrays: ``(X, y)`` (or ``(X1, X2, y)`` for several inputs), NumPy arrays or Tensors;
* a data set: anything with ``len()`` whose ``dataset[index_array]`` returns the samples;
* a reader: an object with ``next_batch()`` and ``state_dict()`` (``DataReader``, ``DataLoader``,
  ``CSVReader``, ...), used as it is, so its position is what gets checkpointed.

Arrays and data sets are read through a :class:`~minidl.data.DataReader`, whose shuffle order
comes from ``seed`` (a fixed number, so a re-run of the script sees the same order and can
resume from a checkpoint).
"""

from __future__ import annotations

import itertools

import numpy as np

from ..autograd.tensor import Tensor, as_tensor


def is_reader(data) -> bool:
    """Whether ``data`` is a reader (hands out batches and has a checkpointable position)."""
    return callable(getattr(data, "next_batch", None)) and callable(
        getattr(data, "state_dict", None))


def model_device(model) -> str:
    """Where ``model`` computes: the device of its first parameter or buffer (the CPU for a
    model without any, or a plain function)."""
    tensors = itertools.chain(getattr(model, "parameters", tuple)(),
                              getattr(model, "buffers", tuple)())
    return next((tensor.device for tensor in tensors), "cpu")


def on_device(part, device: str) -> Tensor:
    """One array of a batch as a Tensor on ``device``. Batches are read on the host and copied
    to the model's device one at a time, as Keras feeds a model on a GPU: the data set need not
    fit in GPU memory, and the user never moves a batch by hand."""
    return as_tensor(part).to(device)


def _as_array(part):
    return part.numpy() if isinstance(part, Tensor) else np.asarray(part)


def as_arrays(data, argument: str) -> tuple | None:
    """``(X, y)``-style data as a tuple of NumPy arrays of one length; None for other data."""
    if isinstance(data, (tuple, list)) and data and not is_reader(data):
        arrays = tuple(_as_array(part) for part in data)
        lengths = {len(a) if a.ndim else -1 for a in arrays}
        if len(lengths) != 1 or -1 in lengths:
            raise ValueError(f"{argument}: the arrays must have one length (samples first), "
                             f"got shapes {[a.shape for a in arrays]}")
        return arrays
    return None


def split_off_validation(arrays: tuple, fraction: float) -> tuple[tuple, tuple]:
    """Keras's ``validation_split``: the last ``fraction`` of the samples, before shuffling."""
    if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) \
            or not 0.0 < fraction < 1.0:
        raise ValueError(f"fit: validation_split must be a number in (0, 1), got {fraction!r}")
    total = len(arrays[0])
    held_out = int(total * fraction)
    if held_out == 0 or held_out == total:
        raise ValueError(f"fit: validation_split={fraction} of {total} samples leaves "
                         f"{held_out} for validation and {total - held_out} for training")
    cut = total - held_out
    return tuple(a[:cut] for a in arrays), tuple(a[cut:] for a in arrays)


def training_reader(data, batch_size: int | None, shuffle: bool, seed: int):
    """The reader ``fit`` trains from: ``data`` itself when it is a reader, else a
    :class:`DataReader` over the arrays or data set."""
    from ..data import ArrayDataset, DataReader

    if is_reader(data):
        own = getattr(data, "batch_size", None)
        if batch_size is not None and own is not None and batch_size != own:
            raise ValueError(f"fit: batch_size={batch_size} but the reader given makes batches "
                             f"of {own}; set the batch size on the reader")
        return data
    arrays = as_arrays(data, "fit: data")
    if arrays is not None:
        data = ArrayDataset(*arrays)
    elif not (hasattr(data, "__len__") and hasattr(data, "__getitem__")):
        raise TypeError(f"fit: data must be (inputs, targets) arrays, a data set (len() and "
                        f"indexing) or a reader (next_batch()), got {type(data).__name__}")
    # In a data-parallel job each rank reads its block of every global batch (batch_size is
    # per rank, as with PyTorch's DistributedSampler).
    from .. import distributed as dist
    return DataReader(data, batch_size=32 if batch_size is None else batch_size,
                      shuffle=shuffle, seed=seed, rank=dist.get_rank(),
                      world_size=dist.get_world_size())


def batches(data, batch_size: int, argument: str):
    """Batches (tuples of NumPy arrays) of ``data`` in order, for evaluation and prediction:
    arrays and data sets are sliced; a reader yields the rest of its current epoch."""
    if is_reader(data):
        yield from data
        return
    arrays = as_arrays(data, argument)
    if arrays is None and isinstance(data, (np.ndarray, Tensor)):
        arrays = (_as_array(data),)
    if arrays is not None:
        for start in range(0, len(arrays[0]), batch_size):
            yield tuple(a[start:start + batch_size] for a in arrays)
        return
    if not (hasattr(data, "__len__") and hasattr(data, "__getitem__")):
        raise TypeError(f"{argument} must be arrays, a data set or a reader, got "
                        f"{type(data).__name__}")
    from ..data.reader import as_batch
    for start in range(0, len(data), batch_size):
        yield as_batch(data[np.arange(start, min(start + batch_size, len(data)))])
