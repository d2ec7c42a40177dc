"""PyTorch's rules for integer and bool tensors: negative integer powers, numbers that do not
fit an unsigned dtype, float-valued ops of integers, integer sums, arange's default float,
mixed-dtype cat/stack, and the bool arithmetic PyTorch refuses.

Expected values are PyTorch 2's, written out; with torch installed each is also compared."""

import numpy as np
import pytest

import minidl as md

F32, I64, U8 = np.float32, np.int64, np.uint8


def _torch():
    try:
        import torch
    except ImportError:
        return None
    return torch


def check(expression, values, dtype):
    """``expression(lib)`` gives ``values`` of ``dtype`` in minidl (and in torch)."""
    out = expression(md)
    assert out.dtype == dtype, out.dtype
    np.testing.assert_allclose(out.numpy(), values, rtol=1e-6)
    torch = _torch()
    if torch is not None:
        theirs = expression(torch)
        assert str(theirs.dtype).removeprefix("torch.") == np.dtype(dtype).name
        np.testing.assert_allclose(theirs.numpy(), values, rtol=1e-6)


def u8(lib, values):
    return lib.tensor(np.array(values, dtype=U8))


@pytest.mark.parametrize("expression,values,dtype", [
    (lambda lib: lib.tensor([1, -1, 2, 0, -1]) ** lib.tensor([-1, -1, -1, -2, -2]),
     [1, -1, 0, 0, 1], I64),
    (lambda lib: 2 ** lib.tensor([-1, 2]), [0, 4], I64),
    (lambda lib: lib.tensor(2) ** lib.tensor([-1, 3]), [0, 8], I64),
    (lambda lib: lib.tensor([True, False]) ** 2, [1, 0], I64),
    (lambda lib: 2 ** lib.tensor([True, False]), [2, 1], I64),
    (lambda lib: lib.tensor([True, False]) ** 2.5, [1.0, 0.0], F32),
    (lambda lib: lib.tensor([True, False]) ** False, [True, True], np.bool_),
], ids=["int-tensor-powers", "number-base", "0-d-base", "bool-base", "bool-exponent",
        "bool-float", "bool-to-bool-number"])
def test_integer_powers(expression, values, dtype):
    check(expression, values, dtype)


def test_an_integer_tensor_to_a_negative_integer_number_raises():
    with pytest.raises(ValueError, match="negative integer powers"):
        md.tensor([1, 2]) ** -1


@pytest.mark.parametrize("expression,values", [
    (lambda lib: u8(lib, [3, 250, 7]) + (-3), [0, 247, 4]),
    (lambda lib: u8(lib, [3, 250, 7]) + 300, [47, 38, 51]),
    (lambda lib: u8(lib, [3, 250, 7]) * lib.tensor(-4), [244, 24, 228]),
    (lambda lib: lib.clamp(u8(lib, [3, 250]), -3), [253, 253]),
], ids=["add-negative", "add-too-large", "0-d-negative", "clamp"])
def test_numbers_wrap_into_unsigned_tensors(expression, values):
    check(expression, values, U8)


@pytest.mark.parametrize("name", ["sqrt", "exp", "log", "sigmoid", "tanh"])
@pytest.mark.parametrize("make", [lambda lib: lib.tensor([4, 1]),
                                  lambda lib: u8(lib, [4, 1]),
                                  lambda lib: lib.tensor([True, False])],
                         ids=["int64", "uint8", "bool"])
def test_float_valued_ops_of_integers_give_float32(name, make):
    values = np.float32(make(md).numpy())
    expected = {"sqrt": np.sqrt, "exp": np.exp, "log": np.log, "tanh": np.tanh,
                "sigmoid": lambda v: 1 / (1 + np.exp(-v))}[name](values)
    with np.errstate(divide="ignore"):
        check(lambda lib: getattr(make(lib), name)(), expected, F32)


@pytest.mark.parametrize("make", [lambda lib: u8(lib, [200, 100]),
                                  lambda lib: lib.tensor(np.int32([200, 100])),
                                  lambda lib: lib.tensor([True, True])],
                         ids=["uint8", "int32", "bool"])
def test_integer_sums_are_int64(make):
    total = np.int64(make(md).numpy()).sum()
    check(lambda lib: make(lib).sum(), total, I64)


@pytest.mark.parametrize("expression,values,dtype", [
    (lambda lib: lib.arange(0, 1, 0.25), [0, 0.25, 0.5, 0.75], F32),
    (lambda lib: lib.arange(0.0, 3), [0, 1, 2], F32),
    (lambda lib: lib.arange(0, 3), [0, 1, 2], I64),
], ids=["float-step", "float-start", "ints"])
def test_arange_defaults_to_float32(expression, values, dtype):
    check(expression, values, dtype)


@pytest.mark.parametrize("expression,values,dtype", [
    (lambda lib: lib.cat([lib.tensor([2, -3]), lib.tensor([1.5])]), [2, -3, 1.5], F32),
    (lambda lib: lib.cat([lib.tensor([True]), u8(lib, [3])]), [1, 3], U8),
    (lambda lib: lib.stack([u8(lib, [3, 250]), lib.tensor([2, -3])]), [[3, 250], [2, -3]], I64),
], ids=["int-float", "bool-uint8", "stack-uint8-int64"])
def test_cat_and_stack_promote_mixed_dtypes(expression, values, dtype):
    check(expression, values, dtype)


def test_cat_gradient_reaches_each_input_in_its_own_dtype():
    a = md.tensor(np.float32([1.0, 2.0]), requires_grad=True)
    b = md.tensor(np.float64([3.0]), requires_grad=True)
    (md.cat([a, b]) * md.tensor([1.0, 2.0, 3.0])).sum().backward()
    assert a.grad.dtype == np.float32 and b.grad.dtype == np.float64
    np.testing.assert_array_equal(a.grad.numpy(), [1.0, 2.0])
    np.testing.assert_array_equal(b.grad.numpy(), [3.0])


@pytest.mark.parametrize("expression", [
    lambda lib: lib.tensor([True]) - lib.tensor([False]),
    lambda lib: lib.tensor([True]) - 1,
    lambda lib: 1 - lib.tensor([True]),
    lambda lib: lib.tensor([3]) - lib.tensor([True]),
    lambda lib: -lib.tensor([True]),
    lambda lib: lib.tensor([True]).abs(),
    lambda lib: lib.tensor([True]) ** lib.tensor([True]),
    lambda lib: lib.tensor([True]) // lib.tensor([True]),
    lambda lib: lib.tensor([True]) % lib.tensor([True]),
    lambda lib: lib.nn.functional.relu(lib.tensor([True])),
], ids=["bool-sub", "bool-sub-number", "number-sub-bool", "int-sub-bool", "neg", "abs",
        "pow", "floordiv", "remainder", "relu"])
def test_bool_arithmetic_that_torch_refuses_raises(expression):
    with pytest.raises(TypeError, match="bool"):
        expression(md)
    torch = _torch()
    if torch is not None:
        with pytest.raises((RuntimeError, NotImplementedError)):
            expression(torch)


def test_bool_arithmetic_that_torch_allows_still_works():
    check(lambda lib: lib.tensor([True, False]) + lib.tensor([True, True]), [1, 1], np.bool_)
    check(lambda lib: lib.tensor([True, False]) + 1, [2, 1], I64)
    check(lambda lib: lib.tensor([True, False]) * 2.5, [2.5, 0.0], F32)
