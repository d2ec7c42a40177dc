"""Reverse-mode differentiation: walk the graph from the output back to the leaves.

The chain rule in reverse: visiting nodes so that every consumer of a tensor is done before the
tensor itself (reverse topological order), each node receives the sum of the gradients of all its
consumers, turns it into gradients for its inputs with its ``backward`` rule, and passes them on.
Leaves that require a gradient add what reaches them to ``.grad`` (gradients accumulate across
``backward`` calls, as in PyTorch, until ``zero_grad``); :func:`grad` returns them instead.

Gradients of gradients (``create_graph=True``) take the same walk with one change: gradients are
Tensors rather than backend arrays, and each node applies its ``differentiable_backward`` — the
same formula as ``backward``, written with minidl's differentiable ops — while recording is on.
The backward pass is then itself a graph on the tape, which a later pass differentiates like any
other. The first-order pass (the default) never builds a Tensor or records anything.
"""

from __future__ import annotations

import numpy as np

from ..backend import composed
from .hooks import RemovableHandle, add_hook
from .slice_gradients import SliceGradients


def _topological_order(roots, boundary=frozenset()) -> list:
    """Tensors reachable from ``roots`` through recorded nodes, each after all its inputs.

    Tensors whose ids are in ``boundary`` are included but not looked through (see
    :func:`local_gradients`). Iterative depth-first search, so deep graphs (long RNN unrolls)
    cannot hit Python's recursion limit.
    """
    order, visited = [], set()
    stack = [(root, False) for root in reversed(roots)]
    while stack:
        tensor, inputs_done = stack.pop()
        if inputs_done:
            order.append(tensor)
            continue
        if id(tensor) in visited:
            continue
        visited.add(id(tensor))
        stack.append((tensor, True))
        node = tensor._node
        if node is not None and (not boundary or id(tensor) not in boundary):
            for parent in node.parents:
                if id(parent) not in visited:
                    stack.append((parent, False))
    return order


def sum_to_shape(backend, grad, shape):
    """Undo broadcasting: sum ``grad`` over the axes along which an input of ``shape`` was expanded.

    If y = broadcast(x), each x element was copied to several y elements, so dL/dx is the sum of
    dL/dy over those copies: leading axes that were added, and axes where x had size 1.
    """
    if grad.shape == tuple(shape):
        return grad
    extra = grad.ndim - len(shape)
    if extra > 0:
        grad = backend.sum(grad, axis=tuple(range(extra)))
    axes = tuple(i for i, n in enumerate(shape) if n == 1 and grad.shape[i] != 1)
    if axes:
        grad = backend.sum(grad, axis=axes, keepdims=True)
    return backend.reshape(grad, shape)


def _sum_to_shape_recorded(grad, shape):
    """:func:`sum_to_shape` on a Tensor, with differentiable ops (for ``create_graph``)."""
    if grad.shape == tuple(shape):
        return grad
    extra = grad.ndim - len(shape)
    if extra > 0:
        grad = grad.sum(axis=tuple(range(extra)))
    axes = tuple(i for i, n in enumerate(shape) if n == 1 and grad.shape[i] != 1)
    if axes:
        grad = grad.sum(axis=axes, keepdims=True)
    return grad.reshape(tuple(shape))


def backward(root, grad=None, retain_graph: bool | None = None, create_graph: bool = False,
             inputs=None) -> None:
    """Accumulate d(root)/d(leaf) into ``leaf.grad`` for every leaf that requires a gradient
    (PyTorch's ``Tensor.backward``).

    The pass in four steps: seed the output's gradient, visit tensors so that each comes after all
    its consumers, hand each visited tensor's summed gradient to ``.grad`` (leaves) and through its
    node's rule to its inputs (everything else), then tell the finished-hooks. A leaf is visited
    after all its consumers, so its gradient of this pass is complete once stored: the
    gradient-ready hooks hear of it then, while the rest of the graph is still to be done.

    ``inputs`` (a tensor or a sequence) restricts the accumulation to those tensors (leaves or
    not). ``create_graph`` records the backward pass itself, so the gradients left in ``.grad``
    can be differentiated again; ``retain_graph`` (by default ``create_graph``) keeps the graph's
    saved values for another backward.
    """
    retain_graph = create_graph if retain_graph is None else retain_graph
    seed, caller_holds_seed = _seed_gradient("backward", root, grad, create_graph)
    wanted = None if inputs is None else _tensor_list("backward", "inputs", inputs)
    if wanted is not None and not wanted:
        raise ValueError("backward: inputs is empty; leave it out to accumulate into every leaf")
    # ids of arrays already stored in some .grad during this pass; a grad the caller passed in
    # counts as seen, since the caller still holds it.
    handed_out = {id(seed)} if caller_holds_seed else set()

    store = _accumulator(create_graph, handed_out)
    if _gradient_ready_hooks:
        store = _announcing_leaves(store)
    _walk([root], [seed], retain_graph, create_graph, store, keep=store,
          targets=None if wanted is None else {id(t) for t in wanted})
    for hook in list(_backward_finished_hooks.values()):
        hook()


