"""Real exports: small random-weight models written by PyTorch's exporters (see
``make_corpus.py``, which wrote the files under ``corpus/``).

Each imports, matches onnxruntime at two batch sizes, and trains: one SGD step in evaluation
mode changes a loss by what the gradient predicts, and a training-mode pass (dropout, batch
statistics) gives finite gradients to the weights.
"""

import os

import numpy as np
import pytest

import minidl as md
from minidl import optim
from minidl.onnx import import_model

from onnx_checks import run_onnxruntime

CORPUS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")
MODELS = sorted(name[:-5] for name in os.listdir(CORPUS) if name.endswith(".onnx"))
SEQUENCE = 7  # token models: sequence length of the examples


def example(path, batch, seed=0):
    """An input for the file's only graph input, with ``batch`` as its batch size."""
    import onnx

    proto = onnx.load(path)
    (value,) = proto.graph.input
    dims = value.type.tensor_type.shape.dim
    shape = [dim.dim_value if dim.HasField("dim_value") else (batch if i == 0 else SEQUENCE)
             for i, dim in enumerate(dims)]
    rng = np.random.default_rng(seed)
    if value.type.tensor_type.elem_type == onnx.TensorProto.INT64:
        return rng.integers(0, 50, shape).astype(np.int64)
    return rng.standard_normal(shape).astype(np.float32)


def first(output):
    return output[0] if isinstance(output, tuple) else output


def test_the_corpus_is_there():
    assert {"mobilenetv3_block", "segmentation", "transformer_encoder", "old_opset11_cnn"} \
        <= set(MODELS)


def check_matches_onnxruntime(path):
    """Import ``path`` and compare with onnxruntime at batch sizes 2 and 5."""
    module = import_model(path)
    for batch in (2, 5):
        x = example(path, batch, seed=batch)
        expected = run_onnxruntime(path, [x])[0]
        actual = first(module(x)).numpy()
        assert actual.shape == expected.shape
        np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=1e-5)


def check_sgd_step(path):
    """One SGD step, in evaluation mode, changes the loss by what its gradient predicts.

    A step of −lr·g changes the loss by −lr·|g|² to first order; with lr chosen so that the
    weights move by 0.01 in all, the measured change must be a decrease within 25 % of that,
    which a wrong gradient anywhere in the graph would miss. In training mode (dropout,
    batch statistics) every gradient is finite and most weights get one.
    """
    module = import_model(path)
    x = md.Tensor(example(path, 4))
    params = list(module.parameters())
    assert params
    target = None

    def loss():
        nonlocal target
        y = first(module(x))
        if target is None:  # a fixed random goal: the squared error cannot start at 0
            target = md.Tensor(np.random.default_rng(1).standard_normal(y.shape).astype(y.dtype))
        error = y - target
        return (error * error).mean()

    before = loss()
    before.backward()
    squared_norm = sum(float((p.grad.numpy().astype(np.float64) ** 2).sum())
                       for p in params if p.grad is not None)
    assert squared_norm > 0
    lr = 1e-2 / np.sqrt(squared_norm)
    optim.SGD(params, lr=lr).step()
    with md.no_grad():
        change = loss().item() - before.item()
    predicted = -lr * squared_norm
    assert change < 0 and abs(change - predicted) < 0.25 * abs(predicted), (change, predicted)

    module.train()
    md.manual_seed(0)
    for p in params:
        p.grad = None
    loss().backward()
    grads = [p.grad.numpy() for p in params if p.grad is not None]
    assert len(grads) >= len(params) // 2
    assert all(np.isfinite(g).all() for g in grads)


@pytest.mark.parametrize("name", MODELS)
def test_imports_and_matches_onnxruntime_at_two_batch_sizes(name):
    check_matches_onnxruntime(os.path.join(CORPUS, f"{name}.onnx"))


@pytest.mark.parametrize("name", MODELS)
def test_takes_an_sgd_step(name):
    check_sgd_step(os.path.join(CORPUS, f"{name}.onnx"))
