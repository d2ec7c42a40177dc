"""Small helpers shared by the ops: argument checking with errors that name the op."""

from __future__ import annotations

from ..autograd.tensor import Tensor, as_tensor


def binary_operands(op: str, a, b) -> tuple[Tensor, Tensor]:
    """Turn the operands of a binary op into Tensors and check that their shapes broadcast.

    Python scalars take the tensor operand's dtype, so ``x * 2`` stays float32.
    """
    if not isinstance(a, Tensor) and not isinstance(b, Tensor):
        raise TypeError(f"{op}: expected at least one Tensor operand")
    if not isinstance(a, Tensor):
        a = as_tensor(a, like=b)
    if not isinstance(b, Tensor):
        b = as_tensor(b, like=a)
    broadcast_shape(op, a.shape, b.shape)
    # PyTorch's promotion: a float tensor meeting an integer (or bool) tensor keeps its float
    # dtype, where NumPy would widen int64 with float32 to float64.
    a_float, b_float = a.dtype.kind == "f", b.dtype.kind == "f"
    if a_float and not b_float:
        b = b.to(dtype=a.dtype)
    elif b_float and not a_float:
        a = a.to(dtype=b.dtype)
    return a, b


def broadcast_shape(op: str, *shapes) -> tuple:
    """The shape the operands broadcast to, or a ValueError naming the op and the shapes."""
    import numpy as np
    try:
        return tuple(np.broadcast_shapes(*shapes))
    except ValueError:
        listed = " and ".join(str(tuple(s)) for s in shapes)
        raise ValueError(f"{op}: shapes {listed} cannot be broadcast together") from None


def normalize_axis(op: str, axis: int, ndim: int) -> int:
    """A possibly negative axis as a non-negative one, or a ValueError naming the op."""
    if not isinstance(axis, int) or isinstance(axis, bool):
        raise TypeError(f"{op}: axis must be an int, got {axis!r}")
    if not -max(ndim, 1) <= axis < max(ndim, 1):
        raise ValueError(f"{op}: axis {axis} is out of range for a tensor with {ndim} dimensions")
    return axis % max(ndim, 1)


def normalize_axes(op: str, axis, ndim: int) -> tuple | None:
    """``axis`` (None, an int or a sequence of ints) as a sorted tuple of non-negative axes."""
    if axis is None:
        return None
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    normalized = tuple(sorted(normalize_axis(op, a, ndim) for a in axes))
    if len(set(normalized)) != len(normalized):
        raise ValueError(f"{op}: repeated axis in {axis!r}")
    # A 0-d tensor has no axes; PyTorch accepts axis 0/-1 on it and reduces over "everything".
    return None if ndim == 0 else normalized


def require_float(op: str, tensor: Tensor, what: str = "input") -> None:
    if tensor.dtype.kind != "f":
        raise TypeError(f"{op}: {what} must be a floating point tensor, got {tensor.dtype}")


def check_bias_and_dtype(op: str, x: Tensor, weight: Tensor, bias: Tensor | None) -> None:
    """The checks every affine op (linear, conv2d) shares: a bias of one value per output and
    an input of the weight's dtype."""
    if bias is not None and bias.shape != (weight.shape[0],):
        raise ValueError(f"{op}: bias has shape {bias.shape}, expected ({weight.shape[0]},)")
    if x.dtype != weight.dtype:
        raise TypeError(f"{op}: input is {x.dtype} but weight is {weight.dtype}")
