"""Module hooks: functions called around a module's forward, and when its gradients are known.

* ``register_forward_pre_hook(hook)``: ``hook(module, args)`` before ``forward``; it may return
  new positional arguments (a tuple, or one value).
* ``register_forward_hook(hook)``: ``hook(module, args, output)`` after ``forward``; it may return
  a new output.
* ``register_full_backward_hook(hook)``: ``hook(module, grad_input, grad_output)`` once the
  gradients with respect to the module's tensor arguments are computed (None for an argument
  that needs none); it may return a new ``grad_input`` tuple, which then flows on.

Each returns a handle whose ``remove()`` unregisters the hook. Hooks are not state: they are not
in ``state_dict`` and a checkpoint neither saves nor restores them.

How the backward hook sees its gradients: while recording, the module's tensor arguments pass
through :class:`BackwardHookFunction`, an identity op (several arguments are packed into one flat
tensor first, so that their gradients arrive together, in one node's backward), and each output
through :class:`OutputGradientFunction`, an identity op that notes its gradient. Without a
backward hook, or without recording (inference, export), nothing is wrapped.
"""

from __future__ import annotations

import math

from ..autograd.function import Function
from ..autograd.grad_mode import is_grad_enabled
from ..autograd.hooks import add_hook
from ..autograd.tensor import Tensor


class ModuleHooks:
    """The hooks of one module, in registration order (``prepend`` puts one first)."""

    __slots__ = ("forward_pre", "forward", "full_backward", "with_kwargs")

    def __init__(self):
        self.forward_pre: dict = {}
        self.forward: dict = {}
        self.full_backward: dict = {}
        self.with_kwargs: set = set()  # keys of hooks that take (and return) kwargs

    def __bool__(self) -> bool:
        return bool(self.forward_pre or self.forward or self.full_backward)

    def add(self, table_name: str, hook, prepend: bool, with_kwargs: bool):
        table = getattr(self, table_name)
        handle = add_hook(table, hook, f"register_{table_name}_hook")
        if prepend:
            table_items = list(table.items())
            table.clear()
            table[handle.key] = hook
            table.update((k, v) for k, v in table_items if k != handle.key)
        if with_kwargs:
            self.with_kwargs.add(handle.key)
        return handle

    def describe(self) -> str:
        kinds = [name for name, table in (("forward pre-hooks", self.forward_pre),
                                          ("forward hooks", self.forward),
                                          ("backward hooks", self.full_backward)) if table]
        return ", ".join(kinds)


def call_with_hooks(module, hooks: ModuleHooks, args: tuple, kwargs: dict, run):
    """``run(args, kwargs)`` (the module's forward, traced or not) with ``hooks`` around it."""
    for key, hook in list(hooks.forward_pre.items()):
        if key in hooks.with_kwargs:
            result = hook(module, args, kwargs)
            if result is not None:
                if not (isinstance(result, tuple) and len(result) == 2):
                    raise TypeError(f"forward pre-hook {_name(hook)} (with_kwargs) must return "
                                    f"None or a tuple (args, kwargs), got {type(result).__name__}")
                args, kwargs = result
        else:
            result = hook(module, args)
            if result is not None:
                args = result if isinstance(result, tuple) else (result,)
    record = None
    if hooks.full_backward and is_grad_enabled():
        record = _BackwardRecord(module, hooks)
        args = record.wrap_inputs(args)
    output = run(args, kwargs)
    for key, hook in list(hooks.forward.items()):
        result = hook(module, args, kwargs, output) if key in hooks.with_kwargs else \
            hook(module, args, output)
        if result is not None:
            output = result
    if record is not None:
        output = record.wrap_outputs(output)
    return output


def _name(hook) -> str:
    return repr(getattr(hook, "__name__", hook))


