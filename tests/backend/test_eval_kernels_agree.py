"""The evaluation-only pooling kernels give exactly what the primitives they fuse give:
``max_pool2d_forward``'s maxima, then ``relu`` when asked, NaN and -inf windows included."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from minidl.backend.numba_cpu import eval_kernels
from minidl.backend.reference import ReferenceBackend
from minidl.backend.reference.pool import pool_output_size

ref = ReferenceBackend()
pairs = st.tuples


def _reference(x, kernel_size, stride, padding, dilation, relu):
    out, _ = ref.max_pool2d_forward(x, kernel_size, stride, padding, dilation, False)
    return ref.relu(out) if relu else out


def _with_specials(x, seed):
    """Some NaNs and negative values (so ReLU and NaN propagation are exercised)."""
    rng = np.random.default_rng(seed)
    flat = x.reshape(-1)
    if flat.size:
        flat[rng.integers(0, flat.size, size=max(1, flat.size // 17))] = np.nan
    return x


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(shape=pairs(st.integers(1, 2), st.integers(1, 3), st.integers(1, 9), st.integers(1, 9)),
       kernel=pairs(st.integers(1, 3), st.integers(1, 3)),
       stride=pairs(st.integers(1, 3), st.integers(1, 3)),
       padding=pairs(st.integers(0, 1), st.integers(0, 1)),
       dilation=pairs(st.integers(1, 2), st.integers(1, 2)),
       relu=st.booleans(), nans=st.booleans(), dtype=st.sampled_from([np.float32, np.float64]),
       strided=st.booleans(), seed=st.integers(0, 2**32 - 1))
def test_general_kernel_matches_pool_then_relu(shape, kernel, stride, padding, dilation, relu,
                                               nans, dtype, strided, seed):
    assume(all(p <= k // 2 for p, k in zip(padding, kernel)))  # PyTorch's padding rule
    sizes = [pool_output_size(s, k, st_, p, d, False) if (s + 2 * p - d * (k - 1) - 1) >= 0
             else 0 for s, k, st_, p, d in zip(shape[2:], kernel, stride, padding, dilation)]
    assume(min(sizes) > 0)
    wide = np.random.default_rng(seed).standard_normal(shape[:3] + (shape[3] + 3,)).astype(dtype)
    if nans:
        _with_specials(wide, seed)
    x = wide[..., :shape[3]] if strided else np.ascontiguousarray(wide[..., :shape[3]])
    out = np.empty(shape[:2] + tuple(sizes), dtype)
    scratch = np.empty(out.shape, np.int64)
    eval_kernels.max_pool2d_values_(x, out, scratch, kernel + stride + padding + dilation, relu)
    np.testing.assert_array_equal(out, _reference(np.ascontiguousarray(x), kernel, stride,
                                                  padding, dilation, relu))


@settings(max_examples=25, deadline=None)
@given(shape=pairs(st.integers(1, 2), st.integers(1, 3), st.integers(2, 9), st.integers(2, 9)),
       relu=st.booleans(), nans=st.booleans(), extra_columns=st.integers(0, 3),
       seed=st.integers(0, 2**32 - 1))
def test_2x2_kernel_matches_pool_then_relu_and_ignores_columns_past_the_windows(
        shape, relu, nans, extra_columns, seed):
    """The plan hands this kernel a convolution's rows with unused columns on the right: they
    must not change any window's maximum."""
    n, c, h, w = shape
    rows = np.random.default_rng(seed).standard_normal((n, c, h, w + extra_columns)).astype(
        np.float32)
    if nans:
        _with_specials(rows, seed)
    rows[..., w:] = np.inf  # would win every window that wrongly reached it
    out = np.empty((n, c, h // 2, w // 2), np.float32)
    eval_kernels.max_pool2x2_values_(rows, out, relu)
    want = _reference(np.ascontiguousarray(rows[..., :w]), (2, 2), (2, 2), (0, 0), (1, 1), relu)
    np.testing.assert_array_equal(out, want)
