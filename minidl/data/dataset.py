"""Random-access data sets: a sample is a tuple of array rows, fetched many at a time.

A data set only has to answer two questions: how many samples (``len``) and "give me these
samples" (``ds[index_array]``). Fetching a whole batch with one fancy-indexing call, instead of
one Python call per sample, is what keeps the reader cheap next to a training step.
"""

from __future__ import annotations

import os

import numpy as np


class ArrayDataset:
    """Samples stored as rows of in-memory arrays that all have the same length.

    ``ArrayDataset(X, y)[idx]`` returns ``(X[idx], y[idx])``; ``idx`` may be an int, a slice or an
    integer index array.
    """

    def __init__(self, *arrays):
        if not arrays:
            raise ValueError("arrays: ArrayDataset needs at least one array")
        # np.asarray would turn a np.memmap into a plain view; keep arrays as they come.
        self.arrays = tuple(a if isinstance(a, np.ndarray) else np.asarray(a) for a in arrays)
        lengths = [len(a) if a.ndim else None for a in self.arrays]
        if None in lengths:
            raise ValueError("arrays: every array needs a leading sample axis (got a 0-d array)")
        if len(set(lengths)) != 1:
            raise ValueError(f"arrays: all arrays must have the same length, got lengths {lengths}")

    def __len__(self) -> int:
        return len(self.arrays[0])

    def __getitem__(self, index):
        return tuple(a[index] for a in self.arrays)


class NpyDataset(ArrayDataset):
    """Samples stored in ``.npy`` files, memory-mapped so they never need to fit in memory.

    ``NpyDataset("x.npy", "y.npy")`` maps each file read-only; a batch read copies only the rows
    it asks for. ``allow_pickle=False`` keeps a hostile file from running code on load.
    """

    def __init__(self, *paths):
        if not paths:
            raise ValueError("paths: NpyDataset needs at least one .npy file")
        self.paths = tuple(os.fspath(p) for p in paths)
        super().__init__(*(np.load(p, mmap_mode="r", allow_pickle=False) for p in self.paths))

    def __getitem__(self, index):
        index = np.asarray(index)
        if index.ndim == 1 and index.size > 1:
            # Reading a memory map in file order touches each page once; gather sorted, then
            # undo the sort so the caller still gets its own order.
            order = np.argsort(index, kind="stable")
            undo = np.empty_like(order)
            undo[order] = np.arange(order.size)
            return tuple(np.asarray(a[index[order]])[undo] for a in self.arrays)
        return tuple(np.asarray(a[index]) for a in self.arrays)
