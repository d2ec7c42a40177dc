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
    return elementwise


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_add_sub_mul_give_numpys_bits(elementwise_threads, dtype):
    rng = np.random.default_rng(2)
    a = rng.standard_normal((70, 30, 9)).astype(dtype)  # 18,900 elements: two spans
    b = rng.standard_normal(a.shape).astype(dtype)
    row = rng.standard_normal(9).astype(dtype)
    a[0, 0, :3] = [np.nan, np.inf, -0.0]
    for name, ufunc in (("add", np.add), ("sub", np.subtract), ("mul", np.multiply)):
        op = getattr(elementwise_threads, name)
        for x, y in ((a, b), (a, row), (a.transpose(2, 0, 1), b.transpose(2, 0, 1))):
            ours, numpys = op(x, y), ufunc(x, y)
            assert ours.dtype == numpys.dtype and ours.shape == numpys.shape
            np.testing.assert_array_equal(ours, numpys)
            assert (np.signbit(ours) == np.signbit(numpys)).all()
        if name != "sub":  # the row first: the same sum or product
            np.testing.assert_array_equal(op(row, a), ufunc(row, a))
    np.testing.assert_array_equal(elementwise_threads.sub(row, a), np.subtract(row, a))
    # Mixed dtypes and general broadcasting stay with NumPy (and its type promotion).
    half = b.astype(np.float16)
    assert elementwise_threads.add(a, half).dtype == np.add(a, half).dtype
    np.testing.assert_array_equal(elementwise_threads.mul(a, b[:, :1]), a * b[:, :1])


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
