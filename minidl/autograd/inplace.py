"""In-place ops (``x.add_(y)``, ``x += y``, ``x[i] = v``, ``zero_``, ...) and the version counter
that keeps them from silently corrupting gradients.

The hazard: ``y = x.exp()`` saves y for its backward rule (d eˣ/dx = eˣ). Editing y in place
afterwards changes the array the rule will read, and ``backward`` would return a wrong gradient
without any sign of it. So, as in PyTorch, every tensor carries a version counter (shared by the
tensors that view the same memory). Every in-place edit bumps it; when a node records its forward
it notes the versions of the tensors whose arrays it kept, and ``backward`` refuses to run a node
whose saved tensors have moved on.

An in-place op is computed as its ordinary (out-of-place) op on the value *before* the edit, then
written into the tensor's own memory, so views see it. For autograd the tensor then takes the
result's node as its history: the node's input is the "before" value, which keeps the old history,
so gradients flow through the edit as they would through ``y = y + 1``. As in PyTorch, a leaf that
requires a gradient may only be edited in place under ``no_grad`` (an optimizer step, an init).
"""

from __future__ import annotations

import weakref

import numpy as np

from . import tracing
from .grad_mode import is_grad_enabled


def check_leaf(tensor, op: str) -> None:
    """Refuse to edit a leaf that requires grad while the graph is recorded (PyTorch's rule).

    Its ``.grad`` is d(loss)/d(this value); overwriting the value would make that meaningless.
    """
    if tensor.requires_grad and tensor._node is None and is_grad_enabled():
        raise RuntimeError(f"{op}: a leaf tensor that requires grad is being used in an in-place "
                           f"operation; do it inside md.no_grad() (as an optimizer update does)")


def bump_version(tensor) -> None:
    """Record that ``tensor``'s memory (and every view of it) was written in place."""
    tensor._version_cell[0] += 1


def overwrite_data(tensor, values) -> None:
    """Write ``values`` (a tensor of the same device, or host data) of the tensor's shape into
    its memory without counting it as an edit: PyTorch's ``tensor.data.copy_(values)``, which
    sidesteps the version counter. For loading state (``load_state_dict``), where a graph built
    before the load may still be differentiated, as ported code does."""
    from .tensor import Tensor
    if isinstance(values, Tensor) and values.device == tensor.device:
        source = values.data  # a copy between tensors of one device never leaves it
    else:
        host = values.numpy() if isinstance(values, Tensor) else np.asarray(values)
        source = tensor.backend.from_numpy(host.astype(tensor.dtype, copy=False))
    tensor.backend.assign_(tensor.data, source)


def modify_in_place(tensor, op: str, compute, *others):
    """Make ``tensor`` hold ``compute(before)``, written into its own memory; returns it.

    ``others`` are the other tensor operands, only to tell whether the result will be recorded.
    """
    from .tensor import Tensor

    check_leaf(tensor, op)
    if tracing.active is not None:
        # A tracer (the ONNX exporter) maps each tensor to the value an op produced; an edit in
        # place would leave later readers of this tensor mapped to the old value.
        raise RuntimeError(f"{op}: in-place edits cannot be traced for export; write this step "
                           f"out of place (y = x + 1 rather than x += 1, md.index_put rather "
                           f"than x[i] = v)")
    recording = is_grad_enabled() and (tensor.requires_grad or any(
        isinstance(o, Tensor) and o.requires_grad for o in others))
    if recording and tensor._view_version is not None:
        # Its base tensor's history would not learn of the edit (PyTorch rewrites the base's
        # history; minidl asks for the edit on the base, where it is recorded).
        raise RuntimeError(f"{op}: in-place edit of a view of a tensor that is part of a graph; "
                           f"edit the base tensor instead (x[index] = value, md.index_put)")
    if recording:
        # The result's node may keep the "before" array for its backward (mul_ keeps both
        # factors); give it its own copy, since the tensor's memory is about to be overwritten.
        before = Tensor._wrap(tensor.backend.copy(tensor.data), tensor.device,
                              tensor.requires_grad)
        before._node = tensor._node
        _hand_over_consumers(tensor, before)
    else:
        before = tensor.detach()
    result = compute(before)
    if result.shape != tensor.shape:
        raise RuntimeError(f"{op}: the result has shape {result.shape}, which does not fit the "
                           f"tensor's shape {tensor.shape} (in-place ops cannot broadcast the "
                           f"tensor they write to)")
    if result.dtype != tensor.dtype:
        if not np.can_cast(result.dtype, tensor.dtype, casting="same_kind"):
            raise RuntimeError(f"{op}: result type {result.dtype} can't be cast to the tensor's "
                               f"dtype {tensor.dtype}")
        result = result.to(dtype=tensor.dtype)
    tensor.backend.assign_(tensor.data, result.data)
    bump_version(tensor)
    if result._node is not None:
        tensor._node, tensor.requires_grad = result._node, True
    elif recording and tensor._node is not None:
        # The new value does not depend on the old history (fill_, copy_ from a constant).
        tensor._node, tensor.requires_grad = None, False
    return tensor


