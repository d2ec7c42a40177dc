"""A finite-difference gradient checker for minidl ops, shared by the autograd, ops and nn tests.

For a function f of tensors with output y, ``backward(grad=w)`` computes the vector-Jacobian
product wᵀ·∂y/∂x. The same quantity is the derivative of the scalar L(x) = Σ w ⊙ f(x), which
central differences estimate to O(eps²): ∂L/∂x_i ≈ (L(x + eps·e_i) - L(x - eps·e_i)) / (2·eps).
A random w (rather than all ones) makes sure every output element's gradient is checked with a
different weight, so a rule that mixes up output positions cannot pass by symmetry.
"""

from __future__ import annotations

import numpy as np

import minidl as md


def _as_output(value):
    return value if isinstance(value, md.Tensor) else md.tensor(value)


def numerical_vjp(f, arrays, weights, index, eps, device="cpu"):
    """Central-difference estimate of ∂(Σ w ⊙ f)/∂arrays[index], holding the others fixed."""
    base = [np.array(a, dtype=np.float64, copy=True) for a in arrays]
    target = base[index]
    grad = np.zeros_like(target)
    flat, flat_grad = target.reshape(-1), grad.reshape(-1)
    with md.no_grad():
        for i in range(flat.size):
            original = flat[i]
            flat[i] = original + eps
            plus = _as_output(f(*[md.tensor(a, dtype=np.float64, device=device)
                                  for a in base])).numpy()
            flat[i] = original - eps
            minus = _as_output(f(*[md.tensor(a, dtype=np.float64, device=device)
                                   for a in base])).numpy()
            flat[i] = original
            flat_grad[i] = np.sum(weights * (plus.astype(np.float64) - minus)) / (2 * eps)
    return grad


def analytic_vjp(f, arrays, weights, wrt, device="cpu"):
    """Gradients from ``backward(grad=weights)`` for the inputs listed in ``wrt``."""
    tensors = [md.tensor(a, dtype=np.float64, device=device, requires_grad=i in wrt)
               for i, a in enumerate(arrays)]
    out = f(*tensors)
    assert out.requires_grad, "the output does not depend on any input that requires grad"
    out.backward(grad=weights)
    grads = []
    for i in wrt:
        grad = tensors[i].grad
        # No gradient at all is fine only when the input did not influence the output.
        grads.append(np.zeros(tensors[i].shape) if grad is None else grad.numpy())
    return out, grads


def check_gradients(f, *arrays, wrt=None, eps=1e-6, rtol=1e-6, atol=1e-8, seed=0, device="cpu"):
    """Assert that backward's gradients of f match central differences in float64.

    ``f`` takes one float64 Tensor per array (integer data such as class targets should be
    closed over, not passed) and returns a Tensor. ``wrt`` lists the indices of the arrays to
    check (default: all); ``device`` is where the tensors are made. Returns the analytic
    gradients.
    """
    wrt = tuple(range(len(arrays))) if wrt is None else tuple(wrt)
    arrays = [np.asarray(a, dtype=np.float64) for a in arrays]
    with md.no_grad():
        out_shape = _as_output(f(*[md.tensor(a, dtype=np.float64, device=device)
                                   for a in arrays])).shape
    weights = np.random.default_rng(seed).standard_normal(out_shape)
    out, analytic = analytic_vjp(f, arrays, weights, wrt, device)
    assert out.dtype == np.float64, f"float64 inputs gave a {out.dtype} output"
    for index, grad in zip(wrt, analytic):
        assert grad.shape == arrays[index].shape, (
            f"gradient of input {index} has shape {grad.shape}, input has {arrays[index].shape}")
        assert grad.dtype == np.float64, f"gradient of input {index} is {grad.dtype}"
        expected = numerical_vjp(f, arrays, weights, index, eps, device)
        np.testing.assert_allclose(grad, expected, rtol=rtol, atol=atol,
                                   err_msg=f"gradient of input {index}")
    return analytic


def _weighted_first_gradient(f, arrays, wrt, weights, directions, create_graph, device="cpu"):
    """S = Σ_j ⟨directions[j], ∂(Σ weights ⊙ f)/∂arrays[wrt[j]]⟩ and the tensors it came from."""
    tensors = [md.tensor(a, dtype=np.float64, device=device, requires_grad=i in wrt)
               for i, a in enumerate(arrays)]
    wanted = [tensors[i] for i in wrt]
    out = _as_output(f(*tensors))
    grads = md.autograd.grad(out, wanted, md.tensor(weights, device=device),
                             create_graph=create_graph, allow_unused=True)
    total = None
    for grad, direction in zip(grads, directions):
        if grad is None:
            continue
        term = (grad * md.tensor(direction, device=device)).sum()
        total = term if total is None else total + term
    return total, wanted


def check_second_derivatives(f, *arrays, wrt=None, eps=1e-6, rtol=1e-5, atol=1e-7, seed=0,
                             device="cpu"):
    """gradgradcheck: assert that differentiating the recorded first gradient
    (``create_graph=True``) agrees with central differences of the first gradient, in float64.

    With random output weights w and random directions v, the scalar
    S(x) = Σ_j ⟨v_j, ∂(Σ w ⊙ f)/∂x_j⟩ mixes every second derivative; its gradient from a second
    backward pass must match (S(x + eps·e_i) - S(x - eps·e_i)) / (2·eps), where each S is
    computed with first-order passes only. Returns the analytic second gradients.
    """
    wrt = tuple(range(len(arrays))) if wrt is None else tuple(wrt)
    arrays = [np.asarray(a, dtype=np.float64) for a in arrays]
    rng = np.random.default_rng(seed)
    with md.no_grad():
        out_shape = _as_output(f(*[md.tensor(a, device=device) for a in arrays])).shape
    weights = rng.standard_normal(out_shape)
    directions = [rng.standard_normal(arrays[i].shape) for i in wrt]
    total, wanted = _weighted_first_gradient(f, arrays, wrt, weights, directions, True, device)
    if total is None or not total.requires_grad:  # the first gradient is constant in x
        analytic = [np.zeros(arrays[i].shape) for i in wrt]
    else:
        analytic = [np.zeros(t.shape) if g is None else g.numpy() for t, g in zip(
            wanted, md.autograd.grad(total, wanted, allow_unused=True))]
    for position, index in enumerate(wrt):
        expected = np.zeros(arrays[index].shape)
        flat, flat_expected = arrays[index].reshape(-1), expected.reshape(-1)
        for k in range(flat.size):
            original = flat[k]
            values = []
            for shifted in (original + eps, original - eps):
                flat[k] = shifted
                value, _ = _weighted_first_gradient(f, arrays, wrt, weights, directions, False,
                                                    device)
                values.append(0.0 if value is None else value.item())
            flat[k] = original
            flat_expected[k] = (values[0] - values[1]) / (2 * eps)
        np.testing.assert_allclose(analytic[position], expected, rtol=rtol, atol=atol,
                                   err_msg=f"second derivative with respect to input {index}")
    return analytic
