"""Bad input raises ValueError or TypeError with a message that names the op and the shapes."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import minidl as md
from minidl.ops import conv, linalg, nn_ops, pool

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "backend"))
from opaque_backend import register  # noqa: E402  (a second device kind to mix with "cpu")

register()


def ones(*shape, dtype=np.float32):
    return md.tensor(np.ones(shape), dtype=dtype)


CASES = [
    # (label, thunk, exception, words the message must contain)
    ("add", lambda: ones(2, 3) + ones(4), ValueError, ["add", "(2, 3)", "(4,)"]),
    ("mul", lambda: ones(2, 3) * ones(2, 2), ValueError, ["mul", "(2, 3)", "(2, 2)"]),
    ("maximum", lambda: ones(3).maximum(ones(2)), ValueError, ["maximum", "(3,)", "(2,)"]),
    ("matmul", lambda: ones(2, 3) @ ones(4, 2), ValueError, ["matmul", "(2, 3)", "(4, 2)"]),
    ("matmul batch", lambda: ones(2, 1, 3) @ ones(3, 3, 2), ValueError, ["matmul", "(2,)", "(3,)"]),
    ("matmul 0-d", lambda: ones() @ ones(2), ValueError, ["matmul", "()"]),
    ("matmul dtype", lambda: ones(2, 2) @ ones(2, 2, dtype=np.float64), TypeError,
     ["matmul", "float32", "float64"]),
    ("linear", lambda: linalg.linear(ones(2, 3), ones(4, 5)), ValueError,
     ["linear", "(2, 3)", "(4, 5)"]),
    ("conv2d channels", lambda: conv.conv2d(ones(1, 3, 5, 5), ones(2, 2, 3, 3)), ValueError,
     ["conv2d", "(1, 3, 5, 5)", "(2, 2, 3, 3)"]),
    ("conv2d rank", lambda: conv.conv2d(ones(3, 5, 5), ones(2, 3, 3, 3)), ValueError,
     ["conv2d", "(3, 5, 5)"]),
    ("conv2d groups", lambda: conv.conv2d(ones(1, 3, 5, 5), ones(2, 1, 3, 3), groups=2),
     ValueError, ["conv2d", "groups"]),
    ("conv2d dtype", lambda: conv.conv2d(ones(1, 1, 3, 3), ones(1, 1, 3, 3, dtype=np.float64)),
     TypeError, ["conv2d", "float32", "float64"]),
    ("max_pool2d rank", lambda: pool.max_pool2d(ones(2, 4, 4), 2), ValueError,
     ["max_pool2d", "(2, 4, 4)"]),
    ("avg_pool2d padding", lambda: pool.avg_pool2d(ones(1, 1, 4, 4), 2, padding=2), ValueError,
     ["avg_pool2d", "padding"]),
    ("sum axis", lambda: ones(2, 3).sum(axis=5), ValueError, ["sum", "5", "2 dimensions"]),
    ("mean axis", lambda: ones(2, 3).mean(axis=-3), ValueError, ["mean", "-3"]),
    ("max axis", lambda: ones(2, 3).max(dim=2), ValueError, ["max", "2"]),
    ("sum repeated axis", lambda: ones(2, 3).sum(axis=(0, -2)), ValueError, ["sum", "repeated"]),
    ("max empty", lambda: ones(0, 3).max(axis=0), ValueError, ["max", "(0, 3)"]),
    ("softmax axis", lambda: ones(2, 3).softmax(2), ValueError, ["softmax", "2"]),
    ("softmax int", lambda: md.tensor([1, 2]).softmax(), TypeError, ["softmax", "int64"]),
    ("gelu int", lambda: md.nn.functional.gelu(md.tensor([1, 2])), TypeError, ["gelu", "int64"]),
    ("reshape", lambda: ones(2, 3).reshape(4, 2), ValueError, ["reshape", "(2, 3)", "(4, 2)"]),
    ("permute", lambda: ones(2, 3).permute(0, 0), ValueError, ["permute", "(2, 3)"]),
    ("transpose", lambda: ones(2, 3).transpose(0, 2), ValueError, ["transpose", "2"]),
    ("expand", lambda: ones(2, 3).expand(4, 3), ValueError, ["expand", "(2, 3)", "(4, 3)"]),
    ("unsqueeze", lambda: ones(2, 3).unsqueeze(4), ValueError, ["unsqueeze", "4"]),
    ("getitem", lambda: ones(2, 3)[5], IndexError, ["getitem", "(2, 3)"]),
    ("getitem float index", lambda: ones(2, 3)[md.tensor([0.5])], TypeError, ["getitem"]),
    ("cat shapes", lambda: md.cat([ones(2, 3), ones(2, 4)]), ValueError,
     ["cat", "(2, 3)", "(2, 4)"]),
    ("cat ranks", lambda: md.cat([ones(2, 3), ones(3)]), ValueError, ["cat", "(2, 3)", "(3,)"]),
    ("cat axis", lambda: md.cat([ones(2, 3), ones(2, 3)], axis=2), ValueError, ["cat", "2"]),
    ("sub bools", lambda: md.tensor([True]) - md.tensor([False]), TypeError,
     ["sub", "bool"]),
    ("stack", lambda: md.stack([ones(2, 3), ones(3, 2)]), ValueError, ["stack", "(2, 3)", "(3, 2)"]),
    ("where condition", lambda: md.where(ones(2), ones(2), 0.0), TypeError, ["where", "bool"]),
    ("where shapes", lambda: md.where(md.tensor([True, False, True]), ones(2), 0.0), ValueError,
     ["where", "(3,)", "(2,)"]),
    ("cross_entropy float target shape",
     lambda: nn_ops.cross_entropy(ones(2, 3), md.tensor([0.0, 1.0])), ValueError,
     ["cross_entropy", "(2,)", "(2, 3)"]),
    ("cross_entropy target shape",
     lambda: nn_ops.cross_entropy(ones(2, 3), md.tensor([0, 1, 2])), ValueError,
     ["cross_entropy", "(2, 3)", "(3,)"]),
    ("cross_entropy bool target",
     lambda: nn_ops.cross_entropy(ones(2, 3), md.tensor([True, False])), TypeError,
     ["cross_entropy", "bool"]),
    ("cross_entropy int logits",
     lambda: nn_ops.cross_entropy(ones(2, 3, dtype=np.int64), md.tensor([0, 1])), TypeError,
     ["cross_entropy", "int64"]),
    ("cross_entropy target range",
     lambda: nn_ops.cross_entropy(ones(2, 3), md.tensor([0, 3])), ValueError,
     ["cross_entropy", "3", "(2, 3)"]),
    ("cross_entropy reduction",
     lambda: nn_ops.cross_entropy(ones(2, 3), md.tensor([0, 1]), reduction="avg"), ValueError,
     ["cross_entropy", "avg"]),
    ("nll_loss", lambda: nn_ops.nll_loss(ones(2, 3), md.tensor([0, 3])), ValueError,
     ["nll_loss", "3"]),
    ("mse_loss", lambda: nn_ops.mse_loss(ones(2, 3), ones(3, 2)), ValueError,
     ["mse_loss", "(2, 3)", "(3, 2)"]),
    ("bce", lambda: nn_ops.binary_cross_entropy_with_logits(ones(2, 3), ones(3)), ValueError,
     ["binary_cross_entropy_with_logits", "(2, 3)", "(3,)"]),
    ("layer_norm", lambda: nn_ops.layer_norm(ones(2, 3), (4,)), ValueError,
     ["layer_norm", "(2, 3)", "(4,)"]),
    ("batch_norm", lambda: nn_ops.batch_norm(ones(2, 3), None, None, ones(4), ones(4), True),
     ValueError, ["batch_norm", "weight has shape", "(4,)", "(2, 3)"]),
    ("batch_norm running_var", lambda: nn_ops.batch_norm(ones(2, 3), ones(3), ones(2), ones(3),
                                                         ones(3)),
     ValueError, ["batch_norm: running_var has shape (2,)", "expected (3,)"]),
    ("batch_norm bias", lambda: nn_ops.batch_norm(ones(2, 3), ones(3), ones(3), ones(3), ones(1)),
     ValueError, ["batch_norm: bias has shape (1,)"]),
    ("batch_norm one value", lambda: nn_ops.batch_norm(ones(1, 3), None, None, training=True),
     ValueError, ["batch_norm", "(1, 3)"]),
    ("embedding range", lambda: nn_ops.embedding(md.tensor([5]), ones(3, 2)), IndexError,
     ["embedding", "5", "3"]),
    ("embedding float", lambda: nn_ops.embedding(md.tensor([0.0]), ones(3, 2)), TypeError,
     ["embedding", "float32"]),
    ("dropout p", lambda: nn_ops.dropout(ones(2), 1.5), ValueError, ["dropout", "1.5"]),
    ("device", lambda: ones(2) + md.tensor(np.ones(2, np.float32), device="opaque:1"),
     ValueError, ["Add", "cpu", "opaque:1"]),
    ("unknown device", lambda: md.tensor([1.0], device="tpu"), ValueError, ["tpu"]),
    ("backward shape", lambda: (md.tensor([1.0, 2.0], requires_grad=True) * 2).backward(
        grad=np.ones(3)), ValueError, ["backward", "(3,)", "(2,)"]),
]


@pytest.mark.parametrize("label, thunk, exception, words", CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_reported_with_the_op_and_shapes(label, thunk, exception, words):
    with pytest.raises(exception) as info:
        thunk()
    message = str(info.value)
    for word in words:
        assert word in message, f"{word!r} missing from {message!r}"


def test_a_failed_op_leaves_its_inputs_untouched():
    x = md.tensor(np.ones((2, 3), np.float32), requires_grad=True)
    with pytest.raises(ValueError):
        x + ones(4)
    (x * 2).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.full((2, 3), 2.0))
