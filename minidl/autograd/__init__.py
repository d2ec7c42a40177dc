"""Autograd: tensors that remember how they were computed, and the pass that differentiates them.

Read in this order:

* :mod:`~minidl.autograd.tensor` — the :class:`Tensor`: a backend array, its device, and, when an
  op recorded it, the node (``grad_fn``) that produced it;
* :mod:`~minidl.autograd.function` — :class:`Function`, one differentiable op with its forward
  and backward rule side by side (the ops themselves live in :mod:`minidl.ops`);
* :mod:`~minidl.autograd.engine` — :func:`backward`, the reverse walk over the recorded graph that
  applies the chain rule and accumulates gradients into the leaves' ``.grad``, and :func:`grad`,
  the same walk returning the gradients (recorded, with ``create_graph=True``, so that they can
  be differentiated again);
* :mod:`~minidl.autograd.hooks` — tensor hooks (``register_hook``, ``retain_grad``);
* :mod:`~minidl.autograd.functional` — vjp, jvp, hvp, jacobian and hessian, built on ``grad``;
* :mod:`~minidl.autograd.grad_mode` — ``no_grad`` and friends, which switch recording off;
* :mod:`~minidl.autograd.inplace` — in-place edits and the version counters that keep them from
  corrupting saved values;
* :mod:`~minidl.autograd.tracing` — the hook through which the ONNX exporter watches a forward.

Nothing here compiles a kernel or imports an optional package: this floor needs only NumPy and
the backend registry below it.
"""

from . import functional
from .engine import backward, grad, register_backward_finished_hook
from .function import Function
from .grad_mode import enable_grad, inference_mode, is_grad_enabled, no_grad, set_grad_enabled
from .tensor import Tensor

__all__ = [
    "Tensor", "Function", "backward", "grad", "functional", "register_backward_finished_hook",
    "no_grad", "enable_grad", "inference_mode", "is_grad_enabled", "set_grad_enabled",
]
