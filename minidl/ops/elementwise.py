"""Elementwise ops: arithmetic, the pointwise activations, comparisons and logical ops.

For y = f(a, b) applied element by element, dL/da = dL/dy · ∂f/∂a at each element; the engine
then sums over broadcast axes, so these rules are written as if no broadcasting happened.
"""

from __future__ import annotations

import math

import numpy as np

from ..autograd.function import Function, constant_slope
from ..autograd.tensor import Tensor
from ..backend import composed
from ._util import binary_operands, number_as, refuse_bool, require_float, result_dtype
from .shape import where


class AddFunction(Function):
    def forward(self, a, b):
        return self.backend.add(a, b)

    def backward(self, grad):
        return grad, grad

    def differentiable_backward(self, grad, output):
        return grad, grad


class SubFunction(Function):
    def forward(self, a, b):
        return self.backend.sub(a, b)

    def backward(self, grad):
        return grad, composed.neg(self.backend, grad)

    def differentiable_backward(self, grad, output):
        return grad, -grad


class MulFunction(Function):
    # d(ab)/da = b and d(ab)/db = a: each factor is kept only if the other needs a gradient.
    def forward(self, a, b):
        needs_a, needs_b = self.needs_input_grad
        self.a, self.b = (a if needs_b else None), (b if needs_a else None)
        return self.backend.mul(a, b)

    def backward(self, grad):
        mul = self.backend.mul
        needs_a, needs_b = self.needs_input_grad
        return (mul(grad, self.b) if needs_a else None), (mul(grad, self.a) if needs_b else None)

    def differentiable_backward(self, grad, output):
        a, b = self.parents
        needs_a, needs_b = self.needs_input_grad
        return (grad * b if needs_a else None), (grad * a if needs_b else None)


class DivFunction(Function):
    # y = a / b:  dy/da = 1/b,  dy/db = -a/b² = -y/b, taken as -(g·y)/b: (g/b)·y would
    # overflow g/b for a subnormal b and give inf·0 = nan where y = 0 (PyTorch gives -0)
    def forward(self, a, b):
        self.b = b
        out = self.backend.div(a, b)
        self.out = out if self.needs_input_grad[1] else None
        return out

    def backward(self, grad):
        be = self.backend
        grad_b = composed.neg(be, be.div(be.mul(grad, self.out), self.b)) \
            if self.needs_input_grad[1] else None
        return be.div(grad, self.b), grad_b

    def differentiable_backward(self, grad, output):
        grad_a = grad / self.parents[1]
        return grad_a, (-(grad_a * output) if self.needs_input_grad[1] else None)


class FloorDivideFunction(Function):
    # floor(a / b) is a step function: its derivative is 0 wherever it exists (PyTorch returns
    # zero gradients too, rather than refusing to differentiate).
    def forward(self, a, b):
        return self.backend.floor_divide(a, b)

    def backward(self, grad):
        zeros = composed.zeros_like(self.backend, grad)
        return zeros, zeros

    def differentiable_backward(self, grad, output):
        zeros = _constant_zeros(grad)
        return zeros, zeros


class RemainderFunction(Function):
    # a mod b = a - b·floor(a / b):  d/da = 1,  d/db = -floor(a / b)  (the floor is locally
    # constant)
    def forward(self, a, b):
        self.a, self.b = a, b
        return self.backend.remainder(a, b)

    def backward(self, grad):
        be = self.backend
        return grad, composed.neg(be, be.mul(grad, be.floor_divide(self.a, self.b)))

    def differentiable_backward(self, grad, output):
        a, b = self.parents
        return grad, -(grad * floor_divide(a.detach(), b.detach()))


class NegFunction(Function):
    def forward(self, a):
        return composed.neg(self.backend, a)

    def backward(self, grad):
        return composed.neg(self.backend, grad)

    def differentiable_backward(self, grad, output):
        return -grad


