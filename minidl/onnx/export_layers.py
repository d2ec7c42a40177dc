"""Layers the exporter writes whole, instead of letting the ops inside report themselves.

Most layers need no entry: their forward is a single op (Linear → ``linear``, Conv2d → ``conv2d``,
ReLU → ``relu``, ...) which reports itself as exactly the ONNX node the layer corresponds to, with
the layer's weights named by their ``state_dict`` names; Dropout and Identity return their input
in evaluation and so add nothing. A layer is listed here when its ops alone would say less than
the layer does:

* Embedding: its integer indices reach the lookup as a plain array, not as a traced input, so
  the layer itself writes ``Gather(weight, indices)``;
* Flatten over all but the batch axis is ONNX ``Flatten`` (clearer than a Reshape);
* AdaptiveAvgPool2d to 1×1 is ``GlobalAveragePool``, which works at any image size (and
  AdaptiveMaxPool2d to 1×1 ``GlobalMaxPool``);
* GroupNorm and the instance norms are ``InstanceNormalization`` (their batch-norm-on-a-folded-
  input computation would read as batch statistics, which have no inference form);
* Upsample is ``Resize``, with the coordinate mapping PyTorch uses;
* RNN, LSTM and GRU are one ONNX ``RNN``/``LSTM``/``GRU`` node per layer (gates reordered to
  ONNX's order), not an unrolled loop.

Each entry is ``exporter(builder, module, args, run) -> output``. It either maps the layer whole
(running it under ``tracing.suspended()`` so the inner ops stay silent) or returns ``run()``.
"""

from __future__ import annotations

import numpy as np

from ..autograd import tracing
from ..autograd.tensor import Tensor
from ..nn import layers
from ..ops.resample import adaptive_max_pool2d_by_reductions


def _run_silently(run):
    with tracing.suspended():
        return run()


def _export_embedding(builder, module, args, run):
    indices = args[0]
    output = _run_silently(run)
    if isinstance(indices, Tensor):
        name = builder.name_of(indices)
    else:
        name = builder.name_of_array(indices, "indices")
    builder.emit("Gather", [builder.name_of(module.weight), name], output,
                 builder.batch_axis.get(name), axis=0)
    return output


def _export_flatten(builder, module, args, run):
    x = args[0]
    if not (isinstance(x, Tensor) and x.ndim >= 2 and module.start_dim in (1, 1 - x.ndim)
            and module.end_dim in (-1, x.ndim - 1)):
        return run()
    output = _run_silently(run)
    name = builder.name_of(x)
    keeps_batch = builder.batch_axis[name] == 0  # the batch axis is the one axis kept apart
    builder.emit("Flatten", [name], output, 0 if keeps_batch else None, axis=1)
    return output


def _export_adaptive_avg_pool(builder, module, args, run):
    if tuple(module.output_size) != (1, 1):
        return run()
    output = _run_silently(run)
    name = builder.name_of(args[0])
    builder.emit("GlobalAveragePool", [name], output, builder.batch_axis[name])
    return output


LAYER_EXPORTERS = {
    layers.Embedding: _export_embedding,
    layers.Flatten: _export_flatten,
    layers.AdaptiveAvgPool2d: _export_adaptive_avg_pool,
}


# -- the added layers ------------------------------------------------------------------------------

def _per_channel(builder, tensor, x, hint):
    """A (C,) parameter as (C, 1, ...) so that it broadcasts along axis 1 of ``x``."""
    return builder.add_node("Reshape", [builder.name_of(tensor),
                                        builder.int64s([-1] + [1] * (x.ndim - 2), "shape")],
                            hint=hint)


def _affine_after(builder, module, x, normalized, output):
    axis = builder.batch_axis[builder.name_of(x)]
    if module.weight is not None:
        normalized = builder.add_node("Mul", [normalized, _per_channel(builder, module.weight, x,
                                                                       "scale")])
    if module.bias is not None:
        normalized = builder.add_node("Add", [normalized, _per_channel(builder, module.bias, x,
                                                                       "shift")])
    builder.emit("Identity", [normalized], output, axis)


