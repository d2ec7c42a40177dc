"""The trigonometric and hyperbolic functions, their inverses and erf, as differentiable ops.

Imported graphs use them: rotary position embeddings write Sin and Cos, exporters that predate
ONNX's ``Gelu`` write GELU(x) = x·½·(1 + erf(x/√2)), a few activations use Sinh or Atan. Each
computes through the backend's ``math_function`` primitive, so the values stay on the tensor's
device, and its gradient is grad · f'(a), with the textbook derivative written once below:
d sin x = cos x, d tan x = 1 + tan² x, d asin x = (1 − x²)^(−½), d erf x = 2/√π · e^(−x²), ...
"""

from __future__ import annotations

import math

from ..autograd.function import Function
from ..autograd.tensor import Tensor
from ..backend.primitives import MATH_FUNCTIONS
from . import elementwise as ew

_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)

# name -> f'(a), written with the operations of ``m``: a backend (for the first-order backward,
# on arrays) or _OnTensors (for gradients of gradients, recorded on Tensors). One formula each,
# so the two backward forms cannot disagree.
DERIVATIVES = {
    "exp": lambda m, a: m.math_function(a, "exp"),
    "log": lambda m, a: m.div(1.0, a),
    "sqrt": lambda m, a: m.mul(m.power(a, -0.5), 0.5),
    "sin": lambda m, a: m.math_function(a, "cos"),
    "cos": lambda m, a: m.mul(m.math_function(a, "sin"), -1.0),
    "tan": lambda m, a: m.add(m.power(m.math_function(a, "tan"), 2.0), 1.0),
    "asin": lambda m, a: m.power(m.sub(1.0, m.mul(a, a)), -0.5),
    "acos": lambda m, a: m.mul(m.power(m.sub(1.0, m.mul(a, a)), -0.5), -1.0),
    "atan": lambda m, a: m.div(1.0, m.add(m.mul(a, a), 1.0)),
    "sinh": lambda m, a: m.math_function(a, "cosh"),
    "cosh": lambda m, a: m.math_function(a, "sinh"),
    "tanh": lambda m, a: m.sub(1.0, m.power(m.math_function(a, "tanh"), 2.0)),
    "asinh": lambda m, a: m.power(m.add(m.mul(a, a), 1.0), -0.5),
    "acosh": lambda m, a: m.power(m.sub(m.mul(a, a), 1.0), -0.5),
    "atanh": lambda m, a: m.div(1.0, m.sub(1.0, m.mul(a, a))),
    "erf": lambda m, a: m.mul(m.math_function(m.mul(m.mul(a, a), -1.0), "exp"),
                              _TWO_OVER_SQRT_PI),
}


class _OnTensors:
    """The operations DERIVATIVES uses, as differentiable ops on Tensors."""

    add, sub, mul, div, power = ew.add, ew.sub, ew.mul, ew.div, ew.pow

    @staticmethod
    def math_function(a, name):
        return MathFunction.apply(a, name=name)


class MathFunction(Function):
    """f(a) element by element for f named in the backend's MATH_FUNCTIONS; grad · f'(a)."""

    def forward(self, a, name):
        self.a, self.function_name = a, name
        return self.backend.math_function(a, name)

    def backward(self, grad):
        be = self.backend
        return be.mul(grad, DERIVATIVES[self.function_name](be, self.a))

    def differentiable_backward(self, grad, output):
        return grad * DERIVATIVES[self.function_name](_OnTensors, self.parents[0])


def _math_op(name: str):
    def compute(a: Tensor) -> Tensor:
        if a.dtype.kind != "f":
            raise TypeError(f"{name}: input must be a floating point tensor, got {a.dtype}")
        return MathFunction.apply(a, name=name)
    compute.__name__ = compute.__qualname__ = name
    compute.__doc__ = f"{name}(a) element by element, differentiable (floating point a)."
    return compute


sin, cos, tan = _math_op("sin"), _math_op("cos"), _math_op("tan")
asin, acos, atan = _math_op("asin"), _math_op("acos"), _math_op("atan")
sinh, cosh = _math_op("sinh"), _math_op("cosh")
# exp, sqrt and tanh are ops of their own (ops/elementwise.py), whose gradients read their output
# (e^a, ½/√a, 1 - tanh²) instead of computing the function again, and log's is 1/a with no
# function at all; they compute through math_function(a, name) all the same.
exp, log, sqrt, tanh = ew.exp, ew.log, ew.sqrt, ew.tanh
asinh, acosh, atanh = _math_op("asinh"), _math_op("acosh"), _math_op("atanh")
erf = _math_op("erf")

BY_NAME = {name: globals()[name] for name in MATH_FUNCTIONS}
"""Each op above by its primitive's name."""
