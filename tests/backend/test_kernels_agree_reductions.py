"""Sums over leading axes split over threads (:mod:`minidl.backend.numba_cpu.reductions`): the
same bits at any thread count, NumPy's values, and NumPy's own call wherever the kernel does not
apply."""

from __future__ import annotations

import numpy as np
import pytest

numba = pytest.importorskip("numba")

from minidl.backend.numba_cpu import NumbaCpuBackend, reductions  # noqa: E402
from minidl.backend.reference import array_ops  # noqa: E402


@pytest.fixture
def threaded(monkeypatch):
    """Every float array counts as large; blocks of 8 rows, so a small array has several."""
    monkeypatch.setattr(reductions, "PARALLEL_MIN_WORK", 0)
    monkeypatch.setattr(reductions, "THREADED_MIN_WORK", 0)
    monkeypatch.setattr(reductions, "MIN_BLOCK_ROWS", 8)
    return reductions


def _at_thread_counts(function):
    before = numba.get_num_threads()
    try:
        runs = []
        for threads in (1, max(2, before)):
            numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
            runs.append(function())
        return runs
    finally:
        numba.set_num_threads(before)


def test_the_backend_sums_with_the_threaded_kernel():
    assert NumbaCpuBackend.sum is reductions.sum


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape, axis, keepdims", [
    ((70, 1100), 0, False),              # a Linear bias gradient: 8 blocks, 3 column spans
    ((5, 14, 33), (0, 1), False),        # (batch, tokens, features)
    ((5, 14, 33), (-3, -2), True),
    ((9, 6, 5, 7), (0, 2, 3), False),    # a convolution's bias gradient: batch and pixels
    ((9, 6, 5, 7), (0, 2, 3), True),
    ((40, 6, 5), (0, 2), False),
])
def test_leading_axes_sums_agree_with_numpy_at_any_thread_count(threaded, dtype, shape, axis,
                                                                  keepdims):
    x = np.random.default_rng(0).standard_normal(shape).astype(dtype)
    x.reshape(-1)[:3] = [1e8, -1e8, 0.5]  # cancellation: a change of order shows in the bits
    one, many = _at_thread_counts(lambda: threaded.sum(x, axis, keepdims))
    numpys = array_ops.sum(x, axis, keepdims)
    assert one.dtype == numpys.dtype and one.shape == numpys.shape
    np.testing.assert_array_equal(one, many)
    tolerance = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(one, numpys, rtol=tolerance, atol=tolerance * np.abs(x).sum(0).max())


def test_a_sum_below_the_threads_size_is_the_same_tiles_on_one_thread(threaded, monkeypatch):
    used = []
    kernel = reductions.loading._kernel
    monkeypatch.setattr(reductions.loading, "_kernel",
                        lambda module, name: used.append(name) or kernel(module, name))
    x = np.random.default_rng(2).standard_normal((70, 1100)).astype(np.float32)
    x[:3, 0] = [1e8, -1e8, 0.5]  # cancellation: a change of order shows in the bits
    on_threads = threaded.sum(x, 0)
    monkeypatch.setattr(reductions, "THREADED_MIN_WORK", x.size + 1)
    in_one_thread = threaded.sum(x, 0)
    assert used == ["sum_rows", "sum_rows_in_one_thread"]
    np.testing.assert_array_equal(on_threads, in_one_thread)


def test_a_sum_over_fewer_rows_than_two_blocks_is_numpys_row_by_row_sum(threaded):
    # One block adds the rows in order, as NumPy does down axis 0: the very same bits.
    x = np.random.default_rng(1).standard_normal((15, 700)).astype(np.float32)
    np.testing.assert_array_equal(threaded.sum(x, 0), np.sum(x, axis=0))


def test_the_blocks_follow_the_shape_not_the_thread_count():
    assert reductions.row_blocks(10) == 1
    assert reductions.row_blocks(64 * 5 + 3) == 5
    assert reductions.row_blocks(10 ** 6) == reductions.ROW_BLOCKS


@pytest.mark.parametrize("x, axis", [
    (np.ones((30, 40), np.float32), None),                       # everything: NumPy's pairwise
    (np.ones((30, 40), np.float32), 1),                          # the last axis only
    (np.ones((30, 40, 5), np.float32), (1,)),                    # a middle axis
    (np.ones((30, 40), np.float32).T, 0),                        # not C-contiguous
    (np.ones((30, 40), np.int32), 0),                            # integers sum to int64
    (np.ones((30, 40), np.float16), 0),
    (np.ones((30, 40), np.float32), (0, 1)),                     # every axis
])
def test_other_sums_are_numpys_own(threaded, monkeypatch, x, axis):
    def no_kernel(*args):
        raise AssertionError("the threaded kernel ran")
    monkeypatch.setattr(reductions.loading, "_kernel", no_kernel)
    ours, numpys = threaded.sum(x, axis), array_ops.sum(x, axis)
    assert ours.dtype == numpys.dtype
    np.testing.assert_array_equal(ours, numpys)


# -- an embedding table's gradient: rows scatter-added at integer indices -------------------------

def test_embedding_gradients_are_numpys_add_at_bits_at_any_thread_count(threaded, monkeypatch):
    used = []
    kernel = reductions.loading._kernel
    monkeypatch.setattr(reductions.loading, "_kernel",
                        lambda module, name: used.append(name) or kernel(module, name))
    rng = np.random.default_rng(3)
    rows = rng.integers(0, 50, (9, 7))
    rows[0, :4] = 11  # a row picked four times sums four gradients, in order
    values = rng.standard_normal((9, 7, 70)).astype(np.float32)  # 70 columns: three spans
    values[0, :4, 0] = [1e8, 1.0, -1e8, 1.0]  # order-sensitive: NumPy's order gives 1.0
    one, many = _at_thread_counts(lambda: threaded.index_add((50, 70), (rows,), values,
                                                             np.float32))
    numpys = array_ops.index_add((50, 70), (rows,), values, np.float32)
    assert used == ["add_rows_at", "add_rows_at"]
    assert one.dtype == numpys.dtype and one.shape == numpys.shape
    np.testing.assert_array_equal(one, numpys)
    np.testing.assert_array_equal(one, many)


@pytest.mark.parametrize("index", [
    (np.array([0, -1, 3]),),                          # negative: NumPy wraps it
    (np.array([0, 1]), np.array([2, 3])),             # two index arrays
    (slice(1, 4),),                                   # basic indexing
    (np.array([True, False, True, False, True, False]),),  # a mask
])
def test_other_scatters_are_numpys_own(threaded, monkeypatch, index):
    def no_kernel(*args):
        raise AssertionError("the threaded kernel ran")
    monkeypatch.setattr(reductions.loading, "_kernel", no_kernel)
    table = np.zeros((6, 5), np.float32)
    values = np.ones_like(table[index])
    np.testing.assert_array_equal(threaded.index_add((6, 5), index, values, np.float32),
                                  array_ops.index_add((6, 5), index, values, np.float32))


def test_an_out_of_range_embedding_index_is_refused_as_numpy_refuses_it(threaded):
    with pytest.raises(IndexError):
        threaded.index_add((6, 5), (np.array([0, 6]),), np.ones((2, 5), np.float32), np.float32)
