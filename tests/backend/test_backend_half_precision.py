"""float16 tensors through the CPU kernels: computed in float32 and rounded once, as PyTorch's
CPU kernels do for half precision, so a float16 result is the float32 result rounded (values
and gradients), and close to PyTorch's float16 answer."""

import numpy as np
import pytest

import minidl as md
import minidl.nn.functional as F

rng = np.random.default_rng(3)
IMAGES = rng.normal(size=(2, 3, 5, 5))
SEQUENCES = rng.normal(size=(2, 3, 8))
FILTERS_1D = rng.normal(size=(4, 3, 3))
FILTERS_2D = rng.normal(size=(4, 3, 3, 3))

OPS = {  # name -> (function of (lib, F, *inputs), inputs)
    "batch_norm": (lambda lib, F, x: F.batch_norm(x, None, None, training=True), [IMAGES]),
    "layer_norm": (lambda lib, F, x: F.layer_norm(x, (5,)), [IMAGES]),
    "avg_pool2d": (lambda lib, F, x: F.avg_pool2d(x, 2, padding=1), [IMAGES]),
    "avg_pool1d": (lambda lib, F, x: F.avg_pool1d(x, 3, 2), [SEQUENCES]),
    "conv1d": (lambda lib, F, x, w: F.conv1d(x, w, padding=1), [SEQUENCES, FILTERS_1D]),
    "conv2d": (lambda lib, F, x, w: F.conv2d(x, w), [IMAGES, FILTERS_2D]),
    "max_pool2d": (lambda lib, F, x: F.max_pool2d(x, 2), [IMAGES]),
    "softmax": (lambda lib, F, x: F.softmax(x, dim=1), [IMAGES]),
    "gelu": (lambda lib, F, x: F.gelu(x), [IMAGES]),
    "group_norm": (lambda lib, F, x: F.group_norm(x, 3), [IMAGES]),
}


def run(lib, functional, name, dtype):
    expression, inputs = OPS[name]
    tensors = [lib.tensor(np.asarray(a, dtype=dtype), requires_grad=True) for a in inputs]
    out = expression(lib, functional, *tensors)
    weights = np.linspace(0.5, 1.5, out.numel()).reshape(tuple(out.shape)).astype(dtype)
    (out * lib.tensor(weights)).sum().backward()
    return out.detach().numpy(), [t.grad.numpy() for t in tensors]


@pytest.mark.parametrize("name", sorted(OPS))
def test_float16_is_the_float32_result_rounded(name):
    half, half_grads = run(md, F, name, np.float16)
    assert half.dtype == np.float16 and all(g.dtype == np.float16 for g in half_grads)
    single, _ = run(md, F, name, np.float32)
    # the float32 computation on the float16-rounded inputs, rounded once
    expression, inputs = OPS[name]
    rounded = [md.tensor(np.asarray(a, np.float16).astype(np.float32)) for a in inputs]
    expected = expression(md, F, *rounded).numpy().astype(np.float16)
    np.testing.assert_array_equal(half, expected)
    np.testing.assert_allclose(half, single, rtol=1e-2, atol=1e-2)
    torch = pytest.importorskip("torch")
    theirs, their_grads = run(torch, torch.nn.functional, name, np.float16)
    np.testing.assert_allclose(half.astype(np.float32), theirs.astype(np.float32),
                               rtol=4e-3, atol=4e-3)
    for ours, expected_grad in zip(half_grads, their_grads):
        np.testing.assert_allclose(ours.astype(np.float32), expected_grad.astype(np.float32),
                                   rtol=2e-2, atol=2e-2)
