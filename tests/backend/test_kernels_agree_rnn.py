"""The Numba LSTM and GRU cell kernels return what their NumPy references return."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from minidl.backend.numba_cpu import NumbaCpuBackend
from minidl.backend.reference import ReferenceBackend
from test_kernels_agree import DTYPES, KERNEL_SETTINGS, assert_agree, random_array

fast, ref = NumbaCpuBackend(), ReferenceBackend()
shapes = st.tuples(st.integers(0, 5), st.integers(1, 6))  # (N, H), an empty batch included


def agree(results, expected, dtype):
    for actual, wanted in zip(results, expected):
        assert_agree(actual, wanted, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@KERNEL_SETTINGS
@given(shape=shapes, seed=st.integers(0, 2**32 - 1))
def test_lstm_cell_kernels_agree(dtype, shape, seed):
    n, h = shape
    gates, c_prev = random_array(seed, (n, 4 * h), dtype) * 3, random_array(seed + 1, (n, h), dtype)
    agree(fast.lstm_cell_forward(gates, c_prev), ref.lstm_cell_forward(gates, c_prev), dtype)
    _, c, activated = ref.lstm_cell_forward(gates, c_prev)
    grad_h, grad_c = random_array(seed + 2, (n, h), dtype), random_array(seed + 3, (n, h), dtype)
    agree(fast.lstm_cell_backward(grad_h, grad_c, c_prev, c, activated),
          ref.lstm_cell_backward(grad_h, grad_c, c_prev, c, activated), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@KERNEL_SETTINGS
@given(shape=shapes, seed=st.integers(0, 2**32 - 1))
def test_gru_cell_kernels_agree(dtype, shape, seed):
    n, h = shape
    inputs, hidden = (random_array(seed + k, (n, 3 * h), dtype) * 3 for k in range(2))
    h_prev = random_array(seed + 2, (n, h), dtype)
    agree(fast.gru_cell_forward(inputs, hidden, h_prev),
          ref.gru_cell_forward(inputs, hidden, h_prev), dtype)
    _, activated = ref.gru_cell_forward(inputs, hidden, h_prev)
    grad_h = random_array(seed + 3, (n, h), dtype)
    agree(fast.gru_cell_backward(grad_h, hidden, h_prev, activated),
          ref.gru_cell_backward(grad_h, hidden, h_prev, activated), dtype)


def test_saturated_gates_stay_finite():
    gates = np.array([[-800.0, 800.0, -800.0, 800.0]], np.float32)
    for backend in (fast, ref):
        h, c, activated = backend.lstm_cell_forward(gates, np.ones((1, 1), np.float32))
        assert np.isfinite(h).all() and np.isfinite(activated).all()


def test_float32_activations_are_within_a_rounding_of_the_exact_values():
    # float32 cells take sigmoid and tanh from a float64 polynomial exp (vectorised), not the C
    # library: each activation must still be the float64-exact value rounded, to within one
    # float32 step, over tiny (tanh's series), moderate, saturated and non-finite inputs.
    values = np.array([0.0, -0.0, 1e-30, -1e-20, 3e-8, 1e-3, 0.0624, 0.0626, -0.5, 1.7, -4.2,
                       9.5, 17.0, -30.0, 88.0, -104.0, np.inf, -np.inf, np.nan], np.float32)
    values = np.concatenate([values, np.random.default_rng(0).standard_normal(45).astype(
        np.float32) * 6])
    n = values.size
    gates = np.tile(values, 4).reshape(1, 4 * n)
    _, c, activated = fast.lstm_cell_forward(gates, np.zeros((1, n), np.float32))
    exact = values.astype(np.float64)
    with np.errstate(over="ignore"):
        sigmoid = 1.0 / (1.0 + np.exp(-exact))
    for got, want in ((activated[0, :n], sigmoid), (activated[0, 2 * n:3 * n], np.tanh(exact))):
        np.testing.assert_allclose(got, want.astype(np.float32), rtol=2 ** -23, atol=0)
        numbers = values == values  # a NaN's sign bit is not meaningful
        assert (np.signbit(got) == np.signbit(want))[numbers].all()  # tanh(-0.0) is -0.0
    assert np.isnan(c[0, ~numbers]).all() and np.isfinite(c[0, numbers]).all()


def test_threaded_cells_give_the_one_thread_bits_at_any_thread_count(monkeypatch):
    numba = pytest.importorskip("numba")
    from minidl.backend.numba_cpu import rnn_kernels

    n, h = 13, 6
    gates, c_prev = random_array(0, (n, 4 * h), np.float32) * 3, random_array(1, (n, h), np.float32)
    gru_input, gru_hidden = random_array(2, (n, 3 * h), np.float32), random_array(3, (n, 3 * h),
                                                                                 np.float32)
    grad_h, grad_c = random_array(4, (n, h), np.float32), random_array(5, (n, h), np.float32)

    def all_cells():
        h_, c, activated = rnn_kernels.lstm_cell_forward(gates, c_prev)
        gru_h, gru_activated = rnn_kernels.gru_cell_forward(gru_input, gru_hidden, c_prev)
        return (h_, c, activated, *rnn_kernels.lstm_cell_backward(grad_h, grad_c, c_prev, c,
                                                                  activated),
                gru_h, gru_activated, *rnn_kernels.gru_cell_backward(grad_h, gru_hidden, c_prev,
                                                                    gru_activated))

    one_thread = all_cells()
    monkeypatch.setattr(rnn_kernels, "PARALLEL_MIN_GATES", 0)
    before = numba.get_num_threads()
    try:
        for threads in (1, max(2, before)):
            numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
            for ours, expected in zip(all_cells(), one_thread):
                np.testing.assert_array_equal(ours, expected)
    finally:
        numba.set_num_threads(before)
