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
from minidl.io.reader import read_contents
from minidl.io.writer import write_file

ONNX_SUFFIX = ".onnx"


MODEL_SUFFIX = ".mdl"


def save_model(model, path, *, key: bytes | None = None, durable: bool = True) -> str:
    """Save ``model``'s topology and its ``state_dict()`` (weights and buffers) to ``path``;
    ``.mdl`` is added when the name has no suffix.  Returns the path written."""
    from minidl.nn.spec import module_to_spec

    path = os.fspath(path)
    if not os.path.splitext(path)[1]:
        path += MODEL_SUFFIX
    spec = module_to_spec(model)
    state = model.state_dict()
    write_file(path, {"spec": spec}, dict(state), kind="model", key=key, durable=durable)
    return path


def model_contents(path, metadata: dict, tensors: dict) -> dict:
    """The validated ``{"spec", "state_dict"}`` of a model file's header and tensors."""
    spec = metadata.get("spec")
    if not isinstance(spec, dict):
        raise CorruptFileError(path, "model file has no topology ('spec' map) in its metadata")
    return {"spec": spec, "state_dict": dict(tensors)}


def _looks_like_onnx(path: str) -> bool:
    if path.lower().endswith(ONNX_SUFFIX):
        return True
    try:
        with open(path, "rb") as file:
            start = file.read(8)
    except OSError:
        return False
    # An ONNX model is a protobuf whose first field is ir_version (field 1, varint):
    # tag byte 0x08.  minidl files start with their own magic instead.
    return start[:1] == b"\x08"


def load_model(path, *, key: bytes | None = None, mmap: bool = False,
               verify: bool | None = None):
    """Rebuild a module from a model file alone (``.onnx`` files go to the ONNX importer).

    The module is returned in eval mode.  Every problem with a minidl file, including a
    layer type that is not registered or arguments it rejects, raises a
    ``CheckpointError`` naming the file.
    """
    path = os.fspath(path)
    if _looks_like_onnx(path):
        from minidl.onnx import import_model

        return import_model(path)
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
