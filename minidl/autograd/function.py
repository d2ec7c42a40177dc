"""The unit of autograd: a differentiable op with its forward and backward rule side by side.

Each op subclasses :class:`Function`, is named after what it computes with ``Function`` at the
end (``MulFunction``, ``Conv2dFunction``: a graph node's ``grad_fn`` prints that name, so it must
never read as the ``nn`` layer built on it), and defines

* ``forward(self, *arrays, **attrs) -> array``: compute the output from backend arrays, saving
  whatever the gradient will need on ``self``;
* ``backward(self, grad) -> tuple``: given dLoss/dOutput, return dLoss/dInput for each input
  (``None`` where an input needs no gradient).

For gradients of gradients (``create_graph=True``) an op also gives its rule in a differentiable
form, used only then (the first-order pass never calls it), in one of two ways:

* ``differentiable_backward(self, grad, output) -> tuple``: the same formula as ``backward``,
  written with minidl's differentiable ops on Tensors — ``grad`` and ``output`` are Tensors and the
  inputs are ``self.parents`` — so that running it while recording puts the backward pass itself
  on the tape;
* or ``composed(self, *inputs) -> Tensor``: the forward rewritten with differentiable ops (for a
  fused kernel such as layer norm, whose gradient formula is long); its gradient, recorded, is the
  op's differentiable backward.

An op with neither refuses ``create_graph`` with an error naming it, rather than return a second
derivative that silently treats its first derivative as a constant.

``Function.apply`` runs ``forward`` on the inputs' backend and, when any input requires a
gradient and the op is ``differentiable``, links the output to this node so that :func:`minidl.autograd.engine.backward` can walk
the graph in reverse. Backward rules may return gradients in the *broadcast* shape; the engine
sums them back to each input's shape, so no op has to repeat that bookkeeping.
"""

from __future__ import annotations

import weakref
from operator import attrgetter

import numpy as np

from ..backend import backends_by_name, composed, get_backend
from . import tracing
from .grad_mode import _mode as grad_mode_of_this_thread
from .tensor import Tensor

# needs_input_grad of an op that records nothing, by input count: one shared tuple rather than a
# new one per op.
_NO_GRADIENTS = tuple((False,) * n for n in range(8))
# C-level getters for apply: mapping them over the inputs costs no Python frame per op, where a
# generator expression or list comprehension costs one.
_data_of, _requires_grad_of = attrgetter("data"), attrgetter("requires_grad")


def _add_consumer(tensor, node) -> None:
    """Note that ``node`` reads ``tensor``, so that an in-place edit of the tensor can leave the
    node reading the value it read (autograd/inplace.py).

    Leaves that require grad (parameters) are skipped: they cannot be edited in place while a
    graph is recorded. The list holds weak references, pruned as it grows, so a constant read by
    every step does not accumulate the nodes of finished steps.
    """
    if tensor._node is None and tensor.requires_grad:
        return
    consumers = tensor._consumers
    if consumers is None:
        tensor._consumers = [weakref.ref(node)]
        return
    if len(consumers) >= 16 and not len(consumers) & (len(consumers) - 1):  # at powers of two
        consumers[:] = [ref for ref in consumers if ref() is not None]
    consumers.append(weakref.ref(node))


