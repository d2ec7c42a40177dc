"""Matrix products split over threads (:mod:`minidl.backend.reference.product_threads`)
give the bits of the one-thread products, at 1 and 2 threads, within the thread budget."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import minidl as md
from minidl.backend import threads
from minidl.backend.reference import array_ops, product_threads

pytestmark = pytest.mark.skipif(threads.openblas_thread_count_functions() is None,
                                reason="NumPy here does not use OpenBLAS")


@pytest.fixture(autouse=True, params=["python threads", "numba threads"])
def runner(request, monkeypatch):
    """Each test twice: the parts made by minidl's Python threads, and (where the CPU backend
    can make NumPy's BLAS calls itself) by Numba's threads, as once the kernels are loaded."""
    if request.param == "numba threads":
        from minidl.backend.numba_cpu import load_kernels, product_parts
        load_kernels()
        if not product_parts.gemm_functions():
            pytest.skip("NumPy's OpenBLAS here has no 64-bit-integer CBLAS gemm")
        monkeypatch.setattr(product_threads, "native_parts", product_parts)
    else:
        monkeypatch.setattr(product_threads, "native_parts", None)
    return request.param


def split_from(monkeypatch, work):
    """Split products from ``work`` multiply-adds, on either runner."""
    monkeypatch.setattr(product_threads, "SPLIT_MIN_WORK", work)
    monkeypatch.setattr(product_threads, "NATIVE_SPLIT_MIN_WORK", work)


@pytest.fixture(autouse=True)
def split_small_products(monkeypatch):
    """Split from two parts' work, as the bits allow, rather than from the wake-up cost's
    floor: the tests' products stay small (and quick) and still split."""
    split_from(monkeypatch, 0)


@pytest.fixture
def budget():
    """Set the thread budget for one test, and give the old one back after it."""
    before = md.get_num_threads()
    yield md.set_num_threads
    md.set_num_threads(before)


@pytest.fixture
def split_calls(monkeypatch):
    """The part counts the products were split into (a product on one thread adds nothing)."""
    calls = []
    run_parts = product_threads._ProductThreads._run_parts

    def counting(self, compute, size, parts, *rest):
        calls.append(parts)
        return run_parts(self, compute, size, parts, *rest)
    monkeypatch.setattr(product_threads._ProductThreads, "_run_parts", counting)
    make_native_parts = array_ops.make_native_parts

    def counting_native(calls_table, parts, dtype):
        calls.append(parts)
        return make_native_parts(calls_table, parts, dtype)
    monkeypatch.setattr(array_ops, "make_native_parts", counting_native)
    return calls


def _conv_operands(images, channels, out_channels, side, dtype):
    """Random im2col columns (1, K, N, L), weight (1, 1, O, K) and output gradient (N, 1, O, L)
    of a 3x3 convolution with one group."""
    rng = np.random.default_rng(0)
    k, pixels = channels * 9, side * side
    return (rng.standard_normal((1, k, images, pixels)).astype(dtype),
            rng.standard_normal((1, 1, out_channels, k)).astype(dtype),
            rng.standard_normal((images, 1, out_channels, pixels)).astype(dtype))


def _conv_products(cols, weight, grad):
    """The forward product, weight gradient and input gradient, called as
    :class:`~minidl.ops.conv.Conv2dFunction` calls them."""
    return (array_ops.matmul(weight, cols, b_axes=(0, 2, 1, 3), out_axes=(1, 0, 2, 3)),
            array_ops.matmul(cols, grad, a_axes=(0, 2, 1, 3), b_axes=(1, 0, 3, 2), sum_axis=1,
                             out_axes=(0, 2, 1)),
            array_ops.matmul(weight, grad, transpose_a=True, b_axes=(1, 0, 2, 3),
                             out_axes=(0, 2, 1, 3)))