def grad(outputs, inputs, grad_outputs=None, retain_graph: bool | None = None,
         create_graph: bool = False, allow_unused: bool | None = None,
         materialize_grads: bool = False) -> tuple:
    """The gradients of ``outputs`` with respect to ``inputs``, returned rather than accumulated
    (PyTorch's ``torch.autograd.grad``): Σ_k grad_outputs[k] · d outputs[k] / d inputs[i] for
    each input, as a tuple. No ``.grad`` is touched.

    ``outputs`` and ``inputs`` are tensors or sequences of them; ``grad_outputs`` (one per
    output, None meaning ones for a one-element output) weights the outputs. With
    ``create_graph=True`` the returned gradients carry a recorded graph of their own, so they can
    be differentiated again (a gradient penalty, a Hessian-vector product); ``retain_graph``
    (by default ``create_graph``) keeps the graph of ``outputs`` usable for another pass. An input
    that ``outputs`` do not depend on is an error unless ``allow_unused=True``, which gives None,
    or ``materialize_grads=True``, which gives zeros.
    """
    if materialize_grads and allow_unused is False:
        raise ValueError("grad: materialize_grads=True gives zeros for unused inputs; it cannot "
                         "be combined with allow_unused=False")
    allow_unused = bool(allow_unused) or materialize_grads
    outputs = _tensor_list("grad", "outputs", outputs)
    inputs = _tensor_list("grad", "inputs", inputs)
    if not outputs or not inputs:
        raise ValueError("grad: outputs and inputs must each name at least one tensor")
    if grad_outputs is None or _is_tensor(grad_outputs):
        grad_outputs = [grad_outputs] + [None] * (len(outputs) - 1)
    grad_outputs = list(grad_outputs)
    if len(grad_outputs) != len(outputs):
        raise ValueError(f"grad: got {len(grad_outputs)} grad_outputs for {len(outputs)} outputs")
    for position, tensor in enumerate(inputs):
        if not tensor.requires_grad:
            raise RuntimeError(f"grad: input {position} does not require grad; every "
                               f"differentiated tensor must (requires_grad=True, or the "
                               f"result of an op on one)")
    retain_graph = create_graph if retain_graph is None else retain_graph
    seeds, handed_out = [], set()
    for position, (output, weights) in enumerate(zip(outputs, grad_outputs)):
        seed, caller_holds = _seed_gradient(f"grad (output {position})", output, weights,
                                            create_graph)
        seeds.append(seed)
        if caller_holds:
            handed_out.add(id(seed))
    found = {}

    def capture(tensor, tensor_grad):
        found[id(tensor)] = tensor_grad

    # Tensors that retain their gradient still receive it in .grad, as in PyTorch.
    _walk(outputs, seeds, retain_graph, create_graph, capture,
          keep=_accumulator(create_graph, handed_out), targets={id(t) for t in inputs})
    results = []
    for position, tensor in enumerate(inputs):
        value = found.get(id(tensor))
        if value is None:
            if not allow_unused:
                raise RuntimeError(f"grad: input {position} (shape {tensor.shape}) was not used "
                                   f"to compute the outputs; pass allow_unused=True to get "
                                   f"None for it")
            results.append(_zeros_like(tensor) if materialize_grads else None)
        elif create_graph:
            results.append(value)
        else:
            results.append(_returned_array(tensor, value, handed_out))
    return tuple(results)


