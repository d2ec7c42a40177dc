"""Small helpers shared by the ops: argument checking with errors that name the op."""

from __future__ import annotations

import numpy as np

from ..autograd.tensor import Tensor, as_tensor


def _is_scalar(value) -> bool:
    """A Python or NumPy number (PyTorch's "wrapped number"), as opposed to a tensor."""
    return not isinstance(value, Tensor) and np.ndim(value) == 0 and \
        np.asarray(value).dtype.kind in "biuf"


def _promote_pair(a: np.dtype, b: np.dtype) -> np.dtype:
    """PyTorch's promote_types on bool/integer/float dtypes: a float beats any integer or bool
    (int64 with float32 is float32, where NumPy widens to float64); otherwise the larger."""
    if a == b:
        return a
    if (a.kind == "f") != (b.kind == "f"):
        return a if a.kind == "f" else b
    return np.promote_types(a, b)


def _category(dtype) -> int:
    return {"b": 0, "i": 1, "u": 1, "f": 2}[dtype.kind]


def result_dtype(*operands) -> np.dtype:
    """The dtype PyTorch gives an op on ``operands`` (tensors and numbers).

    Three tiers, highest first: tensors with dimensions, 0-d tensors, numbers. A lower tier
    only counts if it is of a higher category (bool < integer < float) than everything above
    it, so ``float32 tensor + float64 0-d tensor`` stays float32 and ``int tensor * 2.5`` is
    float32 (a Python float counts as the default float dtype, float32).
    """
    tiers = [None, None, None]
    for value in operands:
        if value is None:
            continue
        if isinstance(value, Tensor):
            tier, dtype = (0 if value.ndim else 1), value.dtype
        elif _is_scalar(value):
            kind = np.asarray(value).dtype.kind
            tier, dtype = 2, {"b": np.dtype(np.bool_), "f": np.dtype(np.float32)}.get(
                kind, np.dtype(np.int64))
        else:  # host data (lists, arrays): the dtype md.tensor would give it
            tier, dtype = 0, _host_dtype(value)
        tiers[tier] = dtype if tiers[tier] is None else _promote_pair(tiers[tier], dtype)
    result = None
    for dtype in tiers:
        if dtype is None:
            continue
        if result is None or _category(dtype) > _category(result):
            result = dtype if result is None else _promote_pair(result, dtype)
    return result


def _host_dtype(value) -> np.dtype:
    array = np.asarray(value)
    if isinstance(value, (np.ndarray, np.generic)) or array.dtype.kind not in "iuf":
        return array.dtype
    return np.dtype(np.float32) if array.dtype.kind == "f" else np.dtype(np.int64)


def _scalar_tensor(value, dtype, like: Tensor) -> Tensor:
    """A number as a 0-d tensor on ``like``'s device, filled there: the value travels as a
    kernel argument, with no host-to-device copy (the 2 in ``x * 2``)."""
    return Tensor._wrap(like.backend.full((), number_as(value, dtype), dtype), like.device)


def number_as(value, dtype: np.dtype):
    """A Python or NumPy number as a value of ``dtype``. PyTorch wraps an integer into an
    unsigned dtype's range (uint8 + -3 adds 253, which is -3 modulo 256); a signed dtype it
    does not fit raises OverflowError, as in PyTorch."""
    value = value.item() if isinstance(value, np.generic) else value
    if dtype.kind == "u" and isinstance(value, int) and not 0 <= value <= np.iinfo(dtype).max:
        value %= np.iinfo(dtype).max + 1
    return dtype.type(value)


def promote_operands(*operands, device=None) -> list:
    """``operands`` (tensors, numbers, arrays; None kept) as Tensors of their common PyTorch
    dtype (see :func:`result_dtype`) on the tensors' device."""
    dtype = result_dtype(*operands)
    like = next(o for o in operands if isinstance(o, Tensor))
    device = like.device if device is None else device
    out = []
    for value in operands:
        if value is None:
            out.append(None)
        elif isinstance(value, Tensor):
            out.append(value if value.dtype == dtype else value.to(dtype=dtype))
        elif _is_scalar(value):
            out.append(_scalar_tensor(value, dtype, like))
        else:
            out.append(Tensor(np.asarray(value), dtype=dtype, device=device))
    return out


