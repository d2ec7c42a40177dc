"""``import_model``: read an ONNX file into an :class:`OnnxGraphModule`.

The file is parsed, its external-data references are checked and read (see
:mod:`.external_data`), and the model is validated: the full ONNX checker with shape inference
(so every node has the inputs and attributes its schema requires and every value one
definition), a conversion to opset 13 by ``onnx.version_converter`` for older files, then the
checker again. The graph is then turned into plain data: nodes with their attributes as Python
values, ``Constant`` nodes folded into stored tensors, initializers into parameters (float
arrays read by ordinary inputs: the weights) or buffers (everything else: ``Constant`` values,
scalars, a Reshape's target shape, batch norm's running statistics). Every op type is checked
before anything is built, and all the unsupported ones are reported together.
"""

from __future__ import annotations

import contextlib
import os
import re

import numpy as np

from ..nn.init import skip_init

from .errors import UnsupportedOperatorError
from .external_data import embed_external_arrays
from .graph_module import OnnxGraphModule
from .interpreter import ONNX_OPS
from .registry import DEFAULT_MAX_TENSOR_BYTES

# From 13 on, Reshape/Slice/Unsqueeze/ReduceSum take shapes as inputs; older graphs are first
# rewritten to 13 by onnx.version_converter.
MIN_IMPORT_OPSET = 13

# (op_type, input position) that hold constants describing shapes, statistics or settings:
# initializers read only there are buffers, not trainable weights.
_NON_TRAINABLE_INPUTS = {
    ("BatchNormalization", 3), ("BatchNormalization", 4), ("Reshape", 1), ("Expand", 1),
    ("Slice", 1), ("Slice", 2), ("Slice", 3), ("Slice", 4), ("Unsqueeze", 1), ("Squeeze", 1),
    ("ReduceSum", 1), ("ReduceMean", 1), ("ReduceMax", 1), ("ReduceMin", 1), ("Clip", 1),
    ("Clip", 2), ("Pow", 1), ("Gather", 1), ("Resize", 1), ("Resize", 2), ("Resize", 3),
    ("Pad", 1), ("Pad", 2), ("Pad", 3), ("Range", 0), ("Range", 1), ("Range", 2),
    ("Dropout", 1), ("Dropout", 2), ("Split", 1), ("Tile", 1), ("TopK", 1), ("CumSum", 1),
    ("Trilu", 1), ("ConstantOfShape", 0), ("Mod", 1), ("NegativeLogLikelihoodLoss", 2),
    ("SoftmaxCrossEntropyLoss", 2),
}

# Inputs whose value is a target shape: when the file gives them as constants, an absurd size
# is refused at import rather than allocated at the first forward.
_SHAPE_INPUTS = {("Expand", 1), ("Reshape", 1), ("ConstantOfShape", 0), ("Tile", 1)}


def _attribute_value(attribute):
    """An attribute as plain data (str, int, float, lists of them, or a small tensor as
    ``{"dtype", "shape", "values"}``), so that the graph saves as plain data."""
    from onnx import AttributeProto, helper, numpy_helper

    if attribute.type == AttributeProto.TENSOR:
        array = numpy_helper.to_array(attribute.t)
        return {"dtype": array.dtype.name, "shape": list(array.shape),
                "values": array.reshape(-1).tolist()}
    value = helper.get_attribute_value(attribute)
    if isinstance(value, bytes):
        return value.decode("utf-8")
    if isinstance(value, (list, tuple)):
        return [v.decode("utf-8") if isinstance(v, bytes) else
                (float(v) if isinstance(v, float) else v) for v in value]
    if isinstance(value, (int, float, str)):
        return value
    raise UnsupportedOperatorError(f"attribute {attribute.name!r} holds a graph",
                                   [f"attribute {attribute.name}"])


def _constant_value(node) -> np.ndarray:
    """The tensor a ``Constant`` node produces."""
    from onnx import numpy_helper

    (attribute,) = node.attribute
    if attribute.name == "value":
        return numpy_helper.to_array(attribute.t)
    scalar = {"value_float": np.float32, "value_floats": np.float32, "value_int": np.int64,
              "value_ints": np.int64}
    if attribute.name in scalar:
        return np.asarray(_attribute_value(attribute), scalar[attribute.name])
    raise UnsupportedOperatorError(f"Constant with {attribute.name}",
                                   [f"Constant({attribute.name})"])


