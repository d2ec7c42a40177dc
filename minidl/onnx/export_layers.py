"""Layers the exporter writes whole, instead of letting the ops inside report themselves.

Most layers need no entry: their forward is a single op (Linear → ``linear``, Conv2d → ``conv2d``,
ReLU → ``relu``, ...) which reports itself as exactly the ONNX node the layer corresponds to, with
the layer's weights named by their ``state_dict`` names; Dropout and Identity return their input
in evaluation and so add nothing. A layer is listed here when its ops alone would say less than
the layer does:

* Embedding: its integer indices reach the lookup as a plain array, not as a traced input, so
  the layer itself writes ``Gather(weight, indices)``;
* Flatten over all but the batch axis is ONNX ``Flatten`` (clearer than a Reshape);
* AdaptiveAvgPool2d to 1×1 is ``GlobalAveragePool``, which works at any image size.

Each entry is ``exporter(builder, module, args, run) -> output``. It either maps the layer whole
(running it under ``tracing.suspended()`` so the inner ops stay silent) or returns ``run()``.
"""

from __future__ import annotations

from ..autograd import tracing
from ..autograd.tensor import Tensor
from ..nn import layers


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