# 16x16 maps: the forward product image by image; 8x8: one wide product (see array_ops).
@pytest.mark.parametrize("side, images", [(16, 16), (8, 32)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_conv_products_give_the_one_thread_bits_on_two_threads(budget, split_calls, side,
                                                               images, dtype):
    cols, weight, grad = _conv_operands(images, 16, 16, side, dtype)
    budget(1)
    one_thread = _conv_products(cols, weight, grad)
    assert split_calls == []
    budget(2)
    two_threads = _conv_products(cols, weight, grad)
    assert split_calls == [2, 2, 2]  # forward, weight gradient, input gradient: all split
    for one, two in zip(one_thread, two_threads):
        assert two.flags.c_contiguous
        np.testing.assert_array_equal(one, two)
    # And they are the convolution's products: Y[i] = W @ cols[i], dW = sum_i dY[i] @ cols[i]^T.
    tolerance = 1e-3 if dtype == np.float32 else 1e-10  # sums of 144 and 4096 or 2048 products
    np.testing.assert_allclose(two_threads[0][:, 0], np.einsum("ok,kil->iol", weight[0, 0],
                                                               cols[0]), atol=tolerance)
    np.testing.assert_allclose(two_threads[1][0], np.einsum("iol,kil->ok", grad[:, 0], cols[0]),
                               atol=tolerance * 10)


# A first layer's weight gradient: a few small filters (3 channels → 27 taps, 32 or 8 of them)
# from long maps, computed one product per image and the images' products added in order.
@pytest.mark.parametrize("out_channels", [32, 8])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_small_weight_gradient_is_summed_image_by_image_with_the_same_bits_on_two_threads(
        budget, split_calls, out_channels, dtype):
    cols, _, grad = _conv_operands(64, 3, out_channels, 32, dtype)
    budget(1)
    one_thread = _conv_products(cols, np.zeros((1, 1, out_channels, 27), dtype), grad)[1]
    assert split_calls == []
    budget(2)
    two_threads = _conv_products(cols, np.zeros((1, 1, out_channels, 27), dtype), grad)[1]
    assert split_calls[1] == 2  # the weight gradient's images on both threads
    np.testing.assert_array_equal(one_thread, two_threads)
    # Each image's product (its own BLAS call, 27 taps by the filters), then their sum in
    # image order, transposed into the weight's (filters, taps).
    by_image = [cols[0, :, i] @ grad[i, 0].T for i in range(cols.shape[2])]
    np.testing.assert_array_equal(two_threads[0], np.add.reduce(np.stack(by_image), axis=0).T)
    tolerance = 1e-3 if dtype == np.float32 else 1e-10
    np.testing.assert_allclose(two_threads[0], np.einsum("iol,kil->ok", grad[:, 0], cols[0]),
                               atol=tolerance * 10)


# Small maps whose wide product's image blocks end inside OpenBLAS's register tiles (7x7 and
# 9x9 maps): cutting such a product between images changed float64 sums.
@pytest.mark.parametrize("images, channels, side", [(40, 32, 7), (30, 16, 9)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_small_maps_give_the_one_thread_bits_on_two_threads(budget, images, channels, side,
                                                            dtype):
    cols, weight, grad = _conv_operands(images, channels, 16, side, dtype)
    budget(1)
    one_thread = _conv_products(cols, weight, grad)
    budget(2)
    for one, two in zip(one_thread, _conv_products(cols, weight, grad)):
        np.testing.assert_array_equal(one, two)


def test_a_convolution_and_its_gradients_are_the_same_bits_at_one_and_two_threads(
        budget, split_calls):
    # The whole layer: im2col and col2im (Numba, split by input plane) around the products.
    rng = np.random.default_rng(1)
    x0 = rng.standard_normal((16, 16, 16, 16)).astype(np.float32)
    w0 = rng.standard_normal((16, 16, 3, 3)).astype(np.float32)
    runs = []
    for threads in (1, 2):
        budget(threads)
        x, w = md.tensor(x0, requires_grad=True), md.tensor(w0, requires_grad=True)
        y = md.nn.functional.conv2d(x, w, padding=1)
        (y * y).sum().backward()
        runs.append((y.numpy(), x.grad.numpy(), w.grad.numpy()))
    assert split_calls == [2, 2, 2]
    for one, two in zip(*runs):
        np.testing.assert_array_equal(one, two)


def test_a_small_product_stays_on_the_calling_thread(budget, split_calls):
    budget(2)
    _conv_products(*_conv_operands(2, 4, 4, 8, np.float32))
    assert split_calls == []


def test_the_parts_cover_the_range_once_and_blas_runs_one_thread_in_each(budget):
    budget(2)
    seen = []

    def compute(start, stop):
        seen.append((start, stop, _openblas_threads()))
    parts = product_threads.part_count(5, 10 * product_threads.PARALLEL_MIN_WORK)
    product_threads.compute_in_parts(compute, 5, parts)
    assert sorted(seen) == [(0, 2, 1), (2, 5, 1)]  # two parts, BLAS at one thread in each
    assert md.get_num_threads() == 2 and product_threads._threads.thread_budget() == 2


def test_the_calling_thread_takes_a_larger_first_part_while_the_worker_wakes(budget):
    budget(2)
    seen = []
    product_threads.compute_in_parts(
        lambda start, stop: seen.append((start, stop, threading.get_ident())), 100, 2,
        work=4 * product_threads.WAKE_WORK)
    # The caller's share x of the work: x = (1 - x) + WAKE_WORK / work = (1 - x) + 1/4.
    assert sorted(seen)[0] == (0, 62, threading.get_ident())
    assert sorted(seen)[1][:2] == (62, 100)


def _openblas_threads() -> int:
    return int(threads.openblas_thread_count_functions()[0]())


def test_set_num_threads_leaves_openblas_at_one_thread_and_the_budget_to_the_parts(budget):
    # OpenBLAS's own threads would spin beside Numba's and order their sums by the count.
    budget(2)
    assert _openblas_threads() == 1 and product_threads._threads.thread_budget() == 2


def test_an_error_in_a_worker_reaches_the_caller_and_the_workers_go_on(budget):
    budget(2)

    def compute(start, stop):
        if start > 0:
            raise ZeroDivisionError("part two")
    with pytest.raises(ZeroDivisionError, match="part two"):
        product_threads.compute_in_parts(compute, 4, 2)
    assert product_threads._threads.thread_budget() == 2 and _openblas_threads() == 1
    parts = []
    product_threads.compute_in_parts(lambda start, stop: parts.append(start), 4, 2)
    assert sorted(parts) == [0, 2]


def test_more_parts_than_the_budget_are_never_more_threads(budget):
    budget(2)
    ranges = []
    product_threads.compute_in_parts(lambda start, stop: ranges.append((start, stop)), 9, 1000)
    assert sorted(ranges) == [(0, 4), (4, 9)]  # two threads, not a thousand


def _operand(rng, shape, dtype, transposed):
    """A random array of ``shape``, or a transposed view of one (BLAS reads it in place)."""
    if not transposed:
        return rng.standard_normal(shape).astype(dtype)
    return np.swapaxes(rng.standard_normal(shape[:-2] + shape[-2:][::-1]).astype(dtype), -1, -2)


# A Linear layer's forward (128 rows, cut off a tile boundary), its gradients' shapes, and rows
# not a multiple of the tile; each with either operand transposed.
@pytest.mark.parametrize("m, k, n", [(128, 784, 512), (512, 128, 784), (301, 257, 130)])
@pytest.mark.parametrize("transpose_a, transpose_b", [(False, False), (True, False),
                                                      (False, True), (True, True)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_plain_product_gives_the_one_thread_bits_on_two_threads(
        budget, split_calls, m, k, n, transpose_a, transpose_b, dtype):
    rng = np.random.default_rng(2)
    a = _operand(rng, (k, m) if transpose_a else (m, k), dtype, False)
    b = _operand(rng, (n, k) if transpose_b else (k, n), dtype, False)
    budget(1)
    one_thread = array_ops.matmul(a, b, transpose_a, transpose_b)
    assert split_calls == []
    budget(2)
    two_threads = array_ops.matmul(a, b, transpose_a, transpose_b)
    assert split_calls == [2]
    np.testing.assert_array_equal(one_thread, two_threads)
    tolerance = 1e-3 if dtype == np.float32 else 1e-10
    np.testing.assert_allclose(two_threads, (a.T if transpose_a else a) @ (b.T if transpose_b
                                                                             else b),
                               atol=tolerance)


# Attention's scores and weighted values (batch, heads), a batch times one matrix (broadcast),
# and a stack of rows times one matrix (a transformer's Linear on (batch, time, features)).
@pytest.mark.parametrize("a_shape, b_shape, transposed", [
    ((8, 4, 64, 32), (8, 4, 32, 64), (False, True)),
    ((8, 4, 64, 64), (8, 4, 64, 32), (False, False)),
    ((2, 1, 128, 64), (3, 64, 128), (True, False)),
    ((96, 64), (6, 64, 128), (False, True)),
    ((16, 64, 128), (128, 256), (False, True)),
])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_batched_product_gives_the_one_thread_bits_on_two_threads(
        budget, split_calls, a_shape, b_shape, transposed, dtype):
    rng = np.random.default_rng(3)
    a, b = (_operand(rng, shape, dtype, flag) for shape, flag in zip((a_shape, b_shape),
                                                                     transposed))
    budget(1)
    one_thread = array_ops.matmul(a, b)
    budget(2)
    two_threads = array_ops.matmul(a, b)
    assert split_calls == [2]
    np.testing.assert_array_equal(one_thread, two_threads)
    np.testing.assert_allclose(two_threads, np.matmul(a, b),
                               atol=1e-3 if dtype == np.float32 else 1e-10)


@pytest.fixture
def cuts(monkeypatch):
    """The (size, parts) of each range the products split (a product on one thread adds
    nothing)."""
    seen = []

    def recording(compute, size, parts, *work, **call_work):
        seen.append((size, parts))
        product_threads.compute_in_parts(compute, size, parts, *work, **call_work)
    monkeypatch.setattr(array_ops, "compute_in_parts", recording)

    def recording_native(calls, parts, dtype):  # a stack's matrices, each one call
        seen.append((len(calls), parts))
        product_threads.make_native_parts(calls, parts, dtype)
    monkeypatch.setattr(array_ops, "make_native_parts", recording_native)
    return seen


def test_a_stack_of_small_products_splits_from_half_the_work_along_its_longest_axis(
        budget, monkeypatch, cuts, runner):
    # Attention's scores: 32 sequences x 4 heads of (64x32)(32x64), 16.8M multiply-adds in 128
    # small BLAS calls, which take as long as one 33.6M product: split, by sequences (Numba's
    # threads: by runs of the 128 calls).
    split_from(monkeypatch, 1 << 25)
    rng = np.random.default_rng(7)
    q, k = (rng.standard_normal((32, 4, 64, 32)).astype(np.float32) for _ in range(2))
    budget(1)
    one_thread = array_ops.matmul(q, k, transpose_b=True)
    budget(2)
    two_threads = array_ops.matmul(q, k, transpose_b=True)
    expected = [(128, 2)] if runner == "numba threads" else [(32, 2)]
    assert cuts == expected
    np.testing.assert_array_equal(one_thread, two_threads)
    # The same work in four large products (256x128 @ 128x128) stays whole.
    array_ops.matmul(np.ones((4, 256, 128), np.float32), np.ones((4, 128, 128), np.float32))
    assert cuts == expected


def test_a_product_summed_over_images_splits_by_chunks_of_images(budget, cuts):
    # A convolution's weight gradient (144x32 from 32x256-long sums): each thread sums its own
    # chunk of images, and the two chunks' sums are added in order at any thread count.
    cols, weight, grad = _conv_operands(32, 16, 32, 16, np.float32)
    budget(1)
    one_thread = _conv_products(cols, weight, grad)[1]
    budget(2)
    two_threads = _conv_products(cols, weight, grad)[1]
    assert (2, 2) in cuts  # two chunks of images on two threads, not rows of the 27
    np.testing.assert_array_equal(one_thread, two_threads)
    np.testing.assert_allclose(two_threads[0], np.einsum("iol,kil->ok", grad[:, 0], cols[0]),
                               atol=1e-3)


def test_a_gram_product_stays_whole(budget, split_calls):
    # x @ xᵀ on one buffer is BLAS's syrk, which sums in another order than its parts' GEMMs.
    x = np.random.default_rng(4).standard_normal((300, 700))
    budget(1)
    one_thread = array_ops.matmul(x, x, transpose_b=True)
    budget(2)
    np.testing.assert_array_equal(one_thread, array_ops.matmul(x, x, transpose_b=True))
    assert split_calls == []


def test_a_product_too_small_to_pay_for_waking_a_thread_stays_whole(budget, split_calls,
                                                                      monkeypatch):
    split_from(monkeypatch, 1 << 25)
    budget(2)
    array_ops.matmul(np.ones((128, 256), np.float32), np.ones((256, 512), np.float32))  # 16.8M
    assert split_calls == []
    array_ops.matmul(np.ones((256, 256), np.float32), np.ones((256, 512), np.float32))  # 33.6M
    assert split_calls == [2]


def test_a_small_or_flat_plain_product_stays_on_the_calling_thread(budget, split_calls):
    budget(2)
    array_ops.matmul(np.ones((64, 64)), np.ones((64, 64)))        # below two parts' work
    array_ops.matmul(np.ones((40, 4096)), np.ones((4096, 512)))   # fewer rows than two tiles
    assert split_calls == []


def test_the_caller_computes_the_parts_a_busy_worker_has_not_claimed(budget):
    budget(2)
    product_threads.compute_in_parts(lambda start, stop: None, 2, 2)  # the worker exists
    worker = product_threads._threads._workers[0]
    release = threading.Event()
    worker.start(release.wait)  # the worker is busy (on a loaded machine: not yet on a core)
    computed_by = []

    def caller():
        product_threads.compute_in_parts(
            lambda start, stop: computed_by.append((start, threading.get_ident())), 4, 2)
    try:
        calling = threading.Thread(target=caller)
        calling.start()
        calling.join(timeout=10)
        assert not calling.is_alive()  # it did not wait for the worker
        assert sorted(start for start, _ in computed_by) == [0, 2]
        assert {ident for _, ident in computed_by} == {calling.ident}
    finally:
        release.set()


def test_a_product_too_flat_to_cut_gives_the_one_thread_bits_on_two_threads(budget, split_calls):
    # 32 rows, fewer than two tiles: not cut, and OpenBLAS's own two threads summed some of
    # its elements in another order than one thread (measured), so OpenBLAS stays at one.
    rng = np.random.default_rng(6)
    a, b = rng.standard_normal((32, 1000)), rng.standard_normal((1000, 1000))
    budget(1)
    one_thread = array_ops.matmul(a, b)
    budget(2)
    np.testing.assert_array_equal(one_thread, array_ops.matmul(a, b))
    assert split_calls == []


def test_the_switches_give_back_the_previous_engine_for_a_benchmark(budget, split_calls,
                                                                    monkeypatch):
    monkeypatch.setattr(threads, "OPENBLAS_AT_ONE_THREAD", False)
    monkeypatch.setattr(array_ops, "SPLIT_PLAIN_PRODUCTS", False)
    budget(2)
    assert _openblas_threads() == 2  # OpenBLAS threads the plain products itself
    array_ops.matmul(np.ones((256, 512)), np.ones((512, 512)))
    assert split_calls == []