def _export_group_norm(builder, module, args, run):
    # ONNX InstanceNormalization over (N, G, rest): each group of each sample is normalised.
    x = args[0]
    output = _run_silently(run)
    name, groups = builder.name_of(x), module.num_groups
    folded = builder.add_node("Reshape", [name, builder.int64s([0, groups, -1], "shape")])
    ones = builder.constant(np.ones(groups, x.dtype), "gn_scale")
    zeros = builder.constant(np.zeros(groups, x.dtype), "gn_bias")
    normalized = builder.add_node("InstanceNormalization", [folded, ones, zeros],
                                  epsilon=float(module.eps))
    unfolded = builder.add_node("Reshape", [normalized, builder.add_node("Shape", [name])])
    _affine_after(builder, module, x, unfolded, output)
    return output


def _export_instance_norm(builder, module, args, run):
    if module.track_running_stats:  # evaluation uses the running statistics: batch norm
        return run()
    x = args[0]
    output = _run_silently(run)
    channels = module.num_features
    ones = builder.constant(np.ones(channels, x.dtype), "in_scale")
    zeros = builder.constant(np.zeros(channels, x.dtype), "in_bias")
    normalized = builder.add_node("InstanceNormalization", [builder.name_of(x), ones, zeros],
                                  epsilon=float(module.eps))
    _affine_after(builder, module, x, normalized, output)
    return output


def _export_upsample(builder, module, args, run):
    x = args[0]
    output = _run_silently(run)
    name = builder.name_of(x)
    if module.mode == "nearest":
        how = {"mode": "nearest", "coordinate_transformation_mode": "asymmetric",
               "nearest_mode": "floor"}
    else:
        how = {"mode": "linear", "coordinate_transformation_mode":
               "align_corners" if module.align_corners else "pytorch_half_pixel"}
    if module.scale_factor is not None:
        # The same scales PyTorch maps coordinates with, so ONNX's mapping is PyTorch's.
        factors = module.scale_factor if isinstance(module.scale_factor, list) \
            else [module.scale_factor] * (x.ndim - 2)
        scales = builder.constant(np.asarray([1.0, 1.0] + list(factors), np.float32), "scales")
        builder.emit("Resize", [name, "", scales], output, builder.batch_axis[name], **how)
        return output
    # A fixed size: the batch and channel sizes come from the input at run time.
    leading = builder.add_node("Slice", [builder.add_node("Shape", [name]),
                                         builder.int64s([0], "starts"),
                                         builder.int64s([2], "ends")])
    sizes = builder.add_node("Concat", [leading, builder.int64s(list(output.shape[2:]), "sizes")],
                             axis=0)
    builder.emit("Resize", [name, "", "", sizes], output, builder.batch_axis[name], **how)
    return output


def _export_adaptive_max_pool(builder, module, args, run):
    if tuple(module.output_size) != (1, 1):
        # the pooling ops report themselves: written as reductions over slices
        return adaptive_max_pool2d_by_reductions(args[0], module.output_size)
    output = _run_silently(run)
    name = builder.name_of(args[0])
    builder.emit("GlobalMaxPool", [name], output, builder.batch_axis[name])
    return output


LAYER_EXPORTERS.update({
    layers.GroupNorm: _export_group_norm,
    layers.InstanceNorm1d: _export_instance_norm, layers.InstanceNorm2d: _export_instance_norm,
    layers.Upsample: _export_upsample, layers.AdaptiveMaxPool2d: _export_adaptive_max_pool,
})


# -- recurrent layers: ONNX RNN / LSTM / GRU nodes, one per layer ------------------------------

# ONNX orders the gates differently from PyTorch: LSTM (i, o, f, c) for PyTorch's (i, f, g, o);
# GRU (z, r, h) for (r, z, n). Rows of every weight and bias are permuted to match.
_ONNX_GATE_ORDER = {"LSTM": [0, 3, 1, 2], "GRU": [1, 0, 2], "RNN": [0]}


def _onnx_gates(array, mode, hidden):
    blocks = [array[k * hidden:(k + 1) * hidden] for k in range(len(_ONNX_GATE_ORDER[mode]))]
    return np.concatenate([blocks[k] for k in _ONNX_GATE_ORDER[mode]])


