"""Gradients of basic-index slices of one tensor: written into one buffer when the slices are
disjoint, with the bits of the index_add sums they replace (signed zeros and NaN included)."""

from __future__ import annotations

import numpy as np
import pytest

import minidl as md
from minidl.autograd.slice_gradients import _disjoint


def _count_index_adds(monkeypatch, tensor) -> list:
    calls = []
    backend = tensor.backend
    index_add = backend.index_add

    def counted(*args):
        calls.append(args[1])
        return index_add(*args)

    monkeypatch.setattr(backend, "index_add", counted)
    return calls


def _backward_through(x, indices, gradients):
    # d/dx of sum_i <x[index_i], g_i>: each slice receives exactly g_i (1 * g_i, bit for bit).
    loss = None
    for index, gradient in zip(indices, gradients):
        term = (x[index] * md.tensor(gradient)).sum()
        loss = term if loss is None else loss + term
    loss.backward()
    return x.grad.numpy()


def _gradients(shape, dtype, count):
    rng = np.random.default_rng(0)
    gradients = [rng.standard_normal(shape).astype(dtype) for _ in range(count)]
    for gradient in gradients:
        gradient.flat[0], gradient.flat[1] = -0.0, np.nan
    return gradients


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_disjoint_slices_fill_one_buffer_with_the_sums_bits(monkeypatch, dtype):
    x = md.tensor(np.ones((2, 3, 4, 5), dtype), requires_grad=True)
    indices = [(slice(None), part) for part in (0, 1, -1)]  # the q/k/v split of a qkv output
    gradients = _gradients((2, 4, 5), dtype, 3)
    calls = _count_index_adds(monkeypatch, x)
    got = _backward_through(x, indices, gradients)
    # The sum of one index_add per slice, as the engine computed it before: -0 becomes +0.
    total = None
    for index, gradient in zip(indices, gradients):
        part = np.zeros((2, 3, 4, 5), dtype)
        part[index] = gradient
        total = part if total is None else total + part
    assert calls == []  # no zero array of x's full shape per slice
    assert got.tobytes() == total.tobytes()
    assert np.signbit(got[0, 0, 0, 0]) == np.False_


def test_a_single_slice_keeps_its_gradient_as_index_add_gives_it():
    x = md.tensor(np.ones((3, 4)), requires_grad=True)
    gradient = _gradients((4,), np.float64, 1)
    got = _backward_through(x, [(1,)], gradient)
    assert np.signbit(got[1, 0])  # -0 stays -0: nothing was added to it
    assert np.isnan(got[1, 1]) and not got[0].any() and not got[2].any()


def test_overlapping_slices_are_summed_as_before(monkeypatch):
    x = md.tensor(np.ones((4, 3)), requires_grad=True)
    indices = [(slice(0, 3),), (slice(2, 4),)]  # row 2 in both
    gradients = [np.full((3, 3), -0.0), np.full((2, 3), -0.0)]
    calls = _count_index_adds(monkeypatch, x)
    got = _backward_through(x, indices, gradients)
    assert len(calls) == 2
    # -0 + -0 = -0 where both slices send a gradient; -0 + 0 = +0 where one does.
    np.testing.assert_array_equal(np.signbit(got[:, 0]), [False, False, True, False])


def test_a_bool_index_is_not_read_as_a_position():
    x = md.tensor(np.ones((2, 3)), requires_grad=True)
    (x[True].sum() + x[0].sum() * 2).backward()
    np.testing.assert_array_equal(x.grad.numpy(), [[3, 3, 3], [1, 1, 1]])


def test_slices_mixed_with_a_whole_tensor_gradient():
    x = md.tensor(np.arange(6.0).reshape(2, 3), requires_grad=True)
    (x[:, 0].sum() * 2 + x[:, 1:].sum() * 3 + (x * x).sum()).backward()
    np.testing.assert_array_equal(x.grad.numpy(),
                                  2 * np.arange(6.0).reshape(2, 3) + [[2, 3, 3], [2, 3, 3]])


@pytest.mark.parametrize("indices, disjoint", [
    ([(0,), (1,), (3,)], True),
    ([(slice(None), -1), (slice(None), 2)], False),  # -1 is 2 on an axis of 3
    ([(slice(0, 4, 2),), (slice(1, 4, 2),)], True),  # even rows, odd rows
    ([(slice(3, None, -1),), (slice(3, 4),)], False),
    ([(slice(2, None),), (slice(0, 2),), (slice(0, 0),)], True),  # an empty slice: nothing
    ([(slice(0, 2), 0), (slice(0, 4), 1), (slice(1, 3), 2)], True),  # apart on axis 1 alone
    ([(0, 0), (0, 1), (1, 0)], False),  # pairwise apart, but on no one axis: summed as before
    ([(None, 0), (None, 1)], False),  # None: not placed, counted as overlapping
    ([(True,), (0,)], False),  # x[True] is all of x under a new axis, not row 1
])
def test_disjoint(indices, disjoint):
    assert _disjoint(indices, (4, 3)) is disjoint
