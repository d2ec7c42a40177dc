"""What the backend's Python glue costs per call, counted (never timed): the NumPy calls and
Python frames around a kernel or a BLAS product, on the small arrays of single-sample
inference, where they cost more than the kernel's own work."""

import numpy as np
import pytest

from minidl.backend.numba_cpu import NumbaCpuBackend, load_kernels
from minidl.backend.reference import ReferenceBackend
from python_calls import c_calls, generator_frames, python_calls

fast, ref = NumbaCpuBackend(), ReferenceBackend()


@pytest.fixture(scope="module", autouse=True)
def kernels():
    load_kernels()  # the kernels themselves, not the NumPy stand-ins of a first call


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_batch_norm_with_given_statistics_allocates_its_two_results_and_copies_nothing(dtype):
    # The running statistics were copied into a float64 array, and the results cast back, with
    # reshapes around the kernel: now the kernel reads the statistics in their own dtype and
    # writes mean, var and rstd into one array of x's dtype.
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 3, 10)).astype(dtype)
    weight, bias, mean = (rng.standard_normal(3).astype(dtype) for _ in range(3))
    var = rng.uniform(0.5, 2, 3).astype(dtype)
    arguments = (x, weight, bias, mean, var, 1e-5)
    fast.batch_norm_forward(*arguments)
    calls = c_calls(lambda: fast.batch_norm_forward(*arguments))
    assert sorted(c for c in calls if c not in ("getattr", "ascontiguousarray")) == \
        ["empty", "empty"], calls
    for got, want in zip(fast.batch_norm_forward(*arguments), ref.batch_norm_forward(*arguments)):
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)


def test_max_pooling_reads_its_window_arguments_without_generator_frames():
    x = np.arange(2 * 3 * 6 * 6, dtype=np.float32).reshape(2, 3, 6, 6)
    arguments = (x, (2, 2), (2, 2), (0, 0), (1, 1), False)
    fast.max_pool2d_forward(*arguments)
    calls = python_calls(lambda: fast.max_pool2d_forward(*arguments))
    assert not generator_frames(calls), calls
    for got, want in zip(fast.max_pool2d_forward(*arguments), ref.max_pool2d_forward(*arguments)):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("transpose_a, transpose_b", [(False, True), (True, False)])
def test_a_small_transposed_product_is_a_view_and_no_question_before_blas(transpose_a,
                                                                          transpose_b):
    # A Linear layer's x @ Wᵀ: np.swapaxes went through three NumPy Python wrappers, and a
    # product too small to split asked part_count, which asks worth_splitting: now a product
    # under worth_splitting's first bound goes to BLAS without a call.
    rng = np.random.default_rng(0)
    a = rng.standard_normal((5, 1) if transpose_a else (1, 5)).astype(np.float32)
    b = rng.standard_normal((3, 5) if transpose_b else (5, 3)).astype(np.float32)
    product = fast.matmul(a, b, transpose_a, transpose_b)
    calls = python_calls(lambda: fast.matmul(a, b, transpose_a, transpose_b))
    assert [c[1] for c in calls[1:]] == ["matmul", "_matrix_product"], calls
    np.testing.assert_array_equal(product, (a.T if transpose_a else a) @ (b.T if transpose_b
                                                                          else b))


def test_a_layers_repeated_geometry_is_remembered_and_lists_and_errors_behave_as_before():
    # A layer calls im2col and max pooling with the same arguments every time: the output
    # sizes and int conversions were worked out again on each call (~1 us of a ~3-6 us call).
    x = np.arange(2 * 3 * 6 * 6, dtype=np.float32).reshape(2, 3, 6, 6)
    window = ((3, 3), (1, 1), (1, 1), (1, 1))
    pooling = ((2, 2), (2, 2), (0, 0), (1, 1), False)
    fast.im2col(x, *window), fast.max_pool2d_forward(x, *pooling)
    calls = python_calls(lambda: (fast.im2col(x, *window), fast.max_pool2d_forward(x, *pooling)))
    assert not [c for c in calls if c[1] in ("conv_output_size", "pool_output_size")], calls
    # Lists (unhashable) are still pairs, and the same bad geometry raises on every call.
    as_lists = [list(pair) for pair in window]
    np.testing.assert_array_equal(fast.im2col(x, *as_lists), ref.im2col(x, *window))
    for got, want in zip(fast.max_pool2d_forward(x, *map(list, pooling[:4]), False),
                         ref.max_pool2d_forward(x, *pooling)):
        np.testing.assert_array_equal(got, want)
    for _ in range(2):
        with pytest.raises(ValueError, match="convolution output would be empty"):
            fast.im2col(x, (9, 9), (1, 1), (0, 0), (1, 1))
        with pytest.raises(ValueError, match="pool padding 2 must be between"):
            fast.max_pool2d_forward(x, (2, 2), (2, 2), (2, 2), (1, 1), False)
