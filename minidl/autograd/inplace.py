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

The in-place methods themselves (``add_``, ``__iadd__``, ``__setitem__``, ...) run ops, so they
are attached to Tensor from the ops floor (:mod:`minidl.ops.tensor_methods`) on top of
:func:`modify_in_place`.
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
