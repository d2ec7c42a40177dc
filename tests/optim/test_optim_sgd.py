"""SGD: hand-computed steps, PyTorch agreement, and both CPU backends giving the same bits."""

import numpy as np
import pytest
from optim_helpers import make_param, set_grad

from minidl import optim
from minidl.backend import use_cpu_backend


def _steps(opt, param, grads):
    values = []
    for grad in grads:
        set_grad(param, grad)
        opt.step()
        values.append(param.data.copy())
    return values


def test_plain_sgd_by_hand():
    p = make_param([1.0, -2.0], dtype=np.float64)
    values = _steps(optim.SGD([p], lr=0.1), p, [[0.5, 1.0], [0.5, 1.0]])
    np.testing.assert_allclose(values, [[0.95, -2.1], [0.9, -2.2]], rtol=1e-15)


def test_momentum_by_hand():
    # buffer: 0.5, then 0.9*0.5 + 0.5 = 0.95; param: 1 - 0.05 = 0.95, then 0.95 - 0.095 = 0.855
    p = make_param([1.0], dtype=np.float64)
    opt = optim.SGD([p], lr=0.1, momentum=0.9)
    np.testing.assert_allclose(_steps(opt, p, [[0.5], [0.5]]), [[0.95], [0.855]], rtol=1e-15)
    np.testing.assert_allclose(opt.state[p]["momentum_buffer"], [0.95], rtol=1e-15)


def test_nesterov_and_weight_decay_by_hand():
    # g = 0.5 + 0.1*1 = 0.6; buffer = 0.6; step along g + 0.9*buffer = 1.14 -> 1 - 0.114
    p = make_param([1.0], dtype=np.float64)
    opt = optim.SGD([p], lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.1)
    np.testing.assert_allclose(_steps(opt, p, [[0.5]]), [[0.886]], rtol=1e-15)


def test_dampening_and_maximize_by_hand():
    # maximize flips the gradient: buffer = -1, then 0.5*(-1) + (1-0.5)*(-1) = -1
    p = make_param([0.0], dtype=np.float64)
    opt = optim.SGD([p], lr=0.1, momentum=0.5, dampening=0.5, maximize=True)
    np.testing.assert_allclose(_steps(opt, p, [[1.0], [1.0]]), [[0.1], [0.2]], rtol=1e-15)


def test_no_momentum_keeps_no_state_arrays():
    p = make_param([1.0])
    opt = optim.SGD([p], lr=0.1)
    _steps(opt, p, [[1.0]])
    assert "momentum_buffer" not in opt.state[p]


CONFIGS = [dict(), dict(momentum=0.9), dict(momentum=0.9, dampening=0.3, weight_decay=1e-3),
           dict(momentum=0.7, nesterov=True, weight_decay=1e-2, maximize=True)]


@pytest.mark.parametrize("config", CONFIGS)
def test_matches_torch(config):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    start = [rng.standard_normal((4, 3)), rng.standard_normal(5)]
    grads = [[rng.standard_normal(s.shape) for s in start] for _ in range(5)]
    ours = [make_param(s) for s in start]
    theirs = [torch.tensor(s, dtype=torch.float32, requires_grad=True) for s in start]
    opt = optim.SGD([{"params": ours[:1]}, {"params": ours[1:], "lr": 0.02}], lr=0.05, **config)
    ref = torch.optim.SGD([{"params": theirs[:1]}, {"params": theirs[1:], "lr": 0.02}], lr=0.05,
                          **config)
    for step_grads in grads:
        for p, t, g in zip(ours, theirs, step_grads):
            set_grad(p, g)
            t.grad = torch.tensor(g, dtype=torch.float32)
        opt.step()
        ref.step()
    for p, t in zip(ours, theirs):
        np.testing.assert_allclose(p.data, t.detach().numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("config", CONFIGS)
def test_numba_and_numpy_backends_agree_bitwise(config):
    rng = np.random.default_rng(1)
    start = rng.standard_normal((50, 7))
    grads = [rng.standard_normal(start.shape) for _ in range(4)]
    results = []
    for backend in ("numba", "numpy"):
        previous = use_cpu_backend(backend)
        try:
            p = make_param(start)
            results.append(_steps(optim.SGD([p], lr=0.05, **config), p, grads))
        finally:
            use_cpu_backend(previous)
    np.testing.assert_array_equal(results[0], results[1])
