"""Dtype promotion and device errors follow PyTorch, not NumPy."""

import numpy as np
import pytest

import minidl as md


def test_float_tensor_with_integer_tensor_keeps_the_float_dtype():
    ints = md.tensor(np.array([1, 2], np.int64))
    floats = md.tensor(np.array([0.5, 1.5], np.float32), requires_grad=True)
    out = ints * floats
    assert out.dtype == np.float32
    out.sum().backward()
    np.testing.assert_array_equal(floats.grad.numpy(), [1.0, 2.0])


def test_creating_a_tensor_on_a_missing_device_names_the_device():
    try:
        md.tensor([1.0]).to("cuda")
    except RuntimeError as error:
        assert "cuda" in str(error)
    else:
        pytest.skip("a CUDA device is available here")
    with pytest.raises(RuntimeError, match="'cuda' is not available"):
        md.tensor([1.0], device="cuda")


def test_bool_tensors_combine_with_and_or_not_operators():
    x = md.tensor([-1.0, 0.5, 2.0])
    np.testing.assert_array_equal(((x > 0) & (x < 1)).numpy(), [False, True, False])
    np.testing.assert_array_equal(((x < 0) | (x > 1)).numpy(), [True, False, True])
    np.testing.assert_array_equal((~(x > 0)).numpy(), [True, False, False])
