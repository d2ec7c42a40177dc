"""Element-by-element ONNX operators: activations, rounding, trigonometry, tests and logic.

Activations are compositions of minidl ops, written so that no branch that ``Where`` discards
can overflow (its gradient would be 0·∞ = NaN): ELU uses e^min(x, 0), Softplus
max(x, 0) + log(1 + e^−|x|). Rounding, tests (IsNaN, IsInf, Sign) and logic have no gradient
and are computed on the host; comparisons of numbers stay minidl ops so that a re-export of an
imported graph still sees where a mask came from.
"""

from __future__ import annotations

import numpy as np

from ..ops import elementwise as ew, math_functions, nn_ops, shape
from .registry import ONNX_OPS, computed_in_float32, host_result, onnx_op

# ONNX spells the math functions capitalised: Sin, Asinh, Erf.
for _op_type, _function in (("Exp", ew.exp), ("Sqrt", ew.sqrt), ("Tanh", ew.tanh),
                            ("Sigmoid", ew.sigmoid),
                            *((name.capitalize(), op) for name, op in
                              math_functions.BY_NAME.items())):
    onnx_op(_op_type)(lambda inputs, attributes, context, _f=_function: _f(inputs[0]))


@onnx_op("Log")
def _log(inputs, attributes, context):
    # log 0 = -inf is part of the definition (T5's position buckets rely on it): no warning.
    with np.errstate(divide="ignore"):
        return ew.log(inputs[0])


def _integer_safe(op_type, float_function, host_function):
    """Neg/Abs/Relu/Sign also take integer tensors, which have no gradient: NumPy computes."""
    def compute(inputs, attributes, context):
        x = inputs[0]
        if x.dtype.kind == "f":
            return float_function(x)
        return host_result(host_function(x.numpy()).astype(x.dtype), x)
    ONNX_OPS[op_type] = compute


_integer_safe("Neg", ew.neg, np.negative)
_integer_safe("Abs", ew.abs, np.abs)
_integer_safe("Relu", ew.relu, lambda a: np.maximum(a, 0))


@onnx_op("Gelu")
def _gelu(inputs, attributes, context):
    return ew.gelu(inputs[0], attributes.get("approximate", "none"))


@onnx_op("Reciprocal")
def _reciprocal(inputs, attributes, context):
    return ew.div(1.0, inputs[0])


def _softplus(x):
    return ew.add(ew.relu(x), ew.log(ew.add(ew.exp(ew.neg(ew.abs(x))), 1.0)))


@onnx_op("Softplus")
def _softplus_op(inputs, attributes, context):
    return _softplus(inputs[0])


@onnx_op("Softsign")
def _softsign(inputs, attributes, context):
    x = inputs[0]
    return ew.div(x, ew.add(ew.abs(x), 1.0))


@onnx_op("Mish")
def _mish(inputs, attributes, context):
    x = inputs[0]
    return ew.mul(x, ew.tanh(_softplus(x)))


def _elu(x, alpha):
    """x for x > 0, α(eᕽ − 1) otherwise; e^min(x, 0) keeps the discarded branch finite."""
    negative = ew.mul(ew.sub(ew.exp(ew.minimum(x, 0.0)), 1.0), alpha)
    return shape.where(ew.gt(x, 0.0), x, negative)


@onnx_op("Elu")
def _elu_op(inputs, attributes, context):
    return _elu(inputs[0], attributes.get("alpha", 1.0))


@onnx_op("Selu")
def _selu(inputs, attributes, context):
    alpha = attributes.get("alpha", 1.67326319217681884765625)
    gamma = attributes.get("gamma", 1.05070102214813232421875)
    return ew.mul(_elu(inputs[0], alpha), gamma)


@onnx_op("Celu")
def _celu(inputs, attributes, context):
    # CELU(x) = max(0, x) + min(0, α(e^(x/α) − 1)) = ELU of x/α, scaled back by α.
    alpha = attributes.get("alpha", 1.0)
    return ew.mul(_elu(ew.div(inputs[0], alpha), 1.0), alpha)


@onnx_op("LeakyRelu")
def _leaky_relu(inputs, attributes, context):
    x, slope = inputs[0], attributes.get("alpha", 0.01)
    return ew.sub(ew.relu(x), ew.mul(ew.relu(ew.neg(x)), slope))


@onnx_op("PRelu")
def _prelu(inputs, attributes, context):
    # The slope is a learned tensor broadcast against x: relu(x) − slope·relu(−x).
    x, slope = inputs
    return ew.sub(ew.relu(x), ew.mul(ew.relu(ew.neg(x)), slope))


@onnx_op("ThresholdedRelu")
def _thresholded_relu(inputs, attributes, context):
    x = inputs[0]
    return shape.where(ew.gt(x, attributes.get("alpha", 1.0)), x, 0.0)


def _hard_sigmoid(x, alpha, beta):
    return ew.clamp(ew.add(ew.mul(x, alpha), beta), min=0.0, max=1.0)


@onnx_op("HardSigmoid")
def _hard_sigmoid_op(inputs, attributes, context):
    return _hard_sigmoid(inputs[0], attributes.get("alpha", 0.2), attributes.get("beta", 0.5))


