"""PyTorch-style map data sets: one sample per ``dataset[i]``, and ``random_split``.

A :class:`Dataset` answers ``len(ds)`` and ``ds[i]`` for one integer ``i``, returning one sample
(a Tensor, an array, a number, or a tuple/dict of them). That is the interface a PyTorch user
writes; :class:`~minidl.data.DataLoader` turns such samples into batches.

A data set may also answer ``ds.get_batch(indices)`` with whole columns at once (a tuple of
arrays whose first axis is the batch). :class:`TensorDataset` does (and a :class:`Subset` of it),
so a loader
over them gathers a batch with one fancy-indexing call per column instead of one Python call per
sample -- the same reason :class:`~minidl.data.DataReader` asks data sets for index arrays.
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from ..autograd.tensor import Tensor


class Dataset:
    """Base class of map-style data sets: subclasses define ``__len__`` and ``__getitem__(i)``.

    ``ds_a + ds_b`` concatenates two data sets, as in PyTorch.
    """

    def __len__(self) -> int:
        raise NotImplementedError(f"{type(self).__name__} must define __len__")

    def __getitem__(self, index):
        raise NotImplementedError(f"{type(self).__name__} must define __getitem__")

    def __add__(self, other: "Dataset") -> "ConcatDataset":
        return ConcatDataset([self, other])


def _host_array(column, argument: str) -> np.ndarray:
    """A column as a NumPy array on the host (Tensors are read once, at construction)."""
    array = column.numpy() if isinstance(column, Tensor) else np.asarray(column)
    if array.ndim == 0:
        raise ValueError(f"{argument}: every tensor needs a leading sample axis (got a 0-d one)")
    return array


class TensorDataset(Dataset):
    """Samples that are rows of tensors of one length: ``ds[i] == (t0[i], t1[i], ...)``.

    The tensors are read to host arrays once; each sample (and each batch a loader gathers)
    comes back as Tensors, as in PyTorch.
    """

    def __init__(self, *tensors):
        if not tensors:
            raise ValueError("tensors: TensorDataset needs at least one tensor")
        self.arrays = tuple(_host_array(t, f"tensors[{i}]") for i, t in enumerate(tensors))
        lengths = [len(a) for a in self.arrays]
        if len(set(lengths)) != 1:
            raise ValueError(f"tensors: all tensors must have the same first dimension, got "
                             f"lengths {lengths}")

    def __len__(self) -> int:
        return len(self.arrays[0])

    def __getitem__(self, index):
        index = _check_sample_index(index, len(self))
        return tuple(Tensor(a[index]) for a in self.arrays)

    def get_batch(self, indices: np.ndarray) -> tuple:
        """The samples at ``indices`` as a tuple of NumPy columns (batch axis first)."""
        return tuple(a[indices] for a in self.arrays)


class Subset(Dataset):
    """The samples of ``dataset`` at ``indices``, in that order."""

    def __init__(self, dataset, indices):
        self.dataset = dataset
        self.indices = np.asarray(indices, dtype=np.int64)
        if self.indices.ndim != 1:
            raise ValueError(f"indices: expected a 1-d sequence, got shape {self.indices.shape}")
        if self.indices.size and not (0 <= self.indices.min() and
                                      self.indices.max() < len(dataset)):
            raise ValueError(f"indices: every index must be in [0, {len(dataset)})")

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, index):
        return self.dataset[int(self.indices[_check_sample_index(index, len(self))])]

    def get_batch(self, indices: np.ndarray) -> tuple:
        """The samples at ``indices`` as NumPy columns, when the wrapped data set can gather
        batches (see :func:`batch_gatherer`)."""
        inner = batch_gatherer(self.dataset)
        if inner is None:
            raise TypeError(f"Subset.get_batch: {type(self.dataset).__name__} gathers samples "
                            f"one at a time")
        return inner(self.indices[indices])


class ConcatDataset(Dataset):
    """Several data sets one after the other."""

    def __init__(self, datasets):
        self.datasets = list(datasets)
        if not self.datasets:
            raise ValueError("datasets: ConcatDataset needs at least one data set")
        self.cumulative_sizes = np.cumsum([len(d) for d in self.datasets]).tolist()

    def __len__(self) -> int:
        return self.cumulative_sizes[-1]

    def __getitem__(self, index):
        index = _check_sample_index(index, len(self))
        part = int(np.searchsorted(self.cumulative_sizes, index, side="right"))
        start = self.cumulative_sizes[part - 1] if part else 0
        return self.datasets[part][index - start]


def batch_gatherer(dataset):
    """``dataset``'s way of gathering a whole batch of columns at once, or None.

    A loader with the default collation uses it to skip the per-sample path; a split of a data
    set that gathers batches gathers them too.
    """
    if isinstance(dataset, Subset):
        return dataset.get_batch if batch_gatherer(dataset.dataset) is not None else None
    gather = getattr(dataset, "get_batch", None)
    return gather if callable(gather) else None


def _check_sample_index(index, length: int) -> int:
    if isinstance(index, bool) or not isinstance(index, numbers.Integral):
        raise TypeError(f"index: a map data set takes one integer index, got {index!r}")
    index = int(index)
    if index < 0:
        index += length
    if not 0 <= index < length:
        raise IndexError(f"index {index} is out of range for a data set of {length} samples")
    return index


def split_lengths(total: int, lengths) -> list[int]:
    """``lengths`` as sample counts summing to ``total``; fractions are allowed, as in PyTorch.

    Fractions are floored, and the samples left over go one each to the parts in turn, so
    ``[0.5, 0.5]`` of 5 samples is ``[3, 2]``.
    """
    lengths = list(lengths)
    if not lengths:
        raise ValueError("lengths: random_split needs at least one length")
    if all(isinstance(n, numbers.Integral) and not isinstance(n, bool) for n in lengths):
        counts = [int(n) for n in lengths]
        if any(n < 0 for n in counts) or sum(counts) != total:
            raise ValueError(f"lengths: {counts} must be non-negative and sum to the data set's "
                             f"length {total}")
        return counts
    fractions = [float(f) for f in lengths]
    if any(not 0.0 <= f <= 1.0 for f in fractions) or not math.isclose(sum(fractions), 1.0,
                                                                         abs_tol=1e-9):
        raise ValueError(f"lengths: fractions {lengths} must lie in [0, 1] and sum to 1")
    counts = [int(math.floor(total * f)) for f in fractions]
    for i in range(total - sum(counts)):
        counts[i % len(counts)] += 1
    return counts


def random_split(dataset, lengths, generator=None, *, seed: int | None = None) -> list[Subset]:
    """Split ``dataset`` into non-overlapping random :class:`Subset` s of the given lengths.

    The permutation is drawn from ``generator`` (a :class:`minidl.Generator`), from a fresh
    generator seeded by ``seed``, or else from minidl's global generator -- whose state every
    checkpoint stores, so after ``md.manual_seed`` (or with a fixed ``seed``) a re-run of the
    script, resumed or not, splits the data identically.
    """
    from ..random import Generator, resolve

    if seed is not None:
        if generator is not None:
            raise ValueError("random_split: give generator= or seed=, not both")
        generator = Generator(seed)
    counts = split_lengths(len(dataset), lengths)
    order = resolve(generator).permutation(len(dataset))
    bounds = np.cumsum([0] + counts)
    return [Subset(dataset, order[bounds[i]:bounds[i + 1]]) for i in range(len(counts))]