def _hand_over_consumers(tensor, before) -> None:
    """Make the nodes that read ``tensor`` before the edit read ``before`` instead.

    Nodes link to their input *tensors*, and the edit gives ``tensor`` a new history; a node that
    read the old value (``v = y[:, 1]`` before ``y[:, 0] = v * 3``) must keep pointing at the old
    history, or its gradient would flow through the edit (and a graph could even loop).
    """
    consumers = [ref() for ref in tensor._consumers or ()]
    consumers = [node for node in consumers if node is not None and not node.released]
    for node in consumers:
        node.parents = tuple(before if parent is tensor else parent for parent in node.parents)
    before._consumers = [weakref.ref(node) for node in consumers]
    tensor._consumers = None


def install(Tensor) -> None:
    """Attach the in-place methods and operators to Tensor."""
    from ..ops import elementwise as ew, shape

    def _scaled(other, alpha):
        return other if alpha == 1 else ew.mul(other, alpha)

    def add_(self, other, alpha=1):
        """self += alpha * other, in place."""
        return modify_in_place(self, "add_", lambda a: ew.add(a, _scaled(other, alpha)), other)

    def sub_(self, other, alpha=1):
        """self -= alpha * other, in place."""
        return modify_in_place(self, "sub_", lambda a: ew.sub(a, _scaled(other, alpha)), other)

    def mul_(self, other):
        """self *= other, in place."""
        return modify_in_place(self, "mul_", lambda a: ew.mul(a, other), other)

    def div_(self, other):
        """self /= other, in place."""
        return modify_in_place(self, "div_", lambda a: ew.div(a, other), other)

    def floor_divide_(self, other):
        """self //= other, in place."""
        return modify_in_place(self, "floor_divide_", lambda a: ew.floor_divide(a, other), other)

    def remainder_(self, other):
        """self %= other, in place."""
        return modify_in_place(self, "remainder_", lambda a: ew.remainder(a, other), other)

    def pow_(self, exponent):
        """self **= exponent, in place."""
        return modify_in_place(self, "pow_", lambda a: ew.pow(a, exponent), exponent)

    def clamp_(self, min=None, max=None):  # noqa: A002
        """Clip the values into [min, max], in place."""
        return modify_in_place(self, "clamp_", lambda a: ew.clamp(a, min, max))

    def neg_(self):
        """self = -self, in place."""
        return modify_in_place(self, "neg_", ew.neg)

    def fill_(self, value):
        """Set every element to ``value``, in place."""
        if isinstance(value, Tensor) or (is_grad_enabled() and self.requires_grad) or \
                tracing.active is not None:
            return modify_in_place(self, "fill_", lambda a: shape.full_like(a, value))
        # Nothing to record (a gradient buffer, an update under no_grad): write directly. As
        # in PyTorch the value is cast to the tensor's dtype (fill_(0.5) of integers is 0).
        self.backend.fill_(self.data, value.item() if isinstance(value, np.generic) else value)
        bump_version(self)
        return self

    def zero_(self):
        """Set every element to zero, in place."""
        return fill_(self, 0)

    def copy_(self, source):
        """Overwrite the values with ``source``'s (broadcast to this shape, cast to this dtype),
        in place; the gradient flows to ``source``, as in PyTorch."""
        if not isinstance(source, Tensor):
            source = Tensor(np.asarray(source), device=self.device)
        if source.device != self.device:
            source = source.to(self.device)

        def broadcast(a):
            try:  # the cast first: copy_ truncates floats into an integer tensor
                return shape.broadcast_to(source.to(dtype=a.dtype), a.shape)
            except ValueError:
                raise ValueError(f"copy_: source of shape {source.shape} cannot be broadcast to "
                                 f"the tensor's shape {a.shape}") from None
        return modify_in_place(self, "copy_", broadcast, source)

    def __setitem__(self, index, value):
        """``x[index] = value``, in place; differentiable in ``x``'s other elements and in
        ``value`` (see :func:`minidl.ops.shape.index_put`)."""
        modify_in_place(self, "setitem", lambda a: shape.index_put(a, index, value), value)

    def index_put_(self, indices, values, accumulate: bool = False):
        """``self[indices] = values`` (or ``+=`` with ``accumulate``), in place."""
        return modify_in_place(self, "index_put_", lambda a: shape.index_put(
            a, indices, values, accumulate=accumulate), values)

    def operator(method):
        return lambda self, other: method(self, other)

    methods = {
        "add_": add_, "sub_": sub_, "mul_": mul_, "div_": div_, "floor_divide_": floor_divide_,
        "remainder_": remainder_, "pow_": pow_, "clamp_": clamp_,
        "clip_": clamp_, "neg_": neg_, "fill_": fill_, "zero_": zero_, "copy_": copy_,
        "__setitem__": __setitem__, "index_put_": index_put_,
        # x += y edits x in place, as in PyTorch (without these Python would rebind x to a new
        # tensor, and `param -= lr * param.grad` would silently stop updating the parameter).
        "__iadd__": operator(add_), "__isub__": operator(sub_), "__imul__": operator(mul_),
        "__itruediv__": operator(div_), "__ifloordiv__": operator(floor_divide_),
        "__imod__": operator(remainder_), "__ipow__": operator(pow_),
    }
    for name, method in methods.items():
        setattr(Tensor, name, method)