class Function:
    """Base class of differentiable ops (see the module docstring)."""

    # False for ops whose output is not a differentiable function of their inputs: comparisons,
    # argmax, logical ops. Their outputs are piecewise constant (bools, indices), so the true
    # derivative is zero almost everywhere and undefined at the jumps; linking them into the graph
    # would only keep their inputs alive for a backward pass that has nothing to send.
    differentiable = True

    # True for ops whose output is a view of their (first) input's memory (reshape, permute,
    # basic indexing): the output then shares the input's version counter, so an in-place edit
    # through either is seen through both. An op may also set it on itself in forward.
    output_is_view = False

    # True for a basic-index slice of its input (getitem with ints and slices), whose node then
    # holds ``input_shape``, ``dtype`` and ``index``: the first-order pass adds the gradients of
    # several slices of one tensor into one buffer (see slice_gradients.py) instead of calling
    # ``backward`` on each.
    gradient_is_slice = False

    # Set by apply(); plain attributes rather than constructor arguments keep ops short.
    backend = None
    parents: tuple = ()
    needs_input_grad: tuple = ()
    released = False
    saved_versions: tuple = ()

    def forward(self, *arrays, **attrs):  # pragma: no cover - abstract
        raise NotImplementedError

    def backward(self, grad):  # pragma: no cover - abstract
        raise NotImplementedError

    # The forward written with differentiable ops, for ops that give their create_graph rule
    # that way (see the module docstring); None for the others.
    composed = None

    def differentiable_backward(self, grad, output):
        """``backward`` on Tensors, recorded (``create_graph=True``): by default the recorded
        gradient of :attr:`composed`, or an error naming the op when it has neither form."""
        if self.composed is None:
            raise RuntimeError(
                f"{self.name}: double backward (create_graph=True) is not implemented for this "
                f"op, so its gradient cannot be differentiated again; compute the first "
                f"gradient without create_graph, or write this step with other ops")
        from .engine import local_gradients

        # Each input position gets its own variable: x * x must yield ∂/∂a and ∂/∂b separately
        # (the engine adds them), not their sum twice. A repeated input is aliased by a clone,
        # through which the recorded gradient still reaches it.
        inputs, seen = [], set()
        for tensor in self.parents:
            inputs.append(tensor.clone() if id(tensor) in seen else tensor)
            seen.add(id(tensor))
        return local_gradients(self.composed(*inputs), inputs, grad)

    @property
    def name(self) -> str:
        return type(self).__name__

    @classmethod
    def apply(cls, *inputs, **attrs):
        """Run the op on ``inputs`` (Tensors) and return the output Tensor."""
        # Every op of every step passes here, so its cost is paid per op: one pass over the
        # inputs, no generator expressions, and no graph bookkeeping at all when nothing is
        # recorded (grad mode off, as in inference, or no input requiring a gradient).
        device = inputs[0].device
        grad_enabled = grad_mode_of_this_thread.enabled  # is_grad_enabled(), inline
        any_needs_grad = False
        for tensor in inputs:
            if tensor.device != device:
                raise ValueError(
                    f"{cls.__name__}: inputs are on different devices "
                    f"({', '.join(t.device for t in inputs)}); move them with .to(device)")
            # With grad mode off nothing is recorded whatever the inputs ask, so their flags
            # and view versions are not read at all (inference's every op).
            if grad_enabled and tensor.requires_grad:
                any_needs_grad = True
                if tensor._view_version is not None and \
                        tensor._view_version != tensor._version_cell[0]:
                    raise RuntimeError(
                        f"{cls.__name__}: an input is a view taken before its memory was "
                        f"edited in place; its recorded history no longer describes its "
                        f"values. Take the view again after the edit.")
        node = cls()
        # get_backend's answers, looked up without calling it (one Python frame fewer per op).
        node.backend = backends_by_name.get(device) or get_backend(device)
        requires_grad = any_needs_grad and cls.differentiable
        # Known before forward, so a forward can skip saving what no gradient will read
        # (MulFunction keeps a only when b needs a gradient); in-place edits of unsaved
        # tensors stay legal.
        if requires_grad:
            node.needs_input_grad = tuple(map(_requires_grad_of, inputs))
        else:
            node.needs_input_grad = _NO_GRADIENTS[len(inputs)] if len(inputs) < 8 \
                else (False,) * len(inputs)
        # One to three inputs (most ops; three: a convolution, linear layer or batch norm with
        # its bias) by index: unpacking an iterator costs more than the rest of this block.
        if len(inputs) == 1:
            out_data = node.forward(inputs[0].data, **attrs)
        elif len(inputs) == 2:
            out_data = node.forward(inputs[0].data, inputs[1].data, **attrs)
        elif len(inputs) == 3:
            out_data = node.forward(inputs[0].data, inputs[1].data, inputs[2].data, **attrs)
        else:
            out_data = node.forward(*map(_data_of, inputs), **attrs)
        # The output Tensor, made as Tensor._wrap makes it but inline (one call fewer for every
        # op; the same fields, which a test compares slot by slot).
        out = object.__new__(Tensor)
        out.data = np.asarray(out_data) if isinstance(out_data, np.generic) else out_data
        out.device = device
        out.requires_grad = requires_grad
        out.grad = out._node = out._grad_hooks = None
        out._version_cell = [0]
        out._view_version = out._consumers = None
        if node.output_is_view:
            out._version_cell = inputs[0]._version_cell
            if requires_grad:
                out._view_version = out._version_cell[0]
        if requires_grad:
            node.parents = inputs
            out._node = node
            for tensor in inputs:
                _add_consumer(tensor, node)
            node.saved_versions = node._versions_of_saved(inputs, out)
        # Reported whether or not it is differentiable: a mask computed from the input (x > 0)
        # must reach the tracer as an op, or an export would freeze it at the example's values.
        if tracing.active is not None:
            tracing.active.on_function(cls, inputs, attrs, out)
        return out

    def _versions_of_saved(self, inputs, out) -> tuple:
        """(counter, version now, input position or None for the output) for each tensor
        whose array the forward kept on ``self`` for the backward rule.

        Found by identity: an op saves what it needs as attributes (``self.a = a``,
        ``self.out = ...``), so an attribute that *is* an input's or the output's array marks
        that tensor as saved. An op that saves nothing (add) constrains nothing.
        """
        kept = {id(value) for value in vars(self).values()}
        saved = []
        for i, tensor in enumerate(inputs):
            if id(tensor.data) in kept:
                saved.append((tensor._version_cell, tensor._version_cell[0], i))
        if id(out.data) in kept:
            saved.append((out._version_cell, out._version_cell[0], None))
        return tuple(saved)

    def check_saved_versions(self, recorded: bool = False) -> None:
        """Raise if a tensor this node saved was edited in place since (PyTorch's error).

        ``recorded``: for the differentiable form, which may also read inputs that ``backward``
        did not keep (:class:`ReadsInputsWhenRecorded`). Such an input is checked only while it
        is still the node's input: an edit recorded in place hands the node a copy of the old
        value (autograd/inplace.py), which is what the form then reads.
        """
        versions = self.saved_versions
        if recorded:
            versions += tuple(entry for entry in getattr(self, "input_versions", ())
                              if self.parents[entry[2]]._version_cell is entry[0])
        for cell, version, position in versions:
            if cell[0] != version:
                what = "output" if position is None else f"input {position}"
                raise RuntimeError(
                    f"one of the tensors needed for gradient computation has been modified by "
                    f"an inplace operation: the {what} of {self.name} is at version {cell[0]}; "
                    f"expected version {version} instead. Compute it out of place (or clone "
                    f"it before editing).")

    def release(self) -> None:
        """Drop saved arrays and links once backward has used them (``retain_graph=False``)."""
        self.__dict__.clear()
        self.parents = ()
        self.released = True


