"""``export_onnx``: run the model once on an example input and write what it computed as ONNX.

Export is tracing. While the model runs on the example, the tracing hook
(:mod:`minidl.autograd.tracing`) reports every layer call and every op to an :class:`OnnxTracer`,
which appends the matching ONNX nodes (see :mod:`.export_ops` and :mod:`.export_layers`).
Tensors that no op produced — weights, buffers, constants — become initializers, named by their
``state_dict`` names where they have one. The model runs in evaluation mode (dropout off, batch
norm on its running statistics) and gets its own mode back afterwards.

Opset
-----
``DEFAULT_OPSET`` is 21. Every op the exporter emits has its current meaning at 21 (ONNX's own
``Gelu`` arrived in 20; reductions take their axes as an input since 18), and onnxruntime has a
CPU kernel for each of them there. onnxruntime 1.31 also runs 22 through 26, where these ops
only gained new element types (bfloat16, float8/float4), and refuses 27+; so a newer default
would buy nothing for the graphs written here while shutting out every runtime older than the
newest. ``opset=`` accepts 18 up to what the installed ``onnx`` knows; below 20, GELU is written
with ``Erf`` (its definition).
"""

from __future__ import annotations

import os

import numpy as np

from ..autograd import tracing
from ..autograd.grad_mode import no_grad
from ..autograd.tensor import Tensor
from .dtypes import onnx_code
from .errors import UnsupportedOperatorError
from .export_layers import LAYER_EXPORTERS
from .export_ops import FUNCTION_EXPORTERS
from .graph_builder import GraphBuilder

DEFAULT_OPSET = 21
MIN_OPSET = 18
BATCH_DIM = "batch"


class OnnxTracer:
    """Receives the tracing hook's reports and turns them into nodes of a GraphBuilder."""

    def __init__(self, builder: GraphBuilder):
        self.builder = builder

    def on_module(self, module, args, kwargs, run):
        """Map a built-in layer whole where :mod:`.export_layers` says so; else run it."""
        exporter = LAYER_EXPORTERS.get(type(module))
        if exporter is None or kwargs:
            return run()  # containers and users' modules: their ops report themselves
        return exporter(self.builder, module, args, run)

    def on_function(self, function_class, inputs, attrs, output):
        """Write the op that just ran; remember it if it has no mapping."""
        exporter = FUNCTION_EXPORTERS.get(function_class)
        try:
            if exporter is None:
                raise UnsupportedOperatorError(function_class.__name__,
                                               [function_class.__name__])
            exporter(self.builder, inputs, attrs, output)
        except UnsupportedOperatorError as error:
            # Keep tracing so that one error lists every op without a mapping.
            self.builder.unsupported.update(error.operators)
            self.builder.bind(output, self.builder.fresh_name("unsupported"), None)


def _as_tensors(value, what: str) -> tuple:
    values = (value,) if isinstance(value, Tensor) else value
    if not isinstance(values, (tuple, list)) or not values or \
            not all(isinstance(v, Tensor) for v in values):
        raise TypeError(f"export_onnx: {what} must be a Tensor or a tuple/list of Tensors, got "
                        f"{type(value).__name__}")
    return tuple(values)


def _flattened_outputs(value, where: str = "output") -> tuple:
    """The model's outputs in order, nested tuples/lists flattened as PyTorch's exporter does:
    an LSTM's ``(out, (h, c))`` becomes the three outputs out, h, c."""
    if isinstance(value, Tensor):
        return (value,)
    if isinstance(value, (tuple, list)) and value:
        return tuple(t for i, item in enumerate(value)
                     for t in _flattened_outputs(item, f"{where}[{i}]"))
    raise TypeError(f"export_onnx: the model's {where} is a {type(value).__name__}; outputs must "
                    f"be Tensors or (nested) tuples/lists of them")


def _default_names(count: int, stem: str, given) -> list:
    if given is None:
        return [stem] if count == 1 else [f"{stem}_{i}" for i in range(count)]
    given = [str(n) for n in given]
    if len(given) != count or len(set(given)) != count:
        raise ValueError(f"export_onnx: expected {count} distinct {stem} names, got {given}")
    return given


def default_batch_axis(model) -> int:
    """Where the batch is in the model's input: axis 1 for a sequence-first model (a recurrent
    or attention layer with ``batch_first=False``, PyTorch's default, taking the input as
    (sequence, batch, features)), else axis 0. Looks at the model, or the first layer of a
    Sequential; anything else says where its batch is with ``batch_axis=``."""
    from ..nn import Sequential

    while isinstance(model, Sequential) and len(model) and not hasattr(model, "batch_first"):
        model = model[0]
    return 0 if getattr(model, "batch_first", True) else 1


