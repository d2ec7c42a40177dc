"""Ops that move or select elements without arithmetic: reshape, transpose, broadcast, indexing,
concatenation, stacking, where, casts and device transfers.

Their gradients move the output gradient back to where each element came from: the inverse
reshape or permutation, a sum over broadcast copies, a scatter-add for indexing (an element
selected twice receives both gradients), a split for concatenation.
"""

from __future__ import annotations

import math

import numpy as np

from ..autograd.function import Function
from ..autograd.tensor import Tensor, as_tensor
from ..backend import composed
from ._util import broadcast_shape, normalize_axis, promote_operands


class ReshapeFunction(Function):
    output_is_view = True

    def forward(self, a, shape):
        self.input_shape = a.shape
        return self.backend.reshape(a, shape)

    def backward(self, grad):
        return self.backend.reshape(grad, self.input_shape)

    def differentiable_backward(self, grad, output):
        return reshape(grad, self.input_shape)


class PermuteFunction(Function):
    # The inverse permutation takes each output axis back to where it came from.
    output_is_view = True

    def forward(self, a, axes):
        self.inverse = tuple(np.argsort(axes))
        return self.backend.transpose(a, axes)

    def backward(self, grad):
        return self.backend.transpose(grad, self.inverse)

    def differentiable_backward(self, grad, output):
        return permute(grad, self.inverse)


class BroadcastToFunction(Function):
    # The engine sums the gradient back to the input's shape.
    output_is_view = True

    def forward(self, a, shape):
        return self.backend.broadcast_to(a, shape)

    def backward(self, grad):
        return grad

    def differentiable_backward(self, grad, output):
        return grad


class GetItemFunction(Function):
    def forward(self, a, index):
        self.input_shape, self.index, self.dtype = a.shape, index, a.dtype
        # Ints, slices, None and ... select a view; an index array gathers a copy.
        self.output_is_view = all(part is None or part is Ellipsis or
                                  isinstance(part, (int, slice)) for part in index)
        self.gradient_is_slice = self.output_is_view
        return self.backend.getitem(a, index)

    def backward(self, grad):
        return self.backend.index_add(self.input_shape, self.index, grad, self.dtype)

    def differentiable_backward(self, grad, output):
        # The scatter-add into zeros, as an op: linear in grad, so recorded it differentiates.
        zeros = Tensor._wrap(grad.backend.zeros(self.input_shape, self.dtype), grad.device)
        return IndexPutFunction.apply(zeros, grad, index=self.index, accumulate=True)


class IndexPutFunction(Function):
    """``a`` with ``values`` written at ``index`` (or added there, with ``accumulate``).

    Written elements no longer depend on ``a``: its gradient is the output gradient with zeros
    at ``index`` (all of it with ``accumulate``). ``values`` receives the gradient at ``index``
    (the engine sums it over any broadcast of ``values``).
    """

    def forward(self, a, values, index, accumulate):
        be = self.backend
        self.index, self.accumulate = index, accumulate
        if accumulate:
            return be.add(a, be.index_add(a.shape, index, values, a.dtype))
        out = be.copy(a)
        be.setitem_(out, index, values)
        return out

    def backward(self, grad):
        be = self.backend
        grad_a = grad
        if self.needs_input_grad[0] and not self.accumulate:
            grad_a = be.copy(grad)
            be.setitem_(grad_a, self.index, 0)
        return grad_a, be.getitem(grad, self.index)

    def differentiable_backward(self, grad, output):
        grad_a = grad
        if self.needs_input_grad[0] and not self.accumulate:
            zero = Tensor._wrap(grad.backend.zeros((), grad.dtype), grad.device)
            grad_a = IndexPutFunction.apply(grad, zero, index=self.index, accumulate=False)
        return grad_a, GetItemFunction.apply(grad, index=self.index)


class FullLikeFunction(Function):
    # A constant: zero gradient (a real zero, so that y.zero_() after y = f(x) still lets
    # backward reach x, as in PyTorch).
    def forward(self, a, value):
        return self.backend.full(a.shape, value, a.dtype)

    def backward(self, grad):
        return composed.zeros_like(self.backend, grad)

    def differentiable_backward(self, grad, output):
        return Tensor._wrap(composed.zeros_like(grad.backend, grad.data), grad.device)


