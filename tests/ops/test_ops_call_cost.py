"""What the ops cost in Python per call, counted (never timed): the argument handling of shape
and window ops enters no NumPy Python helper and no generator expression."""

import numpy as np
import pytest

import minidl as md
from minidl.nn import functional as F
from python_calls import generator_frames, python_calls


@pytest.fixture
def x():
    return md.tensor(np.arange(2 * 3 * 4 * 4, dtype=np.float32).reshape(2, 3, 4, 4))


@pytest.mark.parametrize("op", [lambda x: x.reshape(6, 16), lambda x: x.reshape(-1, 4),
                                lambda x: md.flatten(x, 1), lambda x: x.numel()],
                         ids=["reshape", "reshape_inferred", "flatten", "numel"])
def test_sizes_are_computed_without_numpys_python_helpers(x, op):
    # np.prod runs NumPy's Python-level wrappers (fromnumeric.py): microseconds for a few ints.
    expected = op(x)
    calls = python_calls(lambda: op(x))
    assert not [c for c in calls if c[0] == "fromnumeric.py"], calls
    assert expected == 96 if isinstance(expected, int) else expected.numel() == 96


@pytest.mark.parametrize("op", [lambda x: F.max_pool2d(x, 2),
                                lambda x: F.avg_pool2d(x, (2, 2), 1, 1),
                                lambda x: F.conv2d(x, md.ones(5, 3, 3, 3), None, 1, (1, 1))],
                         ids=["max_pool2d", "avg_pool2d", "conv2d"])
def test_window_arguments_are_read_without_generator_frames(x, op):
    with md.no_grad():
        op(x)  # load the kernels first
        calls = python_calls(lambda: op(x))
    assert not [c for c in generator_frames(calls) if c[0] == "size_arguments.py"], calls


@pytest.mark.parametrize("op", [lambda x: x * 2.0, lambda x: 1 + x, lambda x: x + x],
                         ids=["tensor_number", "number_tensor", "same_shape"])
def test_binary_operands_that_need_no_broadcast_check_skip_numpys_helper(x, op):
    # A number is a 0-d tensor, which broadcasts against anything, and equal shapes need no
    # check: np.broadcast_shapes (several Python calls) runs only for shapes that differ.
    calls = python_calls(lambda: op(x))
    assert not [c for c in calls if c[0].startswith("_stride_tricks")], calls
    np.testing.assert_array_equal(op(x).numpy(), op(x.numpy()))


def test_shapes_that_differ_are_still_checked(x):
    with pytest.raises(ValueError, match=r"add: shapes \(2, 3, 4, 4\) and \(3,\) cannot be "
                                         r"broadcast together"):
        x + md.tensor([1.0, 2.0, 3.0])
    np.testing.assert_array_equal((x - x[0]).numpy(), x.numpy() - x.numpy()[0])


def test_a_single_images_convolution_is_a_plain_product_bit_for_bit():
    # One image and one group (single-sample inference): the product is W (O × K) @ cols, with
    # no batched-product layout worked out per call, and the same bits as the batched form.
    rng = np.random.default_rng(0)
    x = md.tensor(rng.standard_normal((1, 3, 6, 6)).astype(np.float32))
    weight = md.tensor(rng.standard_normal((4, 3, 3, 3)).astype(np.float32))
    with md.no_grad():
        out = F.conv2d(x, weight, None, 1, 1)
        calls = python_calls(lambda: F.conv2d(x, weight, None, 1, 1))
    assert not [c for c in calls if c[0] in ("batched_product.py", "fromnumeric.py")], calls
    be = x.backend
    cols = be.im2col(x.data, (3, 3), (1, 1), (1, 1), (1, 1))
    batched = be.matmul(weight.data.reshape(1, 1, 4, 27), cols.reshape(1, 27, 1, 36),
                        b_axes=(0, 2, 1, 3), out_axes=(1, 0, 2, 3))
    np.testing.assert_array_equal(out.numpy(), batched.reshape(1, 4, 6, 6))


@pytest.mark.parametrize("op", [
    lambda x: F.conv2d(x, md.ones(5, 3, 3, 3), md.ones(5), 1, (1, 1)),
    lambda x: F.linear(x, md.ones(5, 4), md.ones(5)),
    lambda x: F.batch_norm(x, md.zeros(3), md.ones(3), md.ones(3), md.zeros(3)),
    lambda x: F.max_pool2d(x, 2),
    lambda x: F.relu(x)], ids=["conv2d", "linear", "batch_norm", "max_pool2d", "relu"])
def test_a_layers_op_checks_shapes_and_dtypes_without_tensor_property_calls(x, op):
    # Tensor.shape, .dtype and .ndim are Python calls; the checks of the ops every layer of a
    # CNN runs read the arrays' own attributes, a saving paid out per layer and per forward.
    with md.no_grad():
        expected = op(x).numpy()
        calls = python_calls(lambda: op(x))
    assert not [c for c in calls if c[0] == "tensor.py" and c[1] in ("shape", "dtype", "ndim")], \
        calls
    np.testing.assert_array_equal(op(x).detach().numpy(), expected)


def test_flatten_builds_its_shape_without_reshapes_checks(x):
    # The merged shape holds the same elements by construction, so flatten (every Flatten
    # layer's forward) goes straight to the reshape op.
    calls = python_calls(lambda: md.flatten(x, 1))
    assert ("shape.py", "reshape") not in calls, calls
    np.testing.assert_array_equal(md.flatten(x, 1).numpy(), x.numpy().reshape(2, 48))
    assert md.flatten(x, 3) is x and md.flatten(md.tensor(2.0)).shape == (1,)


def test_a_convolutions_output_size_is_worked_out_once_per_geometry():
    # A network calls each convolution on the same sizes at every forward: the op remembers
    # (out_h, out_w) by geometry rather than call conv_output_size twice each time, and an
    # empty output is still refused on every call (errors are never remembered).
    from minidl.backend import use_cpu_backend
    from minidl.backend.numba_cpu import load_kernels
    load_kernels()
    x, weight = md.ones(1, 2, 7, 5), md.ones(3, 2, 3, 2)
    previous = use_cpu_backend("numba")  # whose im2col remembers its geometry too
    try:
        with md.no_grad():
            expected = F.conv2d(x, weight, None, 1, (1, 0)).numpy()
            calls = python_calls(lambda: F.conv2d(x, weight, None, 1, (1, 0)))
            for _ in range(2):
                with pytest.raises(ValueError, match="convolution output would be empty"):
                    F.conv2d(md.ones(1, 2, 2, 1), weight)
    finally:
        use_cpu_backend(previous)
    assert not [c for c in calls if c[1] == "conv_output_size"], calls
    assert expected.shape == (1, 3, 7, 4)  # 7 + 2 - 3 + 1 rows, 5 - 2 + 1 columns
