"""``compile_model``: trace an eval-mode model once, replay its ops as a flat plan.

A model's forward pass is Python: modules call modules, which call ops, each of which checks its
arguments, builds an autograd node, wraps its result in a Tensor. For a batch of 128 that cost is
nothing beside the arithmetic; for one sample it is most of the time. So the model is run once on
an example under the tracing hook (:mod:`minidl.autograd.tracing`), which reports every op with
its inputs, attributes and output. What remains is a list of *steps*, each "call this op's
forward on these slots, write that slot", over a table of slots holding the input, the
constants (the parameters and buffers, copied at compile time) and every intermediate result.

Two things make the plan cheaper than the model besides skipping the Python around the ops:

* **BatchNorm folding.** In evaluation, batch norm is an affine map per channel,
  y = (z - μ)·γ/√(σ²+ε) + β, and z = W∗x + b is linear in W and b, so the two collapse into one
  convolution (or linear layer) with W' = W·s and b' = (b - μ)·s + β, where s = γ/√(σ²+ε) is
  applied along the output channel. The rounding differs from the model's in the last bits.
* **No autograd.** Each step runs the op's ``forward`` on backend arrays directly: no graph
  node is linked, no version counted, no Tensor made until the outputs.

The plan is exactly what ran on the example: Python control flow that depends on values is
frozen (as in ``torch.jit.trace``), which is why the compiled model accepts only inputs of the
example's shape, dtype and device, and refuses anything else rather than guess. The weights are
frozen too: compile again after changing them.
"""

from __future__ import annotations

import threading

from ..autograd import tracing
from ..autograd.grad_mode import no_grad
from ..autograd.tensor import Tensor
from ..backend import get_backend
from ..ops.conv import Conv2dFunction
from ..ops.linalg import LinearFunction
from ..ops.elementwise import ReluFunction
from ..ops.nn_ops import BatchNormFunction
from ..ops.pool import MaxPool2dFunction
from ..random import get_rng_state
from .lowering import lower_steps


class _Recorder:
    """The tracer: keeps every op call in order; modules run as usual (their ops report)."""

    def __init__(self):
        self.calls = []

    def on_module(self, module, args, kwargs, run):
        return run()

    def on_function(self, function_class, inputs, attrs, output):
        self.calls.append((function_class, inputs, attrs, output))


class _Step:
    """One op of the plan: ``slots[output] = op.forward(*slots[inputs], **attrs)``."""

    __slots__ = ("op", "inputs", "attrs", "output", "output_ndim", "backend", "release", "note")

    def __init__(self, op, inputs, attrs, output, output_ndim, backend):
        self.op, self.inputs, self.attrs, self.output = op, list(inputs), dict(attrs), output
        self.output_ndim, self.backend = output_ndim, backend
        self.release = ()  # slots no later step reads: dropped after this one, freeing memory
        self.note = ""  # how the step runs, when not through the op's forward (see lowering)

    def __repr__(self) -> str:
        attrs = "".join(f", {k}={v!r}" for k, v in self.attrs.items()
                        if k not in ("mean", "var", "running_mean", "running_var"))
        args = ", ".join(f"%{i}" for i in self.inputs)
        note = f"  # {self.note}" if self.note else ""
        return f"%{self.output} = {self.op.__name__}({args}{attrs}){note}"


