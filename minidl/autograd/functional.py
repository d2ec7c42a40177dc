"""Derivatives of whole functions, built on :func:`~minidl.autograd.engine.grad` (PyTorch's
``torch.autograd.functional``).

For f: inputs -> outputs with Jacobian J:

* ``vjp(f, x, v)`` = vᵀJ, one reverse pass (what ``backward`` computes);
* ``jvp(f, x, v)`` = Jv, by the "double vjp" trick: u ↦ uᵀJ is linear in u, so its own vjp with v
  is (Jᵀ)ᵀv = Jv — two reverse passes, the first recorded (``create_graph``);
* ``hvp(f, x, v)`` = Hv for a scalar f: the gradient g(x) = ∇f, then the vjp of g with v (H is
  symmetric, so vᵀH = (Hv)ᵀ) — the gradient differentiated once more, never H itself;
* ``jacobian(f, x)`` = J, one vjp per output element (rows of J);
* ``hessian(f, x)`` = the Jacobian of ∇f.

Each takes ``inputs`` as a Tensor or a tuple of Tensors and answers in the same form. The
inputs are differentiated as fresh leaves (their own history is not followed) and the results
are detached from the graph unless ``create_graph=True``, as in PyTorch.
"""

from __future__ import annotations

import numpy as np

from ..backend import composed
from .engine import grad
from .grad_mode import enable_grad
from .tensor import Tensor


def _as_tuple(op: str, what: str, value) -> tuple[tuple, bool]:
    """``value`` as a tuple of Tensors, and whether it was one Tensor (to answer in kind)."""
    if isinstance(value, Tensor):
        return (value,), True
    if isinstance(value, (tuple, list)) and value and all(isinstance(v, Tensor) for v in value):
        return tuple(value), False
    raise TypeError(f"{op}: {what} must be a Tensor or a non-empty tuple of Tensors, got "
                    f"{type(value).__name__}")


def _prepare_inputs(op: str, inputs, create_graph: bool) -> tuple[tuple, bool]:
    inputs, single = _as_tuple(op, "inputs", inputs)
    for position, tensor in enumerate(inputs):
        if tensor.dtype.kind != "f":
            raise TypeError(f"{op}: input {position} must be floating point, got {tensor.dtype}")
    # Fresh leaves, so that only f is differentiated. With create_graph an input that already
    # requires grad is used as it is, so the result can be differentiated back through it.
    prepared = tuple(t if create_graph and t.requires_grad else
                     t.detach().requires_grad_(True) for t in inputs)
    return prepared, single


def _check_vectors(op: str, v, like: tuple, what: str) -> tuple:
    vectors, _ = _as_tuple(op, "v", v)
    if len(vectors) != len(like):
        raise ValueError(f"{op}: v has {len(vectors)} tensors for {len(like)} {what}")
    for position, (vector, target) in enumerate(zip(vectors, like)):
        if vector.shape != target.shape:
            raise ValueError(f"{op}: v[{position}] has shape {vector.shape}, the {what[:-1]} "
                             f"has shape {target.shape}")
    return vectors


def _default_vector(op: str, outputs: tuple) -> tuple:
    if len(outputs) != 1 or outputs[0].numel() != 1:
        raise ValueError(f"{op}: v may be left out only when the function returns a single "
                         f"one-element tensor")
    return (Tensor._wrap(composed.ones(outputs[0].backend, outputs[0].shape, outputs[0].dtype),
                         outputs[0].device),)


def _zeros_where_unused(results, like: tuple, create_graph: bool) -> tuple:
    """None (an input the function ignores) as zeros; detached unless create_graph."""
    out = []
    for value, target in zip(results, like):
        if value is None:
            value = Tensor._wrap(target.backend.zeros(target.shape, target.dtype), target.device)
        out.append(value if create_graph else value.detach())
    return tuple(out)


