"""Autograd semantics: what backward accumulates, when graphs are recorded, kept and freed."""

from __future__ import annotations

import numpy as np
import pytest

import minidl as md
from gradcheck_helpers import check_gradients


def leaf(values, dtype=np.float64):
    return md.tensor(np.asarray(values), dtype=dtype, requires_grad=True)


def test_scalar_backward_fills_leaf_grad():
    x = leaf([1.0, -2.0, 3.0])
    (x * 2 + 1).relu().sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [2.0, 0.0, 2.0])


def test_gradients_accumulate_across_backward_calls():
    x = leaf([1.0, 2.0])
    (x * 2).sum().backward()
    (x * 3).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [5.0, 5.0])


def test_accumulation_does_not_mutate_a_grad_already_handed_out():
    x = leaf([1.0, 2.0])
    x.sum().backward()
    first = x.grad.numpy().copy()
    held = x.grad
    x.sum().backward()
    np.testing.assert_array_equal(held.numpy(), first)
    np.testing.assert_array_equal(x.grad.numpy(), [2.0, 2.0])


def test_tensor_used_twice_receives_both_gradients():
    x = leaf([3.0, -1.0])
    (x * x).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [6.0, -2.0])
    y = leaf([3.0, -1.0])
    (y + y).sum().backward()
    np.testing.assert_array_equal(y.grad.numpy(), [2.0, 2.0])


def test_diamond_graph_sums_both_paths():
    x = leaf([2.0])
    a, b = x * 3, x.exp()
    (a * b).sum().backward()
    # d/dx (3x·eˣ) = 3eˣ + 3x·eˣ
    np.testing.assert_allclose(x.grad.numpy(), 3 * np.exp(2.0) * (1 + 2.0))


def test_no_grad_records_nothing_and_enable_grad_turns_it_back_on():
    x = leaf([1.0])
    with md.no_grad():
        assert not md.is_grad_enabled()
        y = x * 2
        with md.enable_grad():
            z = x * 2
        w = x * 2
    assert md.is_grad_enabled()
    assert not y.requires_grad and y.grad_fn is None
    assert z.requires_grad and z.grad_fn is not None
    assert not w.requires_grad
    with pytest.raises(RuntimeError, match="does not require grad"):
        y.sum().backward()


def test_no_grad_as_decorator_restores_the_mode_after_an_exception():
    @md.no_grad()
    def double(t):
        assert not md.is_grad_enabled()
        return t * 2

    assert not double(leaf([1.0])).requires_grad

    with pytest.raises(ZeroDivisionError):
        with md.no_grad():
            1 / 0
    assert md.is_grad_enabled()


def test_detach_cuts_the_graph_and_shares_memory():
    x = leaf([1.0, 2.0])
    y = x * 2
    d = y.detach()
    assert not d.requires_grad and d.is_leaf
    assert np.shares_memory(d.numpy(), y.numpy())
    (x * d).sum().backward()  # d is a constant: the gradient is d, not 4x
    np.testing.assert_array_equal(x.grad.numpy(), [2.0, 4.0])


def test_requires_grad_propagates_to_results_only_when_an_input_requires_it():
    x, c = leaf([1.0]), md.tensor(np.array([2.0]), dtype=np.float64)
    assert (x * c).requires_grad
    assert not (c * c).requires_grad
    assert (x * c).grad_fn is not None and (x * c).is_leaf is False
    assert x.is_leaf and x.grad_fn is None


def test_constant_operand_gets_no_grad():
    x, c = leaf([1.0]), md.tensor(np.array([2.0]), dtype=np.float64)
    (x * c).sum().backward()
    assert c.grad is None


def test_graph_is_freed_after_backward_so_a_second_backward_raises():
    x = leaf([1.0, 2.0])
    y = (x * x).sum()
    y.backward()
    with pytest.raises(RuntimeError, match="second time"):
        y.backward()


def test_retain_graph_allows_a_second_backward():
    x = leaf([1.0, 2.0])
    y = (x * x).exp().sum()
    y.backward(retain_graph=True)
    once = x.grad.numpy().copy()
    y.backward()
    np.testing.assert_allclose(x.grad.numpy(), 2 * once)


def test_retain_grad_keeps_a_non_leaf_gradient():
    x = leaf([1.0, 2.0])
    h = x * 3
    h.retain_grad()
    other = x * 4
    (h * h + other).sum().backward()
    np.testing.assert_array_equal(h.grad.numpy(), [6.0, 12.0])
    np.testing.assert_array_equal(x.grad.numpy(), [18.0 + 4, 36.0 + 4])
    assert other.grad is None


def test_non_scalar_backward_needs_grad_of_the_output_shape():
    x = leaf([1.0, 2.0])
    y = x * 2
    with pytest.raises(RuntimeError, match="scalar"):
        y.backward()
    with pytest.raises(ValueError, match=r"\(3,\)"):
        (x * 2).backward(grad=np.ones(3))
    (x * 2).backward(grad=np.array([1.0, 10.0]))
    np.testing.assert_array_equal(x.grad.numpy(), [2.0, 20.0])