def binary_operands(op: str, a, b) -> tuple[Tensor, Tensor]:
    """Turn the operands of a binary op into Tensors of their common dtype (PyTorch's
    promotion rules, :func:`result_dtype`) and check that their shapes broadcast."""
    a_tensor, b_tensor = isinstance(a, Tensor), isinstance(b, Tensor)
    if not a_tensor and not b_tensor:
        raise TypeError(f"{op}: expected at least one Tensor operand")
    # Fast paths for the common cases (same dtypes; a tensor and a number that does not raise
    # its category), which every small op of a training step takes. The arrays' dtype and shape
    # are read directly (what Tensor.dtype and Tensor.shape return): calls saved per op.
    if a_tensor and b_tensor and a.data.dtype == b.data.dtype:
        pass
    elif a_tensor and type(b) in _NUMBER_CATEGORY and _NUMBER_CATEGORY[type(b)] <= _category(
            a.dtype):
        return a, _scalar_tensor(b, a.dtype, a)  # 0-d: broadcasts against any shape
    elif b_tensor and type(a) in _NUMBER_CATEGORY and _NUMBER_CATEGORY[type(a)] <= _category(
            b.dtype):
        return _scalar_tensor(a, b.dtype, b), b
    else:
        a, b = promote_operands(a, b)
    if a.data.shape != b.data.shape:
        broadcast_shape(op, a.shape, b.shape)
    return a, b


_NUMBER_CATEGORY = {bool: 0, int: 1, float: 2}


def broadcast_shape(op: str, *shapes) -> tuple:
    """The shape the operands broadcast to, or a ValueError naming the op and the shapes."""
    try:
        return tuple(np.broadcast_shapes(*shapes))
    except ValueError:
        listed = " and ".join(str(tuple(s)) for s in shapes)
        raise ValueError(f"{op}: shapes {listed} cannot be broadcast together") from None


def normalize_axis(op: str, axis: int, ndim: int) -> int:
    """A possibly negative axis as a non-negative one, or a ValueError naming the op."""
    if type(axis) is int and -ndim <= axis < ndim:  # the usual case, in one test (not a bool)
        return axis % ndim
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


def refuse_bool(op: str, *operands) -> None:
    """PyTorch refuses some arithmetic on bools (``-``, ``abs``, ``**`` of two bools, ...)
    rather than give it an integer meaning; so does minidl, naming the op."""
    for value in operands:
        dtype = value.data.dtype if isinstance(value, Tensor) else np.asarray(value).dtype
        if dtype == np.bool_:
            raise TypeError(f"{op}: not defined for bool operands, as in PyTorch (use the "
                            f"logical ops, or cast to an integer dtype first)")


def require_float(op: str, tensor: Tensor, what: str = "input") -> None:
    if tensor.dtype.kind != "f":
        raise TypeError(f"{op}: {what} must be a floating point tensor, got {tensor.dtype}")


def check_bias_and_dtype(op: str, x: Tensor, weight: Tensor, bias: Tensor | None) -> None:
    """The checks every affine op (linear, conv2d) shares: a bias of one value per output and
    an input of the weight's dtype."""
    # The arrays' shapes and dtypes, read directly (what Tensor.shape and Tensor.dtype return,
    # without their call): every convolution and linear layer passes here.
    weight_data = weight.data
    if bias is not None and tuple(bias.data.shape) != (weight_data.shape[0],):
        raise ValueError(f"{op}: bias has shape {bias.shape}, expected ({weight.shape[0]},)")
    if x.data.dtype != weight_data.dtype:
        raise TypeError(f"{op}: input is {x.dtype} but weight is {weight.dtype}")