class PowScalarFunction(Function):
    # y = a^p:  dy/da = p · a^(p-1). For p = 0, y is the constant 1 and the gradient is 0 even
    # at a = 0, where the formula reads 0 · 0^-1 = 0 · inf = nan (PyTorch returns 0 too).
    def forward(self, a, exponent):
        self.a, self.exponent = a, exponent
        return self.backend.power(a, a.dtype.type(exponent))

    def backward(self, grad):
        be, p = self.backend, self.exponent
        if p == 0:
            return composed.zeros_like(be, grad)
        local = be.mul(be.power(self.a, self.a.dtype.type(p - 1)), self.a.dtype.type(p))
        return be.mul(grad, local)

    def differentiable_backward(self, grad, output):
        p = self.exponent
        if p == 0:
            return _constant_zeros(grad)
        return grad * (pow(self.parents[0], p - 1) * p)


class PowFunction(Function):
    # y = a^b:  dy/da = b · a^(b-1), taken as 0 where b = 0 (y is then constant, though the
    # formula gives 0 · 0^-1 = nan at a = 0; PyTorch also returns 0);
    # dy/db = y · ln a  (taken as 0 where a <= 0, where ln is undefined and PyTorch reports nan
    # for a < 0; 0 keeps the common 0^b case finite)
    def forward(self, a, b):
        self.a, self.b = a, b
        self.out = self.backend.power(a, b)
        return self.out

    def backward(self, grad):
        be = self.backend
        # Where b = 0 the base is replaced by 1, so the product is b · 1 = 0 without a 0^-1.
        base = be.where(be.equal(self.b, 0), self.a.dtype.type(1), self.a)
        grad_a = be.mul(grad, be.mul(self.b, be.power(base, be.sub(self.b, 1))))
        safe_log = be.math_function(be.where(composed.greater(be, self.a, 0), self.a, 1), "log")
        grad_b = be.mul(grad, be.mul(self.out, safe_log))
        return grad_a, grad_b

    def differentiable_backward(self, grad, output):
        from .shape import where
        a, b = self.parents
        base = where(b.detach() == 0, 1, a)
        grad_a = grad * (b * pow(base, b - 1))
        grad_b = grad * (output * log(where(a.detach() > 0, a, 1)))
        return grad_a, grad_b


class ExpFunction(Function):
    def forward(self, a):
        self.out = self.backend.math_function(a, "exp")
        return self.out

    def backward(self, grad):
        return self.backend.mul(grad, self.out)

    def differentiable_backward(self, grad, output):
        return grad * output


class LogFunction(Function):
    def forward(self, a):
        self.a = a
        return self.backend.math_function(a, "log")

    def backward(self, grad):
        return self.backend.div(grad, self.a)

    def differentiable_backward(self, grad, output):
        return grad / self.parents[0]


class SqrtFunction(Function):
    # d sqrt(a)/da = 1 / (2 sqrt(a))
    def forward(self, a):
        self.out = self.backend.math_function(a, "sqrt")
        return self.out

    def backward(self, grad):
        be = self.backend
        return be.div(grad, be.mul(self.out, self.out.dtype.type(2)))

    def differentiable_backward(self, grad, output):
        return grad / (output * 2)


class TanhFunction(Function):
    # d tanh(a)/da = 1 - tanh(a)²
    def forward(self, a):
        self.out = self.backend.math_function(a, "tanh")
        return self.out

    def backward(self, grad):
        be = self.backend
        return be.mul(grad, be.sub(1, be.mul(self.out, self.out)))

    def differentiable_backward(self, grad, output):
        return grad * (1 - output * output)


class SigmoidFunction(Function):
    # d σ(a)/da = σ(a)(1 - σ(a))
    def forward(self, a):
        self.out = self.backend.sigmoid(a)
        return self.out

    def backward(self, grad):
        be = self.backend
        return be.mul(grad, be.mul(self.out, be.sub(1, self.out)))

    def differentiable_backward(self, grad, output):
        return grad * (output * (1 - output))


