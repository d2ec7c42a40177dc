"""``save_model`` and ``load_model``: a module's topology and weights, rebuilt from data.

The topology is stored as plain data (``minidl.nn.spec.module_to_spec``): layer type
names, constructor arguments, children.  Loading hands that data to
``module_from_spec``, which looks each type name up in a closed registry of layer
classes; nothing the file names is ever imported or called.  A user's own layer loads
only once the user's code has registered it (``minidl.nn.register_module``).

File shape: kind ``"model"``, ``metadata = {"spec": <spec>}``, and one tensor per
``state_dict()`` entry, named by its key, in ``state_dict`` order.
"""

from __future__ import annotations

import os

from minidl.io.errors import (
    CheckpointError, CorruptFileError, ModelSpecError, WrongKindError)
from minidl.io import layout
from minidl.io.reader import open_regular_file, read_contents
from minidl.io.writer import write_file

ONNX_SUFFIX = ".onnx"


def save_model(model, path, *, key: bytes | None = None, durable: bool = True) -> None:
    """Save ``model``'s topology and its ``state_dict()`` (weights and buffers) to ``path``."""
    from minidl.nn.spec import module_to_spec

    spec = module_to_spec(model)
    state = model.state_dict()
    write_file(path, {"spec": spec}, dict(state), kind="model", key=key, durable=durable)


def model_contents(path, metadata: dict, tensors: dict) -> dict:
    """The validated ``{"spec", "state_dict"}`` of a model file's header and tensors."""
    spec = metadata.get("spec")
    if not isinstance(spec, dict):
        raise CorruptFileError(path, "model file has no topology ('spec' map) in its metadata")
    return {"spec": spec, "state_dict": dict(tensors)}


def _file_format(path: str) -> str:
    """``"minidl"`` or ``"onnx"``, decided by the file's first bytes, never by its name alone.

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


def _import_onnx(path: str):
    """The ONNX importer, with every failure reported as a ``CheckpointError``."""
    try:
        from minidl.onnx import import_model
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


def load_model(path, *, key: bytes | None = None, mmap: bool = False,
               verify: bool | None = None):
    """Rebuild a module from a model file alone (``.onnx`` files go to the ONNX importer).

    The module is returned in eval mode.  Every problem with a minidl file, including a
    layer type that is not registered or arguments it rejects, raises a
    ``CheckpointError`` naming the file.
    """
    path = os.fspath(path)
    if _file_format(path) == "onnx":
        return _import_onnx(path)
    info, tensors = read_contents(path, mmap=mmap, verify=verify, key=key)
    if info.kind != "model":
        raise WrongKindError(path, f"holds a {info.kind!r} file, not a model (use minidl.load)")
    contents = model_contents(path, info.metadata, tensors)
    try:
        from minidl.nn.spec import module_from_spec
    except ImportError as exc:
        raise CheckpointError(path, f"cannot rebuild models: {exc}") from None
    try:
        module = module_from_spec(contents["spec"])
    except Exception as exc:  # unknown type, bad args, or a user layer's own complaint
        raise ModelSpecError(path, f"cannot rebuild the model's topology: "
                                   f"{type(exc).__name__}: {exc}") from None
    try:
        module.load_state_dict(contents["state_dict"], strict=True)
    except Exception as exc:
        raise ModelSpecError(path, f"weights do not fit the topology: "
                                   f"{type(exc).__name__}: {exc}") from None
    if callable(getattr(module, "eval", None)):
        module.eval()
    return module