def test_backward_accepts_a_tensor_grad():
    x = leaf([1.0, 2.0])
    (x * 2).backward(grad=md.tensor(np.array([1.0, 1.0]), dtype=np.float64))
    np.testing.assert_array_equal(x.grad.numpy(), [2.0, 2.0])


@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.bool_])
def test_non_float_tensors_cannot_require_grad(dtype):
    with pytest.raises(TypeError, match="floating point"):
        md.tensor(np.zeros(2, dtype), requires_grad=True)
    with pytest.raises(TypeError):
        md.tensor(np.zeros(2, dtype)).requires_grad_()


def test_requires_grad_false_on_a_non_leaf_is_refused():
    y = leaf([1.0]) * 2
    with pytest.raises(RuntimeError, match="detach"):
        y.requires_grad_(False)


def test_grad_dtype_follows_the_leaf_through_a_cast():
    x = md.tensor(np.ones(3, np.float32), requires_grad=True)
    (x.double() * 2).sum().backward()
    assert x.grad.dtype == np.float32
    np.testing.assert_array_equal(x.grad.numpy(), [2, 2, 2])


def test_float32_graph_keeps_float32_everywhere():
    x = md.tensor(np.ones((2, 3), np.float32), requires_grad=True)
    y = ((x * 2 + 1) ** 2 / 3 - x.mean()).exp().sum()
    assert y.dtype == np.float32
    y.backward()
    assert x.grad.dtype == np.float32


def test_deep_chain_of_ten_thousand_ops_has_no_recursion_error():
    x = leaf([1.0])
    y = x
    for _ in range(10_000):
        y = y * 1.0001
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [1.0001 ** 10_000], rtol=1e-9)


_DROP_A_DEEP_GRAPH = """
import gc, sys, weakref
import numpy as np
import minidl as md
problems = []  # errors inside deallocation are never raised: Python hands them to this hook
sys.unraisablehook = lambda unraisable: problems.append(repr(unraisable.exc_value))
x = md.tensor(np.ones(1), requires_grad=True)
y = x + 1.0
first = weakref.ref(y)          # the deepest non-leaf tensor of the chain
for _ in range(50_000):
    y = y + 1.0
gc.disable()                    # the graph must go by reference counting alone: no cycles
sys.setrecursionlimit(100)      # and without Python-level recursion
del y
sys.setrecursionlimit(10_000)
print(first() is None, len(problems), problems[:1])
"""


def test_dropping_a_deep_graph_frees_it_at_once_without_recursion():
    # Run apart: the test lowers the recursion limit and switches the cycle collector off.
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", _DROP_A_DEEP_GRAPH], capture_output=True,
                         text=True, check=True)
    assert out.stdout.strip() == "True 0 []", out.stdout + out.stderr[-2000:]


def test_grad_fn_names_the_op():
    x = leaf([1.0])
    assert (x * 2).grad_fn.name == "MulFunction"
    assert "grad_fn=<MulFunction>" in repr(x * 2)


def test_zero_grad_on_a_leaf():
    x = leaf([1.0, 2.0])
    (x * 2).sum().backward()
    x.grad = None
    (x * 3).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [3.0, 3.0])


def test_inputs_not_on_the_path_to_the_output_get_no_grad():
    x, y = leaf([1.0]), leaf([2.0])
    unused = y * 5  # noqa: F841
    (x * 2).sum().backward()
    assert y.grad is None


def test_checker_accepts_a_correct_rule_and_rejects_a_wrong_one():
    rng = np.random.default_rng(0)
    check_gradients(lambda a, b: a * b + a.exp(), rng.standard_normal((2, 3)),
                    rng.standard_normal(3))

    class WrongExp(md.autograd.function.Function):
        def forward(self, a):
            self.out = self.backend.math_function(a, "exp")
            return self.out

        def backward(self, grad):
            return self.backend.mul(grad, self.backend.mul(self.out, 2.0))  # off by a factor 2

    with pytest.raises(AssertionError, match="gradient of input 0"):
        check_gradients(lambda a: WrongExp.apply(a), rng.standard_normal(4))


def test_gradient_ready_hooks_see_each_leaf_once_with_its_final_gradient():
    from minidl.autograd.engine import (register_backward_finished_hook,
                                        register_gradient_ready_hook)
    w = md.tensor([1.0, 2.0], requires_grad=True)
    b = md.tensor([0.5, 0.5], requires_grad=True)
    events = []
    ready = register_gradient_ready_hook(
        lambda leaf: events.append(("ready", leaf is w, leaf.grad.numpy().tolist())))
    finished = register_backward_finished_hook(lambda: events.append(("finished",)))
    try:
        h = w * w + b      # w is used twice: its gradient is final only after both uses
        (h * w).sum().backward()
    finally:
        ready.remove()
        finished.remove()
    # d/dw (w^3 + b w) = 3 w^2 + b; d/db = w. b's use is nearer the output: it is ready first.
    assert events == [("ready", False, [1.0, 2.0]), ("ready", True, [3.5, 12.5]), ("finished",)]
