"""The optimizer update primitives: Numba equals the NumPy reference bit for bit, and the
reference equals the textbook formulas (and PyTorch, when it is installed).

Agreement between the two backends is checked with ``np.array_equal`` — exact, not within a
tolerance — because resumed training runs are promised to be bitwise identical, whichever CPU
backend they run on. Agreement with PyTorch is within float32 rounding, since PyTorch fuses some
multiply-adds.
"""

import importlib

import numpy as np
import pytest

reference = importlib.import_module("minidl.backend.reference.optim_kernels")
numba_kernels = importlib.import_module("minidl.backend.numba_cpu.optim_kernels")

SGD_CONFIGS = [
    dict(momentum=0.0, dampening=0.0, weight_decay=0.0, nesterov=False, maximize=False),
    dict(momentum=0.9, dampening=0.0, weight_decay=0.0, nesterov=False, maximize=False),
    dict(momentum=0.9, dampening=0.25, weight_decay=1e-2, nesterov=False, maximize=True),
    dict(momentum=0.8, dampening=0.0, weight_decay=1e-2, nesterov=True, maximize=False),
]
ADAM_CONFIGS = [
    dict(weight_decay=0.0, decoupled_weight_decay=False, amsgrad=False, maximize=False),
    dict(weight_decay=0.1, decoupled_weight_decay=False, amsgrad=False, maximize=True),
    dict(weight_decay=0.1, decoupled_weight_decay=True, amsgrad=False, maximize=False),
    dict(weight_decay=0.05, decoupled_weight_decay=True, amsgrad=True, maximize=False),
]


def _run_sgd(kernels, param, grads, config, lr=0.05):
    param = param.copy()
    buffer = np.zeros_like(param)
    for step, grad in enumerate(grads):
        kernels.sgd_update(param, grad, buffer if config["momentum"] else None, lr,
                           first_step=step == 0, **config)
    return param, buffer


def _run_adam(kernels, param, grads, config, lr=1e-2, betas=(0.9, 0.999), eps=1e-8):
    param = param.copy()
    exp_avg, exp_avg_sq, max_sq = (np.zeros_like(param) for _ in range(3))
    for step, grad in enumerate(grads, start=1):
        kernels.adam_update(param, grad, exp_avg, exp_avg_sq, max_sq if config["amsgrad"] else None,
                            step, lr, betas[0], betas[1], eps, **config)
    return param, exp_avg, exp_avg_sq, max_sq


def _problem(dtype, shape=(37, 29), steps=6, seed=0):
    rng = np.random.default_rng(seed)
    param = rng.standard_normal(shape).astype(dtype)
    grads = [(rng.standard_normal(shape) * 10.0 ** rng.integers(-3, 2)).astype(dtype)
             for _ in range(steps)]
    return param, grads


@pytest.fixture(params=["threads", "one-thread"])
def loop_variant(request, monkeypatch):
    """Run the Numba kernels through their parallel loop, or their single-thread loop."""
    threshold = 0 if request.param == "threads" else 1 << 62
    monkeypatch.setattr(numba_kernels, "PARALLEL_MIN_ELEMENTS", threshold)
    return request.param


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("config", SGD_CONFIGS)
def test_sgd_numba_equals_reference_bitwise(dtype, config, loop_variant):
    param, grads = _problem(dtype)
    for expected, actual in zip(_run_sgd(reference, param, grads, config),
                                _run_sgd(numba_kernels, param, grads, config)):
        assert actual.dtype == dtype
        np.testing.assert_array_equal(actual, expected)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("config", ADAM_CONFIGS)
def test_adam_numba_equals_reference_bitwise(dtype, config, loop_variant):
    param, grads = _problem(dtype)
    for expected, actual in zip(_run_adam(reference, param, grads, config),
                                _run_adam(numba_kernels, param, grads, config)):
        assert actual.dtype == dtype
        np.testing.assert_array_equal(actual, expected)


def test_numba_result_does_not_depend_on_thread_count():
    numba = pytest.importorskip("numba")
    param, grads = _problem(np.float32, shape=(100_003,), steps=3)
    config = ADAM_CONFIGS[3]
    before = numba.get_num_threads()
    try:
        numba.set_num_threads(1)
        single = _run_adam(numba_kernels, param, grads, config)
        numba.set_num_threads(before)
        multi = _run_adam(numba_kernels, param, grads, config)
    finally:
        numba.set_num_threads(before)
    for a, b in zip(single, multi):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("kernels", [reference, numba_kernels], ids=["reference", "numba"])
def test_updates_are_in_place(kernels):
    param = np.ones((3, 4), np.float32)
    exp_avg, exp_avg_sq = np.zeros_like(param), np.zeros_like(param)
    ids = [id(a) for a in (param, exp_avg, exp_avg_sq)]
    kernels.adam_update(param, np.full_like(param, 2.0), exp_avg, exp_avg_sq, None, 1, 0.1,
                        0.9, 0.999, 1e-8, 0.0, False, False, False)
    assert [id(a) for a in (param, exp_avg, exp_avg_sq)] == ids
    # First Adam step moves every entry by about lr against the gradient's sign.
    np.testing.assert_allclose(param, 0.9, rtol=1e-6)
    np.testing.assert_allclose(exp_avg, 0.2, rtol=1e-6)
    np.testing.assert_allclose(exp_avg_sq, 0.004, rtol=1e-6)


