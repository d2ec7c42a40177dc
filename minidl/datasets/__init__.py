"""Small data sets shipped with minidl, for the demo, the tests and the examples.

``load_digits`` returns the 8×8 handwritten digits (UCI, 1,797 images, CC BY 4.0: see
DIGITS_LICENSE.txt beside this file). ``MNIST``, ``FashionMNIST`` and ``CIFAR10`` are
torchvision's data sets, downloaded once into ``root`` and checked by SHA-256 (see
:mod:`minidl.datasets.vision`); importing this package loads none of them.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .download import DatasetFileError  # noqa: E402
from .vision import CIFAR10, MNIST, FashionMNIST  # noqa: E402

__all__ = ["load_digits", "MNIST", "FashionMNIST", "CIFAR10", "DatasetFileError"]

_DIGITS_FILE = Path(__file__).with_name("digits.npz")


def load_digits(split: str = "all", test_fraction: float = 0.2, seed: int = 0):
    """The digits as ``(images, labels)``: float32 (N, 1, 8, 8) scaled to [0, 1], int64 (N,).

    ``split`` is "all", "train" or "test"; the split is a fixed stratified shuffle from ``seed``,
    so every caller with the same arguments gets the same images.
    """
    if split not in ("all", "train", "test"):
        raise ValueError(f"load_digits: split must be 'all', 'train' or 'test', got {split!r}")
    if not 0.0 < test_fraction < 1.0:
        raise ValueError(f"load_digits: test_fraction must be in (0, 1), got {test_fraction}")
    with np.load(_DIGITS_FILE, allow_pickle=False) as archive:
        images = archive["images"].astype(np.float32)[:, None] / 16.0
        labels = archive["labels"].astype(np.int64)
    if split == "all":
        return images, labels
    # Stratified: take the same fraction of every class, so both splits are balanced.
    rng = np.random.default_rng(seed)
    test = np.zeros(len(labels), bool)
    for digit in range(10):
        members = rng.permutation(np.flatnonzero(labels == digit))
        test[members[:round(len(members) * test_fraction)]] = True
    chosen = test if split == "test" else ~test
    return images[chosen], labels[chosen]