class _BackwardRecord:
    """One forward call's link between its gradients and the module's backward hooks."""

    def __init__(self, module, hooks: ModuleHooks):
        self.module, self.hooks = module, hooks
        self.input_count = 0
        self.input_positions: list = []  # positions in args of the tensors that need a grad
        self.output_grads: list = []
        self.output_count = 0
        self.outputs_seen = 0
        self.inputs_wrapped = False

    # -- forward ---------------------------------------------------------------------------------

    def wrap_inputs(self, args: tuple) -> tuple:
        self.input_count = len(args)
        self.input_positions = [i for i, a in enumerate(args)
                                if isinstance(a, Tensor) and a.requires_grad]
        if not self.input_positions:
            return args
        wanted = [args[i] for i in self.input_positions]
        if len(wanted) == 1:
            wrapped = [BackwardHookFunction.apply(wanted[0], record=self)]
        else:
            if len({t.dtype for t in wanted}) != 1 or len({t.device for t in wanted}) != 1:
                raise TypeError(f"register_full_backward_hook: the tensor arguments of "
                                f"{type(self.module).__name__} differ in dtype or device, which "
                                f"this hook cannot yet gather into one gradient step")
            packed = BackwardHookFunction.apply(*wanted, record=self)
            wrapped, start = [], 0
            for tensor in wanted:
                stop = start + tensor.numel()
                wrapped.append(packed[start:stop].reshape(tensor.shape))
                start = stop
        self.inputs_wrapped = True
        args = list(args)
        for position, tensor in zip(self.input_positions, wrapped):
            args[position] = tensor
        return tuple(args)

    def wrap_outputs(self, output):
        single = isinstance(output, Tensor)
        outputs = (output,) if single else output
        if not isinstance(outputs, (tuple, list)):
            return output
        self.output_grads = [None] * len(outputs)
        wrapped = []
        for position, value in enumerate(outputs):
            if isinstance(value, Tensor) and value.requires_grad:
                self.output_count += 1
                value = OutputGradientFunction.apply(value, record=self, position=position)
            wrapped.append(value)
        if single:
            return wrapped[0]
        if hasattr(outputs, "_fields"):  # a named tuple (max's values and indices, say)
            return type(outputs)(*wrapped)
        return type(outputs)(wrapped)

    # -- backward --------------------------------------------------------------------------------

    def output_gradient(self, position: int, grad) -> None:
        self.output_grads[position] = grad
        self.outputs_seen += 1
        if not self.inputs_wrapped and self.outputs_seen == self.output_count:
            self.fire([])  # nothing upstream needs a gradient: called with grad_input of Nones

    def fire(self, input_grads: list) -> list:
        """Call the hooks with (grad_input, grad_output); returns the grads to pass on.

        A gradient that reaches the inputs without having passed through an output (the second
        pass of a double backward walks the recorded first one, which joins the inputs
        directly) is not this module's backward: the hooks are skipped, as in PyTorch."""
        if self.output_count and not self.outputs_seen:
            return input_grads
        grad_input = [None] * self.input_count
        for position, grad in zip(self.input_positions, input_grads):
            grad_input[position] = grad
        grad_output = tuple(self.output_grads)
        self.output_grads = [None] * len(self.output_grads)
        self.outputs_seen = 0
        for hook in list(self.hooks.full_backward.values()):
            result = hook(self.module, tuple(grad_input), grad_output)
            if result is None:
                continue
            result = (result,) if isinstance(result, Tensor) else tuple(result)
            if len(result) != len(grad_input):
                raise ValueError(f"backward hook {_name(hook)} returned {len(result)} gradients "
                                 f"for {len(grad_input)} inputs of "
                                 f"{type(self.module).__name__}")
            for position, (old, new) in enumerate(zip(grad_input, result)):
                if new is not None and old is not None and tuple(new.shape) != tuple(old.shape):
                    raise ValueError(f"backward hook {_name(hook)} returned a gradient of shape "
                                     f"{tuple(new.shape)} for input {position} of shape "
                                     f"{tuple(old.shape)}")
            grad_input = list(result)
        return [grad_input[position] for position in self.input_positions]


class BackwardHookFunction(Function):
    """Identity on a module's tensor arguments (several are packed flat into one), whose backward
    hands their gradients to the module's backward hooks and passes on what they return."""

    def forward(self, *arrays, record):
        be = self.backend
        self.record, self.shapes = record, [a.shape for a in arrays]
        if len(arrays) == 1:
            self.output_is_view = True
            return arrays[0]
        return be.concatenate([be.reshape(a, (math.prod(a.shape),)) for a in arrays], 0)

    def backward(self, grad):
        be, device = self.backend, self.parents[0].device
        grads = [Tensor._wrap(g, device) for g in self._split(be.getitem, be.reshape, grad)]
        passed = self.record.fire(grads)
        return tuple(None if g is None else be.astype(g.data, grad.dtype) for g in passed)

    def differentiable_backward(self, grad, output):
        grads = self._split(Tensor.__getitem__, Tensor.reshape, grad)
        return tuple(self.record.fire(grads))

    def _split(self, getitem, reshape, grad) -> list:
        if len(self.shapes) == 1:
            return [grad]
        pieces, start = [], 0
        for shape in self.shapes:
            stop = start + math.prod(shape)
            pieces.append(reshape(getitem(grad, (slice(start, stop),)), shape))
            start = stop
        return pieces


class OutputGradientFunction(Function):
    """Identity on one output of a module with backward hooks; notes the output's gradient."""

    output_is_view = True

    def forward(self, a, record, position):
        self.record, self.position = record, position
        return a

    def backward(self, grad):
        self.record.output_gradient(self.position, Tensor._wrap(grad, self.parents[0].device))
        return grad

    def differentiable_backward(self, grad, output):
        self.record.output_gradient(self.position, grad)
        return grad
