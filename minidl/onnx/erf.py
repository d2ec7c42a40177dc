"""The error function as a differentiable op, for ONNX graphs that spell GELU with ``Erf``.

Exporters that predate ONNX's ``Gelu`` write GELU(x) = x·½·(1 + erf(x/√2)); importing such a
graph only needs ``Erf`` itself, whose derivative is d erf(x)/dx = 2/√π · e^(−x²).
"""

from __future__ import annotations

import math

import numpy as np

from ..autograd.function import Function
from ..autograd.tensor import Tensor
from ..ops.elementwise import exp

_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)
_erf_elementwise = np.frompyfunc(math.erf, 1, 1)  # math.erf applied to every element


class ErfFunction(Function):
    def forward(self, a):
        be = self.backend
        self.a = a
        # math.erf is exact to double precision; computing in float64 then rounding keeps the
        # result within float32's own rounding of the true value.
        values = be.to_numpy(a).astype(np.float64)
        return be.from_numpy(_erf_elementwise(values).astype(a.dtype))

    def backward(self, grad):
        be = self.backend
        slope = be.mul(be.exp(be.neg(be.mul(self.a, self.a))), self.a.dtype.type(_TWO_OVER_SQRT_PI))
        return be.mul(grad, slope)

    def differentiable_backward(self, grad, output):
        a = self.parents[0]
        return grad * (exp(-(a * a)) * _TWO_OVER_SQRT_PI)


def erf(a: Tensor) -> Tensor:
    """erf(a) element by element (floating point tensors)."""
    if a.dtype.kind != "f":
        raise TypeError(f"erf: input must be a floating point tensor, got {a.dtype}")
    return ErfFunction.apply(a)