class CompiledModel:
    """A model traced into a flat plan of backend calls (see the module docstring).

    Call it with inputs of the example's shapes, dtypes and device (Tensors or NumPy arrays); it
    returns what the model returned (a Tensor, or a tuple of Tensors) with the same values, to
    float rounding. ``print(compiled)`` lists the plan.
    """

    def __init__(self, inputs, slots, steps, outputs, single_output, specs):
        self._input_specs = tuple((t.shape, t.dtype, t.device) for t in inputs)
        self._slots = slots
        self._steps = steps
        lowered = {}
        if steps and all(step.backend is steps[0].backend for step in steps):
            lowered = lower_steps(steps, slots, specs, {slot for slot, _ in outputs})
        # (run, read): run(slots[read]), or run(slots) when read is None. A plan step with a
        # buffer of its own is called on the one slot it reads with no wrapper around it: at
        # batch 1 a Python call per step is a few per cent of the whole.
        self._program = tuple(
            lowered[index] if index in lowered else (_runner(step), None)
            for index, step in enumerate(steps) if lowered.get(index, True) is not None)
        self._outputs = tuple((slot, device, get_backend(device).copy) for slot, device in outputs)
        self._single = single_output
        # Lowered steps write into buffers owned by the plan: one call at a time.
        self._lock = threading.Lock()

    @property
    def steps(self) -> tuple:
        """The plan, one readable line per step (``%3 = Conv2dFunction(%0, %1, %2, ...)``)."""
        return tuple(repr(step) for step in self._steps)

    def __repr__(self) -> str:
        lines = [f"CompiledModel(inputs={[s[:2] for s in self._input_specs]}, "
                 f"{len(self._steps)} steps)"] + ["  " + line for line in self.steps]
        return "\n".join(lines)

    def _check_inputs(self, inputs) -> list:
        if len(inputs) != len(self._input_specs):
            raise TypeError(f"compiled model: expected {len(self._input_specs)} input(s), got "
                            f"{len(inputs)}")
        arrays = []
        for position, (value, (shape, dtype, device)) in enumerate(zip(inputs, self._input_specs)):
            if not isinstance(value, Tensor):
                if type(value).__name__ != "ndarray":
                    raise TypeError(f"compiled model: input {position} must be a Tensor or a "
                                    f"NumPy array, got {type(value).__name__}")
                value = Tensor._wrap(get_backend(device).from_numpy(value), device)
            if value.shape != shape or value.dtype != dtype or value.device != device:
                raise ValueError(
                    f"compiled model: input {position} has shape {value.shape}, dtype "
                    f"{value.dtype}, device {value.device!r}; it was compiled for shape {shape}, "
                    f"dtype {dtype}, device {device!r}. The plan is fixed to the example's "
                    f"shape: compile again with an example of the new shape.")
            arrays.append(value.data)
        return arrays

    def __call__(self, *inputs):
        arrays = self._check_inputs(inputs)
        with self._lock:
            slots = list(self._slots)
            slots[:len(arrays)] = arrays
            for run, read in self._program:
                if read is None:
                    run(slots)
                else:
                    run(slots[read])
            # Copied out: the next call reuses the plan's buffers (a result may be one of them).
            results = tuple(Tensor._wrap(copy(slots[slot]), device)
                            for slot, device, copy in self._outputs)
        return results[0] if self._single else results


