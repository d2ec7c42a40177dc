"""Module: the base of every layer and model.

A Module owns parameters (trainable tensors), buffers (state that is saved but not trained, such as
batch norm's running statistics) and child modules, each registered under a name. Names compose
with dots ("0.weight", "encoder.norm.running_mean"), which is the key layout of ``state_dict`` and
the same as PyTorch's, so checkpoints and converted PyTorch weights line up name for name.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from typing import Iterator, NamedTuple

import numpy as np

from ..autograd import tracing
from ..autograd.hooks import RemovableHandle
from ..autograd.inplace import overwrite_data
from ..autograd.tensor import Tensor, cuda_device, device_and_dtype
from .hooks import ModuleHooks, call_with_hooks
from .parameter import Parameter


class StateDictMismatchError(RuntimeError, ValueError):
    """A state_dict does not fit the module: lists the missing, unexpected and mis-shaped names."""


class IncompatibleKeys(NamedTuple):
    missing_keys: list
    unexpected_keys: list


class RegisteredAttribute:
    """A layer class's name for a part every instance registers (``weight``, ``bias``,
    ``running_mean``), read without Python's ``__getattr__`` fallback.

    A registered parameter lives in ``module._parameters``, not in the instance's ``__dict__``,
    so the ordinary lookup of ``module.weight`` misses and Python then calls
    ``Module.__getattr__`` -- after building and discarding an AttributeError, ~0.5 µs a read,
    which a small network's forward pays a dozen times. Declared on the class
    (``weight = RegisteredAttribute()``), the name is found at once and read here, with the
    same answer as the fallback: the instance's own attribute if it has one, else the
    parameter, buffer or child module of that name, else AttributeError. Assigning and
    deleting go through ``Module.__setattr__``/``__delattr__`` as before; what those leave to
    ``object`` (a plain value) is kept in the instance's ``__dict__``, as without the
    declaration.
    """

    def __set_name__(self, owner, name):
        self.name = name

    def __get__(self, module, owner=None):
        if module is None:
            return self
        values = module.__dict__
        name = self.name
        if name in values:
            return values[name]
        # __getattr__'s order (parameters, then buffers), its two usual cases inline, without
        # a loop: a layer reads two to four of these per forward.
        parameters = values.get("_parameters", ())
        if name in parameters:
            return parameters[name]
        buffers = values.get("_buffers", ())
        if name in buffers:
            return buffers[name]
        return module.__getattr__(name)

    def __set__(self, module, value):
        module.__dict__[self.name] = value

    def __delete__(self, module):
        if self.name not in module.__dict__:
            raise AttributeError(f"'{type(module).__name__}' object has no attribute "
                                 f"'{self.name}'")
        del module.__dict__[self.name]


class Module:
    """Base class for layers and models: subclass it, register parts in ``__init__``, define
    ``forward``."""

    training: bool

    def __init__(self):
        object.__setattr__(self, "_parameters", OrderedDict())
        object.__setattr__(self, "_buffers", OrderedDict())
        object.__setattr__(self, "_non_persistent", set())
        object.__setattr__(self, "_modules", OrderedDict())
        object.__setattr__(self, "training", True)

    # -- registration ----------------------------------------------------------------------------

    def __setattr__(self, name, value):
        if "_parameters" not in self.__dict__:
            raise AttributeError(f"{type(self).__name__}.__init__ must call super().__init__() "
                                 f"before assigning {name!r}")
        if isinstance(value, (Parameter, Module)):
            for table in (self._parameters, self._buffers, self._modules):
                table.pop(name, None)
            self.__dict__.pop(name, None)
            (self._parameters if isinstance(value, Parameter) else self._modules)[name] = value
        elif name in self._buffers:
            if value is not None and not isinstance(value, Tensor):
                raise TypeError(f"cannot assign {type(value).__name__} to buffer {name!r}: "
                                f"expected a Tensor or None")
            self._buffers[name] = value
        elif name in self._parameters and value is None:
            self._parameters[name] = None
        else:
            self._parameters.pop(name, None)
            self._modules.pop(name, None)
            object.__setattr__(self, name, value)

    def __getattr__(self, name):
        for table in ("_parameters", "_buffers", "_modules"):
            values = self.__dict__.get(table)
            if values is not None and name in values:
                return values[name]
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")

    def __delattr__(self, name):
        for table in (self._parameters, self._buffers, self._modules):
            if name in table:
                del table[name]
                return
        object.__delattr__(self, name)

    def register_parameter(self, name: str, parameter: Parameter | None) -> None:
        self._check_name(name)
        if parameter is None:
            self._parameters[name] = None
        elif not isinstance(parameter, Parameter):
            raise TypeError(f"register_parameter: {name!r} must be a Parameter, "
                            f"got {type(parameter).__name__}")
        else:
            self._parameters[name] = parameter

    def register_buffer(self, name: str, tensor: Tensor | None, persistent: bool = True) -> None:
        """Register state that is saved in ``state_dict`` (if persistent) but not trained."""
        self._check_name(name)
        if tensor is not None and not isinstance(tensor, Tensor):
            tensor = Tensor(np.asarray(tensor), dtype=np.asarray(tensor).dtype)
        self._buffers[name] = tensor
        if persistent:
            self._non_persistent.discard(name)
        else:
            self._non_persistent.add(name)

    def add_module(self, name: str, module: "Module | None") -> None:
        self._check_name(name)
        if module is not None and not isinstance(module, Module):
            raise TypeError(f"add_module: {name!r} must be a Module, got {type(module).__name__}")
        self._modules[name] = module

    @staticmethod
    def _check_name(name):
        if not isinstance(name, str) or not name or "." in name:
            raise ValueError(f"invalid name {name!r}: must be a non-empty string without '.'")

    # -- calling ---------------------------------------------------------------------------------

    def forward(self, *args, **kwargs):
        raise NotImplementedError(f"{type(self).__name__} does not define forward()")

    # None, or this module's hooks (nn/hooks.py): a class default, so a module without hooks
    # pays one attribute read per call, and modules built without __init__ still have it.
    _hooks = None

    def __call__(self, *args, **kwargs):
        # A NumPy array given where a Tensor belongs is taken as md.tensor would take it
        # (dtype kept), so ``model(x)`` works on the arrays a data set holds. A plain loop rather
        # than any() over generators: every module call of every forward pays for this test.
        for value in (*args, *kwargs.values()) if kwargs else args:
            if isinstance(value, np.ndarray):
                args = tuple(Tensor(a) if isinstance(a, np.ndarray) else a for a in args)
                kwargs = {k: Tensor(v) if isinstance(v, np.ndarray) else v
                          for k, v in kwargs.items()}
                break
        if self._hooks:
            return call_with_hooks(self, self._hooks, args, kwargs, self._call_forward)
        # The same two lines as _call_forward, inline: a module call without hooks costs what
        # it did before hooks existed (one attribute test, no extra call).
        if tracing.active is not None:
            return tracing.active.on_module(self, args, kwargs,
                                            lambda: self.forward(*args, **kwargs))
        # Spreading an empty dict still builds one for the callee: most calls have no kwargs.
        return self.forward(*args, **kwargs) if kwargs else self.forward(*args)

    def _call_forward(self, args: tuple, kwargs: dict):
        if tracing.active is not None:
            return tracing.active.on_module(self, args, kwargs,
                                            lambda: self.forward(*args, **kwargs))
        return self.forward(*args, **kwargs)

    # -- hooks (not state: state_dict and checkpoints never see them) ----------------------------

    def register_forward_pre_hook(self, hook, *, prepend: bool = False,
                                  with_kwargs: bool = False) -> RemovableHandle:
        """Call ``hook(module, args)`` before every forward; a returned value replaces the
        positional arguments (a tuple, or a single argument). With ``with_kwargs``,
        ``hook(module, args, kwargs)`` may return ``(args, kwargs)``. Returns a handle whose
        ``remove()`` unregisters it; ``prepend`` runs it before the hooks already there."""
        return self._hook_table().add("forward_pre", hook, prepend, with_kwargs)

    def register_forward_hook(self, hook, *, prepend: bool = False,
                              with_kwargs: bool = False) -> RemovableHandle:
        """Call ``hook(module, args, output)`` after every forward (``hook(module, args, kwargs,
        output)`` with ``with_kwargs``); a returned value replaces the output. Collecting
        features is the common use. Returns a handle whose ``remove()`` unregisters it."""
        return self._hook_table().add("forward", hook, prepend, with_kwargs)

    def register_full_backward_hook(self, hook, *, prepend: bool = False) -> RemovableHandle:
        """Call ``hook(module, grad_input, grad_output)`` when the gradients with respect to
        this module's tensor arguments have been computed (tuples, None where there is none);
        a returned tuple replaces ``grad_input``. Returns a handle whose ``remove()``
        unregisters it."""
        return self._hook_table().add("full_backward", hook, prepend, False)

    def _hook_table(self) -> ModuleHooks:
        if self.__dict__.get("_hooks") is None:
            object.__setattr__(self, "_hooks", ModuleHooks())
        return self._hooks

    def _hooks_in_tree(self) -> list[str]:
        """"name: kinds of hooks" for this module and its descendants that have hooks."""
        return [f"{name or type(module).__name__}: {module._hooks.describe()}"
                for name, module in self.named_modules() if module._hooks]

    # -- traversal -------------------------------------------------------------------------------

    def named_children(self) -> Iterator[tuple[str, "Module"]]:
        for name, module in self._modules.items():
            if module is not None:
                yield name, module

    def children(self) -> Iterator["Module"]:
        for _, module in self.named_children():
            yield module

    def named_modules(self, prefix: str = "") -> Iterator[tuple[str, "Module"]]:
        """This module and every descendant, depth first, with dotted names ("" for self)."""
        seen = set()
        stack = [(prefix, self)]
        while stack:
            name, module = stack.pop()
            if id(module) in seen:
                continue
            seen.add(id(module))
            yield name, module
            children = [(f"{name}.{child_name}" if name else child_name, child)
                        for child_name, child in module.named_children()]
            stack.extend(reversed(children))

    def modules(self) -> Iterator["Module"]:
        for _, module in self.named_modules():
            yield module

    def _named_members(self, table: str, prefix: str, recurse: bool):
        """(dotted name, tensor) for the entries of ``table`` (``_parameters`` or
        ``_buffers``) of this module and, with ``recurse``, its descendants; each object once."""
        seen = set()
        modules = self.named_modules(prefix) if recurse else [(prefix, self)]
        for module_name, module in modules:
            for name, value in getattr(module, table).items():
                if value is None or id(value) in seen:
                    continue
                seen.add(id(value))
                yield (f"{module_name}.{name}" if module_name else name), value

    def named_parameters(self, prefix: str = "", recurse: bool = True):
        """(dotted name, Parameter) for every parameter, shared ones once."""
        return self._named_members("_parameters", prefix, recurse)

    def parameters(self, recurse: bool = True) -> Iterator[Parameter]:
        """Every parameter, shared ones once (what an optimizer is given)."""
        return (p for _, p in self._named_members("_parameters", "", recurse))

    def named_buffers(self, prefix: str = "", recurse: bool = True):
        """(dotted name, Tensor) for every buffer (running statistics), shared ones once."""
        return self._named_members("_buffers", prefix, recurse)

    def buffers(self, recurse: bool = True) -> Iterator[Tensor]:
        """Every buffer, shared ones once."""
        return (b for _, b in self._named_members("_buffers", "", recurse))

    # -- modes and bulk changes ------------------------------------------------------------------

    def train(self, mode: bool = True) -> "Module":
        """Training mode (dropout active, batch norm uses batch statistics) for every module."""
        for module in self.modules():
            object.__setattr__(module, "training", bool(mode))
        return self

    def eval(self) -> "Module":
        """Evaluation mode: same as ``train(False)``."""
        return self.train(False)

    def requires_grad_(self, requires_grad: bool = True) -> "Module":
        for p in self.parameters():
            p.requires_grad_(requires_grad)
        return self

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.parameters():
            if set_to_none:
                p.grad = None
            elif p.grad is not None:
                p.grad.zero_()

    def apply(self, function) -> "Module":
        for module in self.modules():
            function(module)
        return self

    def to(self, device=None, dtype=None, non_blocking: bool = False) -> "Module":
        """Move (or cast) every parameter and buffer in place, and the gradients with them (as
        PyTorch). ``device`` may also be a tensor (its device, and its dtype when floating) or a
        dtype; ``dtype`` casts floating-point values only. ``non_blocking`` is as for
        ``Tensor.to``."""
        if isinstance(device, Tensor) and dtype is None and device.dtype.kind != "f":
            device = device.device  # (an index or mask tensor says where, not what type)
        device, dtype = device_and_dtype(device, dtype)
        for module in self.modules():
            for table in (module._parameters, module._buffers):
                for name, value in table.items():
                    if value is None:
                        continue
                    cast = dtype if (dtype is not None and value.dtype.kind == "f") else None
                    moved = value.detach().to(device=device, dtype=cast)
                    grad = None if value.grad is None else \
                        value.grad.detach().to(device=device, dtype=cast)
                    value.data, value.device = moved.data, moved.device
                    value.grad = grad
        return self

    def cuda(self, device=None) -> "Module":
        """Move every parameter and buffer to the current CUDA device, or to ``device`` (an
        index or "cuda:N")."""
        return self.to(cuda_device(device))

    def cpu(self) -> "Module":
        """Move every parameter and buffer to the CPU."""
        return self.to("cpu")

    def float(self) -> "Module":
        return self.to(dtype=np.float32)

    def double(self) -> "Module":
        return self.to(dtype=np.float64)

    # -- state -----------------------------------------------------------------------------------

    def _state_items(self):
        """(name, tensor) for every parameter and persistent buffer, in registration order."""
        for module_name, module in self.named_modules():
            prefix = f"{module_name}." if module_name else ""
            for name, p in module._parameters.items():
                if p is not None:
                    yield prefix + name, p
            for name, b in module._buffers.items():
                if b is not None and name not in module._non_persistent:
                    yield prefix + name, b

    def state_dict(self) -> "OrderedDict[str, np.ndarray]":
        """Ordered name -> NumPy array for every parameter and persistent buffer.

        On the CPU the arrays are the live storage (as PyTorch's state_dict shares storage):
        copy them if the values must not follow later training steps.
        """
        return OrderedDict((name, t.numpy()) for name, t in self._state_items())

    def check_state_dict(self, state_dict, strict: bool = True, *,
                         assign: bool = False) -> IncompatibleKeys:
        """Check that ``state_dict`` fits this module, without changing anything.

        The checks are exactly those of ``load_state_dict(state_dict, strict, assign)``: with
        ``strict``, no name of this module may be missing and no other name present; every
        value given for a parameter or buffer must have its shape, and a dtype that casts to
        its dtype within the same kind (exactly its dtype with ``assign``).  Every problem is
        listed in one :class:`StateDictMismatchError`; a ``state_dict`` that is not a mapping
        is a TypeError.  Returns the missing and unexpected names (empty lists when strict).
        A checkpoint calls this for every tracked module before it loads any object.
        """
        if not isinstance(state_dict, Mapping):
            raise TypeError(f"state_dict must be a mapping of names to arrays, got "
                            f"{type(state_dict).__name__}")
        own = OrderedDict(self._state_items())
        state_dict = _fit_wrapper_prefix(state_dict, own)
        missing = [name for name in own if name not in state_dict]
        unexpected = [name for name in state_dict if name not in own]
        problems = [problem for name, target in own.items() if name in state_dict
                    for problem in [_value_problem(name, state_dict[name], target, assign)]
                    if problem]
        if problems or (strict and (missing or unexpected)):
            lines = [f"Error(s) in loading state_dict for {type(self).__name__}:"]
            if strict and missing:
                lines.append("  missing keys: " + ", ".join(missing))
            if strict and unexpected:
                lines.append("  unexpected keys: " + ", ".join(unexpected))
            if problems:
                lines.append("  size or dtype mismatch: " + "; ".join(problems))
            raise StateDictMismatchError("\n".join(lines))
        return IncompatibleKeys(missing, unexpected)

    def load_state_dict(self, state_dict, strict: bool = True,
                        assign: bool = False) -> IncompatibleKeys:
        """Copy values in from ``state_dict`` (arrays or Tensors, by name).

        Everything is checked before anything is copied (:meth:`check_state_dict`): a mismatch
        leaves the module unchanged. The state of a data-parallel wrapper (every name
        ``module.<name>``, as ``DistributedDataParallel`` saves it) loads into the plain model,
        and a plain model's state into the wrapper. With ``strict`` any missing or unexpected name is an
        error; mis-shaped values always are. ``assign=True`` (as in PyTorch) makes each
        parameter and buffer *use* the given array instead of copying into its own -- dtypes
        must then match exactly -- which is how a module built under ``init.skip_init()`` gets
        its weights without a second copy.
        """
        keys = self.check_state_dict(state_dict, strict, assign=assign)
        state_dict = _fit_wrapper_prefix(state_dict, OrderedDict(self._state_items()))
        for name, target in self._state_items():
            if name not in state_dict:
                continue
            value = _as_state_value(state_dict[name])
            if assign and not isinstance(value, Tensor):
                # The array itself becomes the storage (on the CPU, no copy at all).
                target.data = target.backend.from_numpy(value)
            else:
                overwrite_data(target, value)
        return keys

    # -- description as data ---------------------------------------------------------------------

    def get_config(self) -> dict:
        """Constructor arguments as plain data, so the module can be rebuilt from a file.

        Built-in layers implement this; a user's own layer implements it too and is registered
        with :func:`minidl.nn.register_module` before files naming it can be loaded.
        """
        raise TypeError(f"{type(self).__name__} cannot be described as data: implement "
                        f"get_config() and register it with minidl.nn.register_module")

    @classmethod
    def from_config(cls, config: dict, children: list) -> "Module":
        """Rebuild from ``get_config()``'s output (``children``: rebuilt child modules, used by
        containers)."""
        return cls(**config)

    # -- printing --------------------------------------------------------------------------------

    def num_parameters(self, trainable_only: bool = False) -> int:
        """Number of parameter values (elements), shared parameters counted once;
        ``trainable_only`` counts those with ``requires_grad``."""
        from .summary import count_parameters
        return count_parameters(self, trainable_only)

    def summary(self, input_shape=None, *, example_input=None, print_fn=print) -> str:
        """Print (with ``print_fn``; None prints nothing) and return a table of the layers:
        name and type, output shape, parameter count, then the totals (Keras's summary).

        ``input_shape=(1, 1, 8, 8)`` (or ``example_input=``) runs the model once in eval
        mode, without gradients, to learn each layer's output shape. The shape includes the
        batch axis (PyTorch's rule; Keras's leaves it out): a shape the model fails on is
        reported, with the shape that has a batch axis when the model runs on that.
        """
        from .summary import summarize
        text = summarize(self, input_shape, example_input)
        if print_fn is not None:
            print_fn(text)
        return text

    def extra_repr(self) -> str:
        try:
            config = self.get_config()
        except TypeError:
            return ""
        return ", ".join(f"{k}={v!r}" for k, v in config.items())

    def __repr__(self) -> str:
        children = [f"  ({name}): " + repr(child).replace("\n", "\n  ")
                    for name, child in self.named_children()]
        if not children:
            return f"{type(self).__name__}({self.extra_repr()})"
        return f"{type(self).__name__}(\n" + "\n".join(children) + "\n)"


WRAPPER_PREFIX = "module."  # how DistributedDataParallel (as PyTorch's) names the model's state


def _fit_wrapper_prefix(state_dict: Mapping, own: Mapping) -> Mapping:
    """``state_dict`` with the wrapper prefix taken off every name (a wrapper's state for the
    plain model) or put on (a plain state for the wrapper) when that, and only that, makes its
    names those of ``own``; otherwise ``state_dict`` unchanged, for the usual checks."""
    if not state_dict or set(state_dict) == set(own):
        return state_dict
    if all(name.startswith(WRAPPER_PREFIX) for name in state_dict):
        stripped = {name[len(WRAPPER_PREFIX):]: value for name, value in state_dict.items()}
        if set(stripped) <= set(own):
            return stripped
    elif own and all(name.startswith(WRAPPER_PREFIX) for name in own):
        prefixed = {WRAPPER_PREFIX + name: value for name, value in state_dict.items()}
        if set(prefixed) <= set(own):
            return prefixed
    return state_dict


def _as_state_value(value):
    # Tensors stay where they are (a copy between tensors of one device never leaves it);
    # anything else is host data.
    return value if isinstance(value, Tensor) else np.asarray(value)


def _value_problem(name: str, value, target: Tensor, assign: bool) -> str | None:
    """Why ``value`` cannot be loaded into the parameter or buffer ``target``, or None."""
    try:
        value = _as_state_value(value)
    except (TypeError, ValueError) as exc:  # a ragged list, say
        return f"{name}: not an array ({exc})"
    if tuple(value.shape) != target.shape:
        return f"{name}: shape {value.shape} in the state_dict, {target.shape} in the model"
    if assign and value.dtype != target.dtype:
        return f"{name}: dtype {value.dtype} in the state_dict, {target.dtype} in the model"
    if not np.can_cast(value.dtype, target.dtype, casting="same_kind"):
        return f"{name}: dtype {value.dtype} in the state_dict cannot be copied into {target.dtype}"
    return None
