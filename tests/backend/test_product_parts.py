"""The BLAS calls the CPU backend makes itself on Numba's threads
(:mod:`minidl.backend.numba_cpu.product_parts`) are the calls NumPy's matmul makes: the same
bits on every layout the products use, and no call where NumPy would not call gemm."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

from minidl.backend import threads
from minidl.backend.numba_cpu import load_kernels, product_parts
from minidl.backend.reference import array_ops, product_threads

pytestmark = pytest.mark.skipif(not product_parts.gemm_functions(),
                                reason="NumPy's BLAS here has no 64-bit-integer CBLAS gemm")


def _made(a, b, parts=2, row_bounds=None):
    """a @ b computed by the call table, in ``parts`` runs, or None if there is no table."""
    out = np.empty(np.broadcast_shapes(a.shape[:-2], b.shape[:-2]) + (a.shape[-2], b.shape[-1]),
                   dtype=a.dtype)
    calls = product_parts.gemm_call_table(a, b, out, row_bounds)
    if calls is None:
        return None
    starts = [len(calls) * part // parts for part in range(parts + 1)]
    product_parts.make_calls(calls, starts, a.dtype)
    return out


def _matrix(rng, shape, dtype, transposed):
    """A random matrix of ``shape``, stored transposed (column-major) if asked."""
    if transposed:
        return rng.standard_normal(shape[::-1]).astype(dtype).T
    return rng.standard_normal(shape).astype(dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("transpose_a", [False, True])
@pytest.mark.parametrize("transpose_b", [False, True])
def test_row_parts_give_numpys_bits_for_every_operand_layout(dtype, transpose_a, transpose_b):
    rng = np.random.default_rng(0)
    a = _matrix(rng, (960, 130), dtype, transpose_a)
    b = _matrix(rng, (130, 70), dtype, transpose_b)
    made = _made(a, b, parts=3, row_bounds=[0, 312, 624, 960])
    np.testing.assert_array_equal(made, np.matmul(a, b))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_stack_gives_numpys_bits_whatever_its_strides(dtype):
    rng = np.random.default_rng(1)
    # Attention's heads, read in place out of one (batch, time, 3, heads, width) buffer.
    qkv = rng.standard_normal((8, 64, 3, 4, 32)).astype(dtype)
    q, k = qkv[:, :, 0].transpose(0, 2, 1, 3), qkv[:, :, 1].transpose(0, 2, 3, 1)
    np.testing.assert_array_equal(_made(q, k), np.matmul(q, k))
    # A convolution's weight broadcast over the images (batch stride 0) times their columns.
    weight = np.broadcast_to(rng.standard_normal((16, 150)).astype(dtype), (64, 16, 150))
    columns = rng.standard_normal((150, 64, 100)).astype(dtype).transpose(1, 0, 2)
    np.testing.assert_array_equal(_made(weight, columns, parts=5), np.matmul(weight, columns))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("transpose_b", [False, True])
def test_column_blocks_give_numpys_bits_block_by_block(dtype, transpose_b):
    # A convolution's input gradient as one wide product, Wᵀ (150 × 16) by the images' output
    # gradients side by side (16 × 64·100), in blocks of whole images: each block the call
    # NumPy makes for its columns (blocks of other widths sum some columns in another order).
    rng = np.random.default_rng(5)
    weight_t = rng.standard_normal((16, 150)).astype(dtype).T
    wide = _matrix(rng, (16, 6400), dtype, transpose_b)[None]           # one group
    bounds = [0, 900, 1800, 2800, 3700, 4600, 5500, 6400]
    out = np.empty((1, 150, 6400), dtype)
    calls = product_parts.gemm_call_table(weight_t, wide, out, column_bounds=bounds)
    assert len(calls) == 7
    product_parts.make_calls(calls, [0, 4, 7], dtype)
    for start, stop in zip(bounds, bounds[1:]):
        np.testing.assert_array_equal(out[..., start:stop], weight_t @ wide[..., start:stop])
    assert product_parts.gemm_call_table(weight_t, wide, out, column_bounds=[0, 1, 6400]) \
        is None  # a one-column block is NumPy's gemv


def test_the_parts_cover_every_call_once_however_many_there_are():
    rng = np.random.default_rng(2)
    a, b = (rng.standard_normal((7, 40, 40)).astype(np.float32) for _ in range(2))
    for parts in (1, 2, 3, 7):
        np.testing.assert_array_equal(_made(a, b, parts=parts), np.matmul(a, b))


def test_no_table_where_numpy_would_not_call_gemm():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((100, 100))
    out = np.empty((100, 100))
    assert product_parts.gemm_call_table(x, x.T, out) is None            # syrk
    assert product_parts.gemm_call_table(x[:1], x, out[:1]) is None     # one row: gemv
    assert product_parts.gemm_call_table(x, x[:, :1], out[:, :1]) is None  # one column
    assert product_parts.gemm_call_table(x[::2, ::2], x[:50, :50],
                                         np.empty((50, 50))) is None    # strides BLAS can't take
    assert product_parts.gemm_call_table(x.astype(np.float32), x, out) is None  # mixed types
    ints = np.ones((10, 10), np.int64)
    assert product_parts.gemm_call_table(ints, ints, np.empty((10, 10), np.int64)) is None


def test_a_layout_met_again_is_reused_with_each_products_own_addresses():
    # The calls' sizes and offsets are worked out once per layout; the addresses are each
    # product's own, so a second product of the same layout writes its own result.
    rng = np.random.default_rng(6)
    first = [rng.standard_normal((6, 40, 30)).astype(np.float32) for _ in range(2)]
    second = [rng.standard_normal((6, 40, 30)).astype(np.float32) for _ in range(2)]
    hits = product_parts._layout_table.cache_info().hits
    for a, b in (first, second):
        np.testing.assert_array_equal(_made(a, b.swapaxes(-1, -2)), a @ b.swapaxes(-1, -2))
    assert product_parts._layout_table.cache_info().hits > hits


def test_a_gram_product_is_told_apart_from_its_layouts_other_products():
    # x @ yᵀ and x @ xᵀ share a layout; only the second is NumPy's syrk, whichever comes first.
    rng = np.random.default_rng(7)
    x, y = rng.standard_normal((2, 50, 50))
    out = np.empty((50, 50))
    for _ in range(2):
        assert product_parts.gemm_call_table(x, y.T, out) is not None
        assert product_parts.gemm_call_table(x, x.T, out) is None
    # In a stack, one matrix read against its own transpose is enough (NumPy's loop calls syrk
    # for it): matrices 0 and 1 of a stack, each times the transpose of matrix 1.
    stack = rng.standard_normal((3, 50, 50))
    out = np.empty((2, 50, 50))
    for other in (2, 1):
        b = np.broadcast_to(stack[other].T, (2, 50, 50))
        calls = product_parts.gemm_call_table(stack[:2], b, out)
        assert (calls is None) == (other == 1)


def test_without_set_num_threads_minidls_products_hold_openblas_at_one_thread(monkeypatch):
    # Numba's threads spin for a moment between regions: OpenBLAS's own pool, at NumPy's
    # default count, must not spin beside them. So a product holds it at one thread (and
    # takes its threads from the parts, within OpenBLAS's count), and gives the count back.
    load_kernels()
    get_count, set_count = threads.openblas_thread_count_functions()
    before = int(get_count())
    monkeypatch.setattr(product_threads, "native_parts", product_parts)
    monkeypatch.setattr(threads, "blas_keeps_its_pool", True)
    monkeypatch.setattr(threads, "_requested", None)
    seen = []
    matrix_product = array_ops._matrix_product

    def recording(a, b):
        seen.append((int(get_count()), threads.product_thread_budget()))
        return matrix_product(a, b)
    monkeypatch.setattr(array_ops, "_matrix_product", recording)
    set_count(ctypes.c_int(2))
    try:
        array_ops.matmul(np.ones((512, 512), np.float32), np.ones((512, 512), np.float32))
        assert seen == [(1, 2)]
        assert int(get_count()) == 2
        # Counted by the product's own n: x @ Wᵀ with W (10, 784) is 784·10 multiply-adds a
        # row, whatever W's longer axis; 512 rows of it are held, a single sample is not (its
        # product never reaches OpenBLAS's threading, so its count is not set and set back).
        weight = np.ones((10, 784), np.float32)
        array_ops.matmul(np.ones((512, 784), np.float32), weight, False, True)
        array_ops.matmul(np.ones((1, 784), np.float32), weight, False, True)
        assert seen[1:] == [(1, 2), (2, 2)]
    finally:
        set_count(ctypes.c_int(before))


def test_products_made_from_two_threads_at_once_give_the_one_thread_bits(monkeypatch):
    # A model trained in a worker thread beside another: both products' parts run on Numba's
    # threads at the same time, and each gets its own result.
    import threading

    import minidl as md

    load_kernels()
    monkeypatch.setattr(product_threads, "native_parts", product_parts)
    monkeypatch.setattr(product_threads, "NATIVE_SPLIT_MIN_WORK", 0)
    rng = np.random.default_rng(4)
    pairs = [(rng.standard_normal((480, 300)).astype(np.float32),
              rng.standard_normal((300, 200)).astype(np.float32)) for _ in range(2)]
    before = md.get_num_threads()
    md.set_num_threads(2)
    try:
        expected = [array_ops.matmul(a, b) for a, b in pairs]
        results = [[], []]

        def products(index):
            for _ in range(20):
                results[index].append(array_ops.matmul(*pairs[index]))
        workers = [threading.Thread(target=products, args=(index,)) for index in range(2)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
    finally:
        md.set_num_threads(before)
    for index in range(2):
        assert len(results[index]) == 20
        for result in results[index]:
            np.testing.assert_array_equal(result, expected[index])
