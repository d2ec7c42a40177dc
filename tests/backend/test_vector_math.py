"""The vectorisable exp(-y) and normal tail agree with the C library, and the float32 GELU kernels
built on them agree with the float64 reference within a few float32 ulps, down to the tails.

The reference for exp and erfc is Python's ``math`` module (the C library, correctly rounded or
within an ulp). Errors of float32 results are counted in float32 ulps: the spacing of float32
numbers at the exact value (2^-149 among the subnormals).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from minidl.backend.numba_cpu import nn_kernels as fast
from minidl.backend.numba_cpu.vector_math import (EXP_SCALE_FLOAT32, NORMAL_DENSITY_SCALE,
                                                  UNSCALE_FLOAT32, exp_of_negative,
                                                  scaled_exp_of_negative_float32,
                                                  scaled_normal_tail_float32)
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


def ulps(actual, expected, size=None):
    """|actual - expected| in float32 ulps of ``size`` (default: of the expected value)."""
    size = np.abs(expected if size is None else size)
    spacing = np.maximum(np.spacing(np.float32(size).astype(np.float32)).astype(np.float64),
                         2.0 ** -149)
    return np.abs(np.float64(actual) - np.float64(expected)) / spacing


def test_float32_exp_of_negative_is_within_an_ulp_and_a_half_of_the_c_library():
    # Sampled over its whole range, and at y = k ln 2 + ln2/2, the ends of the reduced range.
    y = np.concatenate([np.linspace(0, 127.9, 30_011), (np.arange(184) + 0.5) * math.log(2),
                        [1e-30, 5e-8]]).astype(np.float32)
    scaled = np.array([scaled_exp_of_negative_float32(value, np.float32(0.0)) for value in y])
    np.testing.assert_array_equal(scaled, scaled.astype(np.float32))  # float32 values
    expected = np.exp(-y.astype(np.float64)) * 2.0 ** 64
    assert ulps(scaled, expected).max() <= 1.5  # measured 1.13 here, 1.18 on 3 million points


def test_float32_exp_of_negative_takes_the_low_part_of_its_argument():
    # exp(-(high + low)) for a low part far below high's float32 ulp: a float32 sum would drop it.
    high, low = np.float32(100.0), np.float32(3e-6)
    expected = math.exp(-(100.0 + 3e-6)) * 2.0 ** 64
    assert ulps(scaled_exp_of_negative_float32(high, low), expected) <= 1.5
    assert ulps(scaled_exp_of_negative_float32(high, np.float32(0.0)), expected) > 20


@pytest.mark.parametrize("y", [128.0, 1e30, math.inf])
def test_float32_exp_of_negative_is_zero_beyond_its_range(y):
    assert scaled_exp_of_negative_float32(np.float32(y), np.float32(0.0)) == 0.0


def test_float32_exp_of_negative_of_nan_is_nan_and_its_scale_is_two_to_the_64():
    assert math.isnan(scaled_exp_of_negative_float32(np.float32(math.nan), np.float32(0.0)))
    assert scaled_exp_of_negative_float32(np.float32(0.0), np.float32(0.0)) == EXP_SCALE_FLOAT32
    assert EXP_SCALE_FLOAT32 * UNSCALE_FLOAT32 == 1.0 and EXP_SCALE_FLOAT32 == 2.0 ** 64


def test_float32_normal_tail_matches_erfc_and_the_density_matches_exp():
    v = np.concatenate([np.linspace(-15.9, 15.9, 10_001), [1e-30, -1e-30, 5e-8]]).astype(np.float32)
    parts = np.array([scaled_normal_tail_float32(value) for value in v], dtype=np.float64)
    wide = v.astype(np.float64)
    tail = np.array([0.5 * math.erfc(abs(value) / math.sqrt(2)) for value in wide]) * 2.0 ** 64
    # measured 4.7 and 1.11 here; 6.2 and 1.32 on 4 million points of the same range
    assert ulps(parts[:, 0], tail).max() <= 7
    assert ulps(parts[:, 1], np.exp(-0.5 * wide * wide) * 2.0 ** 64).max() <= 1.5


def test_float32_normal_tail_at_infinity_and_nan():
    for v in (16.0, -16.0, math.inf, -math.inf):
        assert scaled_normal_tail_float32(np.float32(v)) == (0.0, 0.0)
    assert all(math.isnan(part) for part in scaled_normal_tail_float32(np.float32(math.nan)))
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
    finite values at most 2.4e-7 relative apart (2 to 4 float32 ulps), plus, for GELU's gradient, an
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


# A dense sweep of float32 inputs: every 1.6e-4 over the range where Phi(v) is neither 0 nor 1
# in float32 (|v| < 16), and ±2^-k down to the smallest subnormal. Measured here: forward 5.3
# ulp (exact) and 2.8 (tanh), the gradient 5.6 and 7.5 ulps of the larger of |GELU'(v)| and
# Phi(v) -- the size of the terms whose difference it is near v = -0.75, where GELU' crosses
# zero and its own ulp shrinks to nothing. On 2 million points of [-16, 16]: 5.5, 3.1, 6.9, 9.1.
SWEEP = np.concatenate([np.linspace(-16, 16, 200_001),
                        2.0 ** -np.arange(0, 150, 0.5), -(2.0 ** -np.arange(0, 150, 0.5)),
                        [0.0, -0.0]]).astype(np.float32)


@pytest.mark.parametrize("approximate, forward_ulps, slope_ulps", [("none", 7, 10),
                                                                   ("tanh", 4, 11)])
def test_float32_gelu_is_within_a_few_ulps_of_the_float64_curve(approximate, forward_ulps,
                                                                 slope_ulps):
    x, wide = SWEEP, SWEEP.astype(np.float64)
    expected = ref.gelu_forward(wide, approximate)
    assert ulps(fast.gelu_forward(x, approximate), expected).max() <= forward_ulps
    cdf = np.divide(expected, wide, out=np.full_like(wide, 0.5), where=wide != 0)
    expected_slope = ref.gelu_backward(np.ones_like(wide), wide, approximate)
    slope = fast.gelu_backward(np.ones_like(x), x, approximate)
    assert ulps(slope, expected_slope, np.maximum(np.abs(expected_slope), cdf)).max() <= slope_ulps


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