def local_gradients(output, inputs, grad_output) -> tuple:
    """The gradient of ``output`` with respect to each of ``inputs`` *as separate variables*,
    recorded (for an op's backward written as a composition of differentiable ops).

    Unlike :func:`grad`, the walk stops at ``inputs``: a gradient reaching one of them is not
    passed on through its history, even when another input is computed from it. That is what an
    op's backward rule must return (partial derivatives), which the outer pass then chains.
    Inputs the output does not depend on get None.
    """
    boundary = {id(t) for t in inputs}
    found = {}

    def capture(tensor, tensor_grad):
        found[id(tensor)] = tensor_grad

    # The graph of ``output`` is kept: the recorded gradients read its saved values.
    # Hooks and retain_grad of the inputs are the outer pass's business (it sees the total).
    _walk([output], [grad_output], True, True, capture, targets=boundary, boundary=boundary)
    return tuple(found.get(id(t)) for t in inputs)


def _walk(roots, seeds, retain_graph: bool, create_graph: bool, store, keep=None,
          targets=None, boundary=frozenset()) -> None:
    """The reverse pass shared by :func:`backward`, :func:`grad` and :func:`local_gradients`.

    Gradients are backend arrays and each node's ``backward`` rule runs on them; with
    ``create_graph`` they are Tensors and each node's ``differentiable_backward`` runs instead,
    under recording, so the pass itself lands on the tape. ``store(tensor, grad)`` receives the
    gradient of each tensor in ``targets`` (a set of ids; None: every leaf), after the tensor's
    hooks ran; ``keep(tensor, grad)`` that of each tensor that retains its gradient (None: run
    no tensor hooks and retain nothing, for the inner pass of :func:`local_gradients`).
    """
    order = _topological_order(roots, boundary)
    # With targets, only the nodes on a path to one of them have work to do: the rest of the
    # graph (a generator behind a critic's input, say) is not differentiated at all.
    needed = None if targets is None else _on_paths_to(order, targets)
    pending = {}  # id(tensor) -> sum of the gradients its consumers sent so far
    for root, seed in zip(roots, seeds):
        previous = pending.get(id(root))
        pending[id(root)] = seed if previous is None else _add(root.backend, previous, seed,
                                                                create_graph)
    for tensor in reversed(order):
        tensor_grad = pending.pop(id(tensor), None)
        if tensor_grad is None:
            continue  # no path from this tensor to the output carries a gradient
        if type(tensor_grad) is SliceGradients:
            tensor_grad = tensor_grad.total(tensor.backend)
        node = tensor._node
        hooks = tensor._grad_hooks if keep is not None else None
        if hooks is not None and hooks.hooks:
            tensor_grad = _run_hooks(hooks, tensor, tensor_grad, create_graph)
        stored = node is None if targets is None else id(tensor) in targets
        if stored:
            store(tensor, tensor_grad)
        if hooks is not None and hooks.retains_grad and not (stored and keep is store):
            keep(tensor, tensor_grad)
        if node is not None and (not boundary or id(tensor) not in boundary) and (
                needed is None or id(tensor) in needed):
            _send_to_inputs(node.backend, node, tensor, tensor_grad, pending, create_graph,
                            needed)
            if not retain_graph:
                node.release()


def _on_paths_to(order, targets: set) -> set:
    """ids of the tensors in ``order`` (inputs first) from which some target can be reached
    going back through recorded nodes: the targets and everything computed from them.

    A node freed by an earlier backward has forgotten its inputs; it counts as needed, so that
    reaching it raises the "backward through the graph a second time" error rather than
    reporting its inputs as unused."""
    needed = set()
    for tensor in order:
        node = tensor._node
        if id(tensor) in targets or (node is not None and (node.released or any(
                id(parent) in needed for parent in node.parents))):
            needed.add(id(tensor))
    return needed


def _run_hooks(hooks, tensor, tensor_grad, create_graph: bool):
    """Tensor hooks see and return Tensors; on the first-order pass the array is wrapped for
    them (under no_grad, so a hook's arithmetic records nothing) and unwrapped after."""
    from .grad_mode import no_grad
    from .tensor import Tensor

    if create_graph:
        replaced = hooks.apply(tensor, tensor_grad)
        if not isinstance(replaced, Tensor):  # host data: a constant from here on
            replaced = Tensor(np.asarray(replaced), dtype=tensor_grad.dtype, device=tensor.device)
        return replaced if replaced.dtype == tensor_grad.dtype else \
            replaced.to(dtype=tensor_grad.dtype)
    given = Tensor._wrap(tensor_grad, tensor.device)
    with no_grad():
        replaced = hooks.apply(tensor, given)
    if replaced is given:
        return tensor_grad
    # A replacement may still be held by the hook's owner (appended to a list, say): the pass
    # continues with a copy, so that .grad never shares memory with it.
    array = replaced.data if isinstance(replaced, Tensor) else \
        tensor.backend.from_numpy(np.asarray(replaced))
    return tensor.backend.copy(tensor.backend.astype(array, tensor_grad.dtype))