class ReluFunction(Function):
    def forward(self, a):
        self.a = a
        return self.backend.relu(a)

    def backward(self, grad):
        return self.backend.relu_backward(grad, self.a)

    def differentiable_backward(self, grad, output):
        return constant_slope(self, grad)


class GeluFunction(Function):
    def forward(self, a, approximate):
        self.a, self.approximate = a, approximate
        return self.backend.gelu_forward(a, approximate)

    def backward(self, grad):
        return self.backend.gelu_backward(grad, self.a, self.approximate)

    def differentiable_backward(self, grad, output):
        return grad * GeluDerivativeFunction.apply(self.parents[0], approximate=self.approximate)


class AbsFunction(Function):
    def forward(self, a):
        self.a = a
        return self.backend.abs(a)

    def backward(self, grad):
        # d|a|/da = sign(a), taken as 0 at a NaN (PyTorch's sgn), where NumPy's sign is NaN.
        be = self.backend
        sign = be.where(be.equal(self.a, self.a), composed.sign(be, self.a), grad.dtype.type(0))
        return be.mul(grad, sign)

    def differentiable_backward(self, grad, output):
        return constant_slope(self, grad)


class MaximumFunction(Function):
    # The gradient goes to the larger input; on ties it is split evenly, and where either is
    # NaN (so neither is larger) both receive it, as in PyTorch.
    def forward(self, a, b):
        self.a, self.b = a, b
        return self.backend.maximum(a, b)

    def backward(self, grad):
        return _route_by_comparison(self.backend, grad, self.a, self.b)

    def differentiable_backward(self, grad, output):
        return constant_slope(self, grad)


class MinimumFunction(Function):
    def forward(self, a, b):
        self.a, self.b = a, b
        return self.backend.minimum(a, b)

    def backward(self, grad):
        return _route_by_comparison(self.backend, grad, self.b, self.a)

    def differentiable_backward(self, grad, output):
        return constant_slope(self, grad)


def _route_by_comparison(be, grad, winner_if_greater, other):
    """The gradients of (winner_if_greater, other): each loses it only where it compares
    strictly worse, and a tie halves it. A NaN compares neither way, so both keep it."""
    zero = grad.dtype.type(0)
    shared = be.where(be.equal(winner_if_greater, other), be.mul(grad, grad.dtype.type(0.5)),
                      grad)
    return (be.where(be.less(winner_if_greater, other), zero, shared),
            be.where(composed.greater(be, winner_if_greater, other), zero, shared))


def _constant_zeros(like: Tensor) -> Tensor:
    return Tensor._wrap(composed.zeros_like(like.backend, like.data), like.device)


class GeluDerivativeFunction(Function):
    """gelu'(x), as an op of its own so that gelu's gradient can be differentiated again.

    Exact:  gelu(x) = xΦ(x),  gelu'(x) = Φ(x) + xφ(x),  gelu''(x) = φ(x)(2 - x²).
    tanh form: gelu(x) = x·s(x) with s = (1 + tanh u)/2, u = c(x + kx³), c = √(2/π), k = 0.044715;
    gelu' = s + x·s',  gelu'' = 2s' + x·s'',  s' = (1 - t²)u'/2,  s'' = (1 - t²)(u'' - 2t·u'²)/2
    with t = tanh u, u' = c(1 + 3kx²), u'' = 6ckx.
    gelu'' is written once, with differentiable ops, and serves both passes (this op only runs
    when a gradient is being differentiated, so its first-order pass need not be fused).
    """

    def forward(self, a, approximate):
        self.approximate = approximate
        be = self.backend
        return be.gelu_backward(composed.ones(be, a.shape, a.dtype), a, approximate)

    def backward(self, grad):
        from ..autograd.grad_mode import no_grad
        device = self.parents[0].device
        with no_grad():
            return self.differentiable_backward(Tensor._wrap(grad, device), None).data

    def differentiable_backward(self, grad, output):
        x = self.parents[0]
        if self.approximate == "none":
            second = exp(x * x * -0.5) * ((2 - x * x) * (1.0 / math.sqrt(2 * math.pi)))
        else:
            c, k = math.sqrt(2 / math.pi), 0.044715
            t = tanh((x + x * x * x * k) * c)
            sech2 = 1 - t * t
            du = (x * x * (3 * k) + 1) * c
            ds = sech2 * du * 0.5
            d2s = sech2 * (x * (6 * c * k) - t * du * du * 2) * 0.5
            second = ds * 2 + x * d2s
        return grad * second