def _attribute_names(names):
    """A unique Module attribute name for each ONNX value name ("0.weight" -> "0_weight")."""
    taken, result = set(), {}
    for name in names:
        base = re.sub(r"[^A-Za-z0-9_]", "_", name) or "tensor"
        candidate, counter = base, 1
        while candidate in taken:
            counter += 1
            candidate = f"{base}_{counter}"
        taken.add(candidate)
        result[name] = candidate
    return result


def _node_name(node, index: int) -> str:
    return f"node {index} ({node.op_type} {node.name!r} -> {list(node.output)})"


def _unsupported(graph) -> list:
    """Every op type the interpreter cannot run (and every foreign domain)."""
    problems = set()
    for node in graph.node:
        if node.domain not in ("", "ai.onnx"):
            problems.add(f"{node.domain}::{node.op_type}")
        elif node.op_type != "Constant" and node.op_type not in ONNX_OPS:
            problems.add(node.op_type)
    return sorted(problems)


def _check_opset_is_known(model) -> None:
    """Refuse an opset newer than the installed onnx package knows: its operators' schemas
    (and so the checker's verdict) would be guesses."""
    from onnx import defs

    newest = defs.onnx_opset_version()
    opset = _opset(model)
    if opset > newest:
        raise UnsupportedOperatorError(
            f"import: opset {opset} is newer than this onnx package knows ({newest}); "
            f"upgrade onnx, or export the model at opset {newest} or below", [f"opset {opset}"])


def _input_types(graph, stored) -> dict:
    """What the graph declares for each tensor input: ``{name: {"dtype", "shape"}}``, each
    dimension an int (fixed) or its symbolic name / None (dynamic)."""
    from onnx import helper

    declared = {}
    for value in graph.input:
        if not value.type.HasField("tensor_type"):
            continue
        tensor_type = value.type.tensor_type
        try:
            dtype = np.dtype(helper.tensor_dtype_to_np_dtype(tensor_type.elem_type)).name
        except (KeyError, TypeError, ValueError):
            continue  # a type minidl has no dtype for is left to the operators to refuse
        shape = None
        if tensor_type.HasField("shape"):
            shape = [d.dim_value if d.HasField("dim_value") else (d.dim_param or None)
                     for d in tensor_type.shape.dim]
        if shape is not None:
            declared[value.name] = {"dtype": dtype, "shape": shape}
    return declared


def _opset(model) -> int:
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)


def _converted_to_supported_opset(model):
    """The model itself from opset 13 on; older ones rewritten by onnx.version_converter."""
    from onnx import version_converter

    opset = _opset(model)
    if opset >= MIN_IMPORT_OPSET:
        return model
    try:
        return version_converter.convert_version(model, MIN_IMPORT_OPSET)
    except Exception as error:  # the converter raises bare RuntimeErrors from C++
        raise UnsupportedOperatorError(
            f"import: opset {opset} cannot be converted to {MIN_IMPORT_OPSET} "
            f"(onnx.version_converter: {str(error).splitlines()[0] if str(error) else error})",
            [f"opset {opset}"]) from None


def _checker_stand_in(model, external: dict):
    """``model`` for the ONNX checker: initializers whose bytes were read from a side file
    (``external``) become graph inputs of the same type and shape. The checker serializes the
    model and parses it again, so the weights would be held twice more for a check that
    looks at their types and shapes only."""
    from onnx import helper

    if not external:
        return model
    stand_in = type(model)()
    stand_in.CopyFrom(model)  # small: the side file's tensors are only names and shapes here
    graph = stand_in.graph
    declared = {value.name for value in graph.input}
    kept = [tensor for tensor in graph.initializer if tensor.name not in external]
    for tensor in graph.initializer:
        if tensor.name in external and tensor.name not in declared:
            graph.input.append(helper.make_tensor_value_info(tensor.name, tensor.data_type,
                                                             list(tensor.dims)))
    del graph.initializer[:]
    graph.initializer.extend(kept)
    return stand_in