@pytest.mark.parametrize("kernels", [reference, numba_kernels], ids=["reference", "numba"])
def test_non_contiguous_param_is_rejected(kernels):
    param = np.ones((4, 4), np.float32).T[:, :2]
    with pytest.raises(ValueError, match="param"):
        kernels.sgd_update(param, np.ones_like(param), None, 0.1, 0.0, 0.0, 0.0, False, False, True)


@pytest.mark.parametrize("config", SGD_CONFIGS)
def test_sgd_reference_matches_textbook_formula(config):
    param, grads = _problem(np.float64, shape=(5,))
    actual, _ = _run_sgd(reference, param, grads, config, lr=0.05)
    p, buf = param.copy(), None
    m, d, wd = config["momentum"], config["dampening"], config["weight_decay"]
    for g in grads:
        g = -g if config["maximize"] else g
        g = g + wd * p
        if m:
            buf = g.copy() if buf is None else m * buf + (1 - d) * g
            g = g + m * buf if config["nesterov"] else buf
        p = p - 0.05 * g
    np.testing.assert_allclose(actual, p, rtol=1e-14, atol=1e-15)


@pytest.mark.parametrize("config", ADAM_CONFIGS)
def test_adam_reference_matches_textbook_formula(config):
    param, grads = _problem(np.float64, shape=(5,))
    lr, b1, b2, eps = 1e-2, 0.9, 0.999, 1e-8
    actual = _run_adam(reference, param, grads, config, lr=lr, betas=(b1, b2), eps=eps)[0]
    p, m, v, vmax = param.copy(), 0.0, 0.0, 0.0
    wd = config["weight_decay"]
    for t, g in enumerate(grads, start=1):
        g = -g if config["maximize"] else g
        if config["decoupled_weight_decay"]:
            p = p * (1 - lr * wd)
        else:
            g = g + wd * p
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        vmax = np.maximum(vmax, v) if config["amsgrad"] else v
        # Bias-corrected moments, the form of the Adam paper.
        m_hat, v_hat = m / (1 - b1 ** t), vmax / (1 - b2 ** t)
        p = p - lr * m_hat / (np.sqrt(v_hat) + eps)
    np.testing.assert_allclose(actual, p, rtol=1e-12, atol=1e-14)


def _torch_functional_reference(kind, param, grads, config):
    torch = pytest.importorskip("torch")
    tp = torch.tensor(param, requires_grad=True)
    if kind == "sgd":
        opt = torch.optim.SGD([tp], lr=0.05, **config)
    else:
        config = dict(config)
        cls = torch.optim.AdamW if config.pop("decoupled_weight_decay") else torch.optim.Adam
        opt = cls([tp], lr=1e-2, betas=(0.9, 0.999), eps=1e-8, **config)
    for grad in grads:
        tp.grad = torch.tensor(grad)
        opt.step()
    return tp.detach().numpy()


@pytest.mark.parametrize("dtype,rtol", [(np.float32, 2e-5), (np.float64, 1e-12)])
@pytest.mark.parametrize("kind,config", [("sgd", c) for c in SGD_CONFIGS]
                         + [("adam", c) for c in ADAM_CONFIGS])
def test_reference_matches_torch(kind, config, dtype, rtol):
    param, grads = _problem(dtype, shape=(64,))
    expected = _torch_functional_reference(kind, param, grads, config)
    run = _run_sgd if kind == "sgd" else _run_adam
    actual = run(reference, param, grads, config)[0]
    np.testing.assert_allclose(actual, expected, rtol=rtol, atol=rtol * 1e-2)


def test_module_exports():
    for module in (reference, numba_kernels):
        assert set(module.__all__) == {"sgd_update", "adam_update"}


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_adam_zero_denominator_gives_nan_like_the_reference(dtype, loop_variant):
    # eps=0 and a zero gradient make the first step's m / (sqrt(v) + eps) a 0/0. NumPy gives NaN;
    # the one-thread loop once raised ZeroDivisionError (Numba's Python error model), which also
    # kept LLVM from vectorising it.
    param = np.ones(5, dtype)
    exp_avg, exp_avg_sq = np.zeros_like(param), np.zeros_like(param)
    with np.errstate(invalid="ignore"):
        expected = _run_adam(reference, param, [np.zeros_like(param)], ADAM_CONFIGS[0], eps=0.0)
    actual = _run_adam(numba_kernels, param, [np.zeros_like(param)], ADAM_CONFIGS[0], eps=0.0)
    assert np.isnan(expected[0]).all()
    for a, b in zip(actual, expected):
        np.testing.assert_array_equal(a, b)
