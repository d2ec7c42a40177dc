"""Reductions: sum, mean, amax/amin and max/min, var/std, and argmax/argmin (no gradient).

A reduction's backward broadcasts the output gradient back over the reduced axes. To do that the
reduced axes are re-inserted with size 1 (``keepdims``), after which ordinary broadcasting lines
every input element up with the output element it contributed to.
"""

from __future__ import annotations

import builtins
from collections import namedtuple

import numpy as np

from ..autograd.function import Function
from ..autograd.tensor import Tensor
from ..backend import composed
from ._util import normalize_axes, refuse_bool


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


def _kept_shape(input_shape, axes) -> tuple:
    return tuple(1 if axes is None or i in axes else n for i, n in enumerate(input_shape))


def _with_kept_dims_recorded(grad, input_shape, axes, keepdims):
    """:func:`_with_kept_dims` on a Tensor (for ``create_graph``)."""
    if keepdims or axes is None and grad.ndim == len(input_shape):
        return grad
    return grad.reshape(_kept_shape(input_shape, axes))


class SumFunction(Function):
    # d(Σ a)/da_i = 1: every input element receives the output gradient unchanged.
    def forward(self, a, axes, keepdims):
        self.shape, self.axes, self.keepdims = a.shape, axes, keepdims
        return self.backend.sum(a, axis=axes, keepdims=keepdims)

    def backward(self, grad):
        be = self.backend
        grad = _with_kept_dims(be, grad, self.shape, self.axes, self.keepdims)
        return be.broadcast_to(grad, self.shape)

    def differentiable_backward(self, grad, output):
        from .shape import expand
        return expand(_with_kept_dims_recorded(grad, self.shape, self.axes, self.keepdims),
                      self.shape)


def _extreme(be, name: str, a, **axes):
    # "max" and "argmax" are primitives; "min" and "argmin" are composed of them, as the max
    # of the order-reversed values (minidl.backend.composed).
    if name in ("min", "argmin"):
        return getattr(composed, name)(be, a, **axes)
    return getattr(be, name)(a, **axes)


class ExtremumFunction(Function):
    """max or min: the gradient goes to the elements that attained it, split evenly on ties.

    A NaN is the extremum of any slice holding one (it propagates). With ``nan_attains`` (max()
    and min()) it is the NaN elements that attained it: NaN == NaN is false, so they are
    matched by being NaN themselves (x != x), as PyTorch does, and the rest of the slice
    receives 0. Without it (amax and amin) no element equals a NaN extremum, so the slice's
    gradient is g/0 · 0 = nan throughout: PyTorch's amax rule, whose NaN gradient tells the
    user where the NaN came from.
    """

    def forward(self, a, axes, keepdims, primitive, nan_attains=True):
        be = self.backend
        self.a, self.axes, self.keepdims, self.nan_attains = a, axes, keepdims, nan_attains
        self.out = _extreme(be, primitive, a, axis=axes, keepdims=True)
        return self.out if keepdims else be.reshape(
            self.out, tuple(n for i, n in enumerate(a.shape)
                            if axes is not None and i not in axes))

    def backward(self, grad):
        be = self.backend
        grad = _with_kept_dims(be, grad, self.a.shape, self.axes, self.keepdims)
        attained = be.equal(self.a, self.out)
        if self.nan_attains:
            is_nan = composed.logical_not(be, be.equal(self.a, self.a))
            out_is_nan = composed.logical_not(be, be.equal(self.out, self.out))
            # "or" and "and" of bools as maximum and minimum (False < True).
            attained = be.maximum(attained, be.minimum(is_nan, out_is_nan))
        winners = be.astype(attained, grad.dtype)
        count = be.sum(winners, axis=self.axes, keepdims=True)
        return be.mul(winners, be.div(grad, count))

    def differentiable_backward(self, grad, output):
        # The share each element gets (1/count where it attained the extremum, else 0) is
        # piecewise constant in the input: the gradient is linear in grad with that constant
        # weight, as the first-order rule computes it for a gradient of ones.
        be = self.backend
        share = self.backward(composed.ones(be, _kept_shape(self.a.shape, self.axes), grad.dtype))
        kept = _with_kept_dims_recorded(grad, self.a.shape, self.axes, self.keepdims)
        return kept * Tensor._wrap(share, grad.device)


class _ArgExtremumFunction(Function):
    """Where the extremum is, as int64 indices. An index does not move when the input moves a
    little, and jumps when it moves enough: no gradient (``differentiable = False``), but
    recorded, so an export computes the indices from the input."""

    differentiable = False
    primitive = None  # "argmax" or "argmin"

    def forward(self, a, axis, keepdims):
        return _extreme(self.backend, self.primitive, a, axis=axis, keepdims=keepdims)