class ConcatenateFunction(Function):
    def forward(self, *arrays, axis):
        self.axis = axis
        self.bounds = np.cumsum([0] + [a.shape[axis] for a in arrays])
        return self.backend.concatenate(arrays, axis)

    def backward(self, grad):
        pieces = []
        for start, stop in zip(self.bounds[:-1], self.bounds[1:]):
            index = [slice(None)] * grad.ndim
            index[self.axis] = slice(int(start), int(stop))
            pieces.append(self.backend.getitem(grad, tuple(index)))
        return tuple(pieces)

    def differentiable_backward(self, grad, output):
        pieces = []
        for start, stop in zip(self.bounds[:-1], self.bounds[1:]):
            index = [slice(None)] * grad.ndim
            index[self.axis] = slice(int(start), int(stop))
            pieces.append(GetItemFunction.apply(grad, index=tuple(index)))
        return tuple(pieces)


class WhereFunction(Function):
    # The gradient follows the element that was picked: to a where the condition held, to b
    # elsewhere. The condition is an input too (so an export sees where it came from), but a
    # bool selector has no gradient: None for it.
    def forward(self, a, b, condition):
        self.condition = condition
        return self.backend.where(condition, a, b)

    def backward(self, grad):
        be = self.backend
        zero = grad.dtype.type(0)
        return be.where(self.condition, grad, zero), be.where(self.condition, zero, grad), None

    def differentiable_backward(self, grad, output):
        condition = self.parents[2]
        return where(condition, grad, 0.0), where(condition, 0.0, grad), None


class CastFunction(Function):
    def forward(self, a, dtype):
        self.input_dtype = a.dtype
        return self.backend.astype(a, dtype)

    def backward(self, grad):
        if self.input_dtype.kind != "f":
            return None
        return self.backend.astype(grad, self.input_dtype)

    def differentiable_backward(self, grad, output):
        if self.input_dtype.kind != "f":
            return None
        return cast(grad, self.input_dtype)


class CloneFunction(Function):
    def forward(self, a):
        return self.backend.copy(a)

    def backward(self, grad):
        return grad

    def differentiable_backward(self, grad, output):
        return grad


class ToDeviceFunction(Function):
    """Move data between devices through NumPy; the gradient travels back the same way."""

    @classmethod
    def apply(cls, a: Tensor, device: str):
        from ..autograd.grad_mode import is_grad_enabled
        from ..backend import get_backend
        node = cls()
        node.source, node.target = a.device, device
        data = get_backend(device).from_numpy(a.numpy())
        out = Tensor._wrap(data, device, a.requires_grad and is_grad_enabled())
        if out.requires_grad:
            node.backend = get_backend(device)
            node.parents, node.needs_input_grad = (a,), (True,)
            out._node = node
        return out

    def backward(self, grad):
        from ..backend import get_backend
        return get_backend(self.source).from_numpy(self.backend.to_numpy(grad))

    def differentiable_backward(self, grad, output):
        return to_device(grad, self.source)


# -- functional forms ----------------------------------------------------------------------------

