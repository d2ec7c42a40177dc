"""Data readers whose position can be saved and restored exactly.

Every reader here follows one protocol, so a training checkpoint can store any of them:

- iterating yields the batches left in the current epoch, then the epoch counter advances;
- ``next_batch()`` hands out the next batch and rolls over into the next epoch by itself;
- ``epoch`` and ``position`` say where the reader stands;
- ``state_dict()`` returns a small msgpack-able dict (plain ints, strings, lists, dicts) and
  ``load_state_dict(state)`` puts a reader back at exactly that point, so the restored reader
  yields the very batches the original would have yielded next.

In memory (or memory-mapped): :class:`ArrayDataset` / :class:`NpyDataset` read through a
:class:`DataReader`, which shuffles by a permutation derived from ``(seed, epoch)`` -- so its state
is two counters, never the permutation itself.

PyTorch's way: a :class:`Dataset` (``len`` and ``ds[i]``, e.g. :class:`TensorDataset`, or the
parts :func:`random_split` makes) read by a :class:`DataLoader` -- a ``DataReader`` that yields
Tensors, collates like PyTorch and can gather batches in worker processes.

Streaming from disk: :class:`CSVReader` and :class:`CTFReader` (the CNTK text format). Their
position is a byte offset into the file; restoring seeks there instead of re-reading.

Samplers (:mod:`minidl.data.samplers`: ``RandomSampler``, ``WeightedRandomSampler``,
``DistributedSampler``, ...) order a ``DataLoader`` PyTorch's way while keeping an exact saved
position; an :class:`IterableDataset` yields its samples itself and resumes through its own
state (:mod:`minidl.data.iterable`).

Importing this package is cheap: the Numba parsing kernels compile on first use.
"""

from .dataset import ArrayDataset, NpyDataset
from .reader import DataReader
from .csv_reader import CSVReader
from .ctf_reader import CTFReader
from .map_dataset import ConcatDataset, Dataset, Subset, TensorDataset, random_split
from .collate import default_collate
from .loader import DataLoader
from .samplers import (BatchSampler, DistributedSampler, RandomSampler, Sampler,
                                  SequentialSampler, SubsetRandomSampler, WeightedRandomSampler)
from .iterable import ChainDataset, IterableDataset, WorkerInfo, get_worker_info

__all__ = ["ArrayDataset", "NpyDataset", "DataReader", "CSVReader", "CTFReader", "Dataset",
           "TensorDataset", "Subset", "ConcatDataset", "random_split", "default_collate",
           "DataLoader", "Sampler", "SequentialSampler", "RandomSampler", "SubsetRandomSampler",
           "WeightedRandomSampler", "BatchSampler", "DistributedSampler", "IterableDataset",
           "ChainDataset", "WorkerInfo", "get_worker_info"]
