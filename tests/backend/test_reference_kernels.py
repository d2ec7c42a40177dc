"""The reference kernels are right on their own terms, independently of the Numba ones.

- im2col and col2im are adjoint, and a convolution built on im2col matches a direct loop;
- pooling output sizes and divisors match PyTorch's rules on hand-worked cases, and pooling matches
  a window-by-window loop;
- every backward kernel matches central finite differences in float64.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from minidl.backend.conv_arithmetic import conv_output_size
from minidl.backend.reference import ReferenceBackend
from minidl.backend.reference.pool import pool_output_size

ref = ReferenceBackend()

SETTINGS = settings(max_examples=20, deadline=None)


def numerical_gradient(function, x, h=1e-6):
    """Central differences of a scalar function of the array x (float64)."""
    grad = np.zeros_like(x)
    flat_x = x.reshape(-1)
    flat_grad = grad.reshape(-1)
    for k in range(flat_x.size):
        saved = flat_x[k]
        flat_x[k] = saved + h
        plus = function(x)
        flat_x[k] = saved - h
        minus = function(x)
        flat_x[k] = saved
        flat_grad[k] = (plus - minus) / (2 * h)
    return grad


# ---------------------------------------------------------------------------------------------
# convolution


conv_geometry = st.tuples(
    st.tuples(st.integers(1, 3), st.integers(1, 3)),  # kernel
    st.tuples(st.integers(1, 3), st.integers(1, 3)),  # stride
    st.tuples(st.integers(0, 2), st.integers(0, 2)),  # padding
    st.tuples(st.integers(1, 2), st.integers(1, 2)),  # dilation
)


def output_hw(height, width, kernel, stride, padding, dilation):
    try:
        return (
            conv_output_size(height, kernel[0], stride[0], padding[0], dilation[0]),
            conv_output_size(width, kernel[1], stride[1], padding[1], dilation[1]),
        )
    except ValueError:
        return None


@SETTINGS
@given(
    shape=st.tuples(st.integers(1, 2), st.integers(1, 3), st.integers(1, 7), st.integers(1, 7)),
    geometry=conv_geometry,
    seed=st.integers(0, 2**32 - 1),
)
def test_col2im_is_the_adjoint_of_im2col(shape, geometry, seed):
    assume(output_hw(shape[2], shape[3], *geometry) is not None)
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape)
    cols_shape = ref.im2col(x, *geometry).shape
    c = rng.standard_normal(cols_shape)
    # <im2col(x), c> == <x, col2im(c)> is the definition of the adjoint
    assert np.vdot(ref.im2col(x, *geometry), c) == pytest.approx(np.vdot(x, ref.col2im(c, shape, *geometry)), rel=1e-12)


def direct_convolution(x, weight, stride, padding, dilation):
    """Convolution straight from its definition: one multiply-add per (output, weight) pair."""
    n, c, height, width = x.shape
    out_channels, _, kh, kw = weight.shape
    out_h, out_w = output_hw(height, width, (kh, kw), stride, padding, dilation)
    out = np.zeros((n, out_channels, out_h, out_w))
    for b in range(n):
        for o in range(out_channels):
            for oh in range(out_h):
                for ow in range(out_w):
                    for ch in range(c):
                        for i in range(kh):
                            for j in range(kw):
                                ih = oh * stride[0] - padding[0] + i * dilation[0]
                                iw = ow * stride[1] - padding[1] + j * dilation[1]
                                if 0 <= ih < height and 0 <= iw < width:
                                    out[b, o, oh, ow] += weight[o, ch, i, j] * x[b, ch, ih, iw]
    return out


@pytest.mark.parametrize(
    "kernel, stride, padding, dilation",
    [((3, 3), (1, 1), (0, 0), (1, 1)), ((3, 2), (2, 1), (1, 2), (1, 2)), ((2, 3), (3, 2), (2, 1), (2, 1))],
)
def test_convolution_through_im2col_matches_direct_loop(kernel, stride, padding, dilation):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 3, 7, 6))
    weight = rng.standard_normal((4, 3) + kernel)
    cols = ref.im2col(x, kernel, stride, padding, dilation)
    out_h, out_w = output_hw(7, 6, kernel, stride, padding, dilation)
    # One product for the whole batch: (O, N*OH*OW), then (N, O, OH, OW).
    via_im2col = (weight.reshape(4, -1) @ cols).reshape(4, 2, out_h, out_w).transpose(1, 0, 2, 3)
    np.testing.assert_allclose(via_im2col, direct_convolution(x, weight, stride, padding, dilation), rtol=1e-12)


def test_col2im_matches_finite_differences_of_im2col():
    # col2im(c) is the gradient of x -> <im2col(x), c>.
    rng = np.random.default_rng(1)
    geometry = ((2, 3), (2, 1), (1, 1), (1, 2))
    x = rng.standard_normal((1, 2, 5, 6))
    c = rng.standard_normal(ref.im2col(x, *geometry).shape)
    numeric = numerical_gradient(lambda v: np.vdot(ref.im2col(v, *geometry), c), x)
    np.testing.assert_allclose(ref.col2im(c, x.shape, *geometry), numeric, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize(
    "size, kernel, stride, padding, dilation, expected",
    [(28, 5, 1, 0, 1, 24), (28, 3, 1, 1, 1, 28), (7, 3, 2, 1, 1, 4), (10, 3, 1, 0, 2, 6), (5, 1, 3, 0, 1, 2)],
)
def test_conv_output_size_cases(size, kernel, stride, padding, dilation, expected):
    assert conv_output_size(size, kernel, stride, padding, dilation) == expected


# ---------------------------------------------------------------------------------------------
# pooling


@pytest.mark.parametrize(
    "size, kernel, stride, padding, dilation, ceil_mode, expected",
    [
        (24, 2, 2, 0, 1, False, 12),  # LeNet pooling
        (112, 3, 2, 1, 1, False, 56),  # ResNet stem
        (5, 2, 2, 0, 1, False, 2),
        (5, 2, 2, 0, 1, True, 3),  # ceil_mode adds the half window at the end
        (6, 3, 2, 0, 1, True, 3),
        (5, 2, 2, 1, 1, False, 3),
        (5, 2, 2, 1, 1, True, 3),  # ceil's extra window would start in the right padding: dropped
        (4, 3, 3, 0, 1, False, 1),
        (4, 3, 3, 0, 1, True, 2),
        (10, 3, 1, 0, 2, False, 6),  # dilated span 5
        (7, 3, 2, 1, 2, True, 3),
        (1, 1, 1, 0, 1, True, 1),
    ],
)
def test_pool_output_size_follows_pytorch(size, kernel, stride, padding, dilation, ceil_mode, expected):
    assert pool_output_size(size, kernel, stride, padding, dilation, ceil_mode) == expected


def test_pool_rejects_padding_over_half_the_kernel():
    with pytest.raises(ValueError, match="half the kernel"):
        pool_output_size(8, 2, 2, 2, 1, False)


def test_avg_pool_divisors_hand_worked():
    # One row 1..5, kernel 1x2, stride 2, padding 1: windows cover columns {-1,0}, {1,2}, {3,4}.
    x = np.arange(1.0, 6.0).reshape(1, 1, 1, 5)
    with_pad = ref.avg_pool2d_forward(x, (1, 2), (1, 2), (0, 1), False, True)
    without_pad = ref.avg_pool2d_forward(x, (1, 2), (1, 2), (0, 1), False, False)
    np.testing.assert_allclose(with_pad.ravel(), [1 / 2, 5 / 2, 9 / 2])
    np.testing.assert_allclose(without_pad.ravel(), [1, 5 / 2, 9 / 2])
    # ceil_mode, no padding: windows {0,1}, {2,3}, {4} (the last one runs past the input and is
    # divided by the cells it has inside the padded input, 1, either way).
    for count_include_pad in (True, False):
        out = ref.avg_pool2d_forward(x, (1, 2), (1, 2), (0, 0), True, count_include_pad)
        np.testing.assert_allclose(out.ravel(), [3 / 2, 7 / 2, 5])
    # ceil_mode, padding 1, kernel 3, stride 2 on 4 columns: windows start at -1, 1 and 3. The
    # last covers column 3, column 4 (right padding) and column 5 (past the padded input): with
    # count_include_pad it is divided by 2, the cells inside the padded input, not by 3.
    x = np.arange(1.0, 5.0).reshape(1, 1, 1, 4)
    out = ref.avg_pool2d_forward(x, (1, 3), (1, 2), (0, 1), True, True)
    np.testing.assert_allclose(out.ravel(), [3 / 3, 9 / 3, 4 / 2])
    out = ref.avg_pool2d_forward(x, (1, 3), (1, 2), (0, 1), True, False)
    np.testing.assert_allclose(out.ravel(), [3 / 2, 9 / 3, 4 / 1])


def windows(height, width, kernel, stride, padding, dilation, ceil_mode):
    """Yield (oh, ow, [(ih, iw) of in-image taps in row-major order]) for every window."""
    out_h = pool_output_size(height, kernel[0], stride[0], padding[0], dilation[0], ceil_mode)
    out_w = pool_output_size(width, kernel[1], stride[1], padding[1], dilation[1], ceil_mode)
    for oh in range(out_h):
        for ow in range(out_w):
            taps = [
                (oh * stride[0] - padding[0] + i * dilation[0], ow * stride[1] - padding[1] + j * dilation[1])
                for i in range(kernel[0])
                for j in range(kernel[1])
            ]
            yield oh, ow, [(ih, iw) for ih, iw in taps if 0 <= ih < height and 0 <= iw < width]


pool_geometry = st.tuples(
    st.tuples(st.integers(1, 3), st.integers(1, 3)),  # kernel
    st.tuples(st.integers(1, 3), st.integers(1, 3)),  # stride
    st.tuples(st.integers(0, 1), st.integers(0, 1)),  # padding
    st.tuples(st.integers(1, 2), st.integers(1, 2)),  # dilation
    st.booleans(),  # ceil_mode
)


def pool_fits(height, width, kernel, stride, padding, dilation, ceil_mode):
    try:
        pool_output_size(height, kernel[0], stride[0], padding[0], dilation[0], ceil_mode)
        pool_output_size(width, kernel[1], stride[1], padding[1], dilation[1], ceil_mode)
    except ValueError:
        return False
    return True


@SETTINGS
@given(hw=st.tuples(st.integers(1, 7), st.integers(1, 7)), geometry=pool_geometry, seed=st.integers(0, 2**32 - 1))
def test_max_pool_matches_window_loop(hw, geometry, seed):
    assume(pool_fits(*hw, *geometry))
    x = np.round(np.random.default_rng(seed).standard_normal((2, 1) + hw))  # rounding creates ties
    out, argmax = ref.max_pool2d_forward(x, *geometry)
    for oh, ow, taps in windows(*hw, *geometry):
        if not taps:  # a dilated window can lie wholly in the padding: no cell, no gradient
            assert np.all(out[:, 0, oh, ow] == -np.inf) and np.all(argmax[:, 0, oh, ow] == -1)
            continue
        for b in range(2):
            values = [x[b, 0, ih, iw] for ih, iw in taps]
            first_best = int(np.argmax(values))  # np.argmax keeps the first of equal maxima
            ih, iw = taps[first_best]
            assert out[b, 0, oh, ow] == values[first_best]
            assert argmax[b, 0, oh, ow] == ih * hw[1] + iw


@SETTINGS
@given(
    hw=st.tuples(st.integers(1, 7), st.integers(1, 7)),
    geometry=pool_geometry,
    count_include_pad=st.booleans(),
    seed=st.integers(0, 2**32 - 1),
)
def test_avg_pool_matches_window_loop(hw, geometry, count_include_pad, seed):
    kernel, stride, padding, _, ceil_mode = geometry
    assume(pool_fits(*hw, kernel, stride, padding, (1, 1), ceil_mode))
    x = np.random.default_rng(seed).standard_normal((1, 2) + hw)
    out = ref.avg_pool2d_forward(x, kernel, stride, padding, ceil_mode, count_include_pad)
    for oh, ow, taps in windows(*hw, kernel, stride, padding, (1, 1), ceil_mode):
        if count_include_pad:
            # cells of the window inside the padded input [-p, size + p)
            rows = min(oh * stride[0] - padding[0] + kernel[0], hw[0] + padding[0]) - (oh * stride[0] - padding[0])
            cols = min(ow * stride[1] - padding[1] + kernel[1], hw[1] + padding[1]) - (ow * stride[1] - padding[1])
            divisor = rows * cols
        else:
            divisor = len(taps)
        expected = [sum(x[0, ch, ih, iw] for ih, iw in taps) / divisor for ch in range(2)]
        np.testing.assert_allclose(out[0, :, oh, ow], expected, rtol=1e-12)


def test_max_pool_backward_matches_finite_differences():
    rng = np.random.default_rng(2)
    # Distinct values spaced far apart, so a 1e-6 nudge never changes which cell wins.
    x = rng.permutation(2 * 3 * 5 * 6).astype(np.float64).reshape(2, 3, 5, 6) * 0.1
    args = ((3, 2), (2, 1), (1, 1), (1, 2), True)
    out, argmax = ref.max_pool2d_forward(x, *args)
    weights = rng.standard_normal(out.shape)
    numeric = numerical_gradient(lambda v: np.vdot(ref.max_pool2d_forward(v, *args)[0], weights), x)
    np.testing.assert_allclose(ref.max_pool2d_backward(weights, argmax, x.shape), numeric, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("ceil_mode, count_include_pad", [(False, True), (True, False), (True, True)])
def test_avg_pool_backward_matches_finite_differences(ceil_mode, count_include_pad):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 2, 5, 6))
    args = ((3, 2), (2, 2), (1, 1), ceil_mode, count_include_pad)
    weights = rng.standard_normal(ref.avg_pool2d_forward(x, *args).shape)
    numeric = numerical_gradient(lambda v: np.vdot(ref.avg_pool2d_forward(v, *args), weights), x)
    np.testing.assert_allclose(ref.avg_pool2d_backward(weights, x.shape, *args), numeric, rtol=1e-6, atol=1e-8)


# ---------------------------------------------------------------------------------------------
# softmax and cross-entropy


def test_softmax_is_stable_and_normalised():
    x = np.array([[1000.0, 1001.0, 1002.0], [-1000.0, 0.0, 1000.0]], dtype=np.float32)
    y = ref.softmax(x, 1)
    assert y.dtype == np.float32 and np.all(np.isfinite(y))
    np.testing.assert_allclose(y.sum(axis=1), 1.0, rtol=1e-6)
    expected_first = np.exp([-2.0, -1.0, 0.0]) / np.exp([-2.0, -1.0, 0.0]).sum()
    np.testing.assert_allclose(y[0], expected_first, rtol=1e-6)
    np.testing.assert_allclose(ref.log_softmax(x, 1)[1], [-2000.0, -1000.0, 0.0], rtol=1e-6)
    np.testing.assert_allclose(ref.softmax(x.T, 0), y.T, rtol=1e-6)


def test_cross_entropy_matches_definition():
    logits = np.array([[2.0, 0.5, -1.0], [0.0, 0.0, 0.0], [1.0, 2.0, 3.0]])
    targets = np.array([0, -100, 2])
    eps = 0.2
    losses, log_probs = ref.softmax_cross_entropy_forward(logits, targets, -100, eps)
    for row, target in ((0, 0), (2, 2)):
        logp = logits[row] - math.log(np.exp(logits[row]).sum())
        smoothed_target = np.full(3, eps / 3)
        smoothed_target[target] += 1 - eps
        assert losses[row] == pytest.approx(-(smoothed_target * logp).sum(), rel=1e-12)
    assert losses[1] == 0.0


def test_cross_entropy_sums_or_averages_over_the_rows_not_ignored():
    logits = np.array([[2.0, 0.5, -1.0], [0.0, 0.0, 0.0], [1.0, 2.0, 3.0]])
    targets = np.array([0, -100, 2])
    losses, log_probs = ref.softmax_cross_entropy_forward(logits, targets, -100, 0.0)
    total, _ = ref.softmax_cross_entropy_forward(logits, targets, -100, 0.0, "sum")
    mean, _ = ref.softmax_cross_entropy_forward(logits, targets, -100, 0.0, "mean")
    assert total == losses.sum() and mean == losses.sum() / 2  # PyTorch's mean: 2 kept rows
    grad = ref.softmax_cross_entropy_backward(np.float64(3.0), log_probs, targets, -100, 0.0,
                                              "mean")
    np.testing.assert_array_equal(grad, ref.softmax_cross_entropy_backward(
        np.full(3, 1.5), log_probs, targets, -100, 0.0))
    nothing = np.full(3, -100)  # nothing kept: the mean is nan, its gradient 0
    assert np.isnan(ref.softmax_cross_entropy_forward(logits, nothing, -100, 0.0, "mean")[0])
    assert not ref.softmax_cross_entropy_backward(np.float64(1.0), log_probs, nothing, -100,
                                                  0.0, "mean").any()
    with pytest.raises(ValueError, match="reduction must be 'none', 'sum' or 'mean', got 'avg'"):
        ref.softmax_cross_entropy_forward(logits, targets, -100, 0.0, "avg")


def test_cross_entropy_backward_matches_finite_differences():
    rng = np.random.default_rng(4)
    logits = rng.standard_normal((5, 4)) * 2
    targets = np.array([3, -1, 0, 2, 1])
    weights = rng.standard_normal(5)
    for eps in (0.0, 0.3):
        _, log_probs = ref.softmax_cross_entropy_forward(logits, targets, -1, eps)
        numeric = numerical_gradient(
            lambda v: np.vdot(ref.softmax_cross_entropy_forward(v, targets, -1, eps)[0], weights), logits
        )
        analytic = ref.softmax_cross_entropy_backward(weights, log_probs, targets, -1, eps)
        np.testing.assert_allclose(analytic, numeric, rtol=1e-6, atol=1e-8)
        assert np.all(analytic[1] == 0)


# ---------------------------------------------------------------------------------------------
# GELU and layer norm


def test_gelu_exact_values():
    # GELU(x) = x * Phi(x); Phi(1) = 0.8413447460685429, Phi(-2) = 0.022750131948179195
    x = np.array([1.0, -2.0, 0.0])
    np.testing.assert_allclose(ref.gelu_forward(x, "none"), [0.8413447460685429, -0.04550026389635839, 0.0], rtol=1e-14)
    # the tanh approximation is close to the exact curve
    np.testing.assert_allclose(ref.gelu_forward(x, "tanh"), ref.gelu_forward(x, "none"), atol=1e-3)
    with pytest.raises(ValueError, match="approximate"):
        ref.gelu_forward(x, "erf")


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_backward_matches_finite_differences(approximate):
    rng = np.random.default_rng(5)
    x = rng.standard_normal((3, 4)) * 3
    weights = rng.standard_normal(x.shape)
    numeric = numerical_gradient(lambda v: np.vdot(ref.gelu_forward(v, approximate), weights), x)
    np.testing.assert_allclose(ref.gelu_backward(weights, x, approximate), numeric, rtol=1e-6, atol=1e-8)


def test_layer_norm_normalises_rows():
    x = np.random.default_rng(6).standard_normal((4, 16)).astype(np.float32) * 5 + 3
    y, mean, rstd = ref.layer_norm_forward(x, None, None, 0.0)
    np.testing.assert_allclose(y.mean(axis=1), 0.0, atol=1e-5)
    np.testing.assert_allclose(y.var(axis=1), 1.0, rtol=1e-4)
    np.testing.assert_allclose(mean, x.mean(axis=1), rtol=1e-5)
    assert y.dtype == mean.dtype == rstd.dtype == np.float32


@pytest.mark.parametrize("affine", [True, False])
def test_layer_norm_backward_matches_finite_differences(affine):
    rng = np.random.default_rng(7)
    x = rng.standard_normal((3, 5))
    weight = rng.standard_normal(5) if affine else None
    bias = rng.standard_normal(5) if affine else None
    weights = rng.standard_normal(x.shape)
    eps = 1e-5

    def loss(x_=x, weight_=weight, bias_=bias):
        return np.vdot(ref.layer_norm_forward(x_, weight_, bias_, eps)[0], weights)

    _, mean, rstd = ref.layer_norm_forward(x, weight, bias, eps)
    dx, dweight, dbias = ref.layer_norm_backward(weights, x, mean, rstd, weight)
    np.testing.assert_allclose(dx, numerical_gradient(lambda v: loss(x_=v), x), rtol=1e-6, atol=1e-8)
    if affine:
        np.testing.assert_allclose(dweight, numerical_gradient(lambda v: loss(weight_=v), weight), rtol=1e-6, atol=1e-8)
        np.testing.assert_allclose(dbias, numerical_gradient(lambda v: loss(bias_=v), bias), rtol=1e-6, atol=1e-8)
    else:
        assert dweight is None and dbias is None


def _cpu_backends():
    from minidl.backend.numba_cpu import NumbaCpuBackend, load_kernels
    load_kernels()  # the kernels, not the NumPy stand-ins a fresh process starts with
    return [ReferenceBackend(), NumbaCpuBackend()]


@pytest.mark.parametrize("backend", _cpu_backends(), ids=["reference", "numba"])
@pytest.mark.parametrize("kernel", ["softmax", "log_softmax"])
def test_softmax_over_an_empty_axis_is_empty(backend, kernel):
    out = getattr(backend, kernel)(np.zeros((3, 0), np.float32), 1)
    assert out.shape == (3, 0) and out.dtype == np.float32


@pytest.mark.parametrize("backend", _cpu_backends(), ids=["reference", "numba"])
def test_float32_layer_norm_of_a_constant_row_is_exactly_zero(backend):
    rows = np.full((3, 37), 0.1, np.float32) * np.array([[1.0], [3.0], [-7.0]], np.float32)
    y, mean, rstd = backend.layer_norm_forward(rows, None, None, 1e-5)
    assert y.dtype == np.float32
    np.testing.assert_array_equal(y, np.zeros_like(rows))  # PyTorch gives exact zeros too


@pytest.mark.parametrize("stack", [(3, 4), (2,), (0, 5)])
def test_matmul_of_a_stack_by_a_matrix_is_each_matrix_product(stack):
    # The stacked operand is multiplied as one block of rows (a single BLAS call); the result
    # must still be each matrix's own product, with the stack's shape, for any stack.
    rng = np.random.default_rng(0)
    a = rng.standard_normal(stack + (3, 5)).astype(np.float32)
    b = rng.standard_normal((5, 2)).astype(np.float32).T.copy().T  # a transposed view
    got = ReferenceBackend.matmul(a, b)
    assert got.shape == stack + (3, 2)
    want = np.array([m @ b for m in a.reshape(-1, 3, 5)], np.float32).reshape(stack + (3, 2))
    np.testing.assert_allclose(got, want, rtol=1e-6)


@pytest.mark.parametrize("transpose_a, transpose_b", [(True, False), (False, True), (True, True)])
def test_matmul_transpose_flags_multiply_by_the_swapped_operands(transpose_a, transpose_b):
    rng = np.random.default_rng(0)
    a = rng.standard_normal((2, 3, 5)).astype(np.float32)
    b = rng.standard_normal((5, 4)).astype(np.float32)
    stored_a = np.swapaxes(a, -1, -2).copy() if transpose_a else a
    stored_b = b.T.copy() if transpose_b else b
    got = ReferenceBackend.matmul(stored_a, stored_b, transpose_a, transpose_b)
    np.testing.assert_allclose(got, ReferenceBackend.matmul(a, b), rtol=1e-6)


@pytest.mark.parametrize("index", [(slice(None), 1), (Ellipsis, slice(0, 3, 2)), 2,
                                   (None, slice(1, None)), (np.array([0, 0, 2]),)])
def test_index_add_matches_add_at_for_basic_and_repeated_indices(index):
    rng = np.random.default_rng(1)
    values = rng.standard_normal(np.zeros((3, 4))[index].shape).astype(np.float32)
    want = np.zeros((3, 4), np.float32)
    np.add.at(want, index, values)
    np.testing.assert_array_equal(ReferenceBackend.index_add((3, 4), index, values, np.float32),
                                  want)