def _add(backend, a, b, create_graph: bool):
    """The sum of two gradients: recorded Tensors with ``create_graph``, else backend arrays."""
    return a + b if create_graph else backend.add(a, b)


def _zeros_like(tensor):
    from .tensor import Tensor
    return Tensor._wrap(tensor.backend.zeros(tensor.shape, tensor.dtype), tensor.device)


def _is_tensor(value) -> bool:
    from .tensor import Tensor
    return isinstance(value, Tensor)


def _tensor_list(op: str, what: str, value) -> list:
    """A tensor or a sequence of tensors as a list, or a TypeError naming the argument."""
    if _is_tensor(value):
        return [value]
    if isinstance(value, (list, tuple)) and all(_is_tensor(v) for v in value):
        return list(value)
    raise TypeError(f"{op}: {what} must be a Tensor or a sequence of Tensors, got "
                    f"{type(value).__name__}")


def _seed_gradient(op: str, root, grad, create_graph: bool):
    """The gradient the pass starts from, d(root)/d(root), and whether the caller passed it in.

    Left out, it is 1 — which only makes sense for a scalar output, as in PyTorch. Passed in, it
    must have the output's shape and is cast to the output's dtype: each gradient takes the dtype
    of the tensor it is for, so a float64 gradient does not widen every step of a float32 graph.
    With ``create_graph`` the seed is a Tensor (a given one keeps its own graph, so the result can
    be differentiated with respect to it too); otherwise a backend array.
    """
    from .tensor import Tensor

    if not root.requires_grad:
        raise RuntimeError(f"{op}: the tensor does not require grad and has no graph "
                           f"(was it computed under no_grad, or from tensors without "
                           f"requires_grad?)")
    backend = root.backend
    if grad is None:
        if root.numel() != 1:
            raise RuntimeError(f"{op}: grad can be implicitly created only for a scalar "
                               f"output, but the output has shape {root.shape}; pass the "
                               f"output's gradient")
        ones = composed.ones(backend, root.shape, root.dtype)
        return (Tensor._wrap(ones, root.device) if create_graph else ones), False
    if not isinstance(grad, Tensor):
        grad = Tensor._wrap(backend.from_numpy(np.asarray(grad)), root.device)
    if grad.shape != root.shape:
        raise ValueError(f"{op}: the output's gradient has shape {grad.shape}, "
                         f"the output has shape {root.shape}")
    if create_graph:
        return (grad if grad.dtype == root.dtype else grad.to(dtype=root.dtype)), True
    return backend.astype(grad.data, root.dtype), True


def _accumulator(create_graph: bool, handed_out: set):
    """The function that adds a gradient into a tensor's ``.grad``: a recorded Tensor sum with
    ``create_graph`` (the gradient keeps its graph), else :func:`_store_gradient`."""
    def accumulate(tensor, tensor_grad):
        if create_graph:
            tensor.grad = tensor_grad if tensor.grad is None else tensor.grad + tensor_grad
        else:
            _store_gradient(tensor, tensor_grad, handed_out)
    return accumulate


def _store_gradient(tensor, grad, handed_out: set) -> None:
    """Add ``grad`` to ``tensor.grad`` (a leaf, or a tensor that called ``retain_grad``).

    The tensor may keep the array itself (no copy) only if nobody else can see it: it must not
    have gone to another tensor already (Add hands one array to both inputs), and it must own its
    memory, not be a view of a forward array (which the backend checks).
    """
    exclusive = id(grad) not in handed_out
    tensor._accumulate_grad(grad, exclusive)
    handed_out.add(id(grad))


def _returned_array(tensor, grad, handed_out: set):
    """A gradient that :func:`grad` returns, as a Tensor owning its memory (the same rule as
    :func:`_store_gradient`: a caller may edit it in place)."""
    from .tensor import Tensor

    backend = tensor.backend
    keep = id(grad) not in handed_out and backend.owns_memory(grad)
    handed_out.add(id(grad))
    return Tensor._wrap(grad if keep else backend.copy(grad), tensor.device)