@onnx_op("HardSwish")
def _hard_swish(inputs, attributes, context):
    x = inputs[0]
    return ew.mul(x, _hard_sigmoid(x, 1.0 / 6.0, 0.5))


@onnx_op("Shrink")
def _shrink(inputs, attributes, context):
    x = inputs[0]
    bias, cut = attributes.get("bias", 0.0), attributes.get("lambd", 0.5)
    if x.dtype.kind != "f":
        a = x.numpy()
        result = np.where(a < -cut, a + bias, np.where(a > cut, a - bias, 0))
        return host_result(result.astype(x.dtype), x)
    return shape.where(ew.lt(x, -cut), ew.add(x, bias),
                       shape.where(ew.gt(x, cut), ew.sub(x, bias), 0.0))


@onnx_op("Swish")
def _swish(inputs, attributes, context):
    x = inputs[0]
    return ew.mul(x, ew.sigmoid(ew.mul(x, attributes.get("alpha", 1.0))))


@onnx_op("Softmax")
@computed_in_float32
def _softmax(inputs, attributes, context):
    return nn_ops.softmax(inputs[0], attributes.get("axis", -1))


@onnx_op("LogSoftmax")
@computed_in_float32
def _log_softmax(inputs, attributes, context):
    return nn_ops.log_softmax(inputs[0], attributes.get("axis", -1))


@onnx_op("Hardmax")
def _hardmax(inputs, attributes, context):
    x = inputs[0]
    axis = attributes.get("axis", -1) % x.ndim
    winner = np.argmax(x.numpy(), axis=axis)
    one_hot = np.moveaxis(np.eye(x.shape[axis], dtype=x.dtype)[winner], -1, axis)
    return host_result(one_hot, x)


# -- no gradient: rounding, tests, signs -----------------------------------------------------------

def _host_unary(op_type, function, dtype=None):
    def compute(inputs, attributes, context):
        x = inputs[0]
        return host_result(np.asarray(function(x.numpy(), attributes)).astype(dtype or x.dtype), x)
    ONNX_OPS[op_type] = compute


_host_unary("Floor", lambda a, attributes: np.floor(a))
_host_unary("Ceil", lambda a, attributes: np.ceil(a))
_host_unary("Round", lambda a, attributes: np.round(a))  # halves to even, as ONNX says
_host_unary("Sign", lambda a, attributes: np.sign(a))
_host_unary("IsNaN", lambda a, attributes: np.isnan(a), np.bool_)
_host_unary("IsInf", lambda a, attributes: np.isinf(a) & (
    ((a > 0) & bool(attributes.get("detect_positive", 1))) |
    ((a < 0) & bool(attributes.get("detect_negative", 1)))), np.bool_)
_host_unary("BitwiseNot", lambda a, attributes: np.invert(a))


# -- comparisons and logic: bool results, no gradient -------------------------------------------

_COMPARISONS = {"Equal": (ew.eq, np.equal), "Less": (ew.lt, np.less),
                "LessOrEqual": (ew.le, np.less_equal), "Greater": (ew.gt, np.greater),
                "GreaterOrEqual": (ew.ge, np.greater_equal)}


def _comparison(op_type):
    recorded, host = _COMPARISONS[op_type]

    def compute(inputs, attributes, context):
        a, b = inputs
        if b.dtype == a.dtype and a.dtype.kind in "fiu":
            return recorded(a, b)  # recorded, so an exporter sees the mask being computed
        return host_result(host(a.numpy(), b.numpy()), a)
    return compute


for _op_type in _COMPARISONS:
    ONNX_OPS[_op_type] = _comparison(_op_type)

# Logic on bool tensors stays recorded too (a mask an exporter can follow); Xor is "differ".
for _op_type, _function in (("And", ew.logical_and), ("Or", ew.logical_or), ("Xor", ew.ne)):
    onnx_op(_op_type)(lambda inputs, attributes, context, _f=_function: _f(inputs[0], inputs[1]))

for _op_type, _function in (("BitwiseAnd", np.bitwise_and), ("BitwiseOr", np.bitwise_or),
                            ("BitwiseXor", np.bitwise_xor)):
    onnx_op(_op_type)(lambda inputs, attributes, context, _f=_function:
                      host_result(_f(inputs[0].numpy(), inputs[1].numpy()), inputs[0]))


@onnx_op("Not")
def _not(inputs, attributes, context):
    return ew.logical_not(inputs[0])


@onnx_op("BitShift")
def _bit_shift(inputs, attributes, context):
    a, b = inputs
    shift = np.left_shift if attributes["direction"] == "LEFT" else np.right_shift
    return host_result(shift(a.numpy(), b.numpy()).astype(a.dtype), a)


@onnx_op("Where")
def _where(inputs, attributes, context):
    condition, a, b = inputs  # the condition may be computed by the graph (Greater, ...)
    if a.dtype.kind == "f":
        return shape.where(condition, a, b)
    return host_result(np.where(condition.numpy(), a.numpy(), b.numpy()), a)
