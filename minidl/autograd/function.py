"""The unit of autograd: a differentiable op with its forward and backward rule side by side.

Each op subclasses :class:`Function` and defines

* ``forward(self, *arrays, **attrs) -> array``: compute the output from backend arrays, saving
  whatever the gradient will need on ``self``;
* ``backward(self, grad) -> tuple``: given dLoss/dOutput, return dLoss/dInput for each input
  (``None`` where an input needs no gradient).

``Function.apply`` runs ``forward`` on the inputs' backend and, when any input requires a
gradient and the op is ``differentiable``, links the output to this node so that :func:`minidl.autograd.engine.backward` can walk
the graph in reverse. Backward rules may return gradients in the *broadcast* shape; the engine
sums them back to each input's shape, so no op has to repeat that bookkeeping.
"""

from __future__ import annotations

from ..backend import get_backend
from . import tracing
from .grad_mode import is_grad_enabled


class Function:
    """Base class of differentiable ops (see the module docstring)."""

    # False for ops whose output is not a differentiable function of their inputs: comparisons,
    # argmax, logical ops. Their outputs are piecewise constant (bools, indices), so the true
    # derivative is zero almost everywhere and undefined at the jumps; linking them into the graph
    # would only keep their inputs alive for a backward pass that has nothing to send.
    differentiable = True

    # Set by apply(); plain attributes rather than constructor arguments keep ops short.
    backend = None
    parents: tuple = ()
    needs_input_grad: tuple = ()
    released = False

    def forward(self, *arrays, **attrs):  # pragma: no cover - abstract
        raise NotImplementedError

    def backward(self, grad):  # pragma: no cover - abstract
        raise NotImplementedError

    @property
    def name(self) -> str:
        return type(self).__name__

    @classmethod
    def apply(cls, *inputs, **attrs):
        """Run the op on ``inputs`` (Tensors) and return the output Tensor."""
        from .tensor import Tensor

        device = inputs[0].device
        for tensor in inputs[1:]:
            if tensor.device != device:
                raise ValueError(
                    f"{cls.__name__}: inputs are on different devices "
                    f"({', '.join(t.device for t in inputs)}); move them with .to(device)")
        node = cls()
        node.backend = get_backend(device)
        out_data = node.forward(*(t.data for t in inputs), **attrs)
        needs = tuple(t.requires_grad for t in inputs)
        requires_grad = cls.differentiable and is_grad_enabled() and any(needs)
        out = Tensor._wrap(out_data, device, requires_grad)
        if requires_grad:
            node.parents = inputs
            node.needs_input_grad = needs
            out._node = node
        # Reported whether or not it is differentiable: a mask computed from the input (x > 0)
        # must reach the tracer as an op, or an export would freeze it at the example's values.
        if tracing.active is not None:
            tracing.active.on_function(cls, inputs, attrs, out)
        return out

    def release(self) -> None:
        """Drop saved arrays and links once backward has used them (``retain_graph=False``)."""
        self.__dict__.clear()
        self.parents = ()
        self.released = True
