"""The other pointwise activations PyTorch has: leaky and exponential rectifiers, smooth ones
(SiLU, Softplus, Mish), the piecewise-linear "hard" ones used by mobile networks, and PReLU.

Each is one op: its forward computes the activation in a few backend primitives, and its
backward uses the derivative written next to it. (Built from generic ops instead, an
activation would record several graph nodes and keep each intermediate alive until backward.)
"""

from __future__ import annotations

from ..autograd.function import Function, ReadsInputsWhenRecorded, constant_slope
from ..autograd.tensor import Tensor
from ..backend import composed
from ._util import require_float


def _bool(mask, like: Tensor) -> Tensor:
    """A saved bool mask as a Tensor (a constant in a recorded gradient)."""
    return Tensor._wrap(mask, like.device)


def _softplus(be, z):
    # log(1 + eᶻ) = max(z, 0) + log(1 + e^-|z|): the exponent is never positive, so no overflow.
    decaying = be.math_function(composed.neg(be, be.abs(z)), "exp")
    return be.add(be.relu(z), be.math_function(be.add(decaying, 1.0), "log"))


class LeakyReluFunction(Function):
    # y = x for x > 0, slope·x otherwise;  dy/dx = 1 or slope (slope at 0, as PyTorch).
    def forward(self, a, negative_slope):
        be = self.backend
        self.positive, self.slope = composed.greater(be, a, 0), negative_slope
        return be.where(self.positive, a, be.mul(a, negative_slope))

    def backward(self, grad):
        be = self.backend
        return be.where(self.positive, grad, be.mul(grad, self.slope))

    def differentiable_backward(self, grad, output):
        return constant_slope(self, grad)


def _expm1(be, z):
    """eᶻ - 1, accurate near 0 where the subtraction would cancel every digit (in float32,
    e^-1e-6 - 1 is off by 5%, and e^-1e-30 - 1 is 0). Kahan's correction: with u = eᶻ as
    rounded, (u - 1)·z / ln u is within a few ulps of eᶻ - 1, because the rounding error of u
    cancels between u - 1 and ln u; where u rounds to 1, z itself is the answer, and where u
    is 0 (z below about -104 in float32, -inf included) the answer is -1."""
    u = be.math_function(z, "exp")
    u_minus_1 = be.sub(u, 1.0)
    is_one, is_zero = be.equal(u, 1.0), be.equal(u, 0.0)
    # any value away from 1 and 0 where those branches are taken: they are not used
    log_u = be.math_function(be.where(composed.logical_or(be, is_one, is_zero), 2.0, u), "log")
    kahan = be.mul(u_minus_1, be.div(z, log_u))
    return be.where(is_one, z, be.where(is_zero, -1.0, kahan))


class EluFunction(Function):
    # y = x for x > 0, α(eˣ - 1) otherwise;  dy/dx = 1 or αeˣ = y + α.
    def forward(self, a, alpha):
        be = self.backend
        # "not x <= 0" rather than x > 0: a NaN takes the linear branch, whose gradient is
        # 1 (PyTorch's test), not the exponential one's NaN.
        self.positive, self.alpha = composed.logical_not(be, composed.less_equal(be, a, 0)), alpha
        # eˣ - 1 only where x <= 0 (min(x, 0)), so eˣ cannot overflow.
        negative_part = be.mul(_expm1(be, be.minimum(a, a.dtype.type(0))), alpha)
        self.out = be.where(self.positive, a, negative_part)
        return self.out

    def backward(self, grad):
        be = self.backend
        return be.where(self.positive, grad, be.mul(grad, be.add(self.out, self.alpha)))

    def differentiable_backward(self, grad, output):
        from .shape import where
        return where(_bool(self.positive, grad), grad, grad * (output + self.alpha))


class SoftplusFunction(ReadsInputsWhenRecorded, Function):
    # y = log(1 + e^(βx)) / β, and y = x where βx > threshold (the two agree there to float
    # precision);  dy/dx = σ(βx), or 1 above the threshold.
    def forward(self, a, beta, threshold):
        be = self.backend
        z = be.mul(a, beta)
        self.linear, self.z, self.beta = composed.greater(be, z, threshold), z, beta
        return be.where(self.linear, a, be.div(_softplus(be, z), beta))

    def backward(self, grad):
        be = self.backend
        return be.where(self.linear, grad, be.mul(grad, be.sigmoid(self.z)))

    def differentiable_backward(self, grad, output):
        from .elementwise import sigmoid
        from .shape import where
        return where(_bool(self.linear, grad), grad, grad * sigmoid(self.parents[0] * self.beta))


class SiluFunction(Function):
    # y = x·σ(x);  dy/dx = σ(x) + x·σ(x)(1 - σ(x)) = σ(x)(1 + x(1 - σ(x))).
    def forward(self, a):
        be = self.backend
        self.a, self.s = a, be.sigmoid(a)
        return be.mul(a, self.s)

    def backward(self, grad):
        be = self.backend
        local = be.mul(self.s, be.add(be.mul(self.a, be.sub(1.0, self.s)), 1.0))
        return be.mul(grad, local)

    def differentiable_backward(self, grad, output):
        from .elementwise import sigmoid
        a = self.parents[0]
        s = sigmoid(a)
        return grad * (s * (a * (1 - s) + 1))


