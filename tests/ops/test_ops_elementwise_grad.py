"""Gradients of the elementwise ops against finite differences, on hypothesis-drawn shapes that
broadcast, including size-1 and size-0 dimensions."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import minidl as md
from minidl.ops import elementwise as ew
from ops_helpers import SETTINGS, check_gradients, distinct, normal, positive

seeds = st.integers(0, 2**31 - 1)
shapes = hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=3)
pairs = hnp.mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=3, min_side=0,
                                          max_side=3)


BINARY = {
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b,
    "radd/rsub/rmul": lambda a, b: (2.0 - a) * b + (3.0 + b) * (1.5 * a),
}


@pytest.mark.parametrize("name", sorted(BINARY))
@SETTINGS
@given(shapes=pairs, seed=seeds)
def test_arithmetic_broadcasts(name, shapes, seed):
    a_shape, b_shape = shapes.input_shapes
    check_gradients(BINARY[name], normal(seed, a_shape), normal(seed + 1, b_shape))


@SETTINGS
@given(shapes=pairs, seed=seeds)
def test_div(shapes, seed):
    a_shape, b_shape = shapes.input_shapes
    check_gradients(lambda a, b: a / b, normal(seed, a_shape), positive(seed + 1, b_shape))
    check_gradients(lambda b: 2.0 / b, -positive(seed, b_shape))


@SETTINGS
@given(shape=shapes, seed=seeds, exponent=st.sampled_from([2, 3, -1, 0.5, -1.5, 0]))
def test_pow_with_a_scalar_exponent(shape, seed, exponent):
    check_gradients(lambda a: a ** exponent, positive(seed, shape))


@SETTINGS
@given(shapes=pairs, seed=seeds)
def test_pow_with_a_tensor_exponent(shapes, seed):
    a_shape, b_shape = shapes.input_shapes
    check_gradients(lambda a, b: a ** b, positive(seed, a_shape), normal(seed + 1, b_shape))
    check_gradients(lambda b: 2.0 ** b, normal(seed, b_shape))


UNARY = {
    "neg": (lambda a: -a, normal),
    "exp": (lambda a: a.exp(), normal),
    "log": (lambda a: a.log(), positive),
    "sqrt": (lambda a: a.sqrt(), positive),
    "tanh": (lambda a: a.tanh(), normal),
    "sigmoid": (lambda a: a.sigmoid(), normal),
    "relu": (lambda a: a.relu(), distinct),
    "gelu": (lambda a: a.gelu(), normal),
    "gelu_tanh": (lambda a: ew.gelu(a, approximate="tanh"), normal),
    "abs": (lambda a: abs(a), distinct),
    "clamp": (lambda a: a.clamp(-0.5, 0.5), distinct),
    "clamp_min": (lambda a: a.clamp(min=-0.3), distinct),
    "clamp_max": (lambda a: ew.clamp(a, max=0.3), distinct),
}


@pytest.mark.parametrize("name", sorted(UNARY))
@SETTINGS
@given(shape=shapes, seed=seeds)
def test_unary(name, shape, seed):
    f, values = UNARY[name]
    check_gradients(f, values(seed, shape))


@pytest.mark.parametrize("op", [ew.maximum, ew.minimum])
@SETTINGS
@given(shapes=pairs, seed=seeds)
def test_maximum_minimum(op, shapes, seed):
    a, b = distinct(seed, *shapes.input_shapes)
    check_gradients(op, a, b)


@pytest.mark.parametrize("op, expected", [(ew.maximum, [0.5, 1.0, 0.0]),
                                          (ew.minimum, [0.5, 0.0, 1.0])])
def test_maximum_minimum_split_ties_evenly(op, expected):
    a = md.tensor(np.array([1.0, 2.0, 0.0]), dtype=np.float64, requires_grad=True)
    b = md.tensor(np.array([1.0, 0.0, 2.0]), dtype=np.float64, requires_grad=True)
    op(a, b).sum().backward()
    np.testing.assert_array_equal(a.grad.numpy(), expected)
    np.testing.assert_array_equal(b.grad.numpy(), 1 - np.array(expected))


def test_gradients_at_kinks_follow_pytorch():
    x = md.tensor(np.array([-1.0, 0.0, 1.0]), dtype=np.float64, requires_grad=True)
    x.relu().sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [0, 0, 1])
    x.grad = None
    abs(x).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [-1, 0, 1])
    x.grad = None
    x.clamp(-1.0, 0.5).sum().backward()  # the bound itself still passes the gradient
    np.testing.assert_array_equal(x.grad.numpy(), [1, 1, 0])


def test_scalar_operands_keep_the_tensor_dtype():
    x = md.tensor(np.ones(3, np.float32))
    for y in (x * 2, 2 * x, x + 0.5, x / 3, 1 - x, x ** 2, 2.0 ** x):
        assert y.dtype == np.float32