class _AnyAllFunction(Function):
    """Whether any (all) element is true: the max (min) of bools, False < True. Bools have
    no gradient."""

    differentiable = False

    def forward(self, a, axes, keepdims, primitive):
        return _extreme(self.backend, primitive, a, axis=axes, keepdims=keepdims)


class ArgMaxFunction(_ArgExtremumFunction):
    primitive = "argmax"


class ArgMinFunction(_ArgExtremumFunction):
    primitive = "argmin"


def sum(a: Tensor, axis=None, keepdims: bool = False, *, dim=None,
        keepdim=None) -> Tensor:  # noqa: A001
    """Sum over ``axis`` (alias ``dim``; an int, a tuple, or None for all); bools and integers
    of every width sum to int64, as in PyTorch."""
    axes = normalize_axes("sum", _axis_or_dim(axis, dim), a.ndim)
    keepdims = _keep(keepdims, keepdim)
    if a.dtype.kind in "biu" and a.dtype != np.int64:
        a = a.to(dtype=np.int64)
    return SumFunction.apply(a, axes=axes, keepdims=keepdims)


def mean(a: Tensor, axis=None, keepdims: bool = False, *, dim=None, keepdim=None) -> Tensor:
    """Mean over ``axis`` (alias ``dim``) of a floating point tensor."""
    axes = normalize_axes("mean", _axis_or_dim(axis, dim), a.ndim)
    keepdims = _keep(keepdims, keepdim)
    if a.dtype.kind != "f":
        raise TypeError(f"mean: input must be a floating point tensor, got {a.dtype}")
    count = a.numel() if axes is None else int(np.prod([a.shape[i] for i in axes]))
    total = SumFunction.apply(a, axes=axes, keepdims=keepdims)
    # Dividing by zero elements gives nan, as NumPy and PyTorch do for an empty mean.
    return total * (1.0 / count if count else float("nan"))


def _extremum(op: str, a: Tensor, axis, keepdims: bool, nan_attains: bool = True) -> Tensor:
    axes = normalize_axes(op, axis, a.ndim)
    reduced = a.numel() if axes is None else int(np.prod([a.shape[i] for i in axes]))
    if reduced == 0:
        raise ValueError(f"{op}: cannot reduce over a zero-size dimension (shape {a.shape})")
    return ExtremumFunction.apply(a, axes=axes, keepdims=keepdims, primitive=op,
                                  nan_attains=nan_attains)


def amax(a: Tensor, axis=None, keepdims: bool = False, *, dim=None, keepdim=None) -> Tensor:
    """The largest value over ``axis`` (an int, a tuple, or None for all); alias ``dim``.
    Ties share the gradient evenly; a slice whose maximum is NaN gets a NaN gradient, as in
    PyTorch."""
    return _extremum("max", a, _axis_or_dim(axis, dim), _keep(keepdims, keepdim), False)


def amin(a: Tensor, axis=None, keepdims: bool = False, *, dim=None, keepdim=None) -> Tensor:
    """The smallest value over ``axis`` (an int, a tuple, or None for all); alias ``dim``;
    gradients as :func:`amax`'s."""
    return _extremum("min", a, _axis_or_dim(axis, dim), _keep(keepdims, keepdim), False)


#: What ``max(dim)`` / ``min(dim)`` return, as PyTorch's ``torch.return_types.max``: a tuple
#: ``(values, indices)`` whose fields are also named.
MaxResult = namedtuple("max", ["values", "indices"])
MinResult = namedtuple("min", ["values", "indices"])


def _extremum_with_indices(op, result_type, a, axis, keepdims, other):
    if isinstance(other, Tensor):  # x.max(y) is the elementwise maximum, as in PyTorch
        from . import elementwise
        if axis is not None:
            raise TypeError(f"{op}: give either another tensor or an axis, not both")
        return getattr(elementwise, "maximum" if op == "max" else "minimum")(a, other)
    if axis is None:
        return _extremum(op, a, None, False)
    if not isinstance(axis, int) or isinstance(axis, bool):
        raise TypeError(f"{op}: axis must be a single int (it returns the index along it); "
                        f"use {'amax' if op == 'max' else 'amin'} to reduce over {axis!r}")
    values = _extremum(op, a, axis, keepdims)
    # PyTorch defines max(dim) of bools though not argmax: their indices are uint8's
    indices = (argmax if op == "max" else argmin)(
        a.to(dtype=np.uint8) if a.dtype == np.bool_ else a, axis=axis, keepdims=keepdims)
    return result_type(values, indices)


