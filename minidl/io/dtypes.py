"""The closed list of element types a minidl file may contain.

Only fixed-size numeric and boolean types are allowed: an array of them is plain bytes,
so loading one can never run code (object arrays would need pickle) and its size is
always shape x itemsize.  Names are NumPy's canonical names; on disk every type is
little-endian.
"""

from __future__ import annotations

import numpy as np

ALLOWED_DTYPES: dict[str, np.dtype] = {
    name: np.dtype(name).newbyteorder("<")
    for name in ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
                 "uint64", "float16", "float32", "float64")
}


_NAME_OF = {dtype: name for name, dtype in ALLOWED_DTYPES.items()}


def dtype_name(dtype: np.dtype) -> str:
    """The on-disk name of a NumPy dtype, or TypeError if it is not allowed."""
    dtype = np.dtype(dtype)
    known = _NAME_OF.get(dtype)  # fast path (``dtype.name`` is slow): files with many tensors
    if known is not None:
        return known
    name = dtype.name if dtype.fields is None and dtype.subdtype is None else None
    if name not in ALLOWED_DTYPES or dtype.kind not in "biuf":
        raise TypeError(f"dtype {dtype!r} cannot be stored; allowed: {', '.join(ALLOWED_DTYPES)}")
    return name


def dtype_from_name(name) -> np.dtype | None:
    """The little-endian dtype for an on-disk name, or None when the name is not allowed."""
    if not isinstance(name, str):
        return None
    return ALLOWED_DTYPES.get(name)