def _recurrent_weights(builder, module, layer):
    """W, R, B initializers of one layer: weights (directions, gates·H, ·), biases
    (directions, 2·gates·H)."""
    hidden, mode = module.hidden_size, module.mode
    w, r, b = [], [], []
    for suffix in module._suffixes():
        def get(kind):
            return getattr(module, f"{kind}_l{layer}{suffix}").numpy()
        w.append(_onnx_gates(get("weight_ih"), mode, hidden))
        r.append(_onnx_gates(get("weight_hh"), mode, hidden))
        if module.bias:
            b.append(np.concatenate([_onnx_gates(get("bias_ih"), mode, hidden),
                                     _onnx_gates(get("bias_hh"), mode, hidden)]))
    names = [builder.constant(np.stack(w), f"{mode}_W_l{layer}"),
             builder.constant(np.stack(r), f"{mode}_R_l{layer}")]
    names.append(builder.constant(np.stack(b), f"{mode}_B_l{layer}") if module.bias else "")
    return names


def _export_recurrent(builder, module, args, run):
    x = args[0]
    hx = args[1] if len(args) > 1 else None
    if not isinstance(x, Tensor) or x.ndim != 3 or getattr(module, "proj_size", 0):
        # unbatched sequences, and LSTMs with a projection (ONNX's LSTM has none): the traced
        # ops report themselves
        return run()
    result = _run_silently(run)
    output, finals = result[0], result[1] if module.mode == "LSTM" else (result[1],)
    states = [] if hx is None else list(hx) if module.mode == "LSTM" else [hx]
    name = builder.name_of(x)
    in_axis = builder.batch_axis[name]
    if module.batch_first:
        name = builder.add_node("Transpose", [name], perm=[1, 0, 2])
    directions = module.directions
    attributes = {"hidden_size": module.hidden_size,
                  "direction": "bidirectional" if directions == 2 else "forward"}
    if module.mode == "GRU":
        attributes["linear_before_reset"] = 1  # PyTorch applies r after the hidden product
    if module.mode == "RNN":
        attributes["activations"] = ["Tanh" if module.nonlinearity == "tanh" else "Relu"] \
            * directions
    last = {0: [], 1: []}
    for layer in range(module.num_layers):
        inputs = [name] + _recurrent_weights(builder, module, layer)
        if states:
            inputs.append("")  # sequence_lens: every sequence has the full length
            for state in states:
                inputs.append(builder.add_node(
                    "Slice", [builder.name_of(state),
                              builder.int64s([layer * directions], "starts"),
                              builder.int64s([(layer + 1) * directions], "ends"),
                              builder.int64s([0], "axes")]))
        count = 3 if module.mode == "LSTM" else 2
        y, *ends = builder.add_node(module.mode, inputs, outputs=count, **attributes)
        for k, end in enumerate(ends):
            last[k].append(end)
        # Y is (T, directions, N, H): directions side by side on the features, as PyTorch.
        y = builder.add_node("Transpose", [y], perm=[0, 2, 1, 3])
        name = builder.add_node("Reshape", [y, builder.int64s([0, 0, -1], "shape")])
    if module.batch_first:
        name = builder.add_node("Transpose", [name], perm=[1, 0, 2])
    builder.emit("Identity", [name], output, in_axis)
    # Final states are (layers·directions, N, H): the batch is axis 1 when the input's batch
    # axis was N, and absent when the traced batch axis was the sequence.
    state_axis = 1 if (module.batch_first and in_axis == 0) or \
        (not module.batch_first and in_axis == 1) else None
    for k, final in enumerate(finals):
        pieces = last[k]
        if len(pieces) == 1:
            builder.emit("Identity", pieces, final, state_axis)
        else:
            builder.emit("Concat", pieces, final, state_axis, axis=0)
    return result


LAYER_EXPORTERS.update({layers.RNN: _export_recurrent, layers.LSTM: _export_recurrent,
                        layers.GRU: _export_recurrent})
