"""Which reader a model file goes to: minidl's own, or the ONNX importer.

The decision is made from the file's first bytes, never from its name alone, so a renamed
file still loads, and the ONNX package is imported only when an ONNX file is met (``import
minidl`` stays light).
"""

from __future__ import annotations

from ..io import layout
from ..io.errors import CheckpointError, CorruptFileError, ModelSpecError
from ..io.reader import open_regular_file

ONNX_SUFFIX = ".onnx"


def file_format(path: str) -> str:
    """``"minidl"`` or ``"onnx"``, decided by the file's first bytes.

    A minidl file starts with its magic; one whose magic is damaged in a single byte is still
    a (damaged) minidl file, and the minidl reader says so.  An ONNX model is a protobuf
    whose first field is ir_version (field 1, varint): tag byte 0x08.  The ``.onnx``
    extension only decides for files that are neither.
    """
    with open_regular_file(path) as file:
        try:
            start = file.read(len(layout.MAGIC))
        except OSError as exc:
            raise CheckpointError(path, f"cannot read: {exc.strerror or exc}") from None
    matching = sum(a == b for a, b in zip(start, layout.MAGIC))
    if len(start) == len(layout.MAGIC) and matching >= len(layout.MAGIC) - 1:
        return "minidl"
    if start[:1] == b"\x08" or path.lower().endswith(ONNX_SUFFIX):
        return "onnx"
    return "minidl"  # the reader explains what is wrong with it


def import_onnx_model(path: str):
    """The ONNX importer's module for ``path``, with every failure reported as a
    ``CheckpointError`` naming the file."""
    try:
        from ..onnx import import_model
    except ImportError as exc:
        raise CheckpointError(path, f"cannot import ONNX models: {exc}") from None
    try:
        return import_model(path)
    except CheckpointError:
        raise
    except (MemoryError, RecursionError) as exc:
        raise CorruptFileError(path, f"ONNX model is too large or too deeply nested to "
                                     f"import ({type(exc).__name__})") from None
    except Exception as exc:  # a bad protobuf, an unsupported operator, unsafe external data
        raise ModelSpecError(path, f"cannot import the ONNX model: {type(exc).__name__}: "
                                   f"{exc}") from exc
