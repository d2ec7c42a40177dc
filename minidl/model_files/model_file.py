"""``save_model`` and ``load_model``: a module's topology and weights, rebuilt from data.

The topology is stored as plain data (``minidl.nn.spec.module_to_spec``): layer type
names, constructor arguments, children.  Loading hands that data to
``module_from_spec``, which looks each type name up in a closed registry of layer
classes; nothing the file names is ever imported or called.  A user's own layer loads
only once the user's code has registered it (``minidl.nn.register_module``).

File shape: kind ``"model"``, ``metadata = {"spec": <spec>}``, and one tensor per
``state_dict()`` entry, named by its key, in ``state_dict`` order.  That shape is read here
and nowhere else: ``load_model`` builds the module from it (and puts it on ``device=``),
``model_contents`` gives it as plain data for ``minidl.load``.
"""

from __future__ import annotations

import os

from .. import random as md_random
from ..io.errors import CorruptFileError, ModelSpecError, WrongKindError
from ..io.reader import read_contents
from ..io.writer import write_file
from .routing import file_format, import_onnx_model
from ..nn import init
from ..nn.spec import module_from_spec, module_to_spec
from ..placement import check_device

MODEL_SUFFIX = ".mdl"
MODEL_KIND = "model"
"""The header ``kind`` of a model file (SPEC section 6)."""


def save_model(model, path, *, key: bytes | None = None, durable: bool = True) -> str:
    """Save ``model``'s topology and its ``state_dict()`` (weights and buffers) to ``path``;
    ``.mdl`` is added when the name has no suffix.  Returns the path written.

    An ``.onnx`` name is refused with the call that writes ONNX (which needs an example
    input to trace), and so is a directory: the file would otherwise be a minidl file under
    a name every ONNX tool rejects, or appear beside the directory under another name.
    """
    path = os.fspath(path)
    if path.lower().endswith(".onnx"):
        raise ValueError(f"save_model writes minidl model files, not ONNX; to write {path} "
                         f"use md.export_onnx(model, {path!r}, example_input) (ONNX is traced "
                         f"on an example input, e.g. md.tensor(np.zeros((1, 3), np.float32)))")
    if os.path.isdir(path):
        raise IsADirectoryError(f"{path}: is a directory; save_model needs a file name, e.g. "
                                f"{os.path.join(path, 'model' + MODEL_SUFFIX)}")
    if not os.path.splitext(path)[1]:
        path += MODEL_SUFFIX
    spec = module_to_spec(model)
    state = model.state_dict()
    write_file(path, {"spec": spec}, dict(state), kind=MODEL_KIND, key=key, durable=durable)
    return path


def load_model(path, *, device=None, key: bytes | None = None, mmap: bool = False,
               verify: bool | None = None):
    """Rebuild a module from a model file alone (ONNX models go to the ONNX importer), with
    its parameters and buffers on ``device`` (``"cuda:0"``, ``md.device("cuda")``; default
    the CPU, where the file's arrays are read).

    The file is trusted only as far as it was checked, in this order: the header; the
    topology, built from the closed registry with placeholders instead of weights (no
    memory, no random initialisation, the global RNG untouched); every parameter and buffer
    the topology implies against the file's tensor index (names, shapes, dtypes); only then
    are the tensors read, every checksum verified -- a model is always verified, so
    ``verify=False`` is refused -- and used as the module's weights without another copy.
    ``mmap=True`` maps them copy-on-write.  The module is returned in eval mode.  Every
    problem with the file raises a ``CheckpointError`` naming it; the device is checked
    before the file is opened.
    """
    if verify is not True and verify is not None:
        raise ValueError("load_model always verifies the file: a model's weights are trusted "
                         "as a model; use minidl.load(path, verify=False) to read raw arrays")
    device = None if device is None else check_device(device)
    path = os.fspath(path)
    module = _read_module(path, key=key, mmap=mmap)
    if device not in (None, "cpu") and callable(getattr(module, "to", None)):
        module.to(device)
    return module


def _read_module(path: str, *, key, mmap: bool):
    """The module a minidl or ONNX model file describes, in eval mode, on the CPU."""
    if file_format(path) == "onnx":
        return import_onnx_model(path)
    rng_state = md_random.get_rng_state()
    try:
        built = {}
        _, tensors = read_contents(path, mmap=mmap, verify=True, key=key, writable=True,
                                   before_data=lambda info: built.update(
                                       module=_build_for(path, info)))
        module = built["module"]
        try:
            module.load_state_dict(tensors, strict=True, assign=True)
        except Exception as exc:  # checked against the index already: only a bug gets here
            raise ModelSpecError(path, f"weights do not fit the topology: "
                                       f"{type(exc).__name__}: {exc}") from None
    finally:
        # Building draws nothing under skip_init, but a user's registered layer might:
        # loading a model must never shift the random stream of the program around it.
        md_random.set_rng_state(rng_state)
    if callable(getattr(module, "eval", None)):
        module.eval()
    return module


def _build_for(path: str, info):
    """The module a model file's header describes, with placeholder weights, after checking
    that its index holds exactly the tensors the module needs (nothing read yet)."""
    if info.kind == "checkpoint":
        raise WrongKindError(path, "holds a training checkpoint, not a model: "
                                   "md.training.model_from_checkpoint(path) rebuilds the model "
                                   "of a checkpoint written by fit, md.load(path) reads its raw "
                                   "state")
    if info.kind != MODEL_KIND:
        raise WrongKindError(path, f"holds a {info.kind!r} file, not a model (use minidl.load)")
    spec = spec_of(path, info.metadata)
    try:
        with init.skip_init():
            module = module_from_spec(spec)
    except Exception as exc:  # unknown type, bad args, or a user layer's own complaint
        raise ModelSpecError(path, f"cannot rebuild the model's topology: "
                                   f"{type(exc).__name__}: {exc}") from None
    check_index_fits(path, module.state_dict(), info.entries)
    return module


def spec_of(path, metadata: dict) -> dict:
    """The topology a model file's metadata carries (SPEC section 6: ``{"spec": S}``), as
    plain data; what it means is ``module_from_spec``'s business."""
    spec = metadata.get("spec")
    if not isinstance(spec, dict):
        raise CorruptFileError(path, "model file has no topology ('spec' map) in its metadata")
    return spec


def model_contents(path, metadata: dict, tensors: dict) -> dict:
    """The plain contents of a model file, ``{"spec": ..., "state_dict": {name: array}}``:
    what ``minidl.load`` returns for one (no module is built)."""
    return {"spec": spec_of(path, metadata), "state_dict": dict(tensors)}


def check_index_fits(path, state: dict, entries) -> None:
    """Refuse a file whose tensor index is not exactly ``state``'s names, shapes and dtypes."""
    indexed = {entry.name: entry for entry in entries}
    missing = [name for name in state if name not in indexed]
    unexpected = [name for name in indexed if name not in state]
    problems = []
    if missing:
        problems.append(f"missing {', '.join(map(repr, missing[:10]))}")
    if unexpected:
        problems.append(f"unexpected {', '.join(map(repr, unexpected[:10]))}")
    for name, array in state.items():
        entry = indexed.get(name)
        if entry is not None and (entry.shape != array.shape or entry.dtype != array.dtype):
            problems.append(f"{name!r}: {entry.dtype.name}{list(entry.shape)} in the file, "
                            f"{array.dtype.name}{list(array.shape)} in the topology")
    if problems:
        raise ModelSpecError(path, "the tensors do not fit the topology: "
                                   + "; ".join(problems[:10]))