class ClampFunction(Function):
    # Gradient passes where low <= a <= high, is 0 where the value was clipped.
    def forward(self, a, low, high):
        be = self.backend
        above = None if low is None else composed.greater_equal(be, a, low)
        below = None if high is None else composed.less_equal(be, a, high)
        self.inside = below if above is None else above if below is None else \
            composed.logical_and(be, above, below)
        return composed.clip(be, a, low, high)

    def backward(self, grad):
        return self.backend.where(self.inside, grad, grad.dtype.type(0))

    def differentiable_backward(self, grad, output):
        return constant_slope(self, grad)


class CompareFunction(Function):
    """a <op> b element by element, as a bool tensor; ``primitive`` names the test (``equal``
    and ``less`` are the backend's primitives, the other comparisons composed of them).

    A step function of its inputs, so there is no gradient to pass back (see
    ``Function.differentiable``). It is still an op, not a direct backend call, so that an export
    sees the mask being computed and writes the comparison instead of the example's mask.
    """

    differentiable = False

    def forward(self, a, b, primitive):
        if primitive in ("equal", "less"):
            return getattr(self.backend, primitive)(a, b)
        return getattr(composed, primitive)(self.backend, a, b)


class LogicalNotFunction(Function):
    differentiable = False

    def forward(self, a):
        return composed.logical_not(self.backend, a)


class LogicalAndFunction(Function):
    differentiable = False

    def forward(self, a, b):
        return composed.logical_and(self.backend, a, b)


class LogicalOrFunction(Function):
    differentiable = False

    def forward(self, a, b):
        return composed.logical_or(self.backend, a, b)


# -- functional forms ----------------------------------------------------------------------------

def add(a, b) -> Tensor:
    return AddFunction.apply(*binary_operands("add", a, b))


def sub(a, b) -> Tensor:
    refuse_bool("sub", a, b)
    return SubFunction.apply(*binary_operands("sub", a, b))


def mul(a, b) -> Tensor:
    return MulFunction.apply(*binary_operands("mul", a, b))


def div(a, b) -> Tensor:
    if result_dtype(a, b).kind != "f":
        # True division of integers gives float32, as in PyTorch. Each operand goes to float32
        # from its own dtype: promoting first would turn uint8 / -4 into uint8 / 252.
        a, b = (x.to(dtype=np.float32) if isinstance(x, Tensor) else x for x in (a, b))
    return DivFunction.apply(*binary_operands("div", a, b))


def _integer_division_operands(op: str, a, b) -> tuple[Tensor, Tensor]:
    a, b = binary_operands(op, a, b)
    refuse_bool(op, a)  # both bool (a bool meeting an integer is an integer division)
    if a.dtype.kind != "f":
        # Integers have no inf: NumPy would quietly give 0 for x // 0 where PyTorch raises.
        # Checking reads one bool back from the device, as PyTorch's check does.
        be = b.backend
        # only where there is something to divide: an empty tensor // 0 is empty, as in PyTorch
        if a.numel() and b.numel() and \
                bool(be.to_numpy(be.max(be.equal(b.data, b.dtype.type(0))))):
            raise ZeroDivisionError(f"{op}: integer division by zero")
    return a, b


