"""What a module takes as input besides Tensors: NumPy arrays, as md.tensor would take them;
and what summary() says when an input shape lacks the batch axis."""

import numpy as np
import pytest

import minidl as md
from minidl import nn


def test_a_module_takes_a_numpy_array_as_md_tensor_would():
    md.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 3), nn.ReLU())
    x = np.random.default_rng(0).standard_normal((2, 4)).astype(np.float32)
    assert np.array_equal(model(x).numpy(), model(md.tensor(x)).numpy())
    with pytest.raises(TypeError, match="input is float64 but weight is float32"):
        model(x.astype(np.float64))  # md.tensor keeps float64: the dtype error says so


def test_a_module_with_keyword_and_several_inputs_takes_arrays():
    attention = nn.MultiheadAttention(4, 2, batch_first=True)
    x = np.ones((1, 3, 4), np.float32)
    out, _ = attention(x, x, value=x)
    expected, _ = attention(md.tensor(x), md.tensor(x), value=md.tensor(x))
    assert np.array_equal(out.numpy(), expected.numpy())


def test_summary_without_the_batch_axis_says_that_it_is_expected():
    model = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.Flatten(), nn.Linear(256, 10))
    with pytest.raises(ValueError, match=r"includes the batch axis: input_shape=\(1, 1, 8, 8\) "
                                         r"runs"):
        model.summary(input_shape=(1, 8, 8), print_fn=None)
    assert "(1, 10)" in model.summary(input_shape=(1, 1, 8, 8), print_fn=None)
    with pytest.raises(ValueError, match=r"includes the batch axis\Z"):  # no false suggestion
        model.summary(input_shape=(1, 2, 8, 8), print_fn=None)
