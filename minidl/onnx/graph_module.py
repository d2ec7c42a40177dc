"""OnnxGraphModule: an ONNX graph held as plain data and run with minidl ops.

The module keeps the graph exactly as a list of nodes — ``{"op_type", "inputs", "outputs",
"attributes"}`` — and its forward walks that list, looking each ``op_type`` up in the closed
table :data:`~minidl.onnx.interpreter.ONNX_OPS`. Weights (the graph's float initializers) are
``Parameter``s, so gradients reach them and any minidl optimizer can train the imported model;
other constants are buffers. Because ``get_config()`` is only that data, the module saves with
``minidl.save_model`` and loads back with ``minidl.load_model``: loading checks every field and
every op type against the table, so a model file can never make it run anything else.

``tensors`` lists each stored value as ``{"name": ONNX name, "attribute": its name in this
module (and in ``state_dict``), "kind": "parameter" | "buffer", "dtype", "shape"}``. A stored
value that is also named in ``inputs`` is an input with a default: a call may leave it out.
``input_types`` (optional) holds what the graph declares for its inputs, ``{name: {"dtype",
"shape"}}`` with each dimension an int (fixed) or a str/None (dynamic: any size); a call is
checked against it, as onnxruntime checks, instead of running on whatever it is given.

The module's mode reaches the graph: in training, Dropout drops and BatchNormalization
normalises with batch statistics and updates its running ones. ``max_tensor_bytes`` (not part
of the saved config, so a file cannot loosen it) bounds what a size computed at run time may
allocate.
"""

from __future__ import annotations

import numpy as np

from ..autograd.tensor import Tensor
from ..nn.init import new_storage
from ..nn.module import Module
from ..nn.parameter import Parameter
from ..nn.registry import register_module
from .errors import UnsupportedOperatorError
from .registry import DEFAULT_MAX_TENSOR_BYTES, RunContext, check_size

# The operator table (minidl.onnx.interpreter and the modules it registers) is several thousand
# lines: it is imported when the first graph module is built, not at ``import minidl``, which
# only needs this class registered so that saved imported models load.

_DTYPES = {"float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "uint16",
           "uint32", "uint64", "bool"}


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise ValueError(f"OnnxGraphModule: {message}")


def _is_name_list(value, allow_empty: bool = False) -> bool:
    return isinstance(value, list) and all(
        isinstance(n, str) and (n or allow_empty) for n in value)