def max(a: Tensor, axis=None, keepdims: bool = False, *, dim=None, keepdim=None,
        other=None):  # noqa: A001
    """The largest element; with ``axis`` (alias ``dim``) the named tuple ``(values,
    indices)`` along it, as PyTorch. Gradients reach the elements that attained the maximum,
    split evenly between ties; ``max(a, other_tensor)`` is the elementwise maximum."""
    if isinstance(axis, Tensor):
        axis, other = None, axis
    return _extremum_with_indices("max", MaxResult, a, _axis_or_dim(axis, dim),
                                  _keep(keepdims, keepdim), other)


def min(a: Tensor, axis=None, keepdims: bool = False, *, dim=None, keepdim=None,
        other=None):  # noqa: A001
    """The smallest element; with ``axis`` (alias ``dim``) the named tuple ``(values,
    indices)``, as PyTorch; ``min(a, other_tensor)`` is the elementwise minimum."""
    if isinstance(axis, Tensor):
        axis, other = None, axis
    return _extremum_with_indices("min", MinResult, a, _axis_or_dim(axis, dim),
                                  _keep(keepdims, keepdim), other)


def _axis_or_dim(axis, dim):
    """PyTorch's ``dim`` is accepted wherever NumPy's ``axis`` is."""
    if dim is not None and axis is not None:
        raise TypeError("give axis or its alias dim, not both")
    return dim if dim is not None else axis


def _keep(keepdims, keepdim):
    return bool(keepdim) if keepdim is not None else bool(keepdims)


def var(a: Tensor, axis=None, keepdims: bool = False, correction=None, *, dim=None,
        keepdim=None, unbiased=None) -> Tensor:
    """Variance Σ(x - mean)² / (N - correction) over ``axis`` (alias ``dim``).

    ``correction=1`` (the default, as PyTorch) is the unbiased estimate, 0 the biased one;
    PyTorch's older ``unbiased=True/False`` means correction 1/0. With N <= correction the
    divisor is 0 (PyTorch warns and returns inf, or nan for a zero sum).
    """
    if unbiased is not None:
        if correction is not None:
            raise TypeError("var: give correction or unbiased, not both")
        correction = 1 if unbiased else 0
    correction = 1 if correction is None else correction
    if isinstance(correction, bool) or not isinstance(correction, (int, float)) or correction < 0:
        raise ValueError(f"var: correction must be a non-negative number, got {correction!r}")
    axes = normalize_axes("var", _axis_or_dim(axis, dim), a.ndim)
    count = a.numel() if axes is None else int(np.prod([a.shape[i] for i in axes]))
    # Σ(x/N) rather than Σx/N: the sum of values near the float range's end would overflow
    # (two float32 3e38s sum to inf) where the mean itself, and so the spread, is finite.
    average = sum(a * (1.0 / count if count else float("nan")), axis=axes, keepdims=True)
    # d var/dx_i = 2(x_i - mean)/(N - correction), PyTorch's formula: the path through the
    # mean would add -2/N·Σ(x_j - mean)/(N - correction), which is 0 in exact arithmetic but
    # not in rounded (a -1e308 next to a 1) and inf - inf = nan for a divisor of 0. So the
    # mean is a constant for the gradient (recorded, so an export still computes it).
    centered = a - StopGradientFunction.apply(average)
    squares = sum(centered * centered, axis=axes, keepdims=_keep(keepdims, keepdim))
    return squares / a.dtype.type(builtins.max(count - correction, 0))


class StopGradientFunction(Function):
    """The identity, with a zero gradient: ``detach`` as a recorded op, so that a traced
    export computes the value (an ONNX Identity) instead of taking it as a constant.

    :func:`var` uses it on the mean, whose gradient there is zero in exact arithmetic
    (Σ (a - m) = 0), to keep rounding noise out of the first derivative. The second derivative
    is another matter: the Hessian of the variance, 2/(n - c) · (I - 11ᵀ/n), owes its 11ᵀ/n
    to the mean's dependence on a. So under ``create_graph`` the recorded rule is the
    identity's, and derivatives of any order stay exact."""

    def forward(self, a):
        return a

    def backward(self, grad):
        return composed.zeros_like(self.backend, grad)

    def differentiable_backward(self, grad, output):
        return grad


