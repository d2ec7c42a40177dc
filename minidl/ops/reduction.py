"""Reductions: sum, mean, max/min over axes, var, and argmax/argmin (which have no gradient).

A reduction's backward broadcasts the output gradient back over the reduced axes. To do that the
reduced axes are re-inserted with size 1 (``keepdims``), after which ordinary broadcasting lines
every input element up with the output element it contributed to.
"""

from __future__ import annotations

import numpy as np

from ..autograd.function import Function
from ..autograd.tensor import Tensor
from ._util import normalize_axes


def _with_kept_dims(be, grad, input_shape, axes, keepdims):
    """Reshape an output gradient so that it broadcasts against the input."""
    if keepdims or axes is None and grad.ndim == len(input_shape):
        return grad
    if axes is None:
        return be.reshape(grad, (1,) * len(input_shape))
    shape = list(input_shape)
    for axis in axes:
        shape[axis] = 1
    return be.reshape(grad, tuple(shape))


class Sum(Function):
    # d(Σ a)/da_i = 1: every input element receives the output gradient unchanged.
    def forward(self, a, axes, keepdims):
        self.shape, self.axes, self.keepdims = a.shape, axes, keepdims
        return self.backend.sum(a, axis=axes, keepdims=keepdims)

    def backward(self, grad):
        be = self.backend
        grad = _with_kept_dims(be, grad, self.shape, self.axes, self.keepdims)
        return be.broadcast_to(grad, self.shape)


class Extremum(Function):
    """max or min: the gradient goes to the elements that attained it, split evenly on ties."""

    def forward(self, a, axes, keepdims, primitive):
        be = self.backend
        self.a, self.axes, self.keepdims = a, axes, keepdims
        self.out = getattr(be, primitive)(a, axis=axes, keepdims=True)
        return self.out if keepdims else be.reshape(
            self.out, tuple(n for i, n in enumerate(a.shape)
                            if axes is not None and i not in axes))

    def backward(self, grad):
        be = self.backend
        grad = _with_kept_dims(be, grad, self.a.shape, self.axes, self.keepdims)
        winners = be.astype(be.equal(self.a, self.out), grad.dtype)
        count = be.sum(winners, axis=self.axes, keepdims=True)
        return be.mul(winners, be.div(grad, count))


class _ArgExtremum(Function):
    """Where the extremum is, as int64 indices. An index does not move when the input moves a
    little, and jumps when it moves enough: no gradient (``differentiable = False``), but
    recorded, so an export computes the indices from the input."""

    differentiable = False
    primitive = None  # the backend's argmax or argmin

    def forward(self, a, axis, keepdims):
        return getattr(self.backend, self.primitive)(a, axis=axis, keepdims=keepdims)


class ArgMax(_ArgExtremum):
    primitive = "argmax"


class ArgMin(_ArgExtremum):
    primitive = "argmin"


def sum(a: Tensor, axis=None, keepdims: bool = False) -> Tensor:  # noqa: A001
    axes = normalize_axes("sum", axis, a.ndim)
    if a.dtype.kind == "b":
        a = a.to(dtype=np.int64)
    return Sum.apply(a, axes=axes, keepdims=keepdims)


def mean(a: Tensor, axis=None, keepdims: bool = False) -> Tensor:
    axes = normalize_axes("mean", axis, a.ndim)
    if a.dtype.kind != "f":
        raise TypeError(f"mean: input must be a floating point tensor, got {a.dtype}")
    count = a.numel() if axes is None else int(np.prod([a.shape[i] for i in axes]))
    total = Sum.apply(a, axes=axes, keepdims=keepdims)
    # Dividing by zero elements gives nan, as NumPy and PyTorch do for an empty mean.
    return total * (1.0 / count if count else float("nan"))


def _extremum(op: str, a: Tensor, axis, keepdims: bool) -> Tensor:
    axes = normalize_axes(op, axis, a.ndim)
    reduced = a.numel() if axes is None else int(np.prod([a.shape[i] for i in axes]))
    if reduced == 0:
        raise ValueError(f"{op}: cannot reduce over a zero-size dimension (shape {a.shape})")
    return Extremum.apply(a, axes=axes, keepdims=keepdims, primitive=op)


def max(a: Tensor, axis=None, keepdims: bool = False) -> Tensor:  # noqa: A001
    return _extremum("max", a, axis, keepdims)


def min(a: Tensor, axis=None, keepdims: bool = False) -> Tensor:  # noqa: A001
    return _extremum("min", a, axis, keepdims)


def var(a: Tensor, axis=None, keepdims: bool = False, correction: int = 1) -> Tensor:
    """Variance with ``correction`` (1: unbiased, as PyTorch's default; 0: biased)."""
    axes = normalize_axes("var", axis, a.ndim)
    count = a.numel() if axes is None else int(np.prod([a.shape[i] for i in axes]))
    centered = a - mean(a, axis=axes, keepdims=True)
    return sum(centered * centered, axis=axes, keepdims=keepdims) * (
        1.0 / (count - correction) if count > correction else float("nan"))


def _index_axis(op: str, axis, ndim: int):
    if axis is None:
        return None
    axes = normalize_axes(op, axis, ndim)
    # A 0-d tensor has no axis to search along: its one element is at index 0, as with None.
    return None if axes is None else axes[0]


def argmax(a: Tensor, axis=None, keepdims: bool = False) -> Tensor:
    """Index of the largest element along ``axis`` (of the flattened tensor when None); the
    first one on ties."""
    return ArgMax.apply(a, axis=_index_axis("argmax", axis, a.ndim), keepdims=keepdims)


def argmin(a: Tensor, axis=None, keepdims: bool = False) -> Tensor:
    """Index of the smallest element along ``axis``; the first one on ties."""
    return ArgMin.apply(a, axis=_index_axis("argmin", axis, a.ndim), keepdims=keepdims)
