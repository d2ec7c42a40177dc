"""Every Numba kernel returns what its plain-NumPy reference returns.

Shapes and parameters (stride, padding, dilation, ceil_mode, count_include_pad, size-1 and empty
batches) are drawn by hypothesis; the array contents come from a seeded generator so a failing
example replays exactly. The reference is itself checked independently in
test_reference_kernels.py.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from minidl.backend.conv_arithmetic import conv_output_size
from minidl.backend.numba_cpu import NumbaCpuBackend, load_kernels
from minidl.backend.reference import ReferenceBackend
from minidl.backend.reference.pool import pool_output_size

fast, ref = NumbaCpuBackend(), ReferenceBackend()
load_kernels()  # the kernels themselves, not the NumPy stand-ins a fresh process starts with

KERNEL_SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
DTYPES = [np.float32, np.float64]


def assert_agree(actual, expected, dtype):
    """float32 kernels may sum in a different order (or in float64); float64 must match closely."""
    assert actual.dtype == expected.dtype == dtype
    assert actual.shape == expected.shape
    if dtype == np.float32:
        np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=1e-6)
    else:
        np.testing.assert_allclose(actual, expected, rtol=1e-12, atol=1e-12)


def random_array(seed, shape, dtype):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


pairs = st.tuples
seeds = st.integers(0, 2**32 - 1)
dtypes = st.sampled_from(DTYPES)


# ---------------------------------------------------------------------------------------------
# im2col / col2im

conv_cases = st.fixed_dictionaries(
    {
        "shape": pairs(st.integers(0, 3), st.integers(1, 3), st.integers(1, 8), st.integers(1, 8)),
        "kernel_size": pairs(st.integers(1, 3), st.integers(1, 3)),
        "stride": pairs(st.integers(1, 3), st.integers(1, 3)),
        "padding": pairs(st.integers(0, 2), st.integers(0, 2)),
        "dilation": pairs(st.integers(1, 2), st.integers(1, 2)),
    }
)


def conv_fits(case):
    _, _, height, width = case["shape"]
    try:
        for axis, size in enumerate((height, width)):
            conv_output_size(
                size, case["kernel_size"][axis], case["stride"][axis], case["padding"][axis], case["dilation"][axis]
            )
    except ValueError:
        return False
    return True


@KERNEL_SETTINGS
@given(case=conv_cases, dtype=dtypes, seed=seeds)
def test_im2col_and_col2im_agree(case, dtype, seed):
    assume(conv_fits(case))
    geometry = (case["kernel_size"], case["stride"], case["padding"], case["dilation"])
    x = random_array(seed, case["shape"], dtype)
    cols = ref.im2col(x, *geometry)
    assert_agree(fast.im2col(x, *geometry), cols, dtype)
    grad_cols = random_array(seed + 1, cols.shape, dtype)
    assert_agree(fast.col2im(grad_cols, x.shape, *geometry), ref.col2im(grad_cols, x.shape, *geometry), dtype)


@pytest.mark.parametrize("parallel_min_work", [0, 1 << 60], ids=["threads", "one-thread"])
def test_im2col_and_col2im_loops_agree_with_reference(monkeypatch, parallel_min_work):
    # Small inputs take the single-thread loop; force each loop in turn on the same problem.
    from minidl.backend.numba_cpu import conv as fast_conv

    monkeypatch.setattr(fast_conv, "COLUMNS_PARALLEL_MIN_WORK", parallel_min_work)
    for dtype, stride in ((np.float32, (1, 1)), (np.float64, (2, 3))):
        x = random_array(2, (3, 2, 9, 10), dtype)
        geometry = ((3, 2), stride, (1, 2), (2, 1))
        cols = ref.im2col(x, *geometry)
        assert_agree(fast.im2col(x, *geometry), cols, dtype)
        assert_agree(fast.col2im(cols, x.shape, *geometry), ref.col2im(cols, x.shape, *geometry), dtype)


@pytest.mark.parametrize("geometry", [
    ((3, 3), (1, 1), (1, 1), (1, 1)),   # 'same' 3x3: the contiguous-band copy
    ((5, 3), (1, 1), (2, 1), (1, 1)),   # tall kernel
    ((3, 3), (1, 1), (2, 2), (2, 2)),   # dilated, still as wide as the image
    ((1, 5), (1, 1), (0, 2), (1, 1)),
    ((7, 7), (1, 1), (3, 3), (1, 1)),   # taps whose rows fall wholly outside a 3-row image
], ids=["3x3", "5x3", "dilated", "1x5", "7x7-on-3-rows"])
@pytest.mark.parametrize("parallel_min_work", [0, 1 << 60], ids=["threads", "one-thread"])
def test_im2col_of_same_size_convolutions_equals_the_reference(monkeypatch, geometry,
                                                               parallel_min_work):
    # Output rows as wide as the image take the band copy; it must give the reference's bits.
    from minidl.backend.numba_cpu import conv as fast_conv

    monkeypatch.setattr(fast_conv, "COLUMNS_PARALLEL_MIN_WORK", parallel_min_work)
    for shape in ((2, 3, 6, 5), (1, 2, 3, 4), (3, 1, 1, 6)):
        x = random_array(sum(shape), shape, np.float32)
        cols = ref.im2col(x, *geometry)
        np.testing.assert_array_equal(fast.im2col(x, *geometry), cols)
        assert_agree(fast.col2im(cols, x.shape, *geometry), ref.col2im(cols, x.shape, *geometry),
                     np.float32)


@pytest.mark.parametrize("geometry", [
    ((5, 5), (1, 1), (0, 0), (1, 1)),   # unpadded 5x5 (LeNet's second layer): rows narrower
    ((3, 3), (2, 2), (1, 1), (1, 1)),   # strided: padding rows and columns zeroed apart
    ((3, 2), (1, 2), (3, 0), (2, 1)),   # taps whose rows fall wholly outside the image
], ids=["valid-5x5", "strided", "rows-outside"])
@pytest.mark.parametrize("loop", ["_im2col_serial", "_im2col_parallel"])
def test_im2col_of_narrow_rows_writes_every_cell_as_the_reference(geometry, loop):
    # Rows narrower than the image take the per-row copy, which zeroes padding apart from
    # copying: a table filled with NaN first shows any cell that neither step wrote.
    from minidl.backend.numba_cpu import conv as fast_conv

    for dtype in DTYPES:
        x = random_array(1, (2, 3, 9, 8), dtype)
        x[0, 1, 4, 3], x[1, 2, 0, 0] = np.nan, -np.inf
        expected = ref.im2col(x, *geometry)
        params = fast_conv._geometry(x.shape, *geometry)
        cols = np.full_like(expected, np.nan)
        getattr(fast_conv, loop)(x, cols, *params)
        np.testing.assert_array_equal(cols, expected)
        assert_agree(fast.col2im(expected, x.shape, *geometry),
                     ref.col2im(expected, x.shape, *geometry), dtype)


def test_im2col_accepts_non_contiguous_input():
    x = random_array(0, (2, 3, 6, 5), np.float64).transpose(0, 1, 3, 2)
    geometry = ((3, 2), (1, 2), (1, 0), (1, 1))
    np.testing.assert_array_equal(fast.im2col(x, *geometry), ref.im2col(x, *geometry))


def test_conv_output_size_rejects_empty_output():
    with pytest.raises(ValueError, match="input size 2, kernel 5"):
        conv_output_size(2, 5, 1, 0, 1)


# ---------------------------------------------------------------------------------------------
# pooling

pool_cases = st.fixed_dictionaries(
    {
        "shape": pairs(st.integers(0, 3), st.integers(1, 3), st.integers(1, 9), st.integers(1, 9)),
        "kernel_size": pairs(st.integers(1, 4), st.integers(1, 4)),
        "stride": pairs(st.integers(1, 3), st.integers(1, 3)),
        "padding": pairs(st.integers(0, 2), st.integers(0, 2)),
        "dilation": pairs(st.integers(1, 2), st.integers(1, 2)),
        "ceil_mode": st.booleans(),
        "count_include_pad": st.booleans(),
    }
)


def pool_fits(case, dilation):
    _, _, height, width = case["shape"]
    try:
        for axis, size in enumerate((height, width)):
            pool_output_size(
                size, case["kernel_size"][axis], case["stride"][axis], case["padding"][axis], dilation[axis],
                case["ceil_mode"],
            )
    except ValueError:
        return False
    return True


@KERNEL_SETTINGS
@given(case=pool_cases, dtype=dtypes, seed=seeds, integer_values=st.booleans())
def test_max_pool_agrees(case, dtype, seed, integer_values):
    assume(pool_fits(case, case["dilation"]))
    x = random_array(seed, case["shape"], dtype)
    if integer_values:
        x = np.round(x).astype(dtype)  # many ties: both must keep the first maximum
    args = (case["kernel_size"], case["stride"], case["padding"], case["dilation"], case["ceil_mode"])
    out, argmax = ref.max_pool2d_forward(x, *args)
    fast_out, fast_argmax = fast.max_pool2d_forward(x, *args)
    assert_agree(fast_out, out, dtype)
    assert fast_argmax.dtype == np.int64
    np.testing.assert_array_equal(fast_argmax, argmax)
    grad = random_array(seed + 1, out.shape, dtype)
    assert_agree(fast.max_pool2d_backward(grad, argmax, x.shape), ref.max_pool2d_backward(grad, argmax, x.shape), dtype)


@KERNEL_SETTINGS
@given(case=pool_cases, dtype=dtypes, seed=seeds)
def test_avg_pool_agrees(case, dtype, seed):
    assume(pool_fits(case, (1, 1)))
    x = random_array(seed, case["shape"], dtype)
    args = (case["kernel_size"], case["stride"], case["padding"], case["ceil_mode"], case["count_include_pad"])
    out = ref.avg_pool2d_forward(x, *args)
    assert_agree(fast.avg_pool2d_forward(x, *args), out, dtype)
    grad = random_array(seed + 1, out.shape, dtype)
    assert_agree(fast.avg_pool2d_backward(grad, x.shape, *args), ref.avg_pool2d_backward(grad, x.shape, *args), dtype)


def test_max_pool_propagates_nan_like_reference():
    x = np.arange(16, dtype=np.float64).reshape(1, 1, 4, 4)
    x[0, 0, 1, 0] = np.nan
    args = ((2, 2), (2, 2), (0, 0), (1, 1), False)
    out, argmax = fast.max_pool2d_forward(x, *args)
    ref_out, ref_argmax = ref.max_pool2d_forward(x, *args)
    np.testing.assert_array_equal(out, ref_out)
    np.testing.assert_array_equal(argmax, ref_argmax)
    assert np.isnan(out[0, 0, 0, 0]) and argmax[0, 0, 0, 0] == 4


@KERNEL_SETTINGS
@given(
    shape=pairs(st.integers(0, 3), st.integers(1, 3), st.integers(2, 9), st.integers(2, 9)),
    ceil_mode=st.booleans(),
    dtype=dtypes,
    seed=seeds,
    integer_values=st.booleans(),
    nan_count=st.integers(0, 3),
)
def test_max_pool_2x2_fast_path_agrees(shape, ceil_mode, dtype, seed, integer_values, nan_count):
    # MaxPool2d(2) has its own kernel; odd sizes with ceil_mode must still take the general one.
    x = random_array(seed, shape, dtype)
    if integer_values:
        x = np.round(x).astype(dtype)
    rng = np.random.default_rng(seed + 2)
    flat = x.reshape(-1)
    flat[rng.integers(0, flat.size, size=nan_count if flat.size else 0)] = np.nan
    args = ((2, 2), (2, 2), (0, 0), (1, 1), ceil_mode)
    out, argmax = ref.max_pool2d_forward(x, *args)
    fast_out, fast_argmax = fast.max_pool2d_forward(x, *args)
    np.testing.assert_array_equal(fast_out, out)  # a max is exact; NaNs must sit in the same cells
    np.testing.assert_array_equal(fast_argmax, argmax)


@pytest.mark.parametrize("ceil_mode", [False, True])
@pytest.mark.parametrize("padding", [(0, 0), (1, 0)])
def test_pooling_gives_the_same_bits_on_threads_as_on_one(monkeypatch, padding, ceil_mode):
    # Large problems split their (n, c) planes over threads; each plane is computed by the same
    # code wherever it runs, so forcing each loop on the same problem must give the same bits.
    from minidl.backend.numba_cpu import pool as fast_pool

    x = random_array(3, (3, 4, 9, 8), np.float32)
    results = []
    # Split over threads; the threaded max-pool loop held to the calling thread; the serial loops.
    for threaded_from, vectorised_from in ((0, 0), (1 << 60, 0), (1 << 60, 1 << 60)):
        monkeypatch.setattr(fast_pool, "PARALLEL_MIN_WORK", threaded_from)
        monkeypatch.setattr(fast_pool, "VECTORISED_MIN_WORK", vectorised_from)
        for window in (((3, 2), (2, 2)), ((2, 2), (2, 2))):
            out, argmax = fast.max_pool2d_forward(x, *window, padding, (1, 1), ceil_mode)
            avg_args = (*window, padding, ceil_mode, True)
            avg = fast.avg_pool2d_forward(x, *avg_args)
            results.append((out, argmax, fast.max_pool2d_backward(out, argmax, x.shape), avg,
                            fast.avg_pool2d_backward(avg, x.shape, *avg_args)))
    threaded = results[:2]
    for other in (results[2:4], results[4:]):
        for a_parts, b_parts in zip(threaded, other):
            for a, b in zip(a_parts, b_parts):
                np.testing.assert_array_equal(a, b)
    out, argmax = ref.max_pool2d_forward(x, (3, 2), (2, 2), padding, (1, 1), ceil_mode)
    np.testing.assert_array_equal(threaded[0][0], out)
    np.testing.assert_array_equal(threaded[0][1], argmax)
    assert_agree(threaded[0][2], ref.max_pool2d_backward(out, argmax, x.shape), np.float32)


def test_mid_sized_max_pooling_runs_the_threaded_loop_on_the_calling_thread(monkeypatch):
    from minidl.backend.numba_cpu import pool as fast_pool

    load_kernels()  # the kernels, not the NumPy stand-in of a small first call
    held = []
    on_numba_threads = fast_pool.on_numba_threads
    monkeypatch.setattr(fast_pool, "on_numba_threads", lambda count, kernel, *a: (
        count == 1 and held.append(kernel)) or on_numba_threads(count, kernel, *a))
    # ~2^12 and ~2^15 cells, then ~2^18 (LeNet's first layer) and 2^20 (threaded)
    for shape in ((1, 6, 28, 28), (8, 6, 28, 28), (64, 6, 28, 28), (64, 16, 32, 32)):
        x = random_array(0, shape, np.float32)
        out, argmax = fast.max_pool2d_forward(x, (2, 2), (2, 2), (0, 0), (1, 1), False)
        np.testing.assert_array_equal(out, ref.max_pool2d_forward(x, (2, 2), (2, 2), (0, 0),
                                                                  (1, 1), False)[0])
    assert 8 * 6 * 28 * 28 < fast_pool.PARALLEL_MIN_WORK <= 64 * 6 * 28 * 28
    assert held == [fast_pool._max_pool_parallel]  # ~2^15 only


def test_a_kernel_held_to_the_calling_thread_runs_alone_and_gives_the_count_back():
    numba = pytest.importorskip("numba")
    from minidl.backend.threads import on_numba_threads

    if numba.config.NUMBA_NUM_THREADS < 2:
        pytest.skip("Numba has one thread here")
    before = numba.get_num_threads()
    seen = []  # the thread count each kernel ran under

    def kernel(fails):
        seen.append(numba.get_num_threads())
        if fails:
            raise FloatingPointError("raised inside the kernel")

    try:
        numba.set_num_threads(2)
        on_numba_threads(1, kernel, False)
        with pytest.raises(FloatingPointError):
            on_numba_threads(1, kernel, True)
        assert numba.get_num_threads() == 2
    finally:
        numba.set_num_threads(before)
    assert seen == [1, 1]


def test_max_pool_2x2_fast_path_is_taken(monkeypatch):
    from minidl.backend.numba_cpu import pool as fast_pool

    calls = []  # each call's usual_2x2 flag, its last argument
    kernel = fast_pool._max_pool_serial
    monkeypatch.setattr(fast_pool, "_max_pool_serial",
                        lambda *a: calls.append(a[-1]) or kernel(*a))
    x = random_array(0, (2, 3, 6, 7), np.float32)  # odd width: the last column is dropped
    fast.max_pool2d_forward(x, (2, 2), (2, 2), (0, 0), (1, 1), False)
    assert calls == [True]
    fast.max_pool2d_forward(x, (2, 2), (2, 2), (0, 0), (1, 1), True)  # window over the edge
    assert calls == [True, False]


# ---------------------------------------------------------------------------------------------
# ReLU gradient


@KERNEL_SETTINGS
@given(shape=st.lists(st.integers(0, 6), min_size=0, max_size=4), dtype=dtypes, seed=seeds,
       transposed=st.booleans())
def test_relu_backward_agrees(shape, dtype, seed, transposed):
    x = np.round(random_array(seed, shape, dtype) * 2).astype(dtype)  # many exact zeros
    grad = random_array(seed + 1, shape, dtype)
    if x.size:
        x.reshape(-1)[0] = np.nan  # NaN input: not > 0, so no gradient
        grad.reshape(-1)[-1] = np.nan
    if transposed:  # non-contiguous inputs
        x, grad = x.T, grad.T
    actual, expected = fast.relu_backward(grad, x), ref.relu_backward(grad, x)
    assert actual.dtype == expected.dtype == dtype
    np.testing.assert_array_equal(actual, expected)  # a select: exact


def test_relu_backward_broadcasts_like_reference():
    x = random_array(0, (3, 4), np.float64)
    grad = random_array(1, (4,), np.float64)
    np.testing.assert_array_equal(fast.relu_backward(grad, x), ref.relu_backward(grad, x))


# ---------------------------------------------------------------------------------------------
# softmax and cross-entropy


@KERNEL_SETTINGS
@given(
    shape=st.lists(st.integers(0, 5), min_size=1, max_size=3),
    axis_choice=st.integers(0, 2),
    dtype=dtypes,
    seed=seeds,
    scale=st.sampled_from([1.0, 50.0]),
)
def test_softmax_its_gradient_and_log_softmax_agree(shape, axis_choice, dtype, seed, scale):
    axis = axis_choice % len(shape)
    assume(shape[axis] > 0)  # softmax over an empty axis is undefined
    x = (random_array(seed, shape, dtype) * scale).astype(dtype)
    assert_agree(fast.softmax(x, axis), ref.softmax(x, axis), dtype)
    assert_agree(fast.log_softmax(x, axis), ref.log_softmax(x, axis), dtype)
    assert_agree(fast.softmax(x, axis - len(shape)), ref.softmax(x, axis), dtype)
    out = ref.softmax(x, axis)
    grad = random_array(seed + 1, shape, dtype)
    assert_agree(fast.softmax_backward(grad, out, axis), ref.softmax_backward(grad, out, axis),
                 dtype)
    # A gradient arriving as a transposed view (as after a permute) reads the same values.
    grad_view = np.ascontiguousarray(np.swapaxes(grad, 0, -1)).swapaxes(0, -1)
    assert_agree(fast.softmax_backward(grad_view, out, axis - len(shape)),
                 ref.softmax_backward(grad, out, axis), dtype)


@KERNEL_SETTINGS
@given(
    rows=st.integers(0, 8),
    classes=st.integers(1, 7),
    dtype=dtypes,
    seed=seeds,
    label_smoothing=st.sampled_from([0.0, 0.1, 0.5]),
    ignore_index=st.sampled_from([-100, 0]),
)
def test_softmax_cross_entropy_agrees(rows, classes, dtype, seed, label_smoothing, ignore_index):
    rng = np.random.default_rng(seed)
    logits = (rng.standard_normal((rows, classes)) * 3).astype(dtype)
    targets = rng.integers(0, classes, size=rows).astype(np.int64)
    targets[rng.random(rows) < 0.25] = ignore_index
    losses, log_probs = ref.softmax_cross_entropy_forward(logits, targets, ignore_index, label_smoothing)
    fast_losses, fast_log_probs = fast.softmax_cross_entropy_forward(logits, targets, ignore_index, label_smoothing)
    assert_agree(fast_losses, losses, dtype)
    assert_agree(fast_log_probs, log_probs, dtype)
    grad = rng.standard_normal(rows).astype(dtype)
    assert_agree(
        fast.softmax_cross_entropy_backward(grad, log_probs, targets, ignore_index, label_smoothing),
        ref.softmax_cross_entropy_backward(grad, log_probs, targets, ignore_index, label_smoothing),
        dtype,
    )


@pytest.mark.parametrize("classes", [9, 17, 1000, 4099])
@pytest.mark.parametrize("label_smoothing", [0.0, 0.1])
def test_float32_softmax_family_agrees_on_wide_rows(classes, label_smoothing):
    # float32 rows find their max and sums by folding the row in halves down to 8 values:
    # rows wider than that, of odd and even widths, take paths the small shapes above never do.
    rng = np.random.default_rng(classes)
    logits = (rng.standard_normal((6, classes)) * 8).astype(np.float32)
    logits[1, classes // 2] = 40.0  # one dominant class: its log-probability is near 0
    logits[2, 3] = -np.inf
    targets = rng.integers(0, classes, 6)
    targets[1], targets[4] = classes // 2, -100
    for name in ("softmax", "log_softmax"):
        assert_agree(getattr(fast, name)(logits, 1), getattr(ref, name)(logits, 1), np.float32)
    losses, log_probs = ref.softmax_cross_entropy_forward(logits, targets, -100, label_smoothing)
    fast_losses, fast_log_probs = fast.softmax_cross_entropy_forward(logits, targets, -100,
                                                                     label_smoothing)
    assert_agree(fast_losses, losses, np.float32)
    assert_agree(fast_log_probs, log_probs, np.float32)
    grad = rng.standard_normal(6).astype(np.float32)
    assert_agree(fast.softmax_cross_entropy_backward(grad, log_probs, targets, -100,
                                                     label_smoothing),
                 ref.softmax_cross_entropy_backward(grad, log_probs, targets, -100,
                                                    label_smoothing), np.float32)


def test_float32_cross_entropy_backward_takes_positive_log_probabilities_as_the_reference():
    # Log-probabilities are <= 0, and the float32 kernel's vectorised exp(-y) needs y >= 0; a
    # row given positive ones (accepted, if meaningless) must still overflow to inf, not wrap
    # the exponent's bits.
    log_probs = np.full((3, 20), -3.0, np.float32)
    log_probs[0, :3] = [800.0, 3.0, np.inf]
    log_probs[1, 5] = np.nan
    targets, grad = np.array([1, 2, 0]), np.array([0.5, 1.0, -2.0], np.float32)
    with np.errstate(over="ignore"):  # exp(800) is inf, as intended
        expected = ref.softmax_cross_entropy_backward(grad, log_probs, targets, -100, 0.1)
    np.testing.assert_allclose(
        fast.softmax_cross_entropy_backward(grad, log_probs, targets, -100, 0.1), expected,
        rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("backend", [ref, fast], ids=["reference", "numba"])
def test_cross_entropy_rejects_out_of_range_target(backend):
    logits = np.zeros((3, 4))
    with pytest.raises(ValueError, match="target 7"):
        backend.softmax_cross_entropy_forward(logits, np.array([0, 7, -100]), -100, 0.0)
    with pytest.raises(ValueError, match="target -1"):
        backend.softmax_cross_entropy_forward(logits, np.array([-1, 0, 1]), -100, 0.0)


# ---------------------------------------------------------------------------------------------
# GELU and layer norm


@KERNEL_SETTINGS
@given(
    shape=st.lists(st.integers(0, 6), min_size=0, max_size=3),
    approximate=st.sampled_from(["none", "tanh"]),
    dtype=dtypes,
    seed=seeds,
)
def test_gelu_agrees(shape, approximate, dtype, seed):
    x = (random_array(seed, shape, dtype) * 4).astype(dtype)
    assert_agree(fast.gelu_forward(x, approximate), ref.gelu_forward(x, approximate), dtype)
    grad = random_array(seed + 1, shape, dtype)
    assert_agree(fast.gelu_backward(grad, x, approximate), ref.gelu_backward(grad, x, approximate), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_row_kernels_agree_across_their_lane_groups(dtype):
    # Softmax, its gradient and layer norm sum a row in groups of 16 or 64 lanes plus a rest:
    # widths on each side of a group, with -inf masks (a fully masked row is NaN, as in the
    # reference's exp(-inf - -inf)) and a NaN.
    rng = np.random.default_rng(5)
    for width in (15, 16, 17, 63, 64, 65, 130):
        x = (rng.standard_normal((6, width)) * 8).astype(dtype)
        x[1, ::3], x[2], x[3, width // 2] = -np.inf, -np.inf, np.nan
        grad = rng.standard_normal(x.shape).astype(dtype)
        with np.errstate(invalid="ignore"):
            out = ref.softmax(x, 1)
            assert_agree(fast.softmax(x, 1), out, dtype)
            assert_agree(fast.softmax_backward(grad, out, 1), ref.softmax_backward(grad, out, 1),
                         dtype)
        finite, weight, bias = x[4:], grad[0], grad[1]
        expected = ref.layer_norm_forward(finite, weight, bias, 1e-5)
        for actual, wanted in zip(fast.layer_norm_forward(finite, weight, bias, 1e-5), expected):
            assert_agree(actual, wanted, dtype)
        for actual, wanted in zip(fast.layer_norm_backward(grad[4:], finite, *expected[1:], weight),
                                  ref.layer_norm_backward(grad[4:], finite, *expected[1:], weight)):
            assert_agree(actual, wanted, dtype)


@KERNEL_SETTINGS
@given(
    rows=st.integers(0, 6),
    width=st.integers(1, 9),
    affine=st.sampled_from(["both", "weight", "none"]),
    dtype=dtypes,
    seed=seeds,
)
# Rows of two cancel almost all of g in dx; a float32 reference once disagreed here by 5e-5.
@example(rows=4, width=2, affine="both", dtype=np.float32, seed=2429757)
def test_layer_norm_agrees(rows, width, affine, dtype, seed):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((rows, width)) * 2 + 1).astype(dtype)
    weight = rng.standard_normal(width).astype(dtype) if affine != "none" else None
    bias = rng.standard_normal(width).astype(dtype) if affine == "both" else None
    y, mean, rstd = ref.layer_norm_forward(x, weight, bias, 1e-5)
    fast_y, fast_mean, fast_rstd = fast.layer_norm_forward(x, weight, bias, 1e-5)
    for actual, expected in ((fast_y, y), (fast_mean, mean), (fast_rstd, rstd)):
        assert_agree(actual, expected, dtype)
    grad = rng.standard_normal((rows, width)).astype(dtype)
    expected_grads = ref.layer_norm_backward(grad, x, mean, rstd, weight)
    actual_grads = fast.layer_norm_backward(grad, x, mean, rstd, weight)
    for actual, expected in zip(actual_grads, expected_grads):
        if expected is None:
            assert actual is None
        else:
            assert_agree(actual, expected, dtype)


@KERNEL_SETTINGS
@given(
    n=st.integers(1, 4),
    channels=st.integers(1, 4),
    size=st.integers(1, 7),
    affine=st.sampled_from(["both", "weight", "none"]),
    batch_stats=st.booleans(),
    dtype=dtypes,
    seed=seeds,
)
# Given statistics far from the batch's: Σ grad·x̂ cancels to ~1e-3 from terms ~10, which a
# float32 x̂ (Numba's float() of a float32 stays float32) got wrong in the 3rd digit.
@example(n=4, channels=4, size=7, affine="weight", batch_stats=False, dtype=np.float32,
         seed=26984)
def test_batch_norm_agrees(n, channels, size, affine, batch_stats, dtype, seed):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((n, channels, size)) * 3 + 1).astype(dtype)
    weight = rng.standard_normal(channels).astype(dtype) if affine != "none" else None
    bias = rng.standard_normal(channels).astype(dtype) if affine == "both" else None
    given = (None, None) if batch_stats else (rng.standard_normal(channels).astype(dtype),
                                              rng.uniform(0.5, 2, channels).astype(dtype))
    expected = ref.batch_norm_forward(x, weight, bias, *given, 1e-5)
    actual = fast.batch_norm_forward(x, weight, bias, *given, 1e-5)
    for fast_value, ref_value in zip(actual, expected):
        assert_agree(fast_value, ref_value, dtype)
    _, mean, _, rstd = expected
    grad = rng.standard_normal(x.shape).astype(dtype)
    expected_grads = ref.batch_norm_backward(grad, x, mean, rstd, weight, batch_stats)
    actual_grads = fast.batch_norm_backward(grad, x, mean, rstd, weight, batch_stats)
    for fast_value, ref_value in zip(actual_grads, expected_grads):
        if ref_value is None:
            assert fast_value is None
        else:
            assert_agree(fast_value, ref_value, dtype)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # the reference's mean of no values
@pytest.mark.parametrize("given", [False, True])
def test_batch_norm_of_an_empty_batch_returns_the_references_statistics(given):
    # No plane to run the kernel on: the statistics are still the reference's (NaN for an
    # empty batch's own, the given ones and their rstd otherwise), never uninitialised memory.
    x = np.empty((0, 3, 4), np.float32)
    stats = (np.array([1, 2, 3], np.float32), np.array([1, 0, 4], np.float32)) if given \
        else (None, None)
    expected = ref.batch_norm_forward(x, None, None, *stats, 1e-5)
    actual = fast.batch_norm_forward(x, None, None, *stats, 1e-5)
    for got, want in zip(actual, expected):
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("batch_stats", [True, False])
@pytest.mark.parametrize("affine", [True, False])
def test_composed_batch_norm_agrees_with_the_kernel(batch_stats, affine):
    # The form a backend without a fused kernel can use, run here on the reference's
    # primitives.
    from minidl.backend import composed
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((3, 4, 5)) * 2 + 1).astype(np.float32)
    weight, bias = (rng.standard_normal(4).astype(np.float32) for _ in range(2))
    weight, bias = (weight, bias) if affine else (None, None)
    given = (None, None) if batch_stats else (rng.standard_normal(4).astype(np.float32),
                                              rng.uniform(0.5, 2, 4).astype(np.float32))
    expected = ref.batch_norm_forward(x, weight, bias, *given, 1e-5)
    actual = composed.batch_norm_forward(ref, x, weight, bias, *given, 1e-5)
    for got, want in zip(actual, expected):
        assert_agree(got, want, np.float32)
    _, mean, _, rstd = expected
    grad = rng.standard_normal(x.shape).astype(np.float32)
    expected_grads = ref.batch_norm_backward(grad, x, mean, rstd, weight, batch_stats)
    actual_grads = composed.batch_norm_backward(ref, grad, x, mean, rstd, weight, batch_stats)
    for got, want in zip(actual_grads, expected_grads):
        assert (got is None) == (want is None)
        if want is not None:
            assert_agree(got, want, np.float32)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_erf_kernel_matches_the_reference_including_infinities_and_nan(dtype):
    x = np.concatenate([random_array(3, (2, 50), dtype).ravel() * 3,
                        np.array([0.0, -0.0, 1e-30, 6.0, -30.0, np.inf, -np.inf, np.nan], dtype)])
    x = x.reshape(4, 27)
    got, want = fast.math_function(x, "erf"), ref.math_function(x, "erf")
    np.testing.assert_array_equal(np.signbit(got), np.signbit(want))
    assert_agree(got, want, dtype)
    assert fast.math_function(x[:0], "erf").shape == (0, 27)


def test_elementwise_passes_give_numpys_bits_on_both_sides_of_their_thread_floor():
    # Below PARALLEL_MIN_WORK an add is NumPy's ufunc; from it, the threaded kernel: the same
    # bits either way (a convolution's bias on LeNet- and CIFAR-sized maps).
    from minidl.backend.numba_cpu import elementwise

    load_kernels()
    for shape in ((8, 6, 28, 28), (64, 6, 28, 28), (64, 16, 32, 32)):
        x = random_array(0, shape, np.float32)
        bias = random_array(1, (1, shape[1], 1, 1), np.float32)  # a convolution's bias
        np.testing.assert_array_equal(fast.add(x, bias), x + bias)
        np.testing.assert_array_equal(fast.mul(x, x), x * x)
    assert 8 * 6 * 28 * 28 < elementwise.PARALLEL_MIN_WORK <= 64 * 6 * 28 * 28