def compile_model(model, example_input) -> CompiledModel:
    """Trace ``model`` (an eval-mode Module, or any callable of Tensors) on ``example_input`` (a
    Tensor or NumPy array, or a tuple of them) into a :class:`CompiledModel`.

    The model must be in evaluation mode (``model.eval()``), since training-mode layers (batch
    statistics, dropout) cannot be frozen into a plan, and its forward must not draw random
    numbers or edit tensors in place. Parameters and buffers are copied: later changes to the
    model do not reach the compiled plan. A model with hooks is refused (a plan would not call
    them).
    """
    from ..nn.module import Module
    if isinstance(model, Module):
        training = [name or type(model).__name__ for name, m in model.named_modules()
                    if m.training]
        if training:
            raise ValueError(f"compile: the model is in training mode ({', '.join(training[:3])}"
                             f"{' ...' if len(training) > 3 else ''}); call model.eval() first")
        hooked = model._hooks_in_tree()
        if hooked:
            # A plan replays the traced ops; a hook's Python (collecting features, printing,
            # changing an output) would run once, at tracing, and then never again.
            raise ValueError(f"compile: the model has hooks ({'; '.join(hooked)}), which a "
                             f"compiled plan would not call; remove them (handle.remove()) "
                             f"before compiling, or run the model uncompiled")
    elif not callable(model):
        raise TypeError(f"compile: model must be a Module or a callable, got "
                        f"{type(model).__name__}")
    examples = example_input if isinstance(example_input, (tuple, list)) else (example_input,)
    inputs = []
    for position, value in enumerate(examples):
        if isinstance(value, Tensor):
            inputs.append(value.detach())
        elif type(value).__name__ == "ndarray":
            inputs.append(Tensor._wrap(get_backend("cpu").from_numpy(value), "cpu"))
        else:
            raise TypeError(f"compile: example input {position} must be a Tensor or a NumPy "
                            f"array, got {type(value).__name__}")
    if not inputs:
        raise ValueError("compile: give at least one example input")

    recorder = _Recorder()
    rng_before = get_rng_state()
    with no_grad(), tracing.tracing(recorder):
        result = model(*inputs)
    if get_rng_state() != rng_before:
        raise ValueError("compile: the model drew random numbers in its forward pass (dropout "
                         "in training mode?); a plan would freeze one draw")
    single = isinstance(result, Tensor)
    results = (result,) if single else result
    if not isinstance(results, (tuple, list)) or not all(isinstance(r, Tensor) for r in results):
        raise TypeError(f"compile: the model must return a Tensor or a tuple of Tensors, got "
                        f"{type(result).__name__}")
    return _build_plan(inputs, recorder.calls, results, single)


def _build_plan(inputs, calls, results, single) -> CompiledModel:
    slots = [None] * len(inputs)
    specs = {i: (t.shape, t.dtype) for i, t in enumerate(inputs)}  # slot -> traced shape, dtype
    slot_of = {id(t): i for i, t in enumerate(inputs)}
    constant_slots = set()
    keep_alive = list(inputs)  # ids are only unique while the tensors live

    def slot_for(tensor):
        slot = slot_of.get(id(tensor))
        if slot is None:  # not computed from the inputs: a parameter, buffer or constant
            slot = slot_of[id(tensor)] = len(slots)
            slots.append(get_backend(tensor.device).copy(tensor.data))
            specs[slot] = (tensor.shape, tensor.dtype)
            constant_slots.add(slot)
            keep_alive.append(tensor)
        return slot

    steps = []
    for op, op_inputs, attrs, output in calls:
        input_slots = [slot_for(t) for t in op_inputs]
        backend = get_backend(op_inputs[0].device)
        if op is BatchNormFunction and attrs["batch_stats"]:  # never move running statistics
            attrs = dict(attrs, running_mean=None, running_var=None)
        elif op is BatchNormFunction:  # running statistics travel as attributes: freeze them
            attrs = dict(attrs, mean=backend.copy(attrs["mean"]), var=backend.copy(attrs["var"]))
        slot_of[id(output)] = len(slots)
        specs[len(slots)] = (output.shape, output.dtype)
        slots.append(None)
        keep_alive.append(output)
        steps.append(_Step(op, input_slots, attrs, len(slots) - 1, output.ndim, backend))
    outputs = [(slot_for(r), r.device) for r in results]

    steps = _fold_batch_norms(steps, slots, constant_slots, {s for s, _ in outputs})
    _pool_before_relu(steps, specs, {s for s, _ in outputs})
    _plan_releases(steps, {s for s, _ in outputs} | constant_slots | set(range(len(inputs))))
    return CompiledModel(inputs, slots, steps, outputs, single, specs)


