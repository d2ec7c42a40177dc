"""``import_model``: read an ONNX file into an :class:`OnnxGraphModule`.

The file is parsed, its external-data references are checked and read (see
:mod:`.external_data`), and the graph is turned into plain data: nodes with their attributes as
Python values, ``Constant`` nodes folded into stored tensors, initializers into parameters
(float arrays read by ordinary inputs: the weights) or buffers (everything else: ``Constant``
values, scalars, a Reshape's target shape, batch norm's running statistics). Every op type is
checked before anything is built, and all the unsupported ones are reported together.
"""

from __future__ import annotations

import os
import re

import numpy as np

from .errors import UnsupportedOperatorError
from .graph_module import OnnxGraphModule
from .interpreter import ONNX_OPS

MIN_IMPORT_OPSET = 13  # from 13 on, Reshape/Slice/Unsqueeze/ReduceSum take shapes as inputs

# (op_type, input position) that hold constants describing shapes or statistics: initializers
# read only there are buffers, not trainable weights.
_NON_TRAINABLE_INPUTS = {
    ("BatchNormalization", 3), ("BatchNormalization", 4), ("Reshape", 1), ("Expand", 1),
    ("Slice", 1), ("Slice", 2), ("Slice", 3), ("Slice", 4), ("Unsqueeze", 1), ("Squeeze", 1),
    ("ReduceSum", 1), ("ReduceMean", 1), ("ReduceMax", 1), ("ReduceMin", 1), ("Clip", 1),
    ("Clip", 2), ("Pow", 1), ("Gather", 1),
}


def _attribute_value(attribute):
    """An attribute as plain data (str, int, float, or lists of them)."""
    from onnx import helper

    value = helper.get_attribute_value(attribute)
    if isinstance(value, bytes):
        return value.decode("utf-8")
    if isinstance(value, (list, tuple)):
        return [v.decode("utf-8") if isinstance(v, bytes) else
                (float(v) if isinstance(v, float) else v) for v in value]
    if isinstance(value, (int, float, str)):
        return value
    raise UnsupportedOperatorError(f"attribute {attribute.name!r} holds a graph or tensor",
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


def _unsupported(graph, opset: int) -> list:
    """Every op type (and op feature) the interpreter cannot run, with why where useful."""
    problems = set()
    if opset < MIN_IMPORT_OPSET:
        problems.add(f"opset {opset} (import needs {MIN_IMPORT_OPSET} or newer)")
    used = {name for node in graph.node for name in node.input} | \
        {output.name for output in graph.output}
    for node in graph.node:
        if node.domain not in ("", "ai.onnx"):
            problems.add(f"{node.domain}::{node.op_type}")
        elif node.op_type != "Constant" and node.op_type not in ONNX_OPS:
            problems.add(node.op_type)
        if any(name in used for name in list(node.output)[1:] if name):
            problems.add(f"{node.op_type} (second output)")
        attributes = {a.name: a for a in node.attribute}
        if node.op_type in ("Conv", "MaxPool", "AveragePool"):
            if "auto_pad" in attributes and attributes["auto_pad"].s not in (b"NOTSET", b"VALID"):
                problems.add(f"{node.op_type} (auto_pad={attributes['auto_pad'].s.decode()})")
            pads = list(attributes["pads"].ints) if "pads" in attributes else []
            if pads and pads[:len(pads) // 2] != pads[len(pads) // 2:]:
                problems.add(f"{node.op_type} (asymmetric pads)")
            kernel = attributes.get("kernel_shape")
            if kernel is not None and len(kernel.ints) != 2:
                problems.add(f"{node.op_type} ({len(kernel.ints)}-D)")
        if node.op_type == "BatchNormalization" and "training_mode" in attributes \
                and attributes["training_mode"].i:
            problems.add("BatchNormalization (training_mode)")
    return sorted(problems)


def module_from_proto(model) -> OnnxGraphModule:
    """An OnnxGraphModule computing the graph of an in-memory ModelProto (external data loaded)."""
    from onnx import numpy_helper

    graph = model.graph
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
    problems = _unsupported(graph, opset)
    if problems:
        raise UnsupportedOperatorError(
            f"import: unsupported ONNX operators: {', '.join(problems)}", problems)

    stored = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
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
        # Scalars are constants of a formula (GELU's ½, an epsilon), not weights to learn.
        weight = name in trainable and array.dtype.kind == "f" and array.ndim > 0
        kind = "parameter" if weight else "buffer"
        tensors.append({"name": name, "attribute": attribute_of[name], "kind": kind,
                        "dtype": array.dtype.name, "shape": [int(n) for n in array.shape]})
        state[attribute_of[name]] = array
    inputs = [value.name for value in graph.input if value.name not in stored]
    outputs = [value.name for value in graph.output]
    module = OnnxGraphModule(inputs, outputs, nodes, tensors)
    module.load_state_dict(state, strict=True)
    return module.eval()


def import_model(path) -> OnnxGraphModule:
    """Read the ONNX model at ``path`` (and its checked external data) into a minidl Module.

    Raises :class:`UnsupportedOperatorError` listing every operator the graph uses that minidl
    cannot run, :class:`UnsafeExternalDataError` for external data that points outside the
    model's directory, and ValueError for a file that is not an ONNX model.
    """
    import onnx
    from google.protobuf.message import DecodeError

    from .external_data import load_external_data

    path = os.fspath(path)
    with open(path, "rb") as file:
        data = file.read()
    model = onnx.ModelProto()
    try:
        model.ParseFromString(data)
    except DecodeError as error:
        raise ValueError(f"{path}: not an ONNX model ({error})") from None
    load_external_data(model, os.path.dirname(os.path.abspath(path)))
    return module_from_proto(model)
