"""Ops without a gradient (argmax, comparisons, logical ops) are recorded for tracers but never
join the autograd graph; gradients still flow around them (through where, to the chosen values)."""

from __future__ import annotations

import numpy as np
import pytest

import minidl as md
from minidl.autograd import tracing
from minidl.ops import reduction


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
    assert recorder.ops == [{"argmax": "ArgMax", "argmin": "ArgMin"}[name]]


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
