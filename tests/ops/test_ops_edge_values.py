"""PyTorch's answers at the edges: zero variance, negative scalars meeting unsigned tensors,
integer division by zero, integers among advanced indices, in-place // and %, NaN gradients,
tied maxima in adaptive pooling and one-element groups.

Each test states PyTorch 2's result as a literal, so it still means something without torch;
where torch is installed the same expression is also run there and compared."""

import numpy as np
import pytest

import minidl as md
import minidl.nn.functional as F

NAN = float("nan")


def _torch():
    try:
        import torch
    except ImportError:
        return None
    return torch


def grad_of(expression, values, lib=md):
    """The gradient of ``expression(x, lib).sum()`` at ``values`` (float32)."""
    x = lib.tensor(np.asarray(values, dtype=np.float32), requires_grad=True)
    expression(x, lib).sum().backward()
    return x.grad.numpy()


def assert_grad_matches(expression, values, expected):
    np.testing.assert_array_equal(grad_of(expression, values), np.float32(expected))
    torch = _torch()
    if torch is not None:
        np.testing.assert_array_equal(grad_of(expression, values, torch), np.float32(expected))


# -- 1. variance and standard deviation at zero spread and degenerate corrections ------------

@pytest.mark.parametrize("expression,values,expected", [
    (lambda x, lib: x.std(correction=0), [2.0, 2.0, 2.0], [0.0, 0.0, 0.0]),
    (lambda x, lib: x.std(), [2.0, 2.0, 2.0], [0.0, 0.0, 0.0]),
    (lambda x, lib: x.std(dim=0, correction=0), [[2.0, 3.0]], [[0.0, 0.0]]),
    (lambda x, lib: x.var(correction=0), [2.0, 2.0, 2.0], [0.0, 0.0, 0.0]),
    # N = correction: the divisor is 0, the gradient 2(x - mean)/0, ±inf away from the mean
    (lambda x, lib: x.var(dim=0, correction=2), [[2.0, 3.0], [2.0, 1.0]],
     [[NAN, np.inf], [NAN, -np.inf]]),
], ids=["std-constant", "std-constant-unbiased", "std-length-1-axis", "var-constant",
        "var-correction-equals-n"])
def test_var_and_std_gradients_at_zero_spread(expression, values, expected):
    assert_grad_matches(expression, values, expected)


def test_std_of_one_element_with_correction_is_nan_like_torch():
    x = md.tensor([[2.0, 3.0]])
    np.testing.assert_array_equal(x.std(dim=0).numpy(), [NAN, NAN])
    np.testing.assert_array_equal(x.std(dim=0, correction=0).numpy(), [0.0, 0.0])


# -- 2. a negative 0-d integer tensor or number divides an unsigned tensor as itself ----------

def test_unsigned_divided_by_a_negative_integer_keeps_its_sign():
    u = md.tensor(np.uint8([3, 250, 7]))
    expected = np.float32([-0.75, -62.5, -1.75])
    for divisor in (md.tensor(np.array(-4)), -4):
        out = u / divisor
        assert out.dtype == np.float32
        np.testing.assert_array_equal(out.numpy(), expected)


# -- 3. integer // and % by zero raise ------------------------------------------------------

@pytest.mark.parametrize("expression", [
    lambda: md.tensor([5]) // md.tensor([0]),
    lambda: md.tensor([5, 3]) % md.tensor([2, 0]),
    lambda: md.tensor(np.uint8([5])) // 0,
    lambda: 7 % md.tensor([0]),
], ids=["floordiv", "remainder", "uint8-by-number", "reflected"])
def test_integer_division_by_zero_raises(expression):
    with pytest.raises(ZeroDivisionError, match="integer division by zero"):
        expression()


