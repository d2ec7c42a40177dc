"""md.compile: a traced plan gives the model's numbers, folds BatchNorm, refuses other inputs."""

import sys
from pathlib import Path

import numpy as np
import pytest

import minidl as md
from minidl import nn


def _with_running_stats(model, input_shape, steps=3):
    """Train-mode passes so BatchNorm's running statistics (and hence the fold) are not trivial."""
    model.train()
    with md.no_grad():
        for _ in range(steps):
            model(md.randn(*input_shape) * 2.0 + 0.5)
    return model.eval()


def _cnn():
    md.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(1, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(8, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU(),
        nn.MaxPool2d(2), nn.Flatten(), nn.Linear(16 * 4 * 4, 32), nn.BatchNorm1d(32), nn.ReLU(),
        nn.Linear(32, 10))


def _eager(model, *inputs):
    with md.no_grad():
        return model(*inputs)


@pytest.mark.parametrize("batch", [1, 5])
def test_compiled_cnn_matches_the_model_and_folds_every_batch_norm(batch):
    model = _with_running_stats(_cnn(), (8, 1, 16, 16))
    x = md.randn(batch, 1, 16, 16)
    compiled = md.compile(model, x)
    assert not any("BatchNorm" in line for line in compiled.steps), compiled
    assert any("Reshape" in line and "made once" in line for line in compiled.steps), compiled
    assert _lowered(compiled, "own buffer") == _lowered(compiled) == [
        "Conv2dFunction", "MaxPool2dFunction", "Conv2dFunction", "MaxPool2dFunction",
        "LinearFunction", "LinearFunction"], compiled  # on the CPU, into buffers of their own
    for _ in range(2):  # a second call reuses nothing it should not
        x = md.randn(batch, 1, 16, 16)
        np.testing.assert_allclose(compiled(x).numpy(), _eager(model, x).numpy(),
                                   rtol=1e-5, atol=1e-5)


def test_batch_norm_without_a_foldable_producer_stays_and_still_matches():
    md.manual_seed(1)
    model = _with_running_stats(nn.Sequential(
        nn.Conv2d(2, 4, 3), nn.ReLU(), nn.BatchNorm2d(4, affine=False), nn.Flatten()),
        (4, 2, 6, 6))
    x = md.randn(3, 2, 6, 6)
    compiled = md.compile(model, x)
    assert any("BatchNorm" in line for line in compiled.steps)
    np.testing.assert_allclose(compiled(x).numpy(), _eager(model, x).numpy(), rtol=1e-6,
                               atol=1e-6)


def test_compiled_attention_block_matches_the_model():
    md.manual_seed(2)
    d, heads = 16, 2

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm1, self.norm2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

        def forward(self, x):
            b, t, _ = x.shape
            qkv = self.qkv(self.norm1(x))
            q, k, v = (qkv[:, :, i * d:(i + 1) * d].reshape(b, t, heads, d // heads)
                       .permute(0, 2, 1, 3) for i in range(3))
            attn = md.softmax(q @ k.transpose(-2, -1) * (d // heads) ** -0.5, -1)
            x = x + self.proj((attn @ v).permute(0, 2, 1, 3).reshape(b, t, d))
            return x + self.mlp(self.norm2(x))

    model = Block().eval()
    x = md.randn(2, 5, d)
    compiled = md.compile(model, x)
    np.testing.assert_allclose(compiled(x).numpy(), _eager(model, x).numpy(), rtol=1e-5,
                               atol=1e-6)


def test_refuses_inputs_of_another_shape_dtype_or_kind():
    model = _cnn().eval()
    compiled = md.compile(model, md.randn(1, 1, 16, 16))
    with pytest.raises(ValueError, match=r"shape \(2, 1, 16, 16\).*compiled for shape "
                                         r"\(1, 1, 16, 16\)"):
        compiled(md.randn(2, 1, 16, 16))
    with pytest.raises(ValueError, match="dtype float64"):
        compiled(md.tensor(np.zeros((1, 1, 16, 16))))
    with pytest.raises(TypeError, match="Tensor or a NumPy array"):
        compiled([[0.0]])
    with pytest.raises(TypeError, match="expected 1 input"):
        compiled(md.randn(1, 1, 16, 16), md.randn(1, 1, 16, 16))


def test_numpy_inputs_several_inputs_and_outputs():
    md.manual_seed(3)
    layer = nn.Linear(4, 3).eval()

    def two_heads(a, b):
        return layer(a) + b, md.relu(b)

    a, b = np.ones((2, 4), np.float32), np.full((2, 3), -0.5, np.float32)
    compiled = md.compile(two_heads, (a, b))
    got = compiled(a, b)
    want = _eager(two_heads, md.tensor(a), md.tensor(b))
    assert isinstance(got, tuple) and len(got) == 2
    for g, w in zip(got, want):
        np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-6)


def test_weights_are_frozen_at_compile_time():
    model = _with_running_stats(_cnn(), (4, 1, 16, 16))
    x = md.randn(1, 1, 16, 16)
    compiled = md.compile(model, x)
    before = compiled(x).numpy()
    with md.no_grad():
        for p in model.parameters():
            p.mul_(0.0)
    np.testing.assert_array_equal(compiled(x).numpy(), before)


def test_refuses_a_training_mode_model_and_random_draws():
    model = _cnn()  # modules start in training mode
    with pytest.raises(ValueError, match=r"training mode.*model.eval\(\)"):
        md.compile(model, md.randn(1, 1, 16, 16))

    def noisy(x):
        return nn.functional.dropout(x, 0.5, training=True)
    with pytest.raises(ValueError, match="random numbers"):
        md.compile(noisy, md.randn(3, 3))
    with pytest.raises(TypeError, match="example input 0"):
        md.compile(model.eval(), [[1.0]])


def test_compiled_model_runs_on_the_reference_backend_too():
    from minidl.backend import get_backend, use_cpu_backend
    model = _with_running_stats(_cnn(), (4, 1, 16, 16))
    x = md.randn(1, 1, 16, 16)
    want = _eager(model, x).numpy()
    previous = use_cpu_backend("numpy")
    try:
        assert get_backend("cpu").name == "numpy"
        np.testing.assert_allclose(md.compile(model, x)(x).numpy(), want, rtol=1e-5, atol=1e-5)
    finally:
        use_cpu_backend(previous)


def test_relu_moves_after_max_pool_with_the_same_values_nan_included():
    md.manual_seed(4)
    model = nn.Sequential(nn.Conv2d(1, 2, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2)).eval()
    x = md.randn(1, 1, 6, 6)
    compiled = md.compile(model, x)
    ops = [line.split(" = ")[1].split("(")[0] for line in compiled.steps]
    assert ops == ["Conv2dFunction", "MaxPool2dFunction", "ReluFunction"], compiled
    values = md.randn(1, 1, 6, 6).numpy()
    values[0, 0, 2, 3] = np.nan
    x = md.tensor(values)
    np.testing.assert_array_equal(compiled(x).numpy(), _eager(model, x).numpy())


# -- steps lowered onto buffers: the backend's plan steps ----------------------------------------

def test_the_plan_reaches_kernels_and_buffers_only_through_the_backend_contract():
    # One way down: md.compile imports the backend package (get_backend) and nothing under it,
    # no kernel module, no NumPy (strided views of buffers are a backend's business).
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from import_scan import imports_in, modules_named
    root = Path(md.__file__).parents[1]
    package = root / "minidl" / "inference"
    reached = {(path.name, module) for path, found in imports_in(package, root)
               for module in modules_named(found, root)}
    around = sorted((name, module) for name, module in reached
                    if module.startswith(("minidl.backend.", "numpy", "numba")))
    assert not around, around
    assert ("plan.py", "minidl.backend") in reached  # the scan sees the package's imports


def _lowered(compiled, note="# plan step"):
    """The ops of the steps the backend's plan steps run, in order."""
    return [line.split(" = ")[1].split("(")[0] for line in compiled.steps if note in line]


def _small_cnn():
    md.manual_seed(8)
    return nn.Sequential(nn.Conv2d(2, 3, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                         nn.Linear(12, 4), nn.ReLU()).eval()


@pytest.mark.skipif(not md.cuda.is_available(), reason="no CUDA device and no numba simulator")
def test_a_compiled_plan_runs_on_cuda_through_that_backends_plan_steps():
    model, x = _small_cnn(), md.randn(1, 2, 4, 4)
    want = _eager(model, x).numpy()
    compiled = md.compile(model.to("cuda"), x.to("cuda"))
    assert _lowered(compiled) == ["Conv2dFunction", "MaxPool2dFunction", "LinearFunction"], \
        compiled
    for _ in range(2):
        got = compiled(x.to("cuda"))
        assert got.device == "cuda:0"
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-6)


# -- the Numba CPU backend's plan steps --------------------------------------------------------

@pytest.mark.parametrize("conv, pool, batch, dtype", [
    (dict(kernel_size=3, padding=1), dict(kernel_size=2), 1, np.float32),
    (dict(kernel_size=3, padding=1), dict(kernel_size=2), 3, np.float32),
    (dict(kernel_size=(3, 2), stride=2, padding=(1, 0)), dict(kernel_size=3, stride=2, padding=1,
                                                                ceil_mode=True), 2, np.float32),
    (dict(kernel_size=3, dilation=2, padding=2, bias=False), dict(kernel_size=2, dilation=2), 1,
     np.float64),
    (dict(kernel_size=1), dict(kernel_size=(2, 3), stride=(1, 2)), 2, np.float64),
    (dict(kernel_size=5, stride=(1, 3), padding=2), dict(kernel_size=2), 1, np.float32),
])
def test_lowered_convolution_and_pool_match_the_model(conv, pool, batch, dtype):
    md.manual_seed(5)
    model = nn.Sequential(nn.Conv2d(3, 4, **conv), nn.ReLU(), nn.MaxPool2d(**pool),
                          nn.Conv2d(4, 5, 3, padding=1), nn.ReLU(), nn.Flatten())
    if dtype == np.float64:
        model = model.double()
    model.eval()
    for _ in range(2):
        x = md.tensor(np.random.default_rng(batch).standard_normal((batch, 3, 11, 13)), dtype=dtype)
        compiled = md.compile(model, x)
        assert _lowered(compiled) == ["Conv2dFunction", "MaxPool2dFunction", "Conv2dFunction"], \
            compiled
        assert any("fused into" in line for line in compiled.steps), compiled  # both ReLUs
        tolerance = 1e-5 if dtype == np.float32 else 1e-12
        np.testing.assert_allclose(compiled(x).numpy(), _eager(model, x).numpy(),
                                   rtol=tolerance, atol=tolerance)


def test_lowered_linear_relu_chain_matches_and_a_shared_input_is_not_fused():
    md.manual_seed(6)
    first, second = nn.Linear(7, 9), nn.Linear(9, 3)

    def net(x):
        hidden = md.relu(first(x))
        raw = second(hidden)
        return md.relu(raw), raw  # raw is an output too: its ReLU must not overwrite it
    x = md.randn(4, 7)
    compiled = md.compile(net, x)
    assert _lowered(compiled) == ["LinearFunction", "LinearFunction"], compiled
    got, want = compiled(x), _eager(net, x)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-6, atol=1e-6)
    assert (got[1].numpy() < 0).any()  # the un-ReLU'd output kept its negative values


def test_results_are_copied_out_of_the_plan_buffers_and_calls_from_threads_agree():
    import threading
    model = _with_running_stats(_cnn(), (4, 1, 16, 16))
    x1, x2 = md.randn(1, 1, 16, 16), md.randn(1, 1, 16, 16)
    compiled = md.compile(model, x1)
    first = compiled(x1)
    kept = first.numpy().copy()
    compiled(x2)
    np.testing.assert_array_equal(first.numpy(), kept)  # the second call left the first alone

    inputs = [md.randn(1, 1, 16, 16) for _ in range(4)]
    expected = [compiled(x).numpy() for x in inputs]
    failures = []

    def worker(index):
        for _ in range(30):
            got = compiled(inputs[index]).numpy()
            if not np.array_equal(got, expected[index]):
                failures.append(index)
    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not failures


def test_a_relu_behind_a_reshape_or_on_a_shared_result_is_not_fused_into_the_buffer():
    md.manual_seed(7)
    conv, pool = nn.Conv2d(2, 3, 3, padding=1), nn.MaxPool2d(2)

    def net(x):
        pooled = pool(conv(x))
        return md.relu(pooled.reshape(2, -1)), pooled, md.relu(conv(x)) + conv(x)
    x = md.randn(2, 2, 6, 6)
    compiled = md.compile(net, x)
    assert "Relu" not in " ".join(_lowered(compiled))
    got, want = compiled(x), _eager(net, x)
    assert (want[1].numpy() < 0).any()
    for g, w in zip(got, want):
        np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-6, atol=1e-6)
