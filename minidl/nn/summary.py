"""``Module.summary()``: a table of a model's layers, their output shapes and parameter counts.

Output shapes are learned by running the model once on an example input (zeros of
``input_shape``) with a tracer attached (:mod:`minidl.autograd.tracing`) that notes what each
module returns -- the same hook the ONNX exporter uses, so no module needs to know about it.
Without an input the shapes are not known and the column says so.
"""

from __future__ import annotations

import numpy as np

from ..autograd import tracing
from ..autograd.grad_mode import no_grad
from ..autograd.tensor import Tensor, tensor


class _OutputShapes:
    """A tracer that records the shape of each module's output (first call only)."""

    def __init__(self):
        self.shapes: dict[int, str] = {}

    def on_module(self, module, args, kwargs, run):
        output = run()
        self.shapes.setdefault(id(module), _describe(output))
        return output

    def on_function(self, function_class, inputs, attrs, output):
        pass


def _describe(output) -> str:
    if isinstance(output, Tensor):
        return str(tuple(output.shape))
    if isinstance(output, (tuple, list)):
        return ", ".join(_describe(o) for o in output)
    return type(output).__name__


def count_parameters(module, trainable_only: bool = False, recurse: bool = True) -> int:
    """Number of parameter values (shared parameters counted once)."""
    return sum(int(np.prod(p.shape)) for p in module.parameters(recurse=recurse)
               if p.requires_grad or not trainable_only)


def _output_shapes(model, example_input) -> dict[int, str]:
    recorder = _OutputShapes()
    inputs = example_input if isinstance(example_input, (tuple, list)) else (example_input,)
    inputs = [x if isinstance(x, Tensor) else tensor(np.asarray(x)) for x in inputs]
    was_training = model.training
    model.eval()  # no batch-norm statistics or dropout draws are changed by looking
    try:
        with no_grad(), tracing.tracing(recorder):
            model(*inputs)
    finally:
        model.train(was_training)
    return recorder.shapes


def _shape_hint(model, input_shape: tuple, dtype, error: Exception) -> str:
    """Why running the model on zeros of ``input_shape`` failed, and the likely fix: Keras's
    ``input_shape`` leaves out the batch axis, minidl's (PyTorch's) includes it. The shape
    with a batch axis of 1 is tried, and suggested only when the model runs on it."""
    message = (f"summary: the model failed on an input of shape {input_shape} "
               f"({type(error).__name__}: {error}); input_shape includes the batch axis")
    try:
        _output_shapes(model, np.zeros((1,) + input_shape, dtype))
    except Exception:
        return message
    return message + f": input_shape={(1,) + input_shape} runs"


def summarize(model, input_shape=None, example_input=None, dtype=np.float32) -> str:
    """The summary table of ``model`` as text (see :meth:`Module.summary`)."""
    if input_shape is not None and example_input is not None:
        raise ValueError("summary: give input_shape or example_input, not both")
    if input_shape is not None:
        example_input = np.zeros(tuple(input_shape), dtype)
        try:
            shapes = _output_shapes(model, example_input)
        except Exception as error:
            raise ValueError(_shape_hint(model, tuple(input_shape), dtype, error)) from error
    else:
        shapes = _output_shapes(model, example_input) if example_input is not None else {}
    rows = []
    for name, module in model.named_modules():
        if not name and any(True for _ in module.children()):
            continue  # the model itself: its layers are the rows, its total is at the bottom
        depth = name.count(".") if name else 0
        label = "  " * depth + (name or "(model)") + f" ({type(module).__name__})"
        shape = shapes.get(id(module), "?" if example_input is None else "(not called)")
        rows.append((label, shape, f"{count_parameters(module, recurse=False):,}"))
    headers = ("Layer (type)", "Output shape", "Params")
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h)
              for i, h in enumerate(headers)]
    rule = "-" * (sum(widths) + 4)

    def line(cells):
        return f"{cells[0]:<{widths[0]}}  {cells[1]:<{widths[1]}}  {cells[2]:>{widths[2]}}"

    total = count_parameters(model)
    trainable = count_parameters(model, trainable_only=True)
    text = [f"{type(model).__name__}", rule, line(headers), rule]
    text += [line(row) for row in rows]
    text += [rule, f"Total params: {total:,}", f"Trainable params: {trainable:,}",
             f"Non-trainable params: {total - trainable:,}"]
    if example_input is None:
        text.append("(output shapes: pass input_shape= to run the model once and see them)")
    return "\n".join(text)
