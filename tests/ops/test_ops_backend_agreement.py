"""Every op gives the same values and gradients on the Numba CPU backend as on the plain-NumPy
reference backend (same op code, only the primitives differ)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import minidl as md
import minidl.backend
from minidl.backend.numba_cpu import NumbaCpuBackend, load_kernels
from minidl.backend.reference import ReferenceBackend
from minidl.ops import conv, elementwise as ew, linalg, nn_ops, pool
from ops_helpers import FEW, distinct, normal, positive, run_on

load_kernels()  # compare the kernels, not the NumPy stand-ins a fresh process starts with
TARGETS = np.array([0, 2, 1, 3, 2, 0], np.int64)

# name -> (function of tensors, input generator(seed) -> arrays)
OPS = {
    "add_mul_div": (lambda a, b: (a + b) * a / b, lambda s: [normal(s, (3, 4)), positive(s, (4,))]),
    "pow_exp_log_sqrt": (lambda a: (a ** 1.5).exp().log().sqrt(), lambda s: [positive(s, (3, 4))]),
    "tanh_sigmoid_relu": (lambda a: a.tanh() + a.sigmoid() + a.relu(), lambda s: [distinct(s, (5,))]),
    "gelu": (lambda a: a.gelu(), lambda s: [normal(s, (4, 5)) * 3]),
    "gelu_tanh": (lambda a: ew.gelu(a, "tanh"), lambda s: [normal(s, (4, 5)) * 3]),
    "abs_clamp_max_min": (lambda a, b: abs(a).clamp(0.2, 0.8) + ew.maximum(a, b) - ew.minimum(a, b),
                          lambda s: distinct(s, (3, 4), (4,))),
    "reductions": (lambda a: a.sum(0) + a.mean(1).sum() + a.max(-1).values.sum() + a.var(axis=0),
                   lambda s: [distinct(s, (4, 4))]),
    "shape": (lambda a, b: md.where(a[:, ::-1] > 0, md.cat([a, b], 1)[:, :3], b.T.reshape(2, 3)),
              lambda s: [normal(s, (2, 3)), normal(s + 1, (2, 3))]),
    "getitem_stack": (lambda a: md.stack([a[[0, 0, 2]], a[a > 0][:3].reshape(3, 1)
                                         .expand(3, 2)], 1), lambda s: [np.abs(normal(s, (3, 2)))]),
    "matmul": (lambda a, b: a @ b, lambda s: [normal(s, (2, 3, 4)), normal(s + 1, (4, 5))]),
    "linear": (linalg.linear, lambda s: [normal(s, (3, 4)), normal(s + 1, (2, 4)), normal(s, (2,))]),
    "conv2d": (lambda x, w, b: conv.conv2d(x, w, b, stride=2, padding=1),
               lambda s: [normal(s, (2, 3, 7, 6)), normal(s + 1, (4, 3, 3, 3)), normal(s, (4,))]),
    "conv2d_grouped_dilated": (lambda x, w: conv.conv2d(x, w, stride=(1, 2), padding=(2, 0),
                                                        dilation=(2, 1), groups=2),
                               lambda s: [normal(s, (2, 4, 6, 7)), normal(s + 1, (6, 2, 2, 3))]),
    "max_pool2d": (lambda x: pool.max_pool2d(x, 3, 2, 1, ceil_mode=True),
                   lambda s: [distinct(s, (2, 3, 7, 6))]),
    "max_pool2d_dilated": (lambda x: pool.max_pool2d(x, 2, 1, 0, dilation=2),
                           lambda s: [distinct(s, (1, 2, 5, 6))]),
    "avg_pool2d": (lambda x: pool.avg_pool2d(x, 3, 2, 1, ceil_mode=True, count_include_pad=False),
                   lambda s: [normal(s, (2, 3, 7, 6))]),
    "avg_pool2d_pad": (lambda x: pool.avg_pool2d(x, (2, 3), (1, 2), (1, 1)),
                       lambda s: [normal(s, (2, 3, 5, 6))]),
    "softmax": (lambda x: x.softmax(0) * x.log_softmax(-1), lambda s: [normal(s, (3, 5)) * 4]),
    "cross_entropy": (lambda x: nn_ops.cross_entropy(x, md.tensor(TARGETS), ignore_index=3,
                                                     label_smoothing=0.1),
                      lambda s: [normal(s, (6, 4)) * 3]),
    "cross_entropy_none": (lambda x: nn_ops.cross_entropy(
        x, md.tensor(TARGETS.reshape(2, 3) % 3), reduction="none"),
        lambda s: [normal(s, (2, 3, 3))]),
    "nll_mse_bce": (lambda x, y: nn_ops.nll_loss(x.log_softmax(-1), md.tensor(TARGETS))
                    + nn_ops.mse_loss(x, y) + nn_ops.binary_cross_entropy_with_logits(x, y.sigmoid()),
                    lambda s: [normal(s, (6, 4)), normal(s + 1, (6, 4))]),
    "layer_norm": (lambda x, w, b: nn_ops.layer_norm(x, (3, 4), w, b),
                   lambda s: [normal(s, (2, 3, 4)), normal(s + 1, (3, 4)), normal(s, (3, 4))]),
    "batch_norm": (lambda x, w, b: nn_ops.batch_norm(x, None, None, w, b, training=True),
                   lambda s: [normal(s, (4, 3, 2, 2)), normal(s + 1, (3,)), normal(s, (3,))]),
    "embedding": (lambda w: nn_ops.embedding(md.tensor([[0, 3], [3, 3]]), w),
                  lambda s: [normal(s, (4, 5))]),
}


def test_the_fixture_really_switches_backends():
    previous = minidl.backend.use_cpu_backend("numpy")
    try:
        assert type(md.tensor([1.0]).backend) is ReferenceBackend
    finally:
        minidl.backend.use_cpu_backend(previous)
    assert type(md.tensor([1.0]).backend) is NumbaCpuBackend


def test_environment_variable_is_read_once_and_again_only_when_asked(monkeypatch):
    # Every op asks for its backend, so the choice is not looked up in os.environ each time: a
    # change of MINIDL_CPU_BACKEND takes effect at use_cpu_backend(None), not before.
    monkeypatch.setenv("MINIDL_CPU_BACKEND", "numpy")
    assert type(minidl.backend.get_backend("cpu")) is NumbaCpuBackend
    try:
        assert minidl.backend.use_cpu_backend(None) == "numba"
        assert type(minidl.backend.get_backend("cpu")) is ReferenceBackend
        monkeypatch.delenv("MINIDL_CPU_BACKEND")
        assert type(minidl.backend.get_backend("cpu")) is ReferenceBackend
    finally:
        assert minidl.backend.use_cpu_backend(None) == "numpy"
    assert type(minidl.backend.get_backend("cpu")) is NumbaCpuBackend


def test_use_cpu_backend_chooses_the_implementation_not_the_device():
    try:
        minidl.backend.use_cpu_backend("numpy")
        x = md.tensor([1.0])
        assert type(x.backend) is ReferenceBackend and x.device == "cpu"
    finally:
        minidl.backend.use_cpu_backend(None)
    assert type(x.backend) is NumbaCpuBackend
    with pytest.raises(ValueError, match="use_cpu_backend"):
        minidl.backend.use_cpu_backend("cpu:numpy")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", sorted(OPS))
@FEW
@given(seed=st.integers(0, 2**31 - 1))
def test_numba_backend_matches_reference(name, dtype, seed):
    f, make = OPS[name]
    arrays = make(seed)
    fast_out, fast_grads = run_on("numba", f, arrays, dtype)
    ref_out, ref_grads = run_on("numpy", f, arrays, dtype)
    tol = dict(rtol=2e-5, atol=2e-5) if dtype == np.float32 else dict(rtol=1e-11, atol=1e-12)
    assert fast_out.dtype == ref_out.dtype == dtype
    np.testing.assert_allclose(fast_out, ref_out, **tol)
    for i, (fast, ref) in enumerate(zip(fast_grads, ref_grads)):
        assert fast.dtype == ref.dtype == dtype
        np.testing.assert_allclose(fast, ref, err_msg=f"gradient of input {i}", **tol)