def _validate(model, external: dict | None = None) -> None:
    """The full ONNX checker and strict shape inference; then what minidl itself relies on.

    Afterwards every node has the inputs and attributes its schema requires, every value is
    defined once, before it is read: a malformed graph fails here, naming the node, never with
    a bare KeyError at the first forward. ``external``: arrays already read from a side file
    (see :func:`_checker_stand_in`).
    """
    import onnx

    try:
        onnx.checker.check_model(_checker_stand_in(model, external or {}), full_check=True)
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as error:
        message = str(error).strip()
        first_line = message.splitlines()[0] if message else type(error).__name__
        # The checker names the node in a trailing "Context" paragraph: put it first.
        node = re.search(r"Name: (\S*) OpType: (\S+)", message)
        if node:
            raise ValueError(f"import: node {node.group(1)!r} ({node.group(2)}) is invalid: "
                             f"{first_line}") from None
        raise ValueError(f"import: invalid ONNX model: {message}") from None
    graph = model.graph
    outputs = [value.name for value in graph.output]
    twice = sorted({name for name in outputs if outputs.count(name) > 1})
    if twice:
        raise ValueError(f"import: graph output {twice[0]!r} is listed twice")
    defined = {t.name for t in graph.initializer} | {v.name for v in graph.input}
    for index, node in enumerate(graph.node):
        for name in node.input:
            if name and name not in defined:
                raise ValueError(f"import: {_node_name(node, index)} reads {name!r}, which "
                                 f"nothing defines before it")
        for name in node.output:
            if name and name in defined:
                raise ValueError(f"import: {_node_name(node, index)} defines {name!r} again")
            defined.add(name)


def _check_constant_shapes(nodes, stored, max_tensor_bytes: int) -> None:
    """Refuse a constant target shape (Expand, Reshape, Tile, ConstantOfShape) whose element
    count alone is beyond the bound, before anything is allocated."""
    for node in nodes:
        for position, name in enumerate(node["inputs"]):
            if (node["op_type"], position) in _SHAPE_INPUTS and name in stored:
                dims = np.asarray(stored[name]).reshape(-1)
                if (dims < 0).sum() > (1 if node["op_type"] == "Reshape" else 0):
                    raise ValueError(f"import: {node['op_type']} -> {node['outputs']}: "
                                     f"negative size in {dims.tolist()}")
                count = int(np.prod(np.maximum(dims, 1), dtype=np.float64))
                if count > max_tensor_bytes:
                    raise ValueError(
                        f"import: {node['op_type']} -> {node['outputs']}: target {dims.tolist()} "
                        f"has {count} elements, beyond the bound of {max_tensor_bytes} bytes "
                        f"(raise it with import_model(..., max_tensor_bytes=N) if it is meant)")


