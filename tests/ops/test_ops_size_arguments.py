"""Size arguments (kernel_size, stride, padding, ...) are read in one place and refused with a
message naming the op or layer that was called, not another one that shares the helper."""

import numpy as np
import pytest

import minidl as md
from minidl import nn
from minidl.nn import functional as F
from minidl.ops.size_arguments import int_pair, single_int


def test_int_pair_and_single_int_accept_what_pytorch_accepts():
    assert int_pair(3, "conv2d", "stride") == (3, 3)
    assert int_pair((2, 5), "conv2d", "stride") == (2, 5)
    assert int_pair([2, 5], "conv2d", "stride") == (2, 5)
    assert single_int(4, "conv1d", "stride") == 4
    assert single_int((4,), "conv1d", "stride") == 4


@pytest.mark.parametrize("call, message", [
    (lambda x: F.max_pool2d(x, (1, 2, 3)), "max_pool2d: kernel_size"),
    (lambda x: F.avg_pool2d(x, 2, stride=(1, 1, 1)), "avg_pool2d: stride"),
    (lambda x: F.adaptive_avg_pool2d(x, (1.5, 2)), "adaptive_avg_pool2d: output_size"),
    (lambda x: F.adaptive_max_pool2d(x, (1.5, 2)), "adaptive_max_pool2d: output_size"),
    (lambda x: F.conv2d(x, md.ones((1, 1, 1, 1)), dilation=(1, 2, 3)), "conv2d: dilation"),
    (lambda x: F.conv_transpose2d(x, md.ones((1, 1, 1, 1)), output_padding=(0, 0, 0)),
     "conv_transpose2d: output_padding"),
])
def test_a_bad_size_names_the_op_that_was_called(call, message):
    x = md.tensor(np.ones((1, 1, 4, 4), np.float32))
    with pytest.raises(ValueError, match=f"^{message} must be an int or a pair of ints"):
        call(x)


@pytest.mark.parametrize("build, message", [
    (lambda: nn.Conv2d(1, 1, kernel_size=(1, 2, 3)), "Conv2d: kernel_size"),
    (lambda: nn.ConvTranspose2d(1, 1, 3, stride="2"), "ConvTranspose2d: stride"),
    (lambda: nn.MaxPool2d(2, padding=(0, 0, 0)), "MaxPool2d: padding"),
    (lambda: nn.AvgPool2d((2, 2.5)), "AvgPool2d: kernel_size"),
])
def test_a_bad_size_names_the_layer_that_was_built(build, message):
    with pytest.raises(ValueError, match=f"^{message} must be an int or a pair of ints"):
        build()
