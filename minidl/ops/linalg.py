"""Matrix products: batched ``matmul`` and the fused affine map ``linear``.

For C = A @ B, dL/dA = dL/dC @ Bᵀ and dL/dB = Aᵀ @ dL/dC; batch axes broadcast like any other
elementwise axis, so the engine's broadcast reduction finishes the job for batched operands.
"""

from __future__ import annotations

import math

from ..autograd.function import Function
from ..autograd.tensor import Tensor
from ._util import broadcast_shape, check_bias_and_dtype


class MatmulFunction(Function):
    def forward(self, a, b):
        self.a, self.b = a, b
        return self.backend.matmul(a, b)

    def backward(self, grad):
        be = self.backend
        # The transposes are read in place by the product (BLAS's transpose flags), not copied.
        return be.matmul(grad, self.b, transpose_b=True), be.matmul(self.a, grad,
                                                                    transpose_a=True)

    def differentiable_backward(self, grad, output):
        from .shape import transpose
        a, b = self.parents
        needs_a, needs_b = self.needs_input_grad
        return (matmul(grad, transpose(b, -1, -2)) if needs_a else None,
                matmul(transpose(a, -1, -2), grad) if needs_b else None)


class LinearFunction(Function):
    """y = x Wᵀ + b over the last axis of x, as one node (the MLP's hot path).

    dL/dx = dL/dy W,   dL/dW = (dL/dy)ᵀ x,   dL/db = Σ_rows dL/dy, with x's leading axes flattened
    into rows so both weight gradients are single BLAS calls.
    """

    def forward(self, x, weight, bias=None):
        be = self.backend
        self.x, self.weight = x, weight
        # Leading axes folded into rows: one (rows × in) GEMM instead of a batch of small ones,
        # which BLAS runs several times faster for a sequence of vectors (T, N, in).
        rows = be.reshape(x, (math.prod(x.shape[:-1]), x.shape[-1])) if x.ndim > 2 else x
        out = be.matmul(rows, weight, transpose_b=True)
        if x.ndim > 2:
            out = be.reshape(out, x.shape[:-1] + (weight.shape[0],))
        return out if bias is None else be.add(out, bias)

    def backward(self, grad):
        be = self.backend
        # The row count is spelled out: reshape cannot infer a -1 when a feature axis is empty.
        n_rows = math.prod(grad.shape[:-1])
        rows = be.reshape(grad, (n_rows, grad.shape[-1]))
        x_rows = be.reshape(self.x, (n_rows, self.x.shape[-1]))
        # A first layer's input (the data) needs no gradient: skip the largest product of all.
        grad_x = None
        if self.needs_input_grad[0]:
            grad_x = be.reshape(be.matmul(rows, self.weight), self.x.shape)
        grad_weight = be.matmul(rows, x_rows, transpose_a=True)
        grad_bias = be.sum(rows, axis=0) if len(self.parents) == 3 else None
        return grad_x, grad_weight, grad_bias

    def differentiable_backward(self, grad, output):
        from .shape import reshape, transpose
        x, weight = self.parents[:2]
        n_rows = math.prod(grad.shape[:-1])
        rows = reshape(grad, (n_rows, grad.shape[-1]))
        grad_x = matmul(grad, weight) if self.needs_input_grad[0] else None
        grad_weight = matmul(transpose(rows, 0, 1), reshape(x, (n_rows, x.shape[-1])))
        grad_bias = rows.sum(axis=0) if len(self.parents) == 3 else None
        return grad_x, grad_weight, grad_bias


def matmul(a: Tensor, b: Tensor) -> Tensor:
    """Matrix product with NumPy's rules: 1-D operands are promoted, batch axes broadcast."""
    if not isinstance(a, Tensor) or not isinstance(b, Tensor):
        raise TypeError("matmul: both operands must be Tensors")
    if a.ndim == 0 or b.ndim == 0:
        raise ValueError(f"matmul: operands must be at least 1-D, got shapes {a.shape} and "
                         f"{b.shape}")
    if a.dtype != b.dtype:
        raise TypeError(f"matmul: dtypes differ ({a.dtype} and {b.dtype})")
    squeeze_rows, squeeze_cols = a.ndim == 1, b.ndim == 1
    a2 = a.reshape(1, -1) if squeeze_rows else a
    b2 = b.reshape(-1, 1) if squeeze_cols else b
    if a2.shape[-1] != b2.shape[-2]:
        raise ValueError(f"matmul: shapes {a.shape} and {b.shape} are not aligned "
                         f"({a2.shape[-1]} != {b2.shape[-2]})")
    broadcast_shape("matmul", a2.shape[:-2], b2.shape[:-2])
    out = MatmulFunction.apply(a2, b2)
    if squeeze_rows:
        out = out.reshape(out.shape[:-2] + out.shape[-1:])
    if squeeze_cols:
        out = out.reshape(out.shape[:-1])
    return out


def linear(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """x @ weight.T + bias, with weight of shape (out_features, in_features) as in PyTorch."""
    x_shape, w_shape = tuple(x.data.shape), tuple(weight.data.shape)  # Tensor.shape, uncalled
    if len(w_shape) != 2:
        raise ValueError(f"linear: weight must be 2-D (out, in), got shape {w_shape}")
    if not x_shape or x_shape[-1] != w_shape[1]:
        raise ValueError(f"linear: input of shape {x_shape} does not match weight of shape "
                         f"{w_shape} (expected last dimension {w_shape[1]})")
    check_bias_and_dtype("linear", x, weight, bias)
    inputs = (x, weight) if bias is None else (x, weight, bias)
    return LinearFunction.apply(*inputs)