def test_float_division_by_zero_still_follows_ieee():
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal((md.tensor([5.0, -1.0]) // md.tensor([0.0, 0.0])).numpy(),
                                      [np.inf, -np.inf])


# -- 4. integers among advanced indices select first, as basic indexing ---------------------

@pytest.mark.parametrize("index,shape", [
    ((0, slice(None), [1, 3]), (3, 2)),
    ((Ellipsis, 0, slice(None), [1, 2]), None),
    ((0, slice(None), [[1], [2]], 1), None),
    ((slice(None), [0, 1], slice(None), 0), None),
    ((0, [0, 1], slice(None), [1, 2]), None),      # arrays apart: the block goes first
    ((slice(None), 0, [1, 2]), None),               # adjacent: both agree already
], ids=["int-slice-array", "ellipsis", "int-after", "array-slice-int", "separated", "adjacent"])
def test_integer_and_array_indices_place_the_block_like_torch(index, shape):
    values = np.arange(2 * 3 * 4 * 5, dtype=np.float32).reshape(2, 3, 4, 5)
    if shape is not None:
        values = values[:, :, :, 0]
    x = md.tensor(values, requires_grad=True)
    out = x[index]
    weights = np.arange(out.numel(), dtype=np.float32).reshape(out.shape)
    (out * md.tensor(weights)).sum().backward()
    if shape is not None:
        assert out.shape == shape
        # x[0, :, [1, 3]][i, j] is x[0, i, [1, 3][j]]
        np.testing.assert_array_equal(out.numpy(), values[0][:, [1, 3]])
    torch = _torch()
    if torch is not None:
        t = torch.tensor(values, requires_grad=True)
        expected = t[index]
        (expected * torch.tensor(weights)).sum().backward()
        assert out.shape == tuple(expected.shape)
        np.testing.assert_array_equal(out.numpy(), expected.detach().numpy())
        np.testing.assert_array_equal(x.grad.numpy(), t.grad.numpy())


def test_assigning_through_integer_and_array_indices_uses_the_same_layout():
    x = md.zeros((2, 3, 4))
    x[0, :, [1, 3]] = md.tensor(np.float32([[1, 2], [3, 4], [5, 6]]))
    expected = np.zeros((2, 3, 4), np.float32)
    expected[0, :, 1] = [1, 3, 5]
    expected[0, :, 3] = [2, 4, 6]
    np.testing.assert_array_equal(x.numpy(), expected)


# -- 5. //= and %= edit in place ------------------------------------------------------------

def test_floor_divide_and_remainder_assignments_edit_in_place():
    a = md.tensor([7, 8, 9])
    alias = a
    a //= 2
    assert a is alias
    np.testing.assert_array_equal(alias.numpy(), [3, 4, 4])
    a %= 3
    assert a is alias
    np.testing.assert_array_equal(alias.numpy(), [0, 1, 1])
    view = md.tensor([5.0, 6.0])
    row = view[:1]
    view %= 4.0
    np.testing.assert_array_equal(row.numpy(), [1.0])


# -- 6. NaN in maximum/minimum, abs and amax -----------------------------------------------

def test_maximum_and_minimum_with_a_nan_give_the_gradient_to_both():
    for op in ("maximum", "minimum"):
        assert_grad_matches(lambda x, lib: getattr(lib, op)(x, lib.tensor([1.0, NAN])),
                            [NAN, 2.0], [1.0, 1.0])
        assert_grad_matches(lambda x, lib: getattr(lib, op)(lib.tensor([1.0, NAN]), x),
                            [NAN, 2.0], [1.0, 1.0])
        # a tie still splits evenly
        assert_grad_matches(lambda x, lib: getattr(lib, op)(x, lib.tensor([3.0])), [3.0], [0.5])


def test_abs_gradient_at_nan_is_zero():
    assert_grad_matches(lambda x, lib: x.abs(), [NAN, 0.0, -1.0, 2.0], [0.0, 0.0, -1.0, 1.0])


def test_amax_over_nans_gives_nan_gradients_and_max_splits_between_them():
    assert_grad_matches(lambda x, lib: x.amax(), [NAN, NAN, 1.0], [NAN, NAN, NAN])
    assert_grad_matches(lambda x, lib: x.amin(dim=1), [[NAN, 1.0], [2.0, 2.0]],
                        [[NAN, NAN], [0.5, 0.5]])
    # max()/min() without a dim split the gradient between the NaNs (PyTorch's
    # evenly_distribute_backward)
    assert_grad_matches(lambda x, lib: x.max(), [NAN, NAN, 1.0], [0.5, 0.5, 0.0])
    assert_grad_matches(lambda x, lib: x.amax(), [1.0, 3.0, 3.0], [0.0, 0.5, 0.5])


# -- 7. adaptive max pooling routes a tie to the first index --------------------------------

@pytest.mark.parametrize("values,size,expected", [
    ([[1.0, 3.0, 2.0], [3.0, 0.0, 3.0]], (1, 2), [[0.0, 2.0, 0.0], [0.0, 0.0, 0.0]]),
    ([[1.0, 3.0], [3.0, 0.0]], 1, [[0.0, 1.0], [0.0, 0.0]]),
    ([[0.0, 0.0, 0.0], [0.0, 0.0, 0.0], [0.0, 0.0, 0.0]], 2,
     [[1.0, 1.0, 0.0], [1.0, 1.0, 0.0], [0.0, 0.0, 0.0]]),
], ids=["overlapping", "equal-windows", "all-zero-after-relu"])
def test_adaptive_max_pool2d_sends_a_tie_to_the_first_index(values, size, expected):
    assert_grad_matches(lambda x, lib: lib.nn.functional.adaptive_max_pool2d(x[None, None], size),
                        values, expected)


# -- 8. group_norm with one value per group -------------------------------------------------

def test_group_norm_of_one_value_per_group_is_zero():
    x = md.tensor(np.float32([[1.0], [2.0]]), requires_grad=True)
    out = F.group_norm(x, 1)
    np.testing.assert_array_equal(out.numpy(), [[0.0], [0.0]])
    out.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [[0.0], [0.0]])
    assert_grad_matches(lambda t, lib: lib.nn.functional.group_norm(t, 1), [[1.0], [2.0]],
                        [[0.0], [0.0]])


# -- found by the differential test at the edges (test_ops_torch_edges.py) -------------------