def reflected_div(a: Tensor, number) -> Tensor:
    """``number / a`` for a Python number, as PyTorch computes it: number · (1/a). (It differs
    from number / a in the last bit, and where 1/a overflows or a is inf: 1e-5 / 1e-40 in
    float32 is inf, and the gradient in a at a = 1e308, number = inf is NaN.)"""
    if isinstance(number, Tensor):
        return div(number, a)
    return mul(div(1, a), number)


def floor_divide(a, b) -> Tensor:
    """a // b: the quotient rounded toward -inf (Python's and PyTorch's ``//``). An integer
    division by zero raises ZeroDivisionError, as in PyTorch."""
    return FloorDivideFunction.apply(*_integer_division_operands("floor_divide", a, b))


def remainder(a, b) -> Tensor:
    """a % b, with the sign of the divisor (Python's and PyTorch's ``%``); an integer
    remainder by zero raises ZeroDivisionError, as in PyTorch."""
    return RemainderFunction.apply(*_integer_division_operands("remainder", a, b))


def neg(a: Tensor) -> Tensor:
    refuse_bool("neg", a)
    return NegFunction.apply(a)


def pow(a, exponent) -> Tensor:  # noqa: A001
    """a ** exponent with PyTorch's dtypes: an integer or bool tensor raised to a float gives
    float32 (never an exponent truncated to the integer dtype), a bool one raised to an
    integer gives int64. An integer tensor to a negative integer tensor is computed as
    integers are (1, ±1 for a base of -1, else 0); to a negative integer number it raises."""
    if isinstance(a, Tensor) and not isinstance(exponent, Tensor) and np.ndim(exponent) == 0:
        dtype = result_dtype(a, exponent)
        if dtype == np.bool_:  # bool ** True/False: x ** 1 = x, x ** 0 = True, as PyTorch
            return pow(a.to(dtype=np.uint8), int(exponent)).to(dtype=np.bool_)
        if dtype.kind != "f" and exponent < 0:
            raise ValueError(f"pow: integers to negative integer powers are not allowed "
                             f"({a.dtype} tensor ** {exponent})")
        return PowScalarFunction.apply(a.to(dtype=dtype) if dtype != a.dtype else a,
                                       exponent=float(exponent))
    a, b = binary_operands("pow", a, exponent)
    refuse_bool("pow", a)  # both bool: PyTorch has no bool ** bool
    if a.dtype.kind != "f":
        return _integer_power(a, b)
    return PowFunction.apply(a, b)


def _integer_power(a: Tensor, b: Tensor) -> Tensor:
    # a^b for a negative integer b is 1/a^|b|, whose integer part is 1 for a = 1, ±1 for
    # a = -1 (the sign of b's parity) and 0 for every other base (0 included, as PyTorch's
    # integer pow gives). Integers have no gradient, so this needs no rule of its own.
    negative = lt(b, 0)
    if not bool(negative.any()):
        return PowFunction.apply(a, b)
    powers = PowFunction.apply(a, where(negative, 0, b))
    odd = remainder(b, 2)
    reciprocal = where(eq(a, 1), 1, where(eq(a, -1), 1 - 2 * odd, 0)).to(dtype=a.dtype)
    return where(negative, reciprocal, powers)


# exp, log, sqrt, tanh and sigmoid of integers and bools are float32, as in PyTorch.
_FLOAT_VALUED = {"exp", "log", "sqrt", "tanh", "sigmoid"}


def _unary(function_class, op: str, a: Tensor, **attrs) -> Tensor:
    if op in _FLOAT_VALUED and a.dtype.kind != "f":
        a = a.to(dtype=np.float32)
    require_float(op, a)
    return function_class.apply(a, **attrs)


def exp(a: Tensor) -> Tensor:
    return _unary(ExpFunction, "exp", a)


def log(a: Tensor) -> Tensor:
    return _unary(LogFunction, "log", a)


def sqrt(a: Tensor) -> Tensor:
    return _unary(SqrtFunction, "sqrt", a)


def tanh(a: Tensor) -> Tensor:
    return _unary(TanhFunction, "tanh", a)


