"""Adam and AdamW: hand-computed steps, PyTorch agreement, and identical CPU backends."""

import math

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


def test_first_step_moves_by_lr_against_the_gradient():
    # With bias correction the first step is lr * g / (|g| + eps): lr times the gradient's sign.
    p = make_param([1.0, 1.0, 1.0], dtype=np.float64)
    opt = optim.Adam([p], lr=0.1)
    (value,) = _steps(opt, p, [[2.0, -3.0, 1e-3]])
    # eps only matters for tiny gradients: 1e-3 / (1e-3 + 1e-8) is 1e-5 short of 1.
    expected = [1 - 0.1 * abs(g) / (abs(g) + 1e-8) * np.sign(g) for g in (2.0, -3.0, 1e-3)]
    np.testing.assert_allclose(value, expected, rtol=1e-12)
    np.testing.assert_allclose(value, [0.9, 1.1, 0.9], rtol=2e-6)
    assert opt.state[p]["step"] == 1
    np.testing.assert_allclose(opt.state[p]["exp_avg"], [0.2, -0.3, 1e-4])
    np.testing.assert_allclose(opt.state[p]["exp_avg_sq"], [4e-3, 9e-3, 1e-9])


def test_two_steps_by_formula():
    lr, b1, b2, eps = 0.01, 0.9, 0.999, 1e-8
    p = make_param([0.5], dtype=np.float64)
    values = _steps(optim.Adam([p], lr=lr, betas=(b1, b2), eps=eps), p, [[1.0], [-2.0]])
    m1, v1 = (1 - b1) * 1.0, (1 - b2) * 1.0
    p1 = 0.5 - lr * (m1 / (1 - b1)) / (math.sqrt(v1 / (1 - b2)) + eps)
    m2, v2 = b1 * m1 + (1 - b1) * -2.0, b2 * v1 + (1 - b2) * 4.0
    p2 = p1 - lr * (m2 / (1 - b1 ** 2)) / (math.sqrt(v2 / (1 - b2 ** 2)) + eps)
    np.testing.assert_allclose(values, [[p1], [p2]], rtol=1e-13)


def test_adamw_decays_the_weight_directly():
    # 1 * (1 - 0.1*0.1) = 0.99, then the Adam step of about lr: 0.89
    p = make_param([1.0], dtype=np.float64)
    (value,) = _steps(optim.AdamW([p], lr=0.1, weight_decay=0.1), p, [[3.0]])
    np.testing.assert_allclose(value, [0.89], rtol=1e-7)
    assert optim.AdamW([make_param([1.0])]).param_groups[0]["weight_decay"] == 0.01


def test_adam_weight_decay_goes_through_the_gradient():
    # L2 decay folds into the gradient, which Adam normalises: the first step is still lr.
    p = make_param([1.0], dtype=np.float64)
    (value,) = _steps(optim.Adam([p], lr=0.1, weight_decay=0.1), p, [[3.0]])
    np.testing.assert_allclose(value, [0.9], rtol=1e-7)


def test_amsgrad_keeps_the_largest_second_moment():
    p = make_param([0.0], dtype=np.float64)
    opt = optim.Adam([p], lr=0.01, amsgrad=True)
    _steps(opt, p, [[10.0], [0.0], [0.0]])
    state = opt.state[p]
    assert state["max_exp_avg_sq"][0] == pytest.approx(0.1)
    assert state["exp_avg_sq"][0] == pytest.approx(0.1 * 0.999 ** 2)


CONFIGS = [
    (optim.Adam, dict()),
    (optim.Adam, dict(weight_decay=1e-2, amsgrad=True)),
    (optim.Adam, dict(betas=(0.8, 0.99), eps=1e-6, maximize=True)),
    (optim.AdamW, dict()),
    (optim.AdamW, dict(weight_decay=0.1, amsgrad=True)),
]


@pytest.mark.parametrize("cls,config", CONFIGS)
def test_matches_torch(cls, config):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    start = [rng.standard_normal((6, 4)), rng.standard_normal(3)]
    grads = [[rng.standard_normal(s.shape) * 0.1 for s in start] for _ in range(8)]
    ours = [make_param(s) for s in start]
    theirs = [torch.tensor(s, dtype=torch.float32, requires_grad=True) for s in start]
    torch_cls = getattr(torch.optim, cls.__name__)
    opt = cls([{"params": ours[:1]}, {"params": ours[1:], "lr": 3e-3}], lr=1e-2, **config)
    ref = torch_cls([{"params": theirs[:1]}, {"params": theirs[1:], "lr": 3e-3}], lr=1e-2,
                    **config)
    for step_grads in grads:
        for p, t, g in zip(ours, theirs, step_grads):
            set_grad(p, g)
            t.grad = torch.tensor(g, dtype=torch.float32)
        opt.step()
        ref.step()
    for p, t in zip(ours, theirs):
        np.testing.assert_allclose(p.data, t.detach().numpy(), rtol=1e-5, atol=1e-6)
    for p, t in zip(ours, theirs):
        theirs_state = ref.state[t]
        assert opt.state[p]["step"] == int(theirs_state["step"])
        np.testing.assert_allclose(opt.state[p]["exp_avg"], theirs_state["exp_avg"].numpy(),
                                   rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("cls,config", CONFIGS)
def test_numba_and_numpy_backends_agree_bitwise(cls, config):
    rng = np.random.default_rng(1)
    start = rng.standard_normal((40, 9)).astype(np.float32)
    grads = [rng.standard_normal(start.shape) for _ in range(4)]
    results = []
    for backend in ("numba", "numpy"):
        previous = use_cpu_backend(backend)
        try:
            p = make_param(start)
            results.append(_steps(cls([p], lr=0.01, **config), p, grads))
        finally:
            use_cpu_backend(previous)
    np.testing.assert_array_equal(results[0], results[1])


def test_float64_parameters_stay_float64():
    p = make_param(np.ones(3), dtype=np.float64)
    opt = optim.Adam([p])
    _steps(opt, p, [np.ones(3)])
    assert p.data.dtype == np.float64 and opt.state[p]["exp_avg"].dtype == np.float64