def _send_to_inputs(backend, node, output, grad, pending: dict, create_graph: bool,
                    needed) -> None:
    """Apply ``node``'s backward rule to ``grad`` and add each result to its input's pending sum.

    An input used by several ops receives one gradient from each (the multivariate chain rule
    sums over paths). Each result is first brought back to its input's shape (undoing the
    broadcast the forward did) and dtype. With ``create_graph`` the rule is the node's
    differentiable form, run while recording, on Tensors.
    """
    if node.released:
        raise RuntimeError(
            "backward: trying to backward through the graph a second time; its saved "
            "arrays were freed by the first backward. Pass retain_graph=True the first time.")
    node.check_saved_versions(create_graph)  # an input edited in place since: the rule is wrong
    if create_graph:
        from .grad_mode import enable_grad
        with enable_grad():
            input_grads = node.differentiable_backward(grad, output)
    elif node.gradient_is_slice:
        _send_slice_gradient(backend, node, grad, pending, needed)
        return
    else:
        input_grads = node.backward(grad)
    if not isinstance(input_grads, tuple):
        input_grads = (input_grads,)
    for parent, needs, parent_grad in zip(node.parents, node.needs_input_grad, input_grads):
        if not needs or parent_grad is None or (needed is not None and id(parent) not in needed):
            continue
        if create_graph:
            parent_grad = _sum_to_shape_recorded(parent_grad, parent.shape)
            if parent_grad.dtype != parent.dtype:
                parent_grad = parent_grad.to(dtype=parent.dtype)
        else:
            parent_grad = sum_to_shape(backend, parent_grad, parent.shape)
            if parent_grad.dtype != parent.dtype:
                parent_grad = backend.astype(parent_grad, parent.dtype)
        previous = pending.get(id(parent))
        if type(previous) is SliceGradients:
            previous = previous.total(backend)
        pending[id(parent)] = parent_grad if previous is None else _add(backend, previous,
                                                                         parent_grad, create_graph)


def _send_slice_gradient(backend, node, grad, pending: dict, needed) -> None:
    """Pass on the gradient of a basic-index slice (``node.index`` of its input): held with the
    input's other slice gradients, so that they are added into one buffer rather than each
    scattered into zeros of the input's full shape (see :mod:`.slice_gradients`)."""
    parent = node.parents[0]
    if not node.needs_input_grad[0] or (needed is not None and id(parent) not in needed):
        return
    previous = pending.get(id(parent))
    if previous is None:
        pending[id(parent)] = SliceGradients(node.input_shape, node.dtype, node.index, grad)
    elif type(previous) is SliceGradients:
        previous.append(node.index, grad)
    else:
        pending[id(parent)] = _add(backend, previous, node.backward(grad), False)


# Called after every backward pass, once all leaf gradients are accumulated: the place where
# data-parallel training averages gradients across processes (PyTorch queues such work on its
# engine as "callbacks" for the same reason: a leaf cannot know it received its last gradient).
_backward_finished_hooks: dict[int, object] = {}


# Called with each leaf as soon as its gradient of the pass is stored (PyTorch's
# post-accumulate-grad hooks): where data-parallel training starts averaging a bucket of
# gradients while backward still computes the others.
_gradient_ready_hooks: dict[int, object] = {}


def _announcing_leaves(store):
    """``store`` followed, for a leaf, by the gradient-ready hooks (see :func:`backward`)."""
    def store_and_announce(tensor, tensor_grad):
        store(tensor, tensor_grad)
        if tensor._node is None:
            for hook in list(_gradient_ready_hooks.values()):
                hook(tensor)
    return store_and_announce


def register_backward_finished_hook(hook) -> RemovableHandle:
    """Run ``hook()`` at the end of every ``backward``; returns a handle to remove it."""
    return add_hook(_backward_finished_hooks, hook, "register_backward_finished_hook")


def register_gradient_ready_hook(hook) -> RemovableHandle:
    """Run ``hook(leaf)`` for each leaf tensor once its gradient of a ``backward`` pass is
    complete in ``leaf.grad``, before the pass ends; returns a handle to remove it."""
    return add_hook(_gradient_ready_hooks, hook, "register_gradient_ready_hook")