def _value_info(name: str, tensor: Tensor, batch_axis):
    from onnx import helper

    dims = [BATCH_DIM if i == batch_axis else int(n) for i, n in enumerate(tensor.shape)]
    return helper.make_tensor_value_info(name, onnx_code(tensor.dtype), dims)


def trace_graph(model, inputs, opset: int, dynamic_batch: bool, input_names, output_names,
                batch_axis: int = 0):
    """Trace ``model`` on ``inputs`` (their batch on ``batch_axis``); returns the onnx
    GraphProto's parts and the initializers."""
    from onnx import helper

    state_names = {}
    for name, tensor in list(model.named_parameters()) + list(model.named_buffers()):
        state_names.setdefault(id(tensor), name)
        state_names.setdefault(id(tensor.data), name)
    builder = GraphBuilder(opset, state_names)
    in_names = _default_names(len(inputs), "input", input_names)
    for name in output_names or ():
        builder.fresh_name(str(name))  # reserved: no internal value may take an output's name
    for name, tensor in zip(in_names, inputs):
        builder.fresh_name(name)
        builder.bind(tensor, name,
                     batch_axis if dynamic_batch and tensor.ndim > batch_axis else None)

    modes = [(module, module.training) for module in model.modules()]
    model.eval()
    try:
        with no_grad(), tracing.tracing(OnnxTracer(builder)):
            outputs = model(*inputs)
    finally:
        for module, training in modes:
            object.__setattr__(module, "training", training)
    if builder.unsupported:
        listed = ", ".join(sorted(builder.unsupported))
        raise UnsupportedOperatorError(f"export_onnx: no ONNX mapping for: {listed}",
                                       builder.unsupported)

    outputs = _flattened_outputs(outputs)
    out_names = _default_names(len(outputs), "output", output_names)
    out_infos = []
    for final, tensor in zip(out_names, outputs):
        source = builder.name_of(tensor)
        axis = builder.batch_axis[source]
        # Always an Identity: the output then has its own name even when it is a graph input,
        # a weight, or the same value as another output.
        builder.nodes.append(helper.make_node("Identity", [source], [final],
                                              name=builder.fresh_name(f"node_{final}")))
        out_infos.append(_value_info(final, tensor, axis))
    in_infos = [_value_info(name, tensor, builder.batch_axis[name])
                for name, tensor in zip(in_names, inputs)]
    return builder, in_infos, out_infos


def _one_more_sample(tensor: Tensor, axis: int) -> Tensor:
    """The example with its last sample (along the batch ``axis``) repeated: the same
    computation at batch size N + 1."""
    if tensor.ndim <= axis or tensor.shape[axis] == 0:
        return tensor
    array = tensor.numpy()
    last = np.take(array, [-1], axis=axis)
    return Tensor(np.concatenate([array, last], axis=axis), dtype=array.dtype)


def _first_difference(first: GraphBuilder, second: GraphBuilder):
    """The first node whose op, attributes or constant inputs differ between two traces."""
    changed = {name for name, array in first.initializers.items()
               if name not in second.initializers
               or np.shape(second.initializers[name]) != np.shape(array)
               or not np.array_equal(second.initializers[name], array)}
    for node, other in zip(first.nodes, second.nodes):
        if node.op_type != other.op_type or list(node.input) != list(other.input) or \
                list(node.attribute) != list(other.attribute):
            return node, "its attributes or inputs"
        constants = [n for n in node.input if n in changed]
        if constants:
            values = [np.asarray(first.initializers[n]).reshape(-1)[:8].tolist()
                      for n in constants]
            return node, f"the constant {constants[0]!r} ({values[0]} ...)"
    if len(first.nodes) != len(second.nodes):
        index = min(len(first.nodes), len(second.nodes))
        node = first.nodes[index] if index < len(first.nodes) else second.nodes[index]
        return node, "the number of nodes"
    return None


def _check_batch_independence(model, inputs, builder, out_infos, opset, input_names,
                              output_names, batch_axis: int) -> None:
    """Trace again at batch size N + 1: a file that declares a dynamic batch must not change.

    Tracing records the example's numbers. Where the model takes a Python int from
    ``x.shape[0]`` (``md.zeros(x.shape[0], 3)``) or reshapes across the batch axis so that it
    can no longer be followed, the batch size is baked into a constant, and at other batch
    sizes the file fails or computes something else. The second trace exposes every such
    constant; the op that reads it is named. An output whose size is merely proportional to the
    batch (``x.reshape(-1)``) is fine: its declared size becomes symbolic.
    """
    other = tuple(_one_more_sample(t, batch_axis) for t in inputs)
    second, _, second_outs = trace_graph(model, other, opset, True, input_names, output_names,
                                         batch_axis)
    difference = _first_difference(builder, second)
    if difference is not None:
        node, what = difference
        raise ValueError(
            f"export_onnx: node {node.name!r} ({node.op_type}) depends on the example's batch "
            f"size through {what}, but the file would declare a dynamic batch. Compute the "
            f"shape from the tensor inside the model (reshape with -1 for the batch, "
            f"zeros_like instead of zeros(x.shape[0], ...)), pass batch_axis= if the batch "
            f"is not on axis {batch_axis} of the input, or export with dynamic_batch=False")
    for info, again in zip(out_infos, second_outs):
        dims = info.type.tensor_type.shape.dim
        for axis, (dim, other_dim) in enumerate(zip(dims, again.type.tensor_type.shape.dim)):
            if dim.HasField("dim_value") and dim.dim_value != other_dim.dim_value:
                dim.dim_param = f"{info.name}_dim{axis}"  # grows with the batch: symbolic