def module_from_proto(model, max_tensor_bytes: int = DEFAULT_MAX_TENSOR_BYTES, *,
                      consume: bool = False, external: dict | None = None) -> OnnxGraphModule:
    """An OnnxGraphModule computing the graph of an in-memory ModelProto (external data loaded).

    ``consume=True`` lets it take the initializers' bytes (the model is the importer's own
    and no longer needed): each is emptied as its array is made, and the arrays become the
    module's storage, so a large model is held about once, not three or four times.
    ``external``: arrays of initializers whose bytes live in a side file, already read.
    """
    from onnx import numpy_helper

    external = dict(external or {})
    _check_opset_is_known(model)
    _validate(model, external)  # at its own opset: the converter assumes a valid graph
    if _opset(model) < MIN_IMPORT_OPSET and external:
        embed_external_arrays(model, external)  # the converter needs every byte in the model
        external = {}
    converted = _converted_to_supported_opset(model)
    if converted is not model:
        _validate(converted)
        model = converted
    graph = model.graph
    problems = _unsupported(graph)
    if problems:
        raise UnsupportedOperatorError(
            f"import: unsupported ONNX operators: {', '.join(problems)}", problems)

    stored = {}
    for tensor in graph.initializer:
        array = external.pop(tensor.name, None)
        if array is None:
            array = numpy_helper.to_array(tensor)
            if consume:
                # A view of the message's bytes: made its own (writable) array, and the
                # message's copy dropped at once, before the next tensor.
                array = np.array(array)
                tensor.ClearField("raw_data")
        stored[tensor.name] = array
    constants = set()
    nodes = []
    for node in graph.node:
        if node.op_type == "Constant":
            stored[node.output[0]] = _constant_value(node)
            constants.add(node.output[0])
            continue
        nodes.append({"op_type": node.op_type, "inputs": list(node.input),
                      "outputs": list(node.output),
                      "attributes": {a.name: _attribute_value(a) for a in node.attribute}})
    _check_constant_shapes(nodes, stored, max_tensor_bytes)

    trainable = set()
    for node in nodes:
        for position, name in enumerate(node["inputs"]):
            if name in stored and name not in constants and \
                    (node["op_type"], position) not in _NON_TRAINABLE_INPUTS:
                trainable.add(name)
    attribute_of = _attribute_names(stored)
    tensors, state = [], {}
    for name, array in stored.items():
        array = np.asarray(array)
        if consume and not (array.flags.writeable and array.flags.c_contiguous):
            array = np.array(array)  # assigned as the module's storage: its own, writable
        # Scalars are constants of a formula (GELU's ½, an epsilon), not weights to learn.
        weight = name in trainable and array.dtype.kind == "f" and array.ndim > 0
        kind = "parameter" if weight else "buffer"
        tensors.append({"name": name, "attribute": attribute_of[name], "kind": kind,
                        "dtype": array.dtype.name, "shape": [int(n) for n in array.shape]})
        state[attribute_of[name]] = array
    # An initializer that is also a graph input is an input with a default value: callers may
    # pass it or leave it out (the ONNX meaning), so it stays in the input list, after the
    # inputs that have none (old exporters list every weight as an input, data first or not).
    inputs = [value.name for value in graph.input if value.name not in stored] + \
        [value.name for value in graph.input if value.name in stored]
    outputs = [value.name for value in graph.output]
    types = _input_types(graph, stored)
    with skip_init() if consume else contextlib.nullcontext():  # every array is assigned next
        module = OnnxGraphModule(inputs, outputs, nodes, tensors,
                                 {name: types[name] for name in inputs if name in types})
    # Taken over, not copied, when the arrays are the importer's own.
    module.load_state_dict(state, strict=True, assign=consume)
    module.max_tensor_bytes = int(max_tensor_bytes)
    return module.eval()


def _read_model_bytes(path: str) -> bytes:
    """The file's bytes, opened as minidl opens every file it reads: a FIFO or a device named
    like a model is refused (it would block the import or feed it endless bytes)."""
    from ..io import CheckpointError, MissingFileError
    from ..io.reader import open_regular_file

    try:
        with open_regular_file(path) as file:
            return file.read()
    except MissingFileError as error:
        raise FileNotFoundError(str(error)) from None
    except CheckpointError as error:
        raise ValueError(f"{error.path}: not an ONNX model: {error.problem}") from None


def import_model(path, max_tensor_bytes: int = DEFAULT_MAX_TENSOR_BYTES) -> OnnxGraphModule:
    """Read the ONNX model at ``path`` (and its checked external data) into a minidl Module.

    Graphs below opset 13 are converted with ``onnx.version_converter`` first. The model must
    pass the full ONNX checker and shape inference. ``max_tensor_bytes`` bounds the size of a
    tensor that a shape read from the file (or computed from the input) may create.

    Raises :class:`UnsupportedOperatorError` listing every operator the graph uses that minidl
    cannot run, :class:`UnsafeExternalDataError` for external data that points outside the
    model's directory, and ValueError for a file that is not a valid ONNX model.
    """
    import onnx
    from google.protobuf.message import DecodeError

    from .external_data import load_external_data

    path = os.fspath(path)
    data = _read_model_bytes(path)
    model = onnx.ModelProto()
    try:
        model.ParseFromString(data)
    except DecodeError as error:
        raise ValueError(f"{path}: not an ONNX model ({error})") from None
    external = load_external_data(model, os.path.dirname(os.path.abspath(path)),
                                  max_tensor_bytes)
    try:
        return module_from_proto(model, max_tensor_bytes, consume=True, external=external)
    except UnsupportedOperatorError as error:
        raise UnsupportedOperatorError(f"{path}: {error}", error.operators) from None
    except ValueError as error:
        raise ValueError(f"{path}: {error}") from None
