"""The model inside a ``fit`` checkpoint, rebuilt from the file alone.

A training checkpoint holds the model's weights (``objects/model``) but a weight list alone
cannot be run: the layers that use it are code. ``fit`` therefore also stores the model's
topology -- the same plain-data description a model file holds (:mod:`minidl.nn.spec`) -- under
``metadata/model_spec`` when the model can be described (every layer registered). With it,
:func:`model_from_checkpoint` rebuilds the model like ``md.load_model`` rebuilds a model file,
and ``minidl export-onnx`` accepts a checkpoint in place of a model file.
"""

from __future__ import annotations

import os


def describe_model(model) -> dict | None:
    """The model's topology as plain data, or None when some layer is not registered.

    A data-parallel wrapper is described by the model it wraps: the rebuilt model is the
    plain one, and its weights, saved as ``module.<name>``, load into it all the same.
    """
    from ..nn.parallel import DistributedDataParallel
    from ..nn.spec import module_to_spec
    if isinstance(model, DistributedDataParallel):
        model = model.module
    try:
        return module_to_spec(model)
    except (TypeError, ValueError):
        return None


def model_from_checkpoint(path, *, key: bytes | None = None):
    """The model of a ``fit`` checkpoint (topology and weights), in eval mode.

    Raises ``CheckpointError`` naming the file when it is not a checkpoint, or holds no
    topology (a checkpoint of your own loop, or a model with unregistered layers: rebuild the
    model in Python and load ``md.load(path)["objects"]["model"]`` into it).
    """
    from ..io import CheckpointError
    from ..io.errors import ModelSpecError
    from ..model_files import load  # md.load: any kind of file, a model file included
    from ..nn.spec import module_from_spec

    path = os.fspath(path)
    contents = load(path, key=key)
    if not (isinstance(contents, dict) and "objects" in contents):
        raise CheckpointError(path, "is not a training checkpoint")
    spec = (contents.get("metadata") or {}).get("model_spec")
    weights = contents["objects"].get("model")
    if not isinstance(spec, dict) or not isinstance(weights, dict):
        raise CheckpointError(path, "holds no model topology ('metadata/model_spec', written by "
                                    "fit): rebuild the model in Python and load "
                                    "md.load(path)['objects']['model'] into it")
    try:
        model = module_from_spec(spec)
        model.load_state_dict(weights, strict=True)
    except Exception as exc:  # unknown type, bad arguments, weights that do not fit
        raise ModelSpecError(path, f"cannot rebuild the model: {type(exc).__name__}: {exc}") \
            from None
    model.eval()
    return model
