"""Real exports: small random-weight models written by PyTorch's exporters (see
``make_corpus.py``, which wrote the files under ``corpus/``).

Each imports, matches onnxruntime at two batch sizes, and trains: one SGD step in evaluation
mode lowers a loss, and a training-mode pass (dropout, batch statistics) gives finite
gradients to every weight that takes part.
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


@pytest.mark.parametrize("name", MODELS)
def test_imports_and_matches_onnxruntime_at_two_batch_sizes(name):
    path = os.path.join(CORPUS, f"{name}.onnx")
    module = import_model(path)
    for batch in (2, 5):
        x = example(path, batch, seed=batch)
        expected = run_onnxruntime(path, [x])[0]
        actual = first(module(x)).numpy()
        assert actual.shape == expected.shape
        np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", MODELS)
def test_takes_an_sgd_step(name):
    path = os.path.join(CORPUS, f"{name}.onnx")
    module = import_model(path)
    x = md.Tensor(example(path, 4))
    params = list(module.parameters())
    assert params

    def loss():
        y = first(module(x))
        return (y * y).mean()

    opt = optim.SGD(params, lr=1e-2)
    before = loss()
    opt.zero_grad()
    before.backward()
    opt.step()
    with md.no_grad():
        after = loss()
    assert after.item() < before.item()

    module.train()
    md.manual_seed(0)
    opt.zero_grad()
    loss().backward()
    grads = [p.grad.numpy() for p in params if p.grad is not None]
    assert len(grads) >= len(params) // 2
    assert all(np.isfinite(g).all() for g in grads)
