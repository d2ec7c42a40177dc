"""The math-function ops (exp, log, sqrt, sin ... atanh, erf): values as Python's math module,
first and second derivatives against finite differences, errors for integer input and unknown
names."""

from __future__ import annotations

import math

import numpy as np
import pytest

import minidl as md
from ops_helpers import check_gradients  # noqa: I001  (puts the autograd helpers on the path)
from gradcheck_helpers import check_second_derivatives
from minidl.backend.primitives import MATH_FUNCTIONS
from minidl.ops import math_functions as mf

# Inside each function's domain, away from its poles and edges.
INPUTS = {"asin": [-0.7, 0.1, 0.6], "acos": [-0.7, 0.1, 0.6], "atanh": [-0.7, 0.1, 0.6],
          "acosh": [1.3, 2.0, 3.5], "tan": [-1.0, 0.2, 1.1], "log": [0.3, 1.0, 2.5],
          "sqrt": [0.3, 1.0, 2.5]}
DEFAULT = [-1.5, -0.2, 0.4, 1.8]


def inputs(name):
    return np.array(INPUTS.get(name, DEFAULT), np.float64)


@pytest.mark.parametrize("name", MATH_FUNCTIONS)
def test_values_are_pythons_math_in_the_tensors_dtype(name):
    x = inputs(name)
    for dtype in (np.float32, np.float64):
        out = mf.BY_NAME[name](md.tensor(x, dtype=dtype))
        assert out.dtype == dtype
        want = [getattr(math, name)(float(v)) for v in x.astype(dtype)]
        np.testing.assert_allclose(out.numpy(), want, rtol=1e-6 if dtype == np.float32 else 1e-15)


@pytest.mark.parametrize("name", MATH_FUNCTIONS)
def test_first_and_second_derivatives_match_finite_differences(name):
    f = mf.BY_NAME[name]
    check_gradients(f, inputs(name))
    check_second_derivatives(f, inputs(name))


def test_integer_input_and_unknown_names_are_refused():
    with pytest.raises(TypeError, match="sin: input must be a floating point tensor"):
        mf.sin(md.tensor([1, 2]))
    with pytest.raises(ValueError, match="math_function: name must be one of .* got 'log2'"):
        md.tensor([1.0]).backend.math_function(md.tensor([1.0]).data, "log2")