def export_onnx(model, path, example_input, opset: int | None = None,
                dynamic_batch: bool = True, input_names=None, output_names=None,
                external_data_threshold: int | None = None, batch_axis: int | None = None) -> str:
    """Write ``model`` as an ONNX file at ``path`` (``.onnx`` is added when the name has no
    suffix), traced on ``example_input``; returns the path written.

    ``example_input``: a Tensor, or a tuple/list of Tensors for a model with several inputs;
    the model may return a Tensor or a (nested) tuple of Tensors, written as its outputs in
    order (an LSTM's ``(out, (h, c))`` as three). With ``dynamic_batch`` the batch axis of
    every input and output is the symbolic dimension "batch", so the file runs at any batch size;
    the model is traced a second time at another batch size, and a graph that would bake the
    example's batch size into the file is refused with a ValueError naming the op.
    ``batch_axis`` is where the inputs hold the batch: by default 1 for a sequence-first model
    (``batch_first=False``: (sequence, batch, features)), else 0 (see :func:`default_batch_axis`).
    Weights of at least ``external_data_threshold`` bytes go to a side file ``<name>.data``
    beside the model (by default only when the weights would not fit in one 2 GB protobuf).
    Raises :class:`UnsupportedOperatorError` naming every op that has no ONNX mapping.
    The file is replaced atomically: a failed export leaves any previous file untouched.
    """
    import onnx
    from onnx import helper, numpy_helper

    from ..version import __version__
    from .external_data import plan_external, write_side_file

    opset = DEFAULT_OPSET if opset is None else int(opset)
    if not MIN_OPSET <= opset <= onnx.defs.onnx_opset_version():
        raise ValueError(f"export_onnx: opset must be between {MIN_OPSET} and "
                         f"{onnx.defs.onnx_opset_version()}, got {opset}")
    inputs = _as_tensors(example_input, "example_input")
    batch_axis = default_batch_axis(model) if batch_axis is None else batch_axis
    if isinstance(batch_axis, bool) or not isinstance(batch_axis, int) or batch_axis < 0:
        raise ValueError(f"export_onnx: batch_axis must be an axis number >= 0, got "
                         f"{batch_axis!r}")
    builder, in_infos, out_infos = trace_graph(model, inputs, opset, dynamic_batch,
                                               input_names, output_names, batch_axis)
    if dynamic_batch and any(t.ndim > batch_axis and t.shape[batch_axis] > 0 for t in inputs):
        _check_batch_independence(model, inputs, builder, out_infos, opset, input_names,
                                  output_names, batch_axis)

    path = os.fspath(path)
    if not os.path.splitext(path)[1]:
        path += ".onnx"  # the conventional suffix, which tools (and load_model) go by
    arrays = builder.initializers
    external = [name for name in arrays if name in plan_external(arrays, external_data_threshold)]
    placements = write_side_file(path, arrays, external) if external else {}
    initializers = []
    for name, array in arrays.items():
        if name in placements:
            location, offset, length = placements[name]
            tensor = onnx.TensorProto(name=name, data_type=onnx_code(array.dtype),
                                      dims=list(array.shape))
            tensor.data_location = onnx.TensorProto.EXTERNAL
            for key, value in (("location", location), ("offset", str(offset)),
                               ("length", str(length))):
                entry = tensor.external_data.add()
                entry.key, entry.value = key, value
        else:
            tensor = numpy_helper.from_array(np.asarray(array), name)
        initializers.append(tensor)

    graph = helper.make_graph(builder.nodes, type(model).__name__, in_infos, out_infos,
                              initializer=initializers)
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                              producer_name="minidl", producer_version=__version__)
    proto.ir_version = helper.find_min_ir_version_for([helper.make_opsetid("", opset)])

    from ..io.atomic import write_atomically

    data = proto.SerializeToString()
    write_atomically(path, lambda file: file.write(data))
    return path
