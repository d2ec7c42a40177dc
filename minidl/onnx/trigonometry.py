"""Trigonometric and hyperbolic functions as differentiable ops, for graphs that use them
(rotary position embeddings write Sin and Cos; a few activations use Sinh or Atan).

Like :mod:`.erf`, each one computes its values with NumPy's function of the same name on the
host copy of the data, and its gradient from the textbook derivative written with the same
functions: d sin x = cos x, d tan x = 1 + tan² x, d asin x = 1/√(1 − x²), and so on.
"""

from __future__ import annotations

import numpy as np

from ..autograd.function import Function
from ..autograd.tensor import Tensor
from ..ops.elementwise import sqrt

# name -> (value, derivative), both of a NumPy array.
_FUNCTIONS = {
    "Sin": (np.sin, np.cos),
    "Cos": (np.cos, lambda x: -np.sin(x)),
    "Tan": (np.tan, lambda x: 1.0 + np.tan(x) ** 2),
    "Asin": (np.arcsin, lambda x: 1.0 / np.sqrt(1.0 - x * x)),
    "Acos": (np.arccos, lambda x: -1.0 / np.sqrt(1.0 - x * x)),
    "Atan": (np.arctan, lambda x: 1.0 / (1.0 + x * x)),
    "Sinh": (np.sinh, np.cosh),
    "Cosh": (np.cosh, np.sinh),
    "Asinh": (np.arcsinh, lambda x: 1.0 / np.sqrt(x * x + 1.0)),
    "Acosh": (np.arccosh, lambda x: 1.0 / np.sqrt(x * x - 1.0)),
    "Atanh": (np.arctanh, lambda x: 1.0 / (1.0 - x * x)),
}


class HostUnaryFunction(Function):
    """f(a) element by element, computed on the host; the gradient is grad · f'(a)."""

    def forward(self, a, name):
        be = self.backend
        self.a, self.function_name = a, name
        value, _ = _FUNCTIONS[name]
        with np.errstate(all="ignore"):  # outside the domain the answer is NaN, as in NumPy
            return be.from_numpy(value(be.to_numpy(a)).astype(a.dtype))

    def backward(self, grad):
        be = self.backend
        _, derivative = _FUNCTIONS[self.function_name]
        with np.errstate(all="ignore"):
            slope = be.from_numpy(derivative(be.to_numpy(self.a)).astype(self.a.dtype))
        return be.mul(grad, slope)

    def differentiable_backward(self, grad, output):
        return grad * _RECORDED_DERIVATIVES[self.function_name](self.parents[0])


def _host(name):
    return lambda a: HostUnaryFunction.apply(a, name=name)


# name -> f'(a) written with differentiable ops (for gradients of gradients).
_RECORDED_DERIVATIVES = {
    "Sin": _host("Cos"),
    "Cos": lambda a: -_host("Sin")(a),
    "Tan": lambda a: 1.0 + _host("Tan")(a) ** 2,
    "Asin": lambda a: 1.0 / sqrt(1.0 - a * a),
    "Acos": lambda a: -1.0 / sqrt(1.0 - a * a),
    "Atan": lambda a: 1.0 / (1.0 + a * a),
    "Sinh": _host("Cosh"),
    "Cosh": _host("Sinh"),
    "Asinh": lambda a: 1.0 / sqrt(a * a + 1.0),
    "Acosh": lambda a: 1.0 / sqrt(a * a - 1.0),
    "Atanh": lambda a: 1.0 / (1.0 - a * a),
}


def _function(name):
    def compute(a: Tensor) -> Tensor:
        if a.dtype.kind != "f":
            raise TypeError(f"{name}: input must be a floating point tensor, got {a.dtype}")
        return HostUnaryFunction.apply(a, name=name)
    compute.__name__ = name.lower()
    compute.__doc__ = f"ONNX {name} of a floating point tensor, element by element."
    return compute


TRIGONOMETRY = {name: _function(name) for name in _FUNCTIONS}
