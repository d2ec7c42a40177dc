"""Factory functions for new leaf tensors (float32 unless a dtype is given)."""

from __future__ import annotations

import numpy as np

from .autograd.tensor import Tensor, float32
from .backend import canonical_device
from .random import resolve


def _shape(shape) -> tuple:
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = tuple(shape[0])
    return tuple(int(n) for n in shape)


def zeros(*shape, dtype=float32, device="cpu", requires_grad=False) -> Tensor:
    return Tensor(np.zeros(_shape(shape), dtype), device=device, requires_grad=requires_grad)


def ones(*shape, dtype=float32, device="cpu", requires_grad=False) -> Tensor:
    return Tensor(np.ones(_shape(shape), dtype), device=device, requires_grad=requires_grad)


def full(shape, value, dtype=float32, device="cpu", requires_grad=False) -> Tensor:
    return Tensor(np.full(_shape((shape,)), value, dtype), device=device,
                  requires_grad=requires_grad)


def zeros_like(t: Tensor, requires_grad=False) -> Tensor:
    return zeros(t.shape, dtype=t.dtype, device=t.device, requires_grad=requires_grad)


def ones_like(t: Tensor, requires_grad=False) -> Tensor:
    return ones(t.shape, dtype=t.dtype, device=t.device, requires_grad=requires_grad)


def arange(start, stop=None, step=1, dtype=None, device="cpu") -> Tensor:
    """The numbers start, start + step, ... below ``stop`` (``arange(n)``: 0 .. n-1). As in
    PyTorch they are int64 when start, stop and step are all integers, else the default float
    dtype (float32), computed in float64 and rounded once."""
    values = np.arange(start, step=step) if stop is None else np.arange(start, stop, step)
    if dtype is None and values.dtype.kind == "f":
        dtype = float32
    return Tensor(values, dtype=dtype, device=device)


def rand(*shape, dtype=float32, generator=None, device="cpu", requires_grad=False) -> Tensor:
    """Samples of U[0, 1) from ``generator`` (default: the global one), drawn on ``device``."""
    device = canonical_device(device)
    values = resolve(generator).uniform(0.0, 1.0, _shape(shape), dtype, device=device)
    return Tensor._wrap(values, device).requires_grad_(requires_grad)


def randn(*shape, dtype=float32, generator=None, device="cpu", requires_grad=False) -> Tensor:
    """Samples of N(0, 1) from ``generator`` (default: the global one), drawn on ``device``."""
    device = canonical_device(device)
    values = resolve(generator).normal(0.0, 1.0, _shape(shape), dtype, device=device)
    return Tensor._wrap(values, device).requires_grad_(requires_grad)


def from_numpy(array: np.ndarray) -> Tensor:
    """A tensor sharing memory with a NumPy array (its dtype kept)."""
    return Tensor(np.asarray(array), dtype=np.asarray(array).dtype)