class ReadsInputsWhenRecorded:
    """Mixin for ops whose differentiable form reads inputs their ``backward`` did not keep
    (a convolution's backward keeps the im2col columns, its recorded form reads x): their input
    versions are noted when the node is recorded, so that the recorded pass refuses an input
    edited in place since, rather than differentiate the new values."""

    def _versions_of_saved(self, inputs, out) -> tuple:
        self.input_versions = tuple((t._version_cell, t._version_cell[0], i)
                                    for i, t in enumerate(inputs))
        return super()._versions_of_saved(inputs, out)


def constant_slope(node, grad):
    """The recorded gradient of an elementwise op whose derivative is piecewise constant (relu,
    leaky relu, abs, clamp, maximum): ``grad`` times that derivative, taken as a constant.

    The derivative is what the op's own first-order rule sends back for a gradient of ones (one
    array per input), so this form follows that rule, its tie and NaN conventions included. The
    second derivative is 0 wherever it is defined, and the gradient stays differentiable in
    ``grad``.
    """
    slopes = node.backward(composed.ones(node.backend, grad.shape, grad.dtype))
    if not isinstance(slopes, tuple):
        return grad * Tensor._wrap(slopes, grad.device)
    return tuple(None if slope is None else grad * Tensor._wrap(slope, grad.device)
                 for slope in slopes)
