"""Row kernels split over threads (:mod:`minidl.backend.numba_cpu.row_threads`) give the bits of
their one-thread kernels, and so agree with the NumPy reference, at any thread count."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("numba")

from minidl.backend.reference import nn_kernels as ref  # noqa: E402
from minidl.backend.numba_cpu import NumbaCpuBackend, nn_kernels, row_threads  # noqa: E402


@pytest.fixture(params=["threads", "one-thread"])
def threshold(request, monkeypatch):
    """Force the threaded blocks on a small problem, or leave the one-thread path."""
    threshold = 0 if request.param == "threads" else 1 << 60
    monkeypatch.setattr(row_threads, "PARALLEL_MIN_WORK", threshold)
    monkeypatch.setattr(row_threads, "TASK_ELEMENTS", 24)  # several rows' blocks per problem
    return request.param


def test_the_backend_computes_rows_with_the_threaded_kernels():
    backend = NumbaCpuBackend()
    for name in ("softmax", "log_softmax", "softmax_backward", "softmax_cross_entropy_forward",
                 "softmax_cross_entropy_backward", "layer_norm_forward", "layer_norm_backward"):
        assert getattr(backend, name).__wrapped__ is getattr(row_threads, name)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("axis", [-1, 1])
def test_softmax_family_gives_the_one_thread_bits(threshold, dtype, axis):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((5, 7, 6)).astype(dtype) * 4
    x[1, 2, 3] = np.nan  # a NaN row stays NaN, alone
    grad = rng.standard_normal(x.shape).astype(dtype)
    out = row_threads.softmax(x, axis)
    np.testing.assert_array_equal(out, nn_kernels.softmax(x, axis))
    np.testing.assert_array_equal(row_threads.log_softmax(x, axis), nn_kernels.log_softmax(x, axis))
    np.testing.assert_array_equal(row_threads.softmax_backward(grad, out, axis),
                                  nn_kernels.softmax_backward(grad, out, axis))
    tolerance = 1e-6 if dtype == np.float32 else 1e-13
    np.testing.assert_allclose(out, ref.softmax(x, axis), rtol=tolerance, atol=tolerance)


@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_cross_entropy_gives_the_one_thread_bits(threshold, smoothing):
    rng = np.random.default_rng(7)
    logits = (rng.standard_normal((11, 5)) * 3).astype(np.float32)
    targets = rng.integers(0, 5, 11)
    targets[3] = -100  # ignored
    grad = rng.standard_normal(11).astype(np.float32)
    ours = row_threads.softmax_cross_entropy_forward(logits, targets, -100, smoothing)
    one_thread = nn_kernels.softmax_cross_entropy_forward(logits, targets, -100, smoothing)
    for a, b in zip(ours, one_thread):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(
        row_threads.softmax_cross_entropy_backward(grad, ours[1], targets, -100, smoothing),
        nn_kernels.softmax_cross_entropy_backward(grad, ours[1], targets, -100, smoothing))
    reference = ref.softmax_cross_entropy_forward(logits, targets, -100, smoothing)
    np.testing.assert_allclose(ours[0], reference[0], rtol=1e-5, atol=1e-6)
    with pytest.raises(Exception, match="target"):
        row_threads.softmax_cross_entropy_forward(logits, np.full(11, 7), -100, smoothing)


def test_wide_float32_rows_give_the_same_bits_at_one_and_two_threads(monkeypatch):
    # Wide rows sum in lanes (softmax, its gradient, layer norm) or fold (log-softmax,
    # cross-entropy; see nn_kernels); either order is the width's, so a row's bits cannot
    # depend on the thread that computes it.
    numba = pytest.importorskip("numba")
    monkeypatch.setattr(row_threads, "PARALLEL_MIN_WORK", 0)
    monkeypatch.setattr(row_threads, "TASK_ELEMENTS", 2000)  # two rows per task, 12 tasks
    rng = np.random.default_rng(11)
    logits = (rng.standard_normal((23, 1001)) * 6).astype(np.float32)
    logits[4, 7], logits[9, :3] = np.nan, -np.inf
    targets = rng.integers(0, 1001, 23)
    targets[5] = -100
    grad = rng.standard_normal(23).astype(np.float32)
    runs = []
    before = numba.get_num_threads()
    try:
        for threads in (1, 2):
            numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
            losses, log_probs = row_threads.softmax_cross_entropy_forward(logits, targets,
                                                                          -100, 0.1)
            log_probs_given = log_probs.copy()
            log_probs_given[2, 0] = 800.0  # a positive entry: that row takes the C library's exp
            probabilities = row_threads.softmax(logits, 1)
            runs.append([probabilities, row_threads.log_softmax(logits, 1),
                         row_threads.softmax_backward(logits, probabilities, 1),
                         *row_threads.layer_norm_forward(logits, logits[0], logits[1], 1e-5),
                         *row_threads.layer_norm_backward(logits, logits[1:2] * logits,
                                                          logits[:, 0], logits[:, 1], logits[2]),
                         losses, log_probs,
                         row_threads.softmax_cross_entropy_backward(grad, log_probs_given,
                                                                    targets, -100, 0.1)])
    finally:
        numba.set_num_threads(before)
    for one, two in zip(*runs):
        np.testing.assert_array_equal(one, two)
    assert np.isnan(runs[0][1][4]).all() and not np.isnan(runs[0][1][3]).any()


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_float32_gelu_spans_give_the_one_thread_bits_at_one_and_two_threads(monkeypatch,
                                                                           approximate):
    numba = pytest.importorskip("numba")
    rng = np.random.default_rng(13)
    x = (rng.standard_normal((7, 5000)) * 4).astype(np.float32)  # two spans and a part
    x[0, :3] = [np.nan, np.inf, -np.inf]
    grad = rng.standard_normal(x.shape).astype(np.float32)
    one_thread = [nn_kernels.gelu_forward(x, approximate),
                  nn_kernels.gelu_backward(grad, x, approximate)]
    monkeypatch.setattr(nn_kernels, "PARALLEL_MIN_WORK", 0)  # every array takes the spans
    before = numba.get_num_threads()
    try:
        for threads in (1, 2):
            numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
            np.testing.assert_array_equal(nn_kernels.gelu_forward(x, approximate), one_thread[0])
            np.testing.assert_array_equal(nn_kernels.gelu_backward(grad, x, approximate),
                                          one_thread[1])
    finally:
        numba.set_num_threads(before)


@pytest.mark.parametrize("reduction", ["sum", "mean"])
def test_reduced_cross_entropy_reduces_the_rows_as_the_reference(threshold, reduction):
    # The sum or mean is the reference's reduction of the per-row losses, so the CPU's result
    # keeps its bits whether the reduction happens inside the primitive or after it.
    rng = np.random.default_rng(3)
    logits = (rng.standard_normal((11, 5)) * 3).astype(np.float32)
    targets = rng.integers(0, 5, 11)
    targets[::4] = -100
    losses, log_probs = row_threads.softmax_cross_entropy_forward(logits, targets, -100, 0.1)
    loss, _ = row_threads.softmax_cross_entropy_forward(logits, targets, -100, 0.1, reduction)
    np.testing.assert_array_equal(loss, ref.reduce_cross_entropy(losses, targets, -100,
                                                                 reduction))
    grad = np.float32(0.5)
    np.testing.assert_array_equal(
        row_threads.softmax_cross_entropy_backward(grad, log_probs, targets, -100, 0.1,
                                                   reduction),
        row_threads.softmax_cross_entropy_backward(
            ref.cross_entropy_row_grads(grad, targets, -100, reduction, np.float32), log_probs,
            targets, -100, 0.1))


@pytest.mark.parametrize("affine", [True, False])
def test_layer_norm_forward_gives_the_one_thread_bits(threshold, affine):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((13, 10)).astype(np.float32)
    weight = rng.standard_normal(10).astype(np.float32) if affine else None
    bias = rng.standard_normal(10).astype(np.float32) if affine else None
    ours = row_threads.layer_norm_forward(x, weight, bias, 1e-5)
    for a, b in zip(ours, nn_kernels.layer_norm_forward(x, weight, bias, 1e-5)):
        np.testing.assert_array_equal(a, b)
    for a, b in zip(ours, ref.layer_norm_forward(x, weight, bias, 1e-5)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("affine", [True, False])
def test_layer_norm_backward_agrees_and_is_the_same_at_any_thread_count(threshold, affine):
    numba = pytest.importorskip("numba")
    rng = np.random.default_rng(5)
    x = rng.standard_normal((13, 10)).astype(np.float32)
    grad = rng.standard_normal(x.shape).astype(np.float32)
    weight = rng.standard_normal(10).astype(np.float32) if affine else None
    _, mean, rstd = nn_kernels.layer_norm_forward(x, weight, None, 1e-5)
    runs = []
    before = numba.get_num_threads()
    try:
        for threads in (1, before):
            numba.set_num_threads(threads)
            runs.append(row_threads.layer_norm_backward(grad, x, mean, rstd, weight))
    finally:
        numba.set_num_threads(before)
    expected = ref.layer_norm_backward(grad, x, mean, rstd, weight)
    for one, many, reference in zip(*runs, expected):
        if reference is None:
            assert one is None and many is None
            continue
        np.testing.assert_array_equal(one, many)
        np.testing.assert_allclose(one, reference, rtol=1e-5, atol=1e-5)


# -- elementwise: NumPy's bits, on threads ---------------------------------------------------------

@pytest.fixture
def elementwise_threads(monkeypatch):
    """Every float array counts as large (the tests' arrays still span two tasks or more)."""
    from minidl.backend.numba_cpu import elementwise

    monkeypatch.setattr(elementwise, "PARALLEL_MIN_WORK", 0)
    monkeypatch.setattr(elementwise, "RELU_PARALLEL_MIN_WORK", 0)
    return elementwise


@pytest.fixture
def used(elementwise_threads, monkeypatch):
    """The names of the threaded kernels the elementwise primitives call, in order."""
    names = []
    threads = elementwise_threads._threads
    monkeypatch.setattr(elementwise_threads, "_threads",
                        lambda name, work: names.append(name) or threads(name, work))
    return names


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_add_sub_mul_give_numpys_bits(elementwise_threads, dtype):
    rng = np.random.default_rng(2)
    a = rng.standard_normal((70, 30, 9)).astype(dtype)  # 18,900 elements: two spans
    b = rng.standard_normal(a.shape).astype(dtype)
    row = rng.standard_normal(9).astype(dtype)
    per_channel = rng.standard_normal((1, 30, 1)).astype(dtype)  # a convolution's bias
    scale = np.array(0.125, dtype)  # a 0-d value, as a Python number reaches the backend
    a[0, 0, :3] = [np.nan, np.inf, -0.0]
    for name, ufunc in (("add", np.add), ("sub", np.subtract), ("mul", np.multiply)):
        op = getattr(elementwise_threads, name)
        for x, y in ((a, b), (a, row), (a.transpose(2, 0, 1), b.transpose(2, 0, 1)),
                     (a, per_channel), (a[:, :, :1], per_channel), (a[:, :, ::2], per_channel),
                     (a, scale), (a[:, ::3], scale)):
            ours, numpys = op(x, y), ufunc(x, y)
            assert ours.dtype == numpys.dtype and ours.shape == numpys.shape
            np.testing.assert_array_equal(ours, numpys)
            assert (np.signbit(ours) == np.signbit(numpys)).all()
        if name != "sub":  # the row first: the same sum or product
            np.testing.assert_array_equal(op(row, a), ufunc(row, a))
            np.testing.assert_array_equal(op(per_channel, a), ufunc(per_channel, a))
            np.testing.assert_array_equal(op(scale, a), ufunc(scale, a))
    np.testing.assert_array_equal(elementwise_threads.sub(row, a), np.subtract(row, a))
    np.testing.assert_array_equal(elementwise_threads.sub(per_channel, a),
                                  np.subtract(per_channel, a))
    np.testing.assert_array_equal(elementwise_threads.sub(scale, a), np.subtract(scale, a))
    # Mixed dtypes and general broadcasting stay with NumPy (and its type promotion).
    half = b.astype(np.float16)
    assert elementwise_threads.add(a, half).dtype == np.add(a, half).dtype
    np.testing.assert_array_equal(elementwise_threads.mul(a, b[:, :1]), a * b[:, :1])


def test_bias_adds_and_scales_take_the_threaded_kernels(elementwise_threads, used):
    # A Linear bias (a row), a convolution's bias (a value per channel) and a scale (a 0-d
    # value) are the commonest broadcasts of a training step: none may fall back to NumPy's
    # one-thread ufunc.
    x = np.ones((4, 3, 5, 5), np.float32)
    elementwise_threads.add(x, np.ones((1, 3, 1, 1), np.float32))
    elementwise_threads.add(np.ones((1, 5), np.float32)[0], x)
    elementwise_threads.mul(np.array(0.5, np.float32), x)  # a scale
    assert used == ["planes_with_values", "rows_with_row", "binary_spans"]
    # A permuted view is NumPy's: copying it to row-major on one thread first costs more.
    elementwise_threads.mul(x.transpose(0, 1, 3, 2), x)
    assert len(used) == 3


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_where_gives_numpys_bits(elementwise_threads, used, dtype):
    rng = np.random.default_rng(5)
    keep = rng.random((40, 30, 25)) < 0.7  # 30,000 elements: two spans
    x, y = (rng.standard_normal(keep.shape).astype(dtype) for _ in range(2))
    x[0, 0, :3] = [np.nan, -0.0, np.inf]
    scale, zero = np.array(1 / 0.7, dtype), np.array(-0.0, dtype)
    for a, b in ((scale, zero), (x, zero), (zero, x), (x, y)):
        ours, numpys = elementwise_threads.where(keep, a, b), np.where(keep, a, b)
        assert ours.dtype == numpys.dtype and ours.shape == numpys.shape
        np.testing.assert_array_equal(ours, numpys)
        assert (np.signbit(ours) == np.signbit(numpys)).all()
    assert used == ["select_spans"] * 4
    # Mixed dtypes, integer values, broadcasting and permuted views stay with NumPy.
    for a, b in ((x, zero.astype(np.float16)), (np.array(1), np.array(0)), (x[:, :1], y),
                 (x.T.copy().T, y)):
        np.testing.assert_array_equal(elementwise_threads.where(keep, a, b), np.where(keep, a, b))
    assert len(used) == 4


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_less_gives_numpys_bits(elementwise_threads, used, dtype):
    u = np.random.default_rng(6).random((40, 750)).astype(dtype)  # a Bernoulli draw's samples
    # Around p: a Python float is compared in u's dtype, rounded once (0.9 as float32 is
    # 0.89999998, so the float32 sample 0.9 is not below it); NaN is below nothing.
    u[0, :4] = [np.float32(0.9), np.nan, np.nextafter(np.float32(0.9), 0), 0.9000000000000001]
    for p in (0.9, 0.25, 1.0, 0.0):
        np.testing.assert_array_equal(elementwise_threads.less(u, p), np.less(u, p))
    np.testing.assert_array_equal(elementwise_threads.less(u, u[::-1].copy()),
                                  np.less(u, u[::-1]))
    assert used == ["less_spans"] * 5
    # Integers, other dtypes and broadcasting stay with NumPy.
    for b in (1, u[:1].copy(), u.astype(np.float16)):
        np.testing.assert_array_equal(elementwise_threads.less(u, b), np.less(u, b))
    assert len(used) == 5


def test_relu_and_its_gradient_give_the_references_bits(elementwise_threads):
    from minidl.backend.reference import array_ops

    x = np.random.default_rng(3).standard_normal((1700, 11)).astype(np.float32)
    x[0, :4] = [np.nan, -0.0, 0.0, -np.inf]
    grad = np.random.default_rng(4).standard_normal(x.shape).astype(np.float32)
    ours, reference = elementwise_threads.relu(x), array_ops.relu(x)
    np.testing.assert_array_equal(ours, reference)
    assert not np.signbit(ours).any()
    np.testing.assert_array_equal(elementwise_threads.relu_backward(grad, x),
                                  array_ops.relu_backward(grad, x))
    np.testing.assert_array_equal(elementwise_threads.relu_backward(grad, x.T.copy().T),
                                  array_ops.relu_backward(grad, x))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_relu_below_the_floor_runs_the_compiled_loop_on_the_calling_thread(monkeypatch,
                                                                             dtype):
    from minidl.backend.numba_cpu import elementwise, loading
    from minidl.backend.reference import array_ops

    used = []
    kernel = loading._kernel
    monkeypatch.setattr(loading, "_kernel", lambda module, name: used.append(name)
                        or kernel(module, name))
    x = np.random.default_rng(5).standard_normal((3000, 11)).astype(dtype)  # from SMALL_WORK
    x[0, :4] = [np.nan, -0.0, 0.0, -np.inf]
    ours = elementwise.relu(x)
    np.testing.assert_array_equal(ours, array_ops.relu(x))
    assert ours.dtype == dtype and not np.signbit(ours).any()
    assert used == ["relu_span"]
    # A view that is not row-major, float16, and a small array stay with NumPy.
    for other in (x.T, x.astype(np.float16), x[:2].copy()):
        np.testing.assert_array_equal(elementwise.relu(other), array_ops.relu(other))
    assert used == ["relu_span"]


# -- random draws: the reference's words, on threads ----------------------------------------------

@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_threaded_random_draws_give_the_references_bits_at_any_thread_count(monkeypatch, dtype):
    numba = pytest.importorskip("numba")
    from minidl.backend.numba_cpu import random_kernels
    from minidl.backend.reference import random_kernels as reference

    monkeypatch.setattr(random_kernels, "PARALLEL_MIN_SAMPLES", 0)
    # 21,000 samples: several spans of SPAN blocks and samples; the block numbers wrap.
    shape, key, counter = (70, 300), (3, 9), 2**64 - 5
    before = numba.get_num_threads()
    runs = []
    try:
        for threads in (1, max(2, before)):
            numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
            runs.append([random_kernels.random_uniform(shape, dtype, key, counter),
                         random_kernels.random_normal(shape, dtype, key, counter)])
    finally:
        numba.set_num_threads(before)
    (uniform, normal), (uniform_many, normal_many) = runs
    np.testing.assert_array_equal(uniform, uniform_many)
    np.testing.assert_array_equal(normal, normal_many)
    np.testing.assert_array_equal(uniform, reference.random_uniform(shape, dtype, key, counter))
    # The normal's log and cosine are the C library's on one side, NumPy's on the other.
    np.testing.assert_allclose(normal, reference.random_normal(shape, dtype, key, counter),
                               rtol=1e-6, atol=1e-6)


# -- batch norm: tasks of whole channels, channel sums in a fixed order ----------------------------

@pytest.mark.parametrize("batch_stats", [True, False])
@pytest.mark.parametrize("affine", [True, False])
@pytest.mark.parametrize("shape, task_elements", [
    ((5, 3, 37), 1 << 14),  # planes whose vector loops end in a remainder; 2 blocks of channels
    ((4, 7, 37), 300),      # 3 uneven blocks (2, 2 and 3 channels) over 7 channels
    ((9, 6, 1), 1),         # BatchNorm1d's one-value planes, a channel per block
])
def test_batch_norm_gives_the_same_bits_at_any_thread_count(monkeypatch, batch_stats, affine,
                                                            shape, task_elements):
    numba = pytest.importorskip("numba")
    from minidl.backend.numba_cpu import batch_norm

    monkeypatch.setattr(batch_norm, "TASK_ELEMENTS", task_elements)
    monkeypatch.setattr(batch_norm, "RUN_ELEMENTS", 1)  # blocks as small as task_elements asks
    rng = np.random.default_rng(11)
    channels = shape[1]
    x = (rng.standard_normal(shape) * 3 + 1).astype(np.float32)
    x[2, 1, 0] = np.nan  # its channel's statistics and outputs turn NaN, the others do not
    grad = rng.standard_normal(x.shape).astype(np.float32)
    weight = rng.standard_normal(channels).astype(np.float32) if affine else None
    bias = rng.standard_normal(channels).astype(np.float32) if affine else None
    given = (None, None) if batch_stats else (rng.standard_normal(channels).astype(np.float32),
                                              rng.uniform(0.5, 2, channels).astype(np.float32))
    runs = []
    before = numba.get_num_threads()
    try:  # the one-thread kernel, then the threaded one on one thread and on all of them
        for threshold, threads in ((1 << 60, 1), (0, 1), (0, max(2, before))):
            monkeypatch.setattr(batch_norm, "PARALLEL_MIN_WORK", threshold)
            numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
            y, mean, var, rstd = batch_norm.batch_norm_forward(x, weight, bias, *given, 1e-5)
            runs.append((y, mean, var, rstd, *batch_norm.batch_norm_backward(
                grad, x, mean, rstd, weight, batch_stats)))
    finally:
        numba.set_num_threads(before)
    for serial, one_thread, many in zip(*runs):
        if serial is None:
            assert one_thread is None and many is None
            continue
        np.testing.assert_array_equal(serial, one_thread)
        np.testing.assert_array_equal(serial, many)
    y, mean, var, rstd = ref.batch_norm_forward(x, weight, bias, *given, 1e-5)
    expected = (y, mean, var, rstd, *ref.batch_norm_backward(grad, x, mean, rstd, weight,
                                                              batch_stats))
    for ours, reference in zip(runs[0], expected):
        if reference is not None:
            np.testing.assert_allclose(ours, reference, rtol=1e-5, atol=1e-5)
    assert np.isnan(runs[0][0][:, 1]).any() and np.isfinite(np.delete(runs[0][0], 1, axis=1)).all()
