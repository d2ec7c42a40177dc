"""Ops without a gradient (argmax, comparisons, logical ops) are recorded for tracers but never
join the autograd graph; gradients still flow around them (through where, to the chosen values)."""

from __future__ import annotations

import numpy as np
import pytest

import minidl as md
from minidl.autograd import tracing
from minidl.ops import elementwise as ew, reduction


def leaf(values, dtype=np.float64):
    return md.tensor(np.asarray(values), dtype=dtype, requires_grad=True)


class Recorder:
    """A tracer that only lists the ops it was told about."""

    def __init__(self):
        self.ops = []

    def on_module(self, module, args, kwargs, run):
        return run()

    def on_function(self, function_class, inputs, attrs, output):
        self.ops.append(function_class.__name__)


@pytest.mark.parametrize("name", ["argmax", "argmin"])
def test_argmax_and_argmin_have_no_graph_but_are_traced(name):
    x = leaf([[1.0, 5.0, 2.0], [7.0, -1.0, 7.0]])
    with tracing.tracing(Recorder()) as recorder:
        index = getattr(x, name)(axis=1)
    assert not index.requires_grad and index._node is None
    assert index.dtype == np.int64
    expected = getattr(np, name)(x.numpy(), axis=1)
    np.testing.assert_array_equal(index.numpy(), expected)
    assert recorder.ops == [{"argmax": "ArgMaxFunction", "argmin": "ArgMinFunction"}[name]]


def test_argmax_keepdims_flattened_and_zero_dim():
    x = md.tensor(np.array([[1.0, 9.0], [9.0, 0.0]]))
    assert x.argmax().item() == 1  # the first of the tied maxima, in row-major order
    assert x.argmax(axis=0, keepdims=True).shape == (1, 2)
    assert x.argmin(axis=-1).numpy().tolist() == [0, 1]
    # A 0-d tensor: axis 0 means "everything", as in NumPy (this used to raise a TypeError).
    assert md.tensor(3.0).argmax(0).item() == 0
    assert reduction.argmin(md.tensor(3.0), axis=-1).item() == 0


def test_an_index_used_downstream_does_not_block_backward():
    x = leaf([[1.0, 5.0, 2.0], [7.0, -1.0, 3.0]])
    best = x.argmax(axis=1).numpy()
    picked = x[np.arange(2), best]
    picked.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [[0, 1, 0], [1, 0, 0]])


COMPARISONS = {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal,
               "gt": np.greater, "ge": np.greater_equal}


@pytest.mark.parametrize("name", sorted(COMPARISONS))
def test_comparisons_give_bool_tensors_without_grad(name):
    x = leaf([[-1.0, 0.0, 2.0], [3.0, 0.5, -0.5]])
    y = leaf([0.0, 0.5, 2.0])
    with tracing.tracing(Recorder()) as recorder:
        result = getattr(x, name)(y)
        with_scalar = getattr(x, name)(0.5)
    for out, other in ((result, y.numpy()), (with_scalar, 0.5)):
        assert out.dtype == np.bool_
        assert not out.requires_grad and out._node is None
        np.testing.assert_array_equal(out.numpy(), COMPARISONS[name](x.numpy(), other))
    assert recorder.ops == ["CompareFunction", "CompareFunction"]


def test_operators_are_the_comparisons():
    x = leaf([1.0, 2.0, 3.0])
    assert (x > 2).numpy().tolist() == [False, False, True]
    assert (2 < x).numpy().tolist() == [False, False, True]  # reflected: x.__gt__(2)
    assert (x == 2).numpy().tolist() == [False, True, False]
    assert (x != 2).numpy().tolist() == [True, False, True]
    assert not (x <= 2).requires_grad


def test_comparisons_keep_their_error_messages():
    with pytest.raises(ValueError, match=r"gt: shapes \(2,\) and \(3,\)"):
        md.tensor([1.0, 2.0]) > md.tensor([1.0, 2.0, 3.0])
    with pytest.raises(TypeError, match="eq: expected at least one Tensor"):
        ew.eq(1, 2)


def test_logical_ops_on_bool_tensors():
    a = md.tensor([True, True, False, False])
    b = md.tensor([True, False, True, False])
    assert ew.logical_and(a, b).numpy().tolist() == [True, False, False, False]
    assert ew.logical_or(a, b).numpy().tolist() == [True, True, True, False]
    assert ew.logical_not(a).numpy().tolist() == [False, False, True, True]
    assert ew.logical_and(a, True).numpy().tolist() == [True, True, False, False]
    with pytest.raises(TypeError, match="logical_and: operands must be bool"):
        ew.logical_and(a, md.tensor([1.0, 0.0, 1.0, 0.0]))
    with pytest.raises(TypeError, match="logical_not"):
        ew.logical_not(md.tensor([1.0]))


def test_backward_through_where_on_a_mask_of_its_own_input():
    # Leaky ReLU by mask: the gradient is 1 where x > 0 and 0.1 elsewhere; the mask gets none.
    x = leaf([-2.0, -0.5, 0.5, 3.0])
    mask = x > 0
    y = md.where(mask, x, x * 0.1)
    assert y.requires_grad and y._node.name == "WhereFunction"
    (y * y).sum().backward()
    expected = 2 * y.numpy() * np.where(x.numpy() > 0, 1.0, 0.1)
    np.testing.assert_allclose(x.grad.numpy(), expected)
    assert mask.grad is None


def test_where_condition_is_an_input_that_receives_no_gradient():
    a, b = leaf([1.0, 2.0, 3.0]), leaf([10.0, 20.0, 30.0])
    condition = md.tensor([True, False, True])
    with tracing.tracing(Recorder()) as recorder:
        y = md.where(condition, a, b)
    assert recorder.ops == ["WhereFunction"]
    assert y._node.parents == (a, b, condition)
    y.backward(np.array([1.0, 2.0, 3.0]))
    np.testing.assert_array_equal(a.grad.numpy(), [1.0, 0.0, 3.0])
    np.testing.assert_array_equal(b.grad.numpy(), [0.0, 2.0, 0.0])
    # Plain NumPy and Python conditions still work, broadcasting as before.
    np.testing.assert_array_equal(md.where(np.array([True, False, True]), a, 0.0).numpy(),
                                  [1.0, 0.0, 3.0])
    np.testing.assert_array_equal(md.where(True, a, b).numpy(), [1.0, 2.0, 3.0])


def test_non_differentiable_ops_do_not_keep_their_inputs_alive():
    # No node links the output to the inputs, so a mask does not hold a graph in memory.
    import gc
    import weakref

    x = leaf([1.0, -1.0])
    h = x * 2
    mask, alive = h > 0, weakref.ref(h)
    del h
    gc.collect()
    assert alive() is None and mask.numpy().tolist() == [True, False]
