"""NumPy dtypes and the integer codes ONNX uses for them (``TensorProto.DataType``).

The codes are fixed by the ONNX standard, so they are written out here rather than read from the
``onnx`` package: the importer's runtime half (the graph interpreter) then works without it.
"""

from __future__ import annotations

import numpy as np

ONNX_CODE_OF_DTYPE = {
    np.dtype(np.float32): 1, np.dtype(np.uint8): 2, np.dtype(np.int8): 3,
    np.dtype(np.uint16): 4, np.dtype(np.int16): 5, np.dtype(np.int32): 6,
    np.dtype(np.int64): 7, np.dtype(np.bool_): 9, np.dtype(np.float16): 10,
    np.dtype(np.float64): 11, np.dtype(np.uint32): 12, np.dtype(np.uint64): 13,
}
DTYPE_OF_ONNX_CODE = {code: dtype for dtype, code in ONNX_CODE_OF_DTYPE.items()}


def onnx_code(dtype) -> int:
    """The ONNX element-type code of a NumPy dtype (ValueError for types ONNX cannot hold here)."""
    try:
        return ONNX_CODE_OF_DTYPE[np.dtype(dtype)]
    except KeyError:
        raise ValueError(f"dtype {np.dtype(dtype)} has no ONNX equivalent supported by minidl") \
            from None


def numpy_dtype(code: int) -> np.dtype:
    """The NumPy dtype of an ONNX element-type code."""
    try:
        return DTYPE_OF_ONNX_CODE[int(code)]
    except KeyError:
        raise ValueError(f"ONNX element type {code} is not supported by minidl") from None