def _call(op: str, func, inputs: tuple) -> tuple[tuple, bool]:
    with enable_grad():
        outputs = func(*inputs)
    return _as_tuple(op, "the function's result", outputs)


def _answer(values: tuple, single: bool):
    return values[0] if single else values


def vjp(func, inputs, v=None, create_graph: bool = False, strict: bool = False):
    """``(func(inputs), vᵀ·J)``: the vector-Jacobian product at ``inputs`` (``v`` shaped like
    the outputs; may be left out for a one-element output)."""
    del strict  # PyTorch's check for independent outputs; zeros are returned instead
    inputs, single_input = _prepare_inputs("vjp", inputs, create_graph)
    outputs, single_output = _call("vjp", func, inputs)
    vectors = _default_vector("vjp", outputs) if v is None else \
        _check_vectors("vjp", v, outputs, "outputs")
    differentiable = [(o, w) for o, w in zip(outputs, vectors) if o.requires_grad]
    results = (None,) * len(inputs)
    if differentiable:
        results = grad([o for o, _ in differentiable], list(inputs),
                       [w for _, w in differentiable], create_graph=create_graph,
                       allow_unused=True)
    products = _zeros_where_unused(results, inputs, create_graph)
    return (_answer(_detach_unless(outputs, create_graph), single_output),
            _answer(products, single_input))


def jvp(func, inputs, v=None, create_graph: bool = False, strict: bool = False):
    """``(func(inputs), J·v)``: the Jacobian-vector product (``v`` shaped like the inputs; may
    be left out for a one-element input), by the double-vjp trick (module docstring)."""
    del strict
    inputs, single_input = _prepare_inputs("jvp", inputs, create_graph)
    vectors = _default_vector("jvp", inputs) if v is None else \
        _check_vectors("jvp", v, inputs, "inputs")
    outputs, single_output = _call("jvp", func, inputs)
    differentiable = [o for o in outputs if o.requires_grad]
    if not differentiable:
        products = _zeros_where_unused((None,) * len(outputs), outputs, create_graph)
        return (_answer(_detach_unless(outputs, create_graph), single_output),
                _answer(products, single_output))
    # u ↦ uᵀJ, recorded: a dummy u of the outputs' shapes (its value does not matter, the
    # product is linear in it); then the vjp of that with v gives J v.
    dummies = [Tensor._wrap(o.backend.zeros(o.shape, o.dtype), o.device).requires_grad_(True)
               for o in differentiable]
    with enable_grad():
        transposed = grad(differentiable, list(inputs), dummies, create_graph=True,
                          allow_unused=True)
        pairs = [(t, w) for t, w in zip(transposed, vectors) if t is not None and t.requires_grad]
        results = (None,) * len(dummies)
        if pairs:
            results = grad([t for t, _ in pairs], dummies, [w for _, w in pairs],
                           create_graph=create_graph, allow_unused=True)
    by_output = iter(_zeros_where_unused(results, dummies, create_graph))
    products = tuple(next(by_output) if o.requires_grad else
                     _zeros_where_unused((None,), (o,), create_graph)[0] for o in outputs)
    return (_answer(_detach_unless(outputs, create_graph), single_output),
            _answer(products, single_output))


def _scalar_output(op: str, func, inputs: tuple) -> Tensor:
    outputs, _ = _call(op, func, inputs)
    if len(outputs) != 1 or outputs[0].numel() != 1:
        raise ValueError(f"{op}: the function must return a single one-element tensor, got "
                         f"shapes {[o.shape for o in outputs]}")
    return outputs[0]


