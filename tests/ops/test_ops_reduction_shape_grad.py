"""Gradients of reductions and of the ops that move elements (reshape, permute, indexing, cat,
stack, where) against finite differences."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import minidl as md
from ops_helpers import SETTINGS, check_gradients, distinct, normal

seeds = st.integers(0, 2**31 - 1)
shapes = hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=3)
nonempty = hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=3)


@st.composite
def shape_and_axes(draw, shape_strategy=shapes, allow_none=True):
    """A shape and an axis argument for it: None, one (possibly negative) axis, or a tuple."""
    shape = draw(shape_strategy)
    ndim = len(shape)
    choices = [st.none()] if allow_none else []
    if ndim:
        choices.append(st.integers(-ndim, ndim - 1))
        choices.append(st.lists(st.integers(0, ndim - 1), min_size=1, max_size=ndim,
                                unique=True).map(lambda axes: tuple(a - ndim for a in axes)))
    axis = draw(st.one_of(*choices)) if choices else None
    return shape, axis


def reduced_count(shape, axis):
    if axis is None:
        return int(np.prod(shape))
    axes = (axis,) if isinstance(axis, int) else axis
    return int(np.prod([shape[a] for a in axes]))


@pytest.mark.parametrize("op", ["sum", "mean"])
@SETTINGS
@given(shape_axis=shape_and_axes(), keepdims=st.booleans(), seed=seeds)
def test_sum_mean(op, shape_axis, keepdims, seed):
    shape, axis = shape_axis
    if op == "mean":
        assume(reduced_count(shape, axis) > 0)  # the mean of nothing is nan
    x = normal(seed, shape)
    out = check_gradients(lambda a: getattr(a, op)(axis=axis, keepdims=keepdims), x)
    expected = getattr(np, op)(x, axis=axis, keepdims=keepdims)
    with md.no_grad():
        actual = getattr(md.tensor(x, dtype=np.float64), op)(axis=axis, keepdims=keepdims)
    np.testing.assert_allclose(actual.numpy(), expected)
    assert out[0].shape == x.shape


@pytest.mark.parametrize("op", ["amax", "amin"])
@SETTINGS
@given(shape_axis=shape_and_axes(nonempty), keepdims=st.booleans(), seed=seeds)
def test_amax_amin(op, shape_axis, keepdims, seed):
    shape, axis = shape_axis
    x = distinct(seed, shape)
    check_gradients(lambda a: getattr(a, op)(axis=axis, keepdims=keepdims), x)
    actual = getattr(md.tensor(x, dtype=np.float64), op)(dim=axis, keepdim=keepdims).numpy()
    np.testing.assert_array_equal(actual, getattr(np, op[1:])(x, axis=axis, keepdims=keepdims))


@pytest.mark.parametrize("op", ["max", "min"])
def test_max_min_along_a_dim_return_values_and_indices(op):
    x = np.array([[1.0, 5.0, 3.0], [7.0, 2.0, -7.0]])
    result = getattr(md.tensor(x), op)(1)
    values, indices = result  # a plain tuple to unpack, as PyTorch's return type
    assert result.values is values and result.indices is indices
    np.testing.assert_array_equal(values.numpy(), getattr(np, op)(x, axis=1))
    np.testing.assert_array_equal(indices.numpy(), getattr(np, "arg" + op)(x, axis=1))
    assert indices.dtype == np.int64
    # The row bug this prevents: x.max(1)[0] is the values, not the first row of them.
    np.testing.assert_array_equal(result[0].numpy(), values.numpy())
    kept = getattr(md.tensor(x), op)(dim=1, keepdim=True)
    assert kept.values.shape == kept.indices.shape == (2, 1)
    # With no dim, only the value (a 0-d tensor), as in PyTorch.
    assert getattr(md.tensor(x), op)().shape == ()
    with pytest.raises(TypeError, match="amax|amin"):
        getattr(md.tensor(x), op)(dim=(0, 1))


def test_max_with_a_tensor_is_the_elementwise_maximum():
    a, b = md.tensor([1.0, 4.0]), md.tensor([3.0, 2.0])
    np.testing.assert_array_equal(a.max(b).numpy(), [3.0, 4.0])
    np.testing.assert_array_equal(md.min(a, b).numpy(), [1.0, 2.0])


@pytest.mark.parametrize("reduce", [lambda x: x.max(), lambda x: x.max(0).values,
                                    lambda x: x.min()])
def test_extremum_gradient_goes_to_the_nan(reduce):
    # PyTorch: a NaN is the extremum, and only the NaN element receives the gradient (amax's
    # NaN gradient is in test_ops_edge_values.py).
    x = md.tensor([1.0, float("nan"), 3.0], requires_grad=True)
    reduce(x).backward()
    np.testing.assert_array_equal(x.grad.numpy(), [0.0, 1.0, 0.0])


def test_max_splits_ties_evenly():
    x = md.tensor(np.array([[1.0, 3.0, 3.0], [2.0, 2.0, 2.0]]), dtype=np.float64,
                  requires_grad=True)
    x.max(axis=1).values.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [[0, 0.5, 0.5], [1 / 3, 1 / 3, 1 / 3]])


@SETTINGS
@given(shape_axis=shape_and_axes(nonempty), keepdims=st.booleans(), seed=seeds)
def test_var(shape_axis, keepdims, seed):
    shape, axis = shape_axis
    assume(reduced_count(shape, axis) > 1)
    x = normal(seed, shape)
    check_gradients(lambda a: a.var(axis=axis, keepdims=keepdims), x)
    actual = md.tensor(x, dtype=np.float64).var(axis=axis, keepdims=keepdims).numpy()
    np.testing.assert_allclose(actual, np.var(x, axis=axis, keepdims=keepdims, ddof=1))


@SETTINGS
@given(shape=shapes, seed=seeds, data=st.data())
def test_reshape_and_flatten(shape, seed, data):
    x = normal(seed, shape)
    target = data.draw(st.permutations(list(shape))) if shape else []
    target = tuple(target) + (1,)
    check_gradients(lambda a: a.reshape(target), x)
    check_gradients(lambda a: a.reshape(-1), x)
    check_gradients(lambda a: a.flatten(), x)
    if len(shape) >= 2:
        check_gradients(lambda a: a.flatten(1), x)


@SETTINGS
@given(shape=nonempty, seed=seeds, data=st.data())
def test_permute_transpose(shape, seed, data):
    x = normal(seed, shape)
    axes = data.draw(st.permutations(range(len(shape))))
    negative = [a - len(shape) for a in axes]
    check_gradients(lambda a: a.permute(*negative), x)
    i, j = data.draw(st.integers(-len(shape), len(shape) - 1)), data.draw(
        st.integers(0, len(shape) - 1))
    check_gradients(lambda a: a.transpose(i, j), x)
    check_gradients(lambda a: a.T, x)


@SETTINGS
@given(shape=shapes, seed=seeds, data=st.data())
def test_squeeze_unsqueeze_expand(shape, seed, data):
    x = normal(seed, shape)
    axis = data.draw(st.integers(-len(shape) - 1, len(shape)))
    check_gradients(lambda a: a.unsqueeze(axis), x)
    check_gradients(lambda a: a.squeeze(), x)
    ones = [i for i, n in enumerate(shape) if n == 1]
    if ones:
        check_gradients(lambda a: a.squeeze(ones[0] - len(shape)), x)
    # expand: size-1 axes grow, and new leading axes appear; the gradient sums the copies.
    grown = tuple(3 if n == 1 else n for n in shape)
    check_gradients(lambda a: a.expand((2,) + grown), x)
    if shape:
        check_gradients(lambda a: a.expand((-1,) * len(shape)), x)


@st.composite
def basic_index(draw, shape):
    """A tuple of ints and slices (negative steps included) for ``shape``."""
    parts = []
    for n in shape[:draw(st.integers(0, len(shape)))]:
        if n and draw(st.booleans()):
            parts.append(draw(st.integers(-n, n - 1)))
        else:
            start = draw(st.none() | st.integers(-n - 1, n + 1))
            stop = draw(st.none() | st.integers(-n - 1, n + 1))
            step = draw(st.sampled_from([None, 1, 2, -1, -2]))
            parts.append(slice(start, stop, step))
    return tuple(parts)


@SETTINGS
@given(shape=shapes, seed=seeds, data=st.data())
def test_getitem_basic(shape, seed, data):
    x = normal(seed, shape)
    index = data.draw(basic_index(shape))
    check_gradients(lambda a: a[index], x)
    np.testing.assert_array_equal(md.tensor(x, dtype=np.float64)[index].numpy(), x[index])


@SETTINGS
@given(shape=nonempty, seed=seeds, data=st.data())
def test_getitem_integer_array_with_repeats_scatter_adds(shape, seed, data):
    x = normal(seed, shape)
    rows = np.array(data.draw(st.lists(st.integers(-shape[0], shape[0] - 1), max_size=6)),
                    dtype=np.int64)
    check_gradients(lambda a: a[rows], x)
    check_gradients(lambda a: a[md.tensor(rows)], x)
    if len(shape) >= 2:
        cols = np.array(data.draw(st.lists(st.integers(0, shape[1] - 1), min_size=len(rows),
                                           max_size=len(rows))), dtype=np.int64)
        check_gradients(lambda a: a[rows, cols], x)
        check_gradients(lambda a: a[..., [shape[-1] - 1] * 3], x)


def test_getitem_repeated_index_accumulates():
    x = md.tensor(np.arange(3.0), dtype=np.float64, requires_grad=True)
    x[[0, 0, 2, 0]].sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [3, 0, 1])


@SETTINGS
@given(shape=nonempty, seed=seeds)
def test_getitem_bool_mask(shape, seed):
    x = normal(seed, shape)
    check_gradients(lambda a: a[x > 0], x)
    check_gradients(lambda a: a[md.tensor(x > 0)], x)
    check_gradients(lambda a: a[a > 0] * 2, x)
    row_mask = np.arange(shape[0]) % 2 == 0
    check_gradients(lambda a: a[row_mask], x)


def test_getitem_none_and_ellipsis():
    x = normal(0, (3, 2, 2))
    check_gradients(lambda a: a[None, ..., 1], x)
    check_gradients(lambda a: a[1, None, :, ::-1], x)


@SETTINGS
@given(shape=nonempty, seed=seeds, data=st.data(), n=st.integers(1, 3))
def test_cat_and_stack(shape, seed, data, n):
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    arrays = []
    for i in range(n):
        piece = list(shape)
        piece[axis] = data.draw(st.integers(0, 3))
        arrays.append(normal(seed + i, tuple(piece)))
    check_gradients(lambda *ts: md.cat(ts, axis=axis), *arrays)
    np.testing.assert_array_equal(
        md.cat([md.tensor(a, dtype=np.float64) for a in arrays], dim=axis).numpy(),
        np.concatenate(arrays, axis=axis))
    same = [normal(seed + i, shape) for i in range(n)]
    new_axis = data.draw(st.integers(-len(shape) - 1, len(shape)))
    check_gradients(lambda *ts: md.stack(ts, axis=new_axis), *same)


@SETTINGS
@given(shapes=hnp.mutually_broadcastable_shapes(num_shapes=3, min_dims=0, max_dims=3,
                                                 min_side=0, max_side=3), seed=seeds)
def test_where(shapes, seed):
    c_shape, a_shape, b_shape = shapes.input_shapes
    condition = normal(seed, c_shape) > 0
    check_gradients(lambda a, b: md.where(condition, a, b), normal(seed + 1, a_shape),
                    normal(seed + 2, b_shape))
    check_gradients(lambda a: md.where(md.tensor(condition), a, 0.0), normal(seed + 1, a_shape))
    check_gradients(lambda b: md.where(condition, 1.5, b), normal(seed + 2, b_shape))