def _fold_batch_norms(steps, slots, constant_slots, output_slots) -> list:
    """Merge each eval-mode BatchNorm into the Conv2d/Linear whose result only it reads."""
    producer = {step.output: step for step in steps}
    readers = {}
    for step in steps:
        for slot in step.inputs:
            readers[slot] = readers.get(slot, 0) + 1
    kept = []
    for step in steps:
        source = producer.get(step.inputs[0]) if step.op is BatchNormFunction else None
        if source is None or step.attrs["batch_stats"] or not _foldable(
                source, step, slots, constant_slots, readers, output_slots):
            kept.append(step)
            continue
        be = step.backend
        weight = slots[source.inputs[1]]
        dtype = weight.dtype
        # s = γ/√(σ²+ε) per output channel; W' = W·s, b' = (b - μ)·s + β.
        variance = be.add(be.astype(step.attrs["var"], dtype), step.attrs["eps"])
        scale = be.div(1, be.math_function(variance, "sqrt"))
        if len(step.inputs) == 3:
            scale = be.mul(scale, slots[step.inputs[1]])
        bias = slots[source.inputs[2]] if len(source.inputs) == 3 else be.zeros(scale.shape, dtype)
        bias = be.mul(be.sub(bias, be.astype(step.attrs["mean"], dtype)), scale)
        if len(step.inputs) == 3:
            bias = be.add(bias, slots[step.inputs[2]])
        channel_axis = (-1,) + (1,) * (weight.ndim - 1)
        slots[source.inputs[1]] = be.mul(weight, be.reshape(scale, channel_axis))
        slots.append(bias)
        constant_slots.add(len(slots) - 1)
        source.inputs = source.inputs[:2] + [len(slots) - 1]
        source.output = step.output  # the BatchNorm's readers now read the convolution
    return kept


def _foldable(source, norm, slots, constant_slots, readers, output_slots) -> bool:
    # BatchNorm normalises axis 1. A convolution's output channels are axis 1; a Linear's
    # features are its last axis, so they coincide only for 2-D (N, features) activations.
    if not (source.op is Conv2dFunction
            or (source.op is LinearFunction and source.output_ndim == 2)):
        return False
    params = source.inputs[1:] + norm.inputs[1:]
    return (all(slot in constant_slots for slot in params)
            and readers.get(norm.inputs[0], 0) == 1 and norm.inputs[0] not in output_slots
            and readers.get(source.inputs[1], 0) == 1)  # a weight shared elsewhere stays as is


def _pool_before_relu(steps, specs, output_slots) -> None:
    """ReLU then max-pool becomes max-pool then ReLU: the same values, since ReLU never changes
    which of two numbers is larger (max(relu a, relu b) = relu(max(a, b)), NaN included), but the
    ReLU then touches a quarter of the elements after a 2×2 pool."""
    readers = {}
    for step in steps:
        for slot in step.inputs:
            readers[slot] = readers.get(slot, 0) + 1
    for relu, pool in zip(steps, steps[1:]):
        if relu.op is ReluFunction and pool.op is MaxPool2dFunction and \
                pool.inputs[0] == relu.output and \
                readers[relu.output] == 1 and relu.output not in output_slots:
            relu.op, pool.op = MaxPool2dFunction, ReluFunction
            relu.attrs, pool.attrs = pool.attrs, relu.attrs
            specs[relu.output] = specs[pool.output]  # the first slot now holds pooled values


def _plan_releases(steps, keep) -> None:
    """After each step, drop the intermediate results no later step reads."""
    last_read = {}
    for index, step in enumerate(steps):
        for slot in step.inputs:
            last_read[slot] = index
    for index, step in enumerate(steps):
        step.release = tuple(slot for slot in set(step.inputs)
                             if last_read[slot] == index and slot not in keep)


def _runner(step):
    """The step as a function of the slot table: run the op's forward on the arrays it reads,
    store the result, drop the slots no later step reads."""
    op, backend, attrs = step.op, step.backend, step.attrs
    reads, write, release = step.inputs, step.output, step.release
    no_grads = (False,) * len(reads)

    def run(slots):
        node = op()
        node.backend, node.needs_input_grad = backend, no_grads
        slots[write] = node.forward(*[slots[i] for i in reads], **attrs)
        for slot in release:
            slots[slot] = None
    return run