class StdFunction(Function):
    """The square root of a variance, whose gradient is 0 where the variance is 0.

    d sqrt(v)/dv = 1/(2 sqrt(v)) is infinite at v = 0, where the variance's own gradient is
    0: the product would be nan. A constant input is a minimum of the spread, so 0 is the
    answer PyTorch gives too (it masks the zero results in ``std_backward``).
    """

    def forward(self, variance):
        self.out = self.backend.math_function(variance, "sqrt")
        return self.out

    def backward(self, grad):
        be = self.backend
        zero = grad.dtype.type(0)
        scaled = be.div(grad, be.mul(self.out, self.out.dtype.type(2)))
        return be.where(be.equal(self.out, zero), zero, scaled)

    def differentiable_backward(self, grad, output):
        # 1/(2 sqrt v) recorded through the output, so the next derivative (-1/(4 v^1.5))
        # follows it; the zero-spread mask is a constant (piecewise constant in v), and the
        # masked places divide by 1 instead of 0 so no inf * 0 appears.
        be = self.backend
        spread = be.astype(composed.not_equal(be, self.out, self.out.dtype.type(0)), self.out.dtype)
        mask = Tensor._wrap(spread, grad.device)
        return grad * mask / ((output + (1 - mask)) * 2)


def std(a: Tensor, axis=None, keepdims: bool = False, correction=None, *, dim=None,
        keepdim=None, unbiased=None) -> Tensor:
    """Standard deviation: the square root of :func:`var` (same arguments). Its gradient is 0
    where the spread is 0 (a constant slice), as in PyTorch."""
    return StdFunction.apply(var(a, axis, keepdims, correction, dim=dim, keepdim=keepdim,
                                 unbiased=unbiased))


def _index_axis(op: str, axis, ndim: int):
    if axis is None:
        return None
    axes = normalize_axes(op, axis, ndim)
    # A 0-d tensor has no axis to search along: its one element is at index 0, as with None.
    return None if axes is None else axes[0]


def argmax(a: Tensor, axis=None, keepdims: bool = False, *, dim=None, keepdim=None) -> Tensor:
    """Index of the largest element along ``axis`` (alias ``dim``; of the flattened tensor when
    None); the first one on ties."""
    refuse_bool("argmax", a)
    return ArgMaxFunction.apply(a, axis=_index_axis("argmax", _axis_or_dim(axis, dim), a.ndim),
                        keepdims=_keep(keepdims, keepdim))


def argmin(a: Tensor, axis=None, keepdims: bool = False, *, dim=None, keepdim=None) -> Tensor:
    """Index of the smallest element along ``axis`` (alias ``dim``); the first one on ties."""
    refuse_bool("argmin", a)
    return ArgMinFunction.apply(a, axis=_index_axis("argmin", _axis_or_dim(axis, dim), a.ndim),
                        keepdims=_keep(keepdims, keepdim))


def _any_all(op: str, primitive: str, a: Tensor, axis, keepdims, dim, keepdim) -> Tensor:
    axes = normalize_axes(op, _axis_or_dim(axis, dim), a.ndim)
    # PyTorch answers in uint8 for a uint8 input (its any/all predate the bool dtype)
    dtype = a.dtype if a.dtype == np.uint8 else np.dtype(np.bool_)
    if a.dtype.kind != "b":
        a = a != 0
    if a.numel() == 0 or (axes is not None and 0 in [a.shape[i] for i in axes]):
        # over nothing: any is False and all is True (the identities of "or" and "and")
        shape = _reduced_shape(a.shape, axes, _keep(keepdims, keepdim))
        return Tensor._wrap(a.backend.full(shape, op == "all", dtype), a.device)
    out = _AnyAllFunction.apply(a, axes=axes, keepdims=_keep(keepdims, keepdim),
                                primitive=primitive)
    return out if dtype == np.bool_ else out.to(dtype=dtype)


def _reduced_shape(shape, axes, keepdims):
    axes = range(len(shape)) if axes is None else axes
    return tuple(1 if i in axes else n for i, n in enumerate(shape) if keepdims or i not in axes)


def any(a: Tensor, axis=None, keepdims: bool = False, *, dim=None, keepdim=None) -> Tensor:  # noqa: A001
    """Whether any element (along ``axis``, alias ``dim``) is non-zero, as a bool tensor."""
    return _any_all("any", "max", a, axis, keepdims, dim, keepdim)


def all(a: Tensor, axis=None, keepdims: bool = False, *, dim=None, keepdim=None) -> Tensor:  # noqa: A001
    """Whether every element (along ``axis``, alias ``dim``) is non-zero, as a bool tensor."""
    return _any_all("all", "min", a, axis, keepdims, dim, keepdim)