class MishFunction(Function):
    # y = x·tanh(softplus(x));  dy/dx = t + x·σ(x)(1 - t²) with t = tanh(softplus(x)),
    # since d softplus/dx = σ(x).
    def forward(self, a):
        be = self.backend
        self.a, self.t = a, be.math_function(_softplus(be, a), "tanh")
        return be.mul(a, self.t)

    def backward(self, grad):
        be = self.backend
        sech2 = be.sub(1.0, be.mul(self.t, self.t))
        local = be.add(self.t, be.mul(be.mul(self.a, be.sigmoid(self.a)), sech2))
        return be.mul(grad, local)

    def differentiable_backward(self, grad, output):
        from .elementwise import sigmoid, tanh
        a = self.parents[0]
        t = tanh(softplus(a))
        return grad * (t + a * sigmoid(a) * (1 - t * t))


class HardsigmoidFunction(Function):
    # y = clip(x/6 + 1/2, 0, 1);  dy/dx = 1/6 strictly inside (-3, 3), 0 outside.
    # No differentiable form on purpose: PyTorch defines no double backward for hardsigmoid,
    # so create_graph through it raises, as there.
    def forward(self, a):
        be = self.backend
        self.inside = composed.logical_and(be, composed.greater(be, a, -3.0), be.less(a, 3.0))
        return composed.clip(be, be.add(be.div(a, 6.0), 0.5), 0.0, 1.0)

    def backward(self, grad):
        be = self.backend
        return be.where(self.inside, be.div(grad, 6.0), grad.dtype.type(0))


class HardswishFunction(Function):
    # y = x·clip(x + 3, 0, 6)/6;  dy/dx = 0 up to -3, 1 from 3 on, and (2x + 3)/6 strictly
    # between (PyTorch's choice at the two kinks).
    def forward(self, a):
        be = self.backend
        self.a = a
        return be.mul(a, be.div(composed.clip(be, be.add(a, 3.0), 0.0, 6.0), 6.0))

    def backward(self, grad):
        be = self.backend
        middle = be.mul(grad, be.add(be.div(self.a, 3.0), 0.5))
        upper = be.where(be.less(self.a, 3.0), middle, grad)
        return be.where(composed.less_equal(be, self.a, -3.0), grad.dtype.type(0), upper)

    def differentiable_backward(self, grad, output):
        from .shape import where
        a = self.parents[0]
        upper = where(a.detach() < 3.0, grad * (a / 3.0 + 0.5), grad)
        return where(a.detach() <= -3.0, 0.0, upper)


class PreluFunction(Function):
    # y = x for x > 0, w·x otherwise, w learned (one per channel, broadcast along axis 1);
    # dy/dx = 1 or w, dy/dw = 0 or x. The weight's gradient comes back in x's shape; the engine
    # sums it over the axes the weight was broadcast along.
    def forward(self, a, weight):
        be = self.backend
        self.a, self.weight, self.positive = a, weight, composed.greater(be, a, 0)
        return be.where(self.positive, a, be.mul(a, weight))

    def backward(self, grad):
        be = self.backend
        grad_a = be.where(self.positive, grad, be.mul(grad, self.weight))
        grad_w = be.where(self.positive, grad.dtype.type(0), be.mul(grad, self.a))
        return grad_a, grad_w

    def differentiable_backward(self, grad, output):
        from .shape import where
        a, weight = self.parents
        positive = _bool(self.positive, grad)
        return where(positive, grad, grad * weight), where(positive, 0.0, grad * a)


# -- functional forms (``nn.functional``) --------------------------------------------------------

def _pointwise(function_class, op: str, x: Tensor, **attrs) -> Tensor:
    require_float(op, x)
    return function_class.apply(x, **attrs)


def leaky_relu(x: Tensor, negative_slope: float = 0.01) -> Tensor:
    """max(0, x) + negative_slope·min(0, x)."""
    return _pointwise(LeakyReluFunction, "leaky_relu", x, negative_slope=float(negative_slope))


def elu(x: Tensor, alpha: float = 1.0) -> Tensor:
    """x for x > 0, alpha·(exp(x) - 1) otherwise."""
    return _pointwise(EluFunction, "elu", x, alpha=float(alpha))


def softplus(x: Tensor, beta: float = 1.0, threshold: float = 20.0) -> Tensor:
    """log(1 + exp(beta·x)) / beta, linear where beta·x > threshold."""
    if not beta > 0:
        raise ValueError(f"softplus: beta must be > 0, got {beta!r}")
    return _pointwise(SoftplusFunction, "softplus", x, beta=float(beta), threshold=float(threshold))


def silu(x: Tensor) -> Tensor:
    """x·sigmoid(x) (also called swish)."""
    return _pointwise(SiluFunction, "silu", x)


def mish(x: Tensor) -> Tensor:
    """x·tanh(softplus(x))."""
    return _pointwise(MishFunction, "mish", x)


def hardsigmoid(x: Tensor) -> Tensor:
    """clip(x/6 + 1/2, 0, 1): a piecewise-linear sigmoid."""
    return _pointwise(HardsigmoidFunction, "hardsigmoid", x)


def hardswish(x: Tensor) -> Tensor:
    """x·hardsigmoid(x)."""
    return _pointwise(HardswishFunction, "hardswish", x)


def prelu(x: Tensor, weight: Tensor) -> Tensor:
    """x for x > 0, weight·x otherwise; weight has 1 element or one per channel (axis 1)."""
    require_float("prelu", x)
    if weight.ndim != 1:
        raise ValueError(f"prelu: weight must be 1-D, got shape {weight.shape}")
    channels = weight.shape[0]
    if channels != 1:
        if x.ndim < 2 or x.shape[1] != channels:
            raise ValueError(f"prelu: weight has {channels} values but the input of shape "
                             f"{x.shape} has {x.shape[1] if x.ndim > 1 else 1} channels (axis 1)")
        weight = weight.reshape((1, channels) + (1,) * (x.ndim - 2))
    return PreluFunction.apply(x, weight)