def sigmoid(a: Tensor) -> Tensor:
    return _unary(SigmoidFunction, "sigmoid", a)


def relu(a: Tensor) -> Tensor:
    if a.data.dtype == np.bool_:  # refuse_bool's test, inline: every ReLU layer passes here
        refuse_bool("relu", a)
    return ReluFunction.apply(a)


def gelu(a: Tensor, approximate: str = "none") -> Tensor:
    if approximate not in ("none", "tanh"):
        raise ValueError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")
    return _unary(GeluFunction, "gelu", a, approximate=approximate)


def abs(a: Tensor) -> Tensor:  # noqa: A001
    refuse_bool("abs", a)
    return AbsFunction.apply(a)


def maximum(a, b) -> Tensor:
    return MaximumFunction.apply(*binary_operands("maximum", a, b))


def minimum(a, b) -> Tensor:
    return MinimumFunction.apply(*binary_operands("minimum", a, b))


def clamp(a: Tensor, min=None, max=None) -> Tensor:  # noqa: A002
    """Clip into [min, max] (either may be None; numbers or tensors). The result has PyTorch's
    promoted dtype: clamping an integer tensor at 0.5 gives float32."""
    if min is None and max is None:
        raise ValueError("clamp: at least one of min and max must be given")
    dtype = result_dtype(a, min, max)
    if dtype != a.dtype:
        a = a.to(dtype=dtype)
    if isinstance(min, Tensor) or isinstance(max, Tensor):
        # Tensor bounds: the elementwise maximum/minimum, which route the gradient to the bound
        # where it is the one chosen.
        out = a if min is None else maximum(a, min)
        return out if max is None else minimum(out, max)
    low = None if min is None else number_as(min, dtype)
    high = None if max is None else number_as(max, dtype)
    return ClampFunction.apply(a, low=low, high=high)


def _compare(primitive: str, op: str, a, b) -> Tensor:
    a, b = binary_operands(op, a, b)
    if a.device != b.device:
        raise ValueError(f"{op}: operands are on different devices ({a.device}, {b.device})")
    return CompareFunction.apply(a, b, primitive=primitive)


def eq(a, b) -> Tensor:
    """a == b element by element (a bool tensor, never requiring grad)."""
    return _compare("equal", "eq", a, b)


def ne(a, b) -> Tensor:
    """a != b element by element."""
    return _compare("not_equal", "ne", a, b)


def lt(a, b) -> Tensor:
    """a < b element by element."""
    return _compare("less", "lt", a, b)


def le(a, b) -> Tensor:
    """a <= b element by element."""
    return _compare("less_equal", "le", a, b)


def gt(a, b) -> Tensor:
    """a > b element by element."""
    return _compare("greater", "gt", a, b)


def ge(a, b) -> Tensor:
    """a >= b element by element."""
    return _compare("greater_equal", "ge", a, b)


def _require_bool(op: str, *tensors) -> None:
    for tensor in tensors:
        if tensor.dtype != np.bool_:
            raise TypeError(f"{op}: operands must be bool tensors, got {tensor.dtype}")


def logical_not(a: Tensor) -> Tensor:
    """Elementwise "not" of a bool tensor."""
    _require_bool("logical_not", a)
    return LogicalNotFunction.apply(a)


def _logical(function_class, op: str, a, b) -> Tensor:
    a, b = binary_operands(op, a, b)
    _require_bool(op, a, b)
    if a.device != b.device:
        raise ValueError(f"{op}: operands are on different devices ({a.device}, {b.device})")
    return function_class.apply(a, b)


def logical_and(a, b) -> Tensor:
    """Elementwise "and" of bool tensors (broadcasting)."""
    return _logical(LogicalAndFunction, "logical_and", a, b)


def logical_or(a, b) -> Tensor:
    """Elementwise "or" of bool tensors (broadcasting)."""
    return _logical(LogicalOrFunction, "logical_or", a, b)
