"""The vectorisable exp(-y) and normal tail agree with the C library, and the float32 GELU kernels
built on them agree with the reference at the edges of the float range.

The reference for exp and erfc is Python's ``math`` module (the C library, correctly rounded or
within an ulp); the kernels promise 2e-9 relative error, far inside float32's rounding step.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from minidl.backend.numba_cpu import nn_kernels as fast
from minidl.backend.numba_cpu.vector_math import NORMAL_DENSITY_SCALE, exp_of_negative, normal_tail
from minidl.backend.reference import nn_kernels as ref


def relative_error(actual, expected):
    return abs(actual - expected) / expected


def test_exp_of_negative_matches_the_c_library_over_its_range():
    worst = 0.0
    for y in np.concatenate([np.linspace(0, 707.9, 20011), [1e-300, 0.5 * math.log(2), 88.7]]):
        worst = max(worst, relative_error(exp_of_negative(y), math.exp(-y)))
    assert worst < 1e-12


@pytest.mark.parametrize("y", [708.0, 745.2, 1e308, math.inf])
def test_exp_of_negative_is_zero_where_float64_would_be_subnormal(y):
    assert exp_of_negative(y) == 0.0


def test_exp_of_negative_of_nan_is_nan():
    assert math.isnan(exp_of_negative(math.nan))


def test_normal_tail_matches_erfc_and_the_density_matches_exp():
    worst_tail = worst_density = 0.0
    for v in np.concatenate([np.linspace(-37, 37, 30001), [1e-300, -1e-300, 5e-8]]):
        tail, gaussian = normal_tail(v)
        worst_tail = max(worst_tail, relative_error(tail, 0.5 * math.erfc(abs(v) / math.sqrt(2))))
        worst_density = max(worst_density, relative_error(gaussian, math.exp(-0.5 * v * v)))
    assert worst_tail < 5e-9
    assert worst_density < 1e-12


def test_normal_tail_at_infinity_and_nan():
    assert normal_tail(math.inf) == (0.0, 0.0)
    assert normal_tail(-math.inf) == (0.0, 0.0)
    assert all(math.isnan(part) for part in normal_tail(math.nan))
    assert NORMAL_DENSITY_SCALE == pytest.approx(1 / math.sqrt(2 * math.pi), rel=1e-15)


# Values where a float32 GELU is delicate: signed zeros, subnormals, the far tails where Phi(v)
# underflows (|v| near 14 for float32), the float32 extremes, infinities and NaN.
EDGE_VALUES = np.array(
    [0.0, -0.0, 1e-45, -1e-45, 1e-38, -1e-38, 1e-8, -1e-8, 0.5, -0.5, -0.7517916, 1.0, -1.0,
     3.0, -3.0, 5.5, -5.5, 9.0, -9.0, 13.0, -13.0, 13.9, -13.9, 14.5, -14.5, 20.0, -20.0,
     40.0, -40.0, 1e4, -1e4, 1e19, -1e19, 3.4e38, -3.4e38, np.inf, -np.inf, np.nan],
    dtype=np.float32)


def assert_within_rounding(actual, expected, grad):
    """float32 ``actual`` against the float64 ``expected``: NaN and infinities in the same places,
    finite values at most ~1 float32 ulp apart (two roundings), plus, for GELU's gradient, an
    absolute 1e-8·|grad| where Phi(v) + v phi(v) cancels (GELU' crosses zero at v = -0.75)."""
    assert actual.dtype == np.float32
    rounded = expected.astype(np.float32)
    np.testing.assert_array_equal(np.isnan(actual), np.isnan(rounded))
    finite = np.isfinite(rounded)
    np.testing.assert_array_equal(actual[~finite], rounded[~finite])
    difference = np.abs(actual[finite].astype(np.float64) - expected[finite])
    allowed = 2.4e-7 * np.abs(expected[finite]) + 1e-8 * np.abs(grad[finite]) + 1e-44
    assert np.all(difference <= allowed), (actual[finite][difference > allowed],
                                           expected[finite][difference > allowed])


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_float32_gelu_agrees_with_the_float64_reference_at_the_edges(approximate):
    # The target is the reference run in float64: the float32 reference's tanh curve computes in
    # float32 and is itself off by up to |u|·6e-8.
    x = EDGE_VALUES
    grad = np.where(np.arange(x.size) % 2 == 0, 1.0, -2.5e6).astype(np.float32)
    x64, grad64 = x.astype(np.float64), grad.astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        assert_within_rounding(fast.gelu_forward(x, approximate),
                               ref.gelu_forward(x64, approximate), np.zeros_like(x))
        assert_within_rounding(fast.gelu_backward(grad, x, approximate),
                               ref.gelu_backward(grad64, x64, approximate), grad)


def test_float32_exact_gelu_mostly_rounds_like_the_float64_reference():
    # The reference computes erfc in float64 and rounds once; a 2e-9 relative error can only
    # change that rounding for values within 2e-9 of a rounding boundary (a few percent).
    x = np.linspace(-16, 16, 200_001, dtype=np.float32)
    grad = np.ones_like(x)
    forward = fast.gelu_forward(x, "none")
    backward = fast.gelu_backward(grad, x, "none")
    assert np.mean(forward == ref.gelu_forward(x, "none")) > 0.95
    assert np.mean(backward == ref.gelu_backward(grad, x, "none")) > 0.95
    assert_within_rounding(forward, ref.gelu_forward(x.astype(np.float64), "none"), grad * 0)
    assert_within_rounding(backward, ref.gelu_backward(grad.astype(np.float64), x.astype(np.float64),
                                                       "none"), grad)


def test_float32_softmax_agrees_with_the_reference_on_rows_with_nan_and_infinities():
    x = np.array([[1, np.nan, 2], [np.inf, 1, 2], [-np.inf, -np.inf, -np.inf], [-np.inf, 0, 1],
                  [1e30, -1e30, 0], [-104, 0, 3], [0, 0, 0]], dtype=np.float32)
    with np.errstate(invalid="ignore"):
        expected = ref.softmax(x.astype(np.float64), 1)
        assert_within_rounding(fast.softmax(x, 1), expected, np.zeros_like(x))
        # Along a leading axis too: the wrapper moves it last and back.
        assert_within_rounding(fast.softmax(x.T.copy(), 0), expected.T, np.zeros_like(x.T))


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_float32_gelu_spread_over_threads_gives_the_bits_of_a_single_thread(approximate):
    from minidl.backend.numba_cpu.conv import PARALLEL_MIN_WORK
    rng = np.random.default_rng(5)
    x = (rng.standard_normal(PARALLEL_MIN_WORK + 12345) * 4).astype(np.float32)
    grad = rng.standard_normal(x.size).astype(np.float32)
    whole_forward = fast.gelu_forward(x, approximate)
    whole_backward = fast.gelu_backward(grad, x, approximate)
    for piece in (slice(0, 1000), slice(PARALLEL_MIN_WORK - 7, None)):  # single-thread sizes
        np.testing.assert_array_equal(whole_forward[piece], fast.gelu_forward(x[piece], approximate))
        np.testing.assert_array_equal(whole_backward[piece],
                                      fast.gelu_backward(grad[piece], x[piece], approximate))