def hvp(func, inputs, v=None, create_graph: bool = False, strict: bool = False):
    """``(func(inputs), H·v)`` for a scalar-valued ``func``: the Hessian-vector product,
    without forming H (the gradient, recorded, differentiated once more along v)."""
    del strict
    inputs, single = _prepare_inputs("hvp", inputs, create_graph)
    vectors = _default_vector("hvp", inputs) if v is None else \
        _check_vectors("hvp", v, inputs, "inputs")
    output = _scalar_output("hvp", func, inputs)
    results = (None,) * len(inputs)
    if output.requires_grad:
        with enable_grad():
            gradients = grad(output, list(inputs), create_graph=True, allow_unused=True)
            pairs = [(g, w) for g, w in zip(gradients, vectors)
                     if g is not None and g.requires_grad]
            if pairs:
                results = grad([g for g, _ in pairs], list(inputs), [w for _, w in pairs],
                               create_graph=create_graph, allow_unused=True)
    products = _zeros_where_unused(results, inputs, create_graph)
    return (output if create_graph else output.detach()), _answer(products, single)


def vhp(func, inputs, v=None, create_graph: bool = False, strict: bool = False):
    """``(func(inputs), vᵀ·H)``: equal to :func:`hvp`'s product, H being symmetric."""
    return hvp(func, inputs, v, create_graph, strict)


def jacobian(func, inputs, create_graph: bool = False, strict: bool = False,
             vectorize: bool = False):
    """The Jacobian of ``func`` at ``inputs``: for output i and input j a tensor of shape
    ``outputs[i].shape + inputs[j].shape``, nested like PyTorch's (a Tensor for one input and
    one output, a tuple over the one that is a tuple, a tuple of tuples for both)."""
    del strict, vectorize  # one vjp per output element; zeros for independent pairs
    inputs, single_input = _prepare_inputs("jacobian", inputs, create_graph)
    outputs, single_output = _call("jacobian", func, inputs)
    return _jacobian_of(outputs, inputs, single_output, single_input, create_graph)


def _jacobian_of(outputs: tuple, inputs: tuple, single_output: bool, single_input: bool,
                 create_graph: bool):
    from ..ops.shape import reshape, stack

    per_output = []
    for output in outputs:
        rows = []  # one per output element: d output[k] / d each input
        for k in range(output.numel()):
            if not output.requires_grad:
                rows.append(_zeros_where_unused((None,) * len(inputs), inputs, create_graph))
                continue
            onehot = np.zeros(output.numel(), dtype=output.dtype)
            onehot[k] = 1
            weights = Tensor._wrap(output.backend.from_numpy(onehot.reshape(output.shape)),
                                   output.device)
            results = grad(output, list(inputs), weights, retain_graph=True,
                           create_graph=create_graph, allow_unused=True)
            rows.append(_zeros_where_unused(results, inputs, create_graph))
        blocks = []
        for j, target in enumerate(inputs):
            if rows:
                block = reshape(stack([row[j] for row in rows]), output.shape + target.shape)
            else:  # an empty output: an empty Jacobian block
                block = Tensor._wrap(target.backend.zeros(output.shape + target.shape,
                                                          target.dtype), target.device)
            blocks.append(block)
        per_output.append(_answer(tuple(blocks), single_input))
    return _answer(tuple(per_output), single_output)


def hessian(func, inputs, create_graph: bool = False, strict: bool = False,
            vectorize: bool = False):
    """The Hessian of a scalar-valued ``func``: the Jacobian of its gradient (for inputs i and
    j a tensor of shape ``inputs[i].shape + inputs[j].shape``, nested as :func:`jacobian`)."""
    del strict, vectorize
    inputs, single = _prepare_inputs("hessian", inputs, create_graph)
    output = _scalar_output("hessian", func, inputs)
    if not output.requires_grad:
        gradients = _zeros_where_unused((None,) * len(inputs), inputs, True)
    else:
        with enable_grad():
            gradients = _zeros_where_unused(
                grad(output, list(inputs), create_graph=True, allow_unused=True), inputs, True)
    with enable_grad():
        return _jacobian_of(gradients, inputs, single, single, create_graph)


def _detach_unless(tensors: tuple, create_graph: bool) -> tuple:
    return tensors if create_graph else tuple(t.detach() for t in tensors)