def test_cross_entropy_with_a_logit_far_below_the_largest_is_finite():
    # log-probability -1e308 for two classes: the (absent) smoothing term must not make it nan
    logits = md.tensor(np.float64([[1e308, 0.0, 0.0], [0.0, 0.0, 0.0]]))
    losses = F.cross_entropy(logits, md.tensor([0, 2]), reduction="none").numpy()
    np.testing.assert_allclose(losses, [0.0, np.log(3.0)], rtol=1e-12)


def test_any_all_of_uint8_are_uint8_and_argmax_of_bool_is_refused():
    u = md.tensor(np.uint8([0, 3]))
    assert u.any().dtype == np.uint8 and u.all(dim=0).dtype == np.uint8
    np.testing.assert_array_equal(u.any().numpy(), 1)
    with pytest.raises(TypeError, match="argmax: not defined for bool"):
        md.tensor([True, False]).argmax()
    values, indices = md.tensor([False, True]).max(dim=0)  # defined, as in PyTorch
    assert bool(values) and int(indices) == 1


def test_bce_with_logits_of_mixed_float_dtypes_has_the_targets_dtype():
    logits = md.tensor(np.float64([0.0, 1.0]), requires_grad=True)
    loss = F.binary_cross_entropy_with_logits(logits, md.tensor(np.float32([0.0, 1.0])))
    assert loss.dtype == np.float32
    loss.backward()
    assert logits.grad.dtype == np.float64


def test_norms_of_empty_inputs_are_empty_and_group_norm_checks_like_torch():
    empty = md.tensor(np.zeros((0, 2), np.float32), requires_grad=True)
    assert F.layer_norm(empty, (2,)).shape == (0, 2)
    assert F.group_norm(empty, 1).shape == (0, 2)
    with pytest.raises(ValueError, match="more than 1 value per channel"):
        F.group_norm(md.tensor(np.float32([[0.5]])), 1)


def test_adaptive_max_pool2d_takes_the_last_nan_of_a_window():
    # PyTorch's scan replaces the running maximum by every NaN it meets
    values = [[NAN, NAN, NAN], [NAN, NAN, NAN]]
    assert_grad_matches(lambda x, lib: lib.nn.functional.adaptive_max_pool2d(x[None, None], (1, 2)),
                        values, [[0.0, 0.0, 0.0], [0.0, 1.0, 1.0]])


def test_elu_of_minus_infinity_is_minus_alpha():
    np.testing.assert_array_equal(F.elu(md.tensor(np.float32([-np.inf, -200.0]))).numpy(),
                                  [-1.0, -1.0])


def test_division_gradient_at_a_subnormal_divisor_of_zero_is_zero():
    b = md.tensor(np.float32(1e-40), requires_grad=True)
    (md.tensor(np.float32(0.0)) / b).backward()
    assert b.grad.numpy() == 0.0 and not np.isnan(b.grad.numpy())


def test_var_of_values_near_the_float_range_end_is_finite():
    x = md.tensor(np.float32([3e38, 3e38]))
    np.testing.assert_array_equal(x.var().numpy(), 0.0)
    np.testing.assert_array_equal((md.tensor(np.int64([])) // 0).numpy(), [])


def test_a_0_d_result_can_be_edited_in_place():
    x = md.tensor(np.array(2.0, np.float32), requires_grad=True)
    y = x * 1
    y += md.tensor(np.array(1.0, np.float32))
    y *= 3
    y.backward()
    assert float(y) == 9.0 and float(x.grad) == 3.0


def test_a_number_divided_by_a_tensor_is_the_number_times_the_reciprocal():
    # PyTorch's __rtruediv__: 1e-5 · (1/1e-40), and 1/1e-40 overflows float32
    out = 1e-5 / md.tensor(np.float32([1e-40, 4.0]))
    np.testing.assert_array_equal(out.numpy(), np.float32([np.inf, 2.5e-6]))
    assert (2 / md.tensor([4])).dtype == np.float32


def test_elu_gradient_at_nan_is_one():
    assert_grad_matches(lambda x, lib: lib.nn.functional.elu(x), [NAN, 2.0], [1.0, 1.0])


def test_bilinear_interpolation_of_infinities_makes_nans_where_torch_does():
    x = md.tensor(np.full((1, 1, 2, 2), np.inf, np.float32))
    out = F.interpolate(x, size=(3, 3), mode="bilinear").numpy()[0, 0]
    np.testing.assert_array_equal(np.isnan(out), [[True, True, True], [True, False, False],
                                                  [True, False, False]])


def test_assignment_checks_like_torch():
    x = md.zeros((2, 3))
    with pytest.raises(TypeError, match="with index arrays the dtypes must match"):
        x[1, [0, 2]] = md.tensor(np.float64(1.0))
    x[0] = md.tensor(np.float64(2.0))  # through a slice: cast, as PyTorch's copy_
    assert x.dtype == np.float32 and float(x[0, 0]) == 2.0
    with pytest.raises(ValueError, match="without overflow"):
        md.zeros((2,), dtype=np.int64)[0] = float("inf")
