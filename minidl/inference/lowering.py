"""The plan's steps lowered onto the backend's plan steps, which may own their memory.

A plan step that calls an op's ``forward`` allocates its result, and the primitives under it
allocate their temporaries; at batch 1 a small CNN spends more time in those calls than in
arithmetic. But the plan knows every shape when it is built, so its convolutions, max pools and
linear layers are handed to the backend once, as *plan steps*
(:class:`~minidl.backend.primitives.PlanStep`, made by ``plan_conv2d``, ``plan_max_pool2d`` and
``plan_linear``). How a step computes is the backend's business: Numba's CPU backend writes
every call into buffers made once (a convolution is two copies and one BLAS call,
:mod:`minidl.backend.numba_cpu.plan_steps`); the others compose the op's own primitives
(:mod:`minidl.backend.plan_steps`). This module decides only what the plan can see and a
backend cannot:

* A ReLU that is the only reader of a step's result (not a model output, not through a
  reshape) is fused into that step, when the step can (``fuse_relu``).
* A reshape of a step's buffer that stays a view is made once, at build time.
* Neighbours: when a step reads exactly the buffer its predecessor writes, it is told so
  (``follow``), and the backend may hand the values over without a copy.

Steps fused away or made once run nothing (their runner is None). A step with a buffer has it
in its slot from build time on, so its runner only runs it; because buffers are reused, a
call's results are copied out before they are returned, and calls are serialised by a lock
(see :mod:`.plan`).
"""

from __future__ import annotations

from ..ops.conv import Conv2dFunction
from ..ops.elementwise import ReluFunction
from ..ops.linalg import LinearFunction
from ..ops.pool import MaxPool2dFunction
from ..ops.shape import ReshapeFunction


def lower_steps(steps, slots, specs, output_slots) -> dict:
    """For each step that a backend plan step runs or makes unnecessary, how to run it:
    ``(run, read)`` for ``run(slots[read])``, ``(run, None)`` for ``run(slots)``, or None when
    nothing is left to run; {step index: that}.

    ``specs`` maps every slot to the (shape, dtype) it had in the traced run.
    """
    readers = {}
    for step in steps:
        for slot in step.inputs:
            readers[slot] = readers.get(slot, 0) + 1
    planned_at, writes, by_output, runners = {}, {}, {}, {}
    for index, step in enumerate(steps):
        builder = _BUILDERS.get(step.op)
        planned = builder(step, slots, specs) if builder else None
        if planned is not None:
            planned_at[index], writes[planned] = planned, [step.output]
            by_output[step.output] = planned
            if planned.output is not None:
                slots[step.output] = planned.output
            step.note = "plan step" + (", own buffer" if planned.output is not None else "")
            continue
        source = by_output.get(step.inputs[0])
        if step.op is ReshapeFunction and source is not None:
            view = source.output_view(step.attrs["shape"])
            if view is not None:  # a view of a fixed buffer: fixed
                slots[step.output] = view
                by_output[step.output] = source
                runners[index] = None
                step.note = f"a view of %{step.inputs[0]}, made once"
            continue
        if step.op is ReluFunction and source is not None and \
                step.inputs[0] in writes[source] and readers[step.inputs[0]] == 1 and \
                step.inputs[0] not in output_slots and source.fuse_relu():
            writes[source].append(step.output)
            slots[step.output] = slots[step.inputs[0]]
            by_output[step.output] = source
            runners[index] = None
            step.note = f"fused into the step writing %{step.inputs[0]}"
    for index, planned in planned_at.items():
        read = steps[index].inputs[0]
        source = by_output.get(read)
        # Hand-offs between neighbours, where the reader sees exactly the writer's buffer (not
        # a reshaped view of it).
        if source is not None and source.output is not None and slots[read] is source.output:
            planned.follow(source, readers[read] == 1 and read not in output_slots)
        runners[index] = _runner(planned, read, writes[planned])
    return runners


def _runner(planned, read, writes) -> tuple:
    """The plan step as ``(run, read)`` (see :func:`lower_steps`)."""
    if planned.output is not None:  # its buffer is in its slots already: call it on its input
        return planned, read

    def run(slots):
        result = planned(slots[read])
        for slot in writes:  # the step's result, and a fused ReLU's
            slots[slot] = result
    return run, None


def _constants_of_one_dtype(step, slots, specs) -> bool:
    """Every parameter is a constant of the plan, and input, parameters and result share one
    dtype."""
    dtype = specs[step.inputs[0]][1]
    return specs[step.output][1] == dtype and all(
        slots[i] is not None and slots[i].dtype == dtype for i in step.inputs[1:])


def _parameters(step, slots):
    """(weight, bias or None) of a convolution or linear step."""
    return slots[step.inputs[1]], slots[step.inputs[2]] if len(step.inputs) == 3 else None


def _plan_conv(step, slots, specs):
    x_shape = specs[step.inputs[0]][0]
    if step.attrs["groups"] != 1 or len(x_shape) != 4 or \
            not _constants_of_one_dtype(step, slots, specs):
        return None
    return step.backend.plan_conv2d(x_shape, *_parameters(step, slots),
                                    *(step.attrs[k] for k in ("stride", "padding", "dilation")))


def _plan_pool(step, slots, specs):
    x_shape, dtype = specs[step.inputs[0]]
    if len(x_shape) != 4:
        return None
    return step.backend.plan_max_pool2d(x_shape, dtype, *(step.attrs[k] for k in (
        "kernel_size", "stride", "padding", "dilation", "ceil_mode")))


def _plan_linear(step, slots, specs):
    x_shape = specs[step.inputs[0]][0]
    if len(x_shape) != 2 or not _constants_of_one_dtype(step, slots, specs):
        return None
    return step.backend.plan_linear(x_shape, *_parameters(step, slots))


_BUILDERS = {Conv2dFunction: _plan_conv, MaxPool2dFunction: _plan_pool,
             LinearFunction: _plan_linear}
