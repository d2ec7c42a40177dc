"""The strided batched form of the ``matmul`` primitive on the CPU backends: what the NumPy
expression says (operands and result read through permutations, a batch axis summed), by every
path the CPU takes (one wide product, one product per block, a summed batch folded into k), and
a clear error for each argument that does not fit. The CUDA backend is held to the reference in
tests/backend/cuda/test_cuda_kernels.py."""

from __future__ import annotations

import numpy as np
import pytest

from minidl.backend.numba_cpu import NumbaCpuBackend
from minidl.backend.reference import ReferenceBackend

rng = np.random.default_rng(3)


def expected(a, b, transpose_a=False, transpose_b=False, a_axes=None, b_axes=None,
             out_axes=None, sum_axis=None):
    """The definition, in float64, step by step."""
    identity = tuple(range(a.ndim)), tuple(range(b.ndim))
    a = np.transpose(a, a_axes or identity[0]).astype(np.float64)
    b = np.transpose(b, b_axes or identity[1]).astype(np.float64)
    a = np.swapaxes(a, -1, -2) if transpose_a else a
    b = np.swapaxes(b, -1, -2) if transpose_b else b
    product = np.matmul(a, b)
    if sum_axis is not None:
        product = product.sum(axis=sum_axis)
    return np.transpose(product, out_axes or tuple(range(product.ndim)))


# A convolution's products, groups g, N images of L pixels: forward, weight and input gradient.
def forward(g, n, pixels):
    return (g, 1, 3, 5), (g, 5, n, pixels), dict(b_axes=(0, 2, 1, 3), out_axes=(1, 0, 2, 3))


def weight_gradient(g, n, pixels):
    return (g, 5, n, pixels), (n, g, 3, pixels), dict(a_axes=(0, 2, 1, 3), b_axes=(1, 0, 3, 2),
                                                      sum_axis=1, out_axes=(0, 2, 1))


def input_gradient(g, n, pixels):
    return (g, 1, 3, 5), (n, g, 3, pixels), dict(transpose_a=True, b_axes=(1, 0, 2, 3),
                                                 out_axes=(0, 2, 1, 3))


@pytest.mark.parametrize("backend", [ReferenceBackend(), NumbaCpuBackend()],
                         ids=["reference", "numba"])
@pytest.mark.parametrize("case", [forward, weight_gradient, input_gradient])
@pytest.mark.parametrize("g, n, pixels", [(1, 3, 7), (2, 3, 7), (1, 3, 100), (1, 1, 100),
                                          (2, 0, 4)])
def test_strided_batched_products_equal_their_numpy_expression(backend, case, g, n, pixels):
    # (1, 3, 100): wide blocks, multiplied one by one; the others as one wide product.
    a_shape, b_shape, keywords = case(g, n, pixels)
    a, b = rng.standard_normal(a_shape), rng.standard_normal(b_shape)
    product = backend.matmul(a, b, **keywords)
    want = expected(a, b, **keywords)
    assert product.shape == want.shape and product.flags.c_contiguous
    np.testing.assert_allclose(product, want, rtol=1e-12, atol=1e-12)


def test_a_result_stored_batch_first_from_operands_read_batch_inside():
    a, b = rng.standard_normal((2, 3, 4, 5)), rng.standard_normal((5, 3, 2))
    keywords = dict(b_axes=(1, 0, 2), out_axes=(2, 3, 0, 1))
    product = ReferenceBackend().matmul(a, b, **keywords)
    assert product.shape == (4, 2, 2, 3)
    np.testing.assert_allclose(product, expected(a, b, **keywords), rtol=1e-12)


@pytest.mark.parametrize("keywords, message", [
    (dict(a_axes=(0, 0, 1)), "a_axes=.* not a permutation of 3 axes"),
    (dict(b_axes=(0, 1)), "b_axes=.* not a permutation of 3 axes"),
    (dict(out_axes=(1, 0)), "out_axes=.* not a permutation of 3 axes"),
    (dict(sum_axis=1), "sum_axis=1 is not one of the product's 1 batch axes"),
    (dict(sum_axis=True), "sum_axis=True"),
    (dict(a_axes=(1, 0, 2)), "do not broadcast"),
    (dict(transpose_a=True, sum_axis=0), "do not align"),
])
def test_arguments_that_do_not_fit_are_named(keywords, message):
    a, b = np.ones((2, 3, 4)), np.ones((2, 4, 5))
    with pytest.raises(ValueError, match=message):
        ReferenceBackend().matmul(a, b, **keywords)


def test_a_remembered_layout_is_the_layout_and_an_error_is_raised_every_time():
    from minidl.backend.batched_product import cached_product_layout, product_layout
    arguments = ((8, 6), (6, 3, 5), False, False, None, [1, 0, 2], None, None)
    assert cached_product_layout(*arguments) == product_layout(*arguments)
    assert cached_product_layout(*arguments) is cached_product_layout(*arguments[:5], (1, 0, 2))
    for _ in range(2):
        with pytest.raises(ValueError, match="b_axes=.* is not a permutation of 3 axes"):
            cached_product_layout((8, 6), (6, 3, 5), b_axes=[0, 0, 2])


def test_a_single_images_convolution_product_is_one_plain_gemm_bit_for_bit():
    # Batch axes all of size 1: the product is the 2-D GEMM itself, whatever the axes say.
    a_shape, b_shape, keywords = forward(1, 1, 37)
    a = rng.standard_normal(a_shape).astype(np.float32)
    b = rng.standard_normal(b_shape).astype(np.float32)
    product = ReferenceBackend().matmul(a, b, **keywords)
    assert product.shape == (1, 1, 3, 37) and product.flags.c_contiguous
    np.testing.assert_array_equal(product.reshape(3, 37), a.reshape(3, 5) @ b.reshape(5, 37))


def test_a_half_precision_weight_gradient_is_rounded_once_not_per_image():
    # A first layer's weight gradient (32 filters × 27 taps from 64 images of 1024 positions)
    # is summed image by image in float32 and float64; in float16 it stays one product, which
    # NumPy sums in float32 and rounds once: adding 64 per-image products in float16 erred by
    # 2.4 on values near 870, where float16's spacing is 0.5.
    cols = rng.standard_normal((1, 27, 64, 1024)).astype(np.float16)
    grad = rng.standard_normal((64, 1, 32, 1024)).astype(np.float16)
    weight_gradient = ReferenceBackend().matmul(cols, grad, a_axes=(0, 2, 1, 3),
                                                b_axes=(1, 0, 3, 2), out_axes=(0, 2, 1),
                                                sum_axis=1)
    exact = np.einsum("iol,kil->ok", grad[:, 0].astype(np.float64), cols[0].astype(np.float64))
    assert weight_gradient.dtype == np.float16
    spacing = float(np.spacing(np.float16(np.abs(exact).max())))
    assert np.abs(weight_gradient[0] - exact).max() <= spacing