def reshape(a: Tensor, *shape) -> Tensor:
    # Every flatten and view of a forward comes here: the sizes are checked with math.prod
    # (exact Python ints, ~20x cheaper than np.prod on a short shape) and without generators.
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = tuple(shape[0])
    shape = tuple(map(int, shape))
    old_shape = a.shape
    size = math.prod(old_shape)
    if -1 in shape:
        if shape.count(-1) > 1:
            raise ValueError(f"reshape: only one dimension can be -1, got {shape}")
        known = -math.prod(shape)  # the other sizes' product (times the one -1)
        if known <= 0 or size % known:
            raise ValueError(f"reshape: cannot reshape a tensor of shape {old_shape} into "
                             f"{shape}")
        shape = tuple([size // known if n == -1 else n for n in shape])
    if (shape and min(shape) < 0) or math.prod(shape) != size:
        raise ValueError(f"reshape: cannot reshape a tensor of shape {old_shape} into {shape}")
    if shape == old_shape:
        return a
    return ReshapeFunction.apply(a, shape=shape)


def flatten(a: Tensor, start_dim: int = 0, end_dim: int = -1) -> Tensor:
    shape = tuple(a.data.shape)  # a.shape, without its call (every Flatten layer's forward)
    if not shape:
        return reshape(a, (1,))
    start = normalize_axis("flatten", start_dim, len(shape))
    end = normalize_axis("flatten", end_dim, len(shape))
    if start > end:
        raise ValueError(f"flatten: start_dim {start_dim} comes after end_dim {end_dim}")
    # The merged shape holds the same elements by construction: reshape's checks are not needed.
    flat = shape[:start] + (math.prod(shape[start:end + 1]),) + shape[end + 1:]
    return a if flat == shape else ReshapeFunction.apply(a, shape=flat)


def permute(a: Tensor, *axes) -> Tensor:
    if len(axes) == 1 and isinstance(axes[0], (tuple, list)):
        axes = tuple(axes[0])
    if len(axes) != a.ndim:
        raise ValueError(f"permute: {len(axes)} axes given for a tensor of shape {a.shape}")
    axes = tuple(normalize_axis("permute", int(x), a.ndim) for x in axes)
    if sorted(axes) != list(range(a.ndim)):
        raise ValueError(f"permute: {axes} is not a permutation of the axes of shape {a.shape}")
    return PermuteFunction.apply(a, axes=axes)


def transpose(a: Tensor, dim0: int | None = None, dim1: int | None = None) -> Tensor:
    """Swap two axes (PyTorch); with no axes, reverse them all (NumPy's ``.T``)."""
    if dim0 is None and dim1 is None:
        return permute(a, tuple(reversed(range(a.ndim))))
    if dim0 is None or dim1 is None:
        raise ValueError("transpose: give both dim0 and dim1, or neither")
    axes = list(range(a.ndim))
    i, j = normalize_axis("transpose", dim0, a.ndim), normalize_axis("transpose", dim1, a.ndim)
    axes[i], axes[j] = axes[j], axes[i]
    return permute(a, axes)


def squeeze(a: Tensor, axis=None, *, dim=None) -> Tensor:
    """Drop ``axis`` (alias ``dim``) if it has size 1; with no axis, every size-1 axis."""
    axis = dim if dim is not None else axis
    if axis is None:
        return reshape(a, tuple(n for n in a.shape if n != 1))
    axis = normalize_axis("squeeze", axis, a.ndim)
    if a.shape[axis] != 1:
        return a
    return reshape(a, a.shape[:axis] + a.shape[axis + 1:])


def unsqueeze(a: Tensor, axis: int | None = None, *, dim: int | None = None) -> Tensor:
    """Insert a size-1 axis at position ``axis`` (alias ``dim``)."""
    axis = dim if dim is not None else axis
    if axis is None:
        raise TypeError("unsqueeze: missing the axis (dim) to insert")
    axis = normalize_axis("unsqueeze", axis, a.ndim + 1)
    return reshape(a, a.shape[:axis] + (1,) + a.shape[axis:])


def expand(a: Tensor, *shape) -> Tensor:
    """Broadcast to ``shape`` without copying (-1 keeps a dimension)."""
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = tuple(shape[0])
    offset = len(shape) - a.ndim
    if offset < 0:
        raise ValueError(f"expand: cannot expand shape {a.shape} to fewer dimensions {shape}")
    shape = tuple(a.shape[i - offset] if n == -1 else int(n) for i, n in enumerate(shape))
    if broadcast_shape("expand", a.shape, shape) != shape:
        raise ValueError(f"expand: shape {a.shape} cannot be expanded to {shape}")
    return BroadcastToFunction.apply(a, shape=shape)


def broadcast_to(a: Tensor, shape) -> Tensor:
    return expand(a, tuple(shape))


def _index_part(part, device, backend):
    """One part of an index as the backend's getitem takes it; arrays stay on (or go to) the
    tensor's device."""
    if isinstance(part, Tensor):
        if part.device != device:
            raise ValueError(f"getitem: index is on {part.device}, tensor on {device}")
        if part.dtype.kind not in "biu":
            raise TypeError(f"getitem: tensors used as indices must be integer or bool, "
                            f"got {part.dtype}")
        part = part.data
    elif isinstance(part, (list, np.ndarray)):
        host = np.asarray(part)
        if host.dtype.kind not in "biu":
            raise TypeError(f"getitem: arrays used as indices must be integer or bool, "
                            f"got {host.dtype}")
        part = backend.from_numpy(host)  # index data the caller gave on the host
    else:
        return (part,)
    if part.dtype == np.bool_:
        # Masks become integer arrays, which index_add can scatter into. How many elements a
        # mask selects decides the output's shape, so this waits for the device.
        return backend.nonzero(part)
    return (part,)


def _flat_index(a: Tensor, index) -> tuple:
    parts = index if isinstance(index, tuple) else (index,)
    flat = []
    for part in parts:
        flat.extend(_index_part(part, a.device, a.backend))
    return tuple(flat)


def _is_int_part(part) -> bool:
    return isinstance(part, (int, np.integer)) and not isinstance(part, bool)


def _is_array_part(part) -> bool:
    return not _is_int_part(part) and part is not None and part is not Ellipsis and \
        not isinstance(part, slice)


def _block_placement(index: tuple, ndim: int) -> tuple[int, int] | None:
    """Where PyTorch puts the dimensions of the index arrays when NumPy puts them elsewhere:
    ``(block, position)``, the block's number of dimensions and the output axis it starts
    at, or None when the two agree.

    Both libraries keep the block in place when the index arrays are adjacent, and move it to
    the front when something separates them. They differ on what an integer is: NumPy counts
    it as one more index array (a 0-d one), PyTorch selects with it first, as basic indexing.
    So in ``x[0, :, [1, 3]]`` NumPy sees two arrays apart and puts the block first (shape
    (2, 3) for x of shape (2, 3, 4)); PyTorch sees one array after a slice and keeps it there
    (shape (3, 2)).
    """
    is_int, is_array = _is_int_part, _is_array_part
    arrays = [i for i, part in enumerate(index) if is_array(part)]
    if not arrays or not any(is_int(part) for part in index) or \
            any(part is None for part in index):
        return None
    advanced = [i for i, part in enumerate(index) if is_array(part) or is_int(part)]
    if advanced[-1] - advanced[0] == len(advanced) - 1:
        return None  # adjacent for NumPy, so for PyTorch too, at the same place
    without_ints = [part for part in index if not is_int(part)]
    arrays = [i for i, part in enumerate(without_ints) if is_array(part)]
    if arrays[-1] - arrays[0] != len(arrays) - 1:
        return None  # apart for PyTorch too: both put the block first
    consumed = sum(part is not Ellipsis for part in index)
    position = sum(ndim - consumed if part is Ellipsis else 1
                   for part in without_ints[:arrays[0]])
    block = len(np.broadcast_shapes(*(tuple(part.shape) for part in index if is_array(part))))
    return block, position


def _block_order(placement, ndim: int) -> tuple[int, ...]:
    """The axes of NumPy's result in PyTorch's order: the leading block moved to its place."""
    block, position = placement
    return tuple(range(block, block + position)) + tuple(range(block)) + \
        tuple(range(block + position, ndim))


def getitem(a: Tensor, index) -> Tensor:
    flat = _flat_index(a, index)
    try:
        out = GetItemFunction.apply(a, index=flat)
    except IndexError as error:
        raise IndexError(f"getitem: {error} (tensor shape {a.shape})") from None
    placement = _block_placement(flat, a.ndim)
    return out if placement is None else permute(out, *_block_order(placement, out.ndim))


def index_put(a: Tensor, index, values, accumulate: bool = False) -> Tensor:
    """A copy of ``a`` with ``a[index] = values`` (``+=`` with ``accumulate``), differentiable
    in both; ``x[index] = values`` and ``x.index_put_`` are the in-place forms. ``index`` is
    anything ``a[index]`` accepts (a tuple of index tensors, as PyTorch's ``indices``, too)."""
    flat = _flat_index(a, index)
    if isinstance(values, Tensor) and values.dtype != a.dtype and \
            any(_is_array_part(part) for part in flat):
        # PyTorch casts values written through slices (a copy) but not through index arrays
        raise TypeError(f"index_put: values are {values.dtype} but the tensor is {a.dtype}; "
                        f"with index arrays the dtypes must match, as in PyTorch (cast the "
                        f"values with .to(dtype=...))")
    if a.dtype.kind in "iu" and isinstance(values, float) and not np.isfinite(values):
        raise ValueError(f"index_put: {values} cannot be converted to {a.dtype} without "
                         f"overflow, as PyTorch says (NumPy would write {np.iinfo(a.dtype).min})")
    values = as_tensor(values, like=a)
    if values.device != a.device:
        raise ValueError(f"index_put: values are on {values.device}, the tensor on {a.device}")
    if values.dtype != a.dtype:
        values = values.to(dtype=a.dtype)
    try:
        region = getitem(a.detach(), flat).shape
    except IndexError as error:
        raise IndexError(f"index_put: {error} (tensor shape {a.shape})") from None
    if broadcast_shape("index_put", region, values.shape) != tuple(region):
        raise ValueError(f"index_put: values of shape {values.shape} cannot be broadcast to the "
                         f"indexed shape {tuple(region)}")
    placement = _block_placement(flat, a.ndim)
    if placement is not None:  # values come in PyTorch's layout; NumPy's setitem wants its own
        order = _block_order(placement, len(region))
        values = permute(broadcast_to(values, region), *np.argsort(order).tolist())
    return IndexPutFunction.apply(a, values, index=flat, accumulate=bool(accumulate))


def full_like(a: Tensor, value) -> Tensor:
    """A tensor of ``a``'s shape and dtype filled with ``value``."""
    return FullLikeFunction.apply(a, value=value)


def cat(tensors, axis: int = 0, dim: int | None = None) -> Tensor:
    """Join tensors along an existing axis."""
    axis = dim if dim is not None else axis
    tensors = list(tensors)
    if not tensors:
        raise ValueError("cat: expected a non-empty sequence of tensors")
    first = tensors[0]
    axis = normalize_axis("cat", axis, first.ndim)
    for t in tensors[1:]:
        if t.ndim != first.ndim or any(n != m for i, (n, m) in enumerate(zip(t.shape, first.shape))
                                       if i != axis):
            raise ValueError(f"cat: shapes {[x.shape for x in tensors]} differ outside axis {axis}")
    if any(t.dtype != first.dtype for t in tensors):
        # PyTorch promotes mixed dtypes (int64 with float32 is float32); each input's gradient
        # comes back through its cast, in its own dtype.
        tensors = promote_operands(*tensors)
    return ConcatenateFunction.apply(*tensors, axis=axis)


def stack(tensors, axis: int = 0, dim: int | None = None) -> Tensor:
    """Join same-shaped tensors along a new axis."""
    axis = dim if dim is not None else axis
    tensors = list(tensors)
    if not tensors:
        raise ValueError("stack: expected a non-empty sequence of tensors")
    shapes = {t.shape for t in tensors}
    if len(shapes) != 1:
        raise ValueError(f"stack: all tensors must have the same shape, got {sorted(shapes)}")
    axis = normalize_axis("stack", axis, tensors[0].ndim + 1)
    return cat([unsqueeze(t, axis) for t in tensors], axis=axis)


def where(condition, a, b) -> Tensor:
    """Elements of ``a`` where ``condition`` is true, else of ``b``."""
    like = a if isinstance(a, Tensor) else b if isinstance(b, Tensor) else None
    if like is None:
        raise TypeError("where: at least one of a and b must be a Tensor")
    a, b = promote_operands(a, b)  # PyTorch's promotion: where(c, float32, int64) is float32
    if not isinstance(condition, Tensor):
        condition = Tensor(np.asarray(condition), device=like.device)
    if condition.dtype != np.bool_:
        raise TypeError(f"where: condition must be a bool tensor, got {condition.dtype}")
    broadcast_shape("where", condition.shape, a.shape, b.shape)
    return WhereFunction.apply(a, b, condition)


def cast(a: Tensor, dtype) -> Tensor:
    return CastFunction.apply(a, dtype=np.dtype(dtype))


def clone(a: Tensor) -> Tensor:
    return CloneFunction.apply(a)


def to_device(a: Tensor, device: str) -> Tensor:
    # get_backend raises a clear error for a missing device
    return ToDeviceFunction.apply(a, device)
