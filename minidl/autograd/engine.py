"""Reverse-mode differentiation: walk the graph from the output back to the leaves.

The chain rule in reverse: visiting nodes so that every consumer of a tensor is done before the
tensor itself (reverse topological order), each node receives the sum of the gradients of all its
consumers, turns it into gradients for its inputs with its ``backward`` rule, and passes them on.
Leaves that require a gradient add what reaches them to ``.grad`` (gradients accumulate across
``backward`` calls, as in PyTorch, until ``zero_grad``).
"""

from __future__ import annotations

import numpy as np


def _topological_order(root) -> list:
    """Tensors reachable from ``root`` through recorded nodes, each after all its inputs.

    Iterative depth-first search, so deep graphs (long RNN unrolls) cannot hit Python's recursion
    limit.
    """
    order, visited = [], set()
    stack = [(root, False)]
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
        if node is not None:
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


def backward(root, grad=None, retain_graph: bool = False) -> None:
    """Accumulate d(root)/d(leaf) into ``leaf.grad`` for every leaf that requires a gradient.

    The pass in four steps: seed the output's gradient, visit tensors so that each comes after all
    its consumers, hand each visited tensor's summed gradient to ``.grad`` (leaves) and through its
    node's rule to its inputs (everything else), then tell the finished-hooks. A leaf is visited
    after all its consumers, so its gradient of this pass is complete once stored: the
    gradient-ready hooks hear of it then, while the rest of the graph is still to be done.
    """
    seed, caller_holds_seed = _seed_gradient(root, grad)
    backend = root.backend
    pending = {id(root): seed}  # id(tensor) -> sum of the gradients its consumers sent so far
    # ids of arrays already stored in some .grad during this pass; a grad the caller passed in
    # counts as seen, since the caller still holds it.
    handed_out = {id(seed)} if caller_holds_seed else set()
    for tensor in reversed(_topological_order(root)):
        grad = pending.pop(id(tensor), None)
        if grad is None:
            continue  # no path from this tensor to the output carries a gradient
        node = tensor._node
        if node is None or tensor._retains_grad:
            _store_gradient(tensor, grad, handed_out)
            if node is None:
                for hook in list(_gradient_ready_hooks.values()):
                    hook(tensor)
        if node is not None:
            _send_to_inputs(backend, node, grad, pending)
            if not retain_graph:
                node.release()
    for hook in list(_backward_finished_hooks.values()):
        hook()


def _seed_gradient(root, grad):
    """The gradient the pass starts from, d(root)/d(root), and whether the caller passed it in.

    Left out, it is 1 — which only makes sense for a scalar output, as in PyTorch. Passed in, it
    must have the output's shape and is cast to the output's dtype: each gradient takes the dtype
    of the tensor it is for, so a float64 gradient does not widen every step of a float32 graph.
    """
    from .tensor import Tensor

    if not root.requires_grad:
        raise RuntimeError("backward: the tensor does not require grad and has no graph "
                           "(was it computed under no_grad, or from tensors without requires_grad?)")
    backend = root.backend
    if grad is None:
        if root.numel() != 1:
            raise RuntimeError(f"backward: grad can be implicitly created only for a scalar "
                               f"output, but the output has shape {root.shape}; pass grad=")
        return backend.ones(root.shape, root.dtype), False
    grad = grad.data if isinstance(grad, Tensor) else backend.from_numpy(np.asarray(grad))
    if tuple(grad.shape) != root.shape:
        raise ValueError(f"backward: grad has shape {tuple(grad.shape)}, "
                         f"the output has shape {root.shape}")
    return backend.astype(grad, root.dtype), True


def _store_gradient(tensor, grad, handed_out: set) -> None:
    """Add ``grad`` to ``tensor.grad`` (a leaf, or a tensor that called ``retain_grad``).

    The tensor may keep the array itself (no copy) only if nobody else can see it: it must not
    have gone to another tensor already (Add hands one array to both inputs), and it must own its
    memory, not be a view of a forward array (which the backend checks).
    """
    exclusive = id(grad) not in handed_out
    tensor._accumulate_grad(grad, exclusive)
    handed_out.add(id(grad))


def _send_to_inputs(backend, node, grad, pending: dict) -> None:
    """Apply ``node``'s backward rule to ``grad`` and add each result to its input's pending sum.

    An input used by several ops receives one gradient from each (the multivariate chain rule
    sums over paths). Each result is first brought back to its input's shape (undoing the
    broadcast the forward did) and dtype.
    """
    if node.released:
        raise RuntimeError(
            "backward: trying to backward through the graph a second time; its saved "
            "arrays were freed by the first backward. Pass retain_graph=True the first time.")
    node.check_saved_versions()  # an input changed in place since the forward: the rule is wrong
    input_grads = node.backward(grad)
    if not isinstance(input_grads, tuple):
        input_grads = (input_grads,)
    for parent, needs, parent_grad in zip(node.parents, node.needs_input_grad, input_grads):
        if not needs or parent_grad is None:
            continue
        parent_grad = sum_to_shape(backend, parent_grad, parent.shape)
        if parent_grad.dtype != parent.dtype:
            parent_grad = backend.astype(parent_grad, parent.dtype)
        previous = pending.get(id(parent))
        pending[id(parent)] = parent_grad if previous is None else backend.add(previous,
                                                                               parent_grad)


# Called after every backward pass, once all leaf gradients are accumulated: the place where
# data-parallel training averages gradients across processes (PyTorch queues such work on its
# engine as "callbacks" for the same reason: a leaf cannot know it received its last gradient).
_backward_finished_hooks: dict[int, object] = {}


# Called with each leaf as soon as its gradient of the pass is stored (PyTorch's
# post-accumulate-grad hooks): where data-parallel training starts averaging a bucket of
# gradients while backward still computes the others.
_gradient_ready_hooks: dict[int, object] = {}


class HookHandle:
    """Returned by the ``register_*_hook`` functions; ``remove()`` unregisters."""

    def __init__(self, hooks: dict, key: int):
        self.hooks = hooks
        self.key = key

    def remove(self) -> None:
        self.hooks.pop(self.key, None)


def _register(hooks: dict, hook) -> HookHandle:
    key = max(hooks, default=-1) + 1
    hooks[key] = hook
    return HookHandle(hooks, key)


def register_backward_finished_hook(hook) -> HookHandle:
    """Run ``hook()`` at the end of every ``backward``; returns a handle to remove it."""
    return _register(_backward_finished_hooks, hook)


def register_gradient_ready_hook(hook) -> HookHandle:
    """Run ``hook(leaf)`` for each leaf tensor once its gradient of a ``backward`` pass is
    complete in ``leaf.grad``, before the pass ends; returns a handle to remove it."""
    return _register(_gradient_ready_hooks, hook)
