"""Gradients of matmul, linear, conv2d and pooling against finite differences, and their values
against direct loops."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

import minidl as md
from minidl.ops import conv, linalg, pool
from ops_helpers import FEW, SETTINGS, check_gradients, distinct, normal

seeds = st.integers(0, 2**31 - 1)
sizes = st.integers(0, 3)


@SETTINGS
@given(seed=seeds, n=sizes, k=sizes, m=sizes, a_batch=st.sampled_from([(), (1,), (2, 1)]),
       b_batch=st.sampled_from([(), (1,), (3,), (1, 3)]), vector=st.sampled_from(["", "a", "b"]))
def test_matmul(seed, n, k, m, a_batch, b_batch, vector):
    a_shape = (k,) if vector == "a" else a_batch + (n, k)
    b_shape = (k,) if vector == "b" else b_batch + (k, m)
    a, b = normal(seed, a_shape), normal(seed + 1, b_shape)
    check_gradients(lambda x, y: x @ y, a, b)
    out = md.tensor(a, dtype=np.float64) @ md.tensor(b, dtype=np.float64)
    np.testing.assert_allclose(out.numpy(), np.matmul(a, b), atol=1e-12)


def test_matmul_vector_by_vector_is_a_scalar():
    check_gradients(lambda x, y: x @ y, normal(0, 3), normal(1, 3))


@SETTINGS
@given(seed=seeds, lead=st.sampled_from([(), (2,), (2, 3), (0,)]), n_in=st.integers(1, 4),
       n_out=st.integers(0, 3), bias=st.booleans())
def test_linear(seed, lead, n_in, n_out, bias):
    x, w, b = normal(seed, lead + (n_in,)), normal(seed + 1, (n_out, n_in)), normal(seed + 2,
                                                                                  (n_out,))
    if bias:
        check_gradients(linalg.linear, x, w, b)
        expected = x @ w.T + b
    else:
        check_gradients(linalg.linear, x, w)
        expected = x @ w.T
    args = [md.tensor(a, dtype=np.float64) for a in ((x, w, b) if bias else (x, w))]
    np.testing.assert_allclose(linalg.linear(*args).numpy(), expected, atol=1e-12)


def conv2d_by_loops(x, w, b, stride, padding, dilation, groups):
    """The definition of (grouped, dilated, strided, padded) cross-correlation, one output at a
    time."""
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (padding[0],) * 2, (padding[1],) * 2))
    oh = (h + 2 * padding[0] - dilation[0] * (kh - 1) - 1) // stride[0] + 1
    ow = (wd + 2 * padding[1] - dilation[1] * (kw - 1) - 1) // stride[1] + 1
    out = np.zeros((n, o, oh, ow))
    per_group = o // groups
    for i in range(n):
        for oc in range(o):
            g = oc // per_group
            for y in range(oh):
                for z in range(ow):
                    patch = xp[i, g * cg:(g + 1) * cg,
                               y * stride[0]:y * stride[0] + dilation[0] * (kh - 1) + 1:dilation[0],
                               z * stride[1]:z * stride[1] + dilation[1] * (kw - 1) + 1:dilation[1]]
                    out[i, oc, y, z] = np.sum(patch * w[oc]) + (0 if b is None else b[oc])
    return out


@st.composite
def conv_cases(draw):
    groups = draw(st.sampled_from([1, 1, 2, 3]))
    c_in = groups * draw(st.integers(1, 2))
    c_out = groups * draw(st.integers(1, 2))
    kernel = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    stride = (draw(st.integers(1, 3)), draw(st.integers(1, 2)))
    padding = (draw(st.integers(0, 2)), draw(st.integers(0, 1)))
    dilation = (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
    h, w = draw(st.integers(1, 6)), draw(st.integers(1, 6))
    out_h = (h + 2 * padding[0] - dilation[0] * (kernel[0] - 1) - 1) // stride[0] + 1
    out_w = (w + 2 * padding[1] - dilation[1] * (kernel[1] - 1) - 1) // stride[1] + 1
    assume(out_h >= 1 and out_w >= 1)
    n = draw(st.integers(1, 2))
    return dict(x_shape=(n, c_in, h, w), w_shape=(c_out, c_in // groups) + kernel,
                stride=stride, padding=padding, dilation=dilation, groups=groups,
                bias=draw(st.booleans()))


@SETTINGS
@given(case=conv_cases(), seed=seeds)
def test_conv2d(case, seed):
    x, w = normal(seed, case["x_shape"]), normal(seed + 1, case["w_shape"])
    b = normal(seed + 2, (case["w_shape"][0],)) if case["bias"] else None
    geometry = {k: case[k] for k in ("stride", "padding", "dilation", "groups")}
    if b is None:
        check_gradients(lambda x_, w_: conv.conv2d(x_, w_, **geometry), x, w)
    else:
        check_gradients(lambda x_, w_, b_: conv.conv2d(x_, w_, b_, **geometry), x, w, b)
    out = conv.conv2d(md.tensor(x, dtype=np.float64), md.tensor(w, dtype=np.float64),
                      None if b is None else md.tensor(b, dtype=np.float64), **geometry)
    np.testing.assert_allclose(out.numpy(), conv2d_by_loops(x, w, b, **geometry), atol=1e-12)


@pytest.mark.parametrize("x_shape, w_shape, padding", [
    ((2, 3, 10, 10), (4, 3, 3, 3), 1),   # 100 output pixels per image: one product per image
    ((3, 1, 20, 17), (2, 1, 5, 2), 2),
])
def test_conv2d_on_maps_large_enough_for_a_product_per_image(x_shape, w_shape, padding):
    x, w, b = normal(0, x_shape), normal(1, w_shape), normal(2, (w_shape[0],))
    out = conv.conv2d(md.tensor(x, dtype=np.float64), md.tensor(w, dtype=np.float64),
                      md.tensor(b, dtype=np.float64), padding=padding)
    expected = conv2d_by_loops(x, w, b, stride=(1, 1), padding=(padding, padding),
                               dilation=(1, 1), groups=1)
    np.testing.assert_allclose(out.numpy(), expected, atol=1e-12)
    assert out.numpy().flags.c_contiguous


def test_conv2d_with_a_batch_of_zero_images():
    x, w = normal(0, (0, 2, 4, 4)), normal(1, (3, 2, 3, 3))
    check_gradients(lambda x_, w_: conv.conv2d(x_, w_, padding=1), x, w)


@st.composite
def pool_cases(draw):
    kernel = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    stride = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    padding = (draw(st.integers(0, kernel[0] // 2)), draw(st.integers(0, kernel[1] // 2)))
    h, w = draw(st.integers(kernel[0], 6)), draw(st.integers(kernel[1], 6))
    return dict(shape=(draw(st.integers(1, 2)), draw(st.integers(1, 2)), h, w), kernel=kernel,
                stride=stride, padding=padding, ceil_mode=draw(st.booleans()))


def pooled_size(n, k, s, p, d, ceil_mode):
    """PyTorch's rule: with ceil_mode the last window must still start inside the padded input."""
    span = n + 2 * p - d * (k - 1) - 1
    out = (-(-span // s) if ceil_mode else span // s) + 1
    if ceil_mode and (out - 1) * s >= n + p:
        out -= 1
    return out


@SETTINGS
@given(case=pool_cases(), dilation=st.sampled_from([(1, 1), (2, 1)]), seed=seeds)
def test_max_pool2d(case, dilation, seed):
    assume(case["shape"][2] >= dilation[0] * (case["kernel"][0] - 1) + 1)
    x = distinct(seed, case["shape"])
    args = (case["kernel"], case["stride"], case["padding"], dilation, case["ceil_mode"])
    check_gradients(lambda a: pool.max_pool2d(a, *args), x)
    out = pool.max_pool2d(md.tensor(x, dtype=np.float64), *args)
    expected_hw = tuple(pooled_size(case["shape"][2 + i], case["kernel"][i], case["stride"][i],
                                    case["padding"][i], dilation[i], case["ceil_mode"])
                        for i in range(2))
    assert out.shape == case["shape"][:2] + expected_hw


@SETTINGS
@given(case=pool_cases(), count_include_pad=st.booleans(), seed=seeds)
def test_avg_pool2d(case, count_include_pad, seed):
    x = normal(seed, case["shape"])
    args = (case["kernel"], case["stride"], case["padding"], case["ceil_mode"], count_include_pad)
    check_gradients(lambda a: pool.avg_pool2d(a, *args), x)


def test_avg_pool2d_counts_padding_only_when_asked():
    x = md.tensor(np.ones((1, 1, 2, 2)), dtype=np.float64)
    with_pad = pool.avg_pool2d(x, 3, stride=1, padding=1, count_include_pad=True).numpy()
    without = pool.avg_pool2d(x, 3, stride=1, padding=1, count_include_pad=False).numpy()
    np.testing.assert_allclose(with_pad, np.full((1, 1, 2, 2), 4 / 9))
    np.testing.assert_allclose(without, np.ones((1, 1, 2, 2)))


@FEW
@given(seed=seeds, size=st.sampled_from([1, 2, (1, 2)]))
def test_adaptive_avg_pool2d(seed, size):
    check_gradients(lambda a: pool.adaptive_avg_pool2d(a, size), normal(seed, (2, 2, 4, 4)))


def test_max_pool2d_known_values():
    x = md.tensor(np.arange(16.0).reshape(1, 1, 4, 4), dtype=np.float64, requires_grad=True)
    out = pool.max_pool2d(x, 2)
    np.testing.assert_array_equal(out.numpy(), [[[[5, 7], [13, 15]]]])
    out.sum().backward()
    expected = np.zeros((4, 4))
    expected[1::2, 1::2] = 1
    np.testing.assert_array_equal(x.grad.numpy()[0, 0], expected)


@pytest.mark.parametrize("op", [pool.max_pool2d, pool.avg_pool2d])
def test_pool_keeps_float32(op):
    x = md.tensor(np.ones((1, 1, 4, 4), np.float32), requires_grad=True)
    out = op(x, 2)
    out.sum().backward()
    assert out.dtype == x.grad.dtype == np.float32


@pytest.mark.parametrize("needs", ["bias", "weight", "x"])
def test_a_single_images_convolution_keeps_its_columns_whenever_it_is_recorded(needs):
    # One image and one group skip the columns' block view unless the node is recorded; any one
    # input that needs a gradient records it, and backward reads the columns for dW.
    x, w, b = normal(0, (1, 2, 4, 4)), normal(1, (3, 2, 3, 3)), normal(2, (3,))
    tensors = {name: md.tensor(value, dtype=np.float64, requires_grad=name == needs)
               for name, value in (("x", x), ("weight", w), ("bias", b))}
    out = conv.conv2d(tensors["x"], tensors["weight"], tensors["bias"], padding=1)
    out.backward(md.ones(*out.shape, dtype=np.float64))
    other = {name: md.tensor(value, dtype=np.float64, requires_grad=True)
             for name, value in (("x", x), ("weight", w), ("bias", b))}
    conv.conv2d(other["x"], other["weight"], other["bias"], padding=1).sum().backward()
    np.testing.assert_allclose(tensors[needs].grad.numpy(), other[needs].grad.numpy(),
                               atol=1e-12)