@register_module
class OnnxGraphModule(Module):
    """A Module whose forward interprets an ONNX graph (see the module docstring)."""

    def __init__(self, inputs, outputs, nodes, tensors, input_types=None):
        from .interpreter import ONNX_OPS

        super().__init__()
        _require(_is_name_list(inputs) and _is_name_list(outputs) and outputs,
                 "inputs and outputs must be lists of value names")
        _require(isinstance(nodes, list) and isinstance(tensors, list),
                 "nodes and tensors must be lists")
        defined = set(inputs)
        self.max_tensor_bytes = DEFAULT_MAX_TENSOR_BYTES
        for entry in tensors:
            _require(isinstance(entry, dict) and set(entry) == {"name", "attribute", "kind",
                                                                 "dtype", "shape"},
                     f"bad tensor entry {entry!r}")
            _require(entry["kind"] in ("parameter", "buffer") and entry["dtype"] in _DTYPES
                     and isinstance(entry["name"], str) and isinstance(entry["attribute"], str)
                     and isinstance(entry["shape"], list)
                     and all(isinstance(n, int) and n >= 0 for n in entry["shape"]),
                     f"bad tensor entry {entry!r}")
            # Zeros, or a placeholder without memory under init.skip_init (the importer then
            # assigns every array).
            array = new_storage(entry["shape"], np.dtype(entry["dtype"]), fill=0)
            if entry["kind"] == "parameter":
                _require(array.dtype.kind == "f", f"parameter {entry['name']!r} is not float")
                self.register_parameter(entry["attribute"], Parameter(array))
            else:
                self.register_buffer(entry["attribute"], Tensor(array, dtype=array.dtype))
            defined.add(entry["name"])
        unknown = set()
        for index, node in enumerate(nodes):
            _require(isinstance(node, dict) and set(node) == {"op_type", "inputs", "outputs",
                                                               "attributes"}
                     and isinstance(node["op_type"], str) and isinstance(node["attributes"], dict)
                     and _is_name_list(node["inputs"], allow_empty=True)
                     and _is_name_list(node["outputs"], allow_empty=True) and node["outputs"],
                     f"node {index} is malformed")
            if node["op_type"] not in ONNX_OPS:
                unknown.add(node["op_type"])
            missing = [n for n in node["inputs"] if n and n not in defined]
            _require(not missing, f"node {index} ({node['op_type']}) reads {missing} before "
                                  f"anything defines them (nodes must be in execution order)")
            defined.update(n for n in node["outputs"] if n)
        if unknown:
            raise UnsupportedOperatorError(
                f"OnnxGraphModule: unsupported ONNX operators: {', '.join(sorted(unknown))}",
                unknown)
        missing = [n for n in outputs if n not in defined]
        _require(not missing, f"outputs {missing} are never computed")
        _require(len(set(outputs)) == len(outputs), f"outputs {outputs} name a value twice")
        self.input_names, self.output_names = list(inputs), list(outputs)
        self.nodes, self.tensor_entries = nodes, tensors
        self.input_types = _checked_input_types(input_types, inputs)

    def forward(self, *args, **named):
        """Run the graph on ``args`` (in ``input_names`` order) and/or inputs given by name.

        Inputs with a stored default (an initializer that is also a graph input) may be left
        out. Returns the output Tensor, or a tuple for several outputs.
        """
        stored = {}
        for entry in self.tensor_entries:
            table = self._parameters if entry["kind"] == "parameter" else self._buffers
            stored[entry["name"]] = table[entry["attribute"]]
        if len(args) > len(self.input_names):
            raise TypeError(f"OnnxGraphModule: expected at most {len(self.input_names)} inputs "
                            f"({', '.join(self.input_names)}), got {len(args)}")
        given = dict(zip(self.input_names, args))
        for name, value in named.items():
            if name not in self.input_names or name in given:
                raise TypeError(f"OnnxGraphModule: unexpected or repeated input {name!r} "
                                f"(inputs: {', '.join(self.input_names)})")
            given[name] = value
        missing = [n for n in self.input_names if n not in given and n not in stored]
        if missing:
            raise TypeError(f"OnnxGraphModule: inputs {missing} have no default and were not "
                            f"given (inputs: {', '.join(self.input_names)})")
        values = dict(stored)
        for name, value in given.items():
            values[name] = value if isinstance(value, Tensor) else Tensor(np.asarray(value))
            if name in self.input_types:
                _check_input(name, values[name], self.input_types[name])
        from .interpreter import run_node
        from .output_bounds import check_output_sizes, predicted_shape

        for node in self.nodes:
            inputs = [values[n] if n else None for n in node["inputs"]]
            # Trailing optional inputs left empty are simply absent, as the spec allows.
            while inputs and inputs[-1] is None:
                inputs.pop()
            wanted = max(i + 1 for i, n in enumerate(node["outputs"]) if n) \
                if any(node["outputs"]) else 1
            context = RunContext(training=self.training, max_tensor_bytes=self.max_tensor_bytes,
                                 node=f"{node['op_type']} -> {node['outputs'][0]}",
                                 outputs=wanted)
            try:
                # Ops whose output outgrows their inputs are checked before they run, every
                # other output once computed: no value beyond the bound reaches a later node.
                shape = predicted_shape(node["op_type"], inputs, node["attributes"])
                if shape is not None and inputs:
                    check_size(shape, inputs[0].dtype, context, node["op_type"])
                result = run_node(node["op_type"], inputs, node["attributes"], context)
                results = result if isinstance(result, tuple) else (result,)
                check_output_sizes(results, context)
            except (ValueError, TypeError, IndexError, KeyError) as error:
                raise type(error)(f"ONNX node {context.node}: {error}") from None
            if len(results) < wanted:
                raise ValueError(f"ONNX node {context.node}: computes {len(results)} outputs, "
                                 f"the graph reads {wanted}")
            for name, value in zip(node["outputs"], results):
                if name:
                    values[name] = value
        results = tuple(values[name] for name in self.output_names)
        return results[0] if len(results) == 1 else results

    def get_config(self) -> dict:
        config = {"inputs": list(self.input_names), "outputs": list(self.output_names),
                  "nodes": self.nodes, "tensors": self.tensor_entries}
        if self.input_types:
            config["input_types"] = self.input_types
        return config

    def extra_repr(self) -> str:
        ops = {}
        for node in self.nodes:
            ops[node["op_type"]] = ops.get(node["op_type"], 0) + 1
        summary = ", ".join(f"{op}×{count}" for op, count in ops.items())
        return f"inputs={self.input_names}, outputs={self.output_names}, nodes: {summary}"


def _checked_input_types(input_types, inputs) -> dict:
    """``input_types`` once every entry names an input and declares a known dtype and a list
    of dimensions (int >= 0, or str/None for a dynamic one); ``{}`` for None."""
    if input_types is None:
        return {}
    _require(isinstance(input_types, dict), "input_types must be a map")
    for name, declared in input_types.items():
        _require(name in inputs and isinstance(declared, dict)
                 and set(declared) == {"dtype", "shape"} and declared["dtype"] in _DTYPES
                 and isinstance(declared["shape"], list)
                 and all(d is None or isinstance(d, str) or (isinstance(d, int)
                                                             and not isinstance(d, bool)
                                                             and d >= 0)
                         for d in declared["shape"]),
                 f"bad input type {name!r}: {declared!r}")
    return dict(input_types)


def _check_input(name: str, tensor: Tensor, declared: dict) -> None:
    """A given input against its declaration: the same dtype, the same rank, and every fixed
    dimension its size (dynamic ones take any)."""
    if np.dtype(tensor.dtype).name != declared["dtype"]:
        raise TypeError(f"OnnxGraphModule: input {name!r} is declared {declared['dtype']}"
                        f"{declared['shape']}, got {np.dtype(tensor.dtype).name} data")
    shape = tuple(tensor.shape)
    dims = declared["shape"]
    if len(shape) != len(dims) or any(isinstance(d, int) and d != n for d, n in zip(dims, shape)):
        raise ValueError(f"OnnxGraphModule: input {name!r} is declared with shape {dims}, "
                         f"got shape {shape}")
