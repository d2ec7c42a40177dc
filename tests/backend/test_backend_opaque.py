"""Ops, layers, optimizers, random draws and checkpoints run on a backend whose arrays are opaque
boxes, with no access around the primitive list and no host copy the user did not ask for.

The gradient checks run on opaque tensors by finite differences. The opaque backend computes
with the NumPy reference underneath, so every result must also equal the reference CPU backend's
bit for bit, which checks that the op code took the same path on both. Host crossings are
counted; only explicit ``.numpy()``, ``.item()``, ``.to()`` and file I/O may cross.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import minidl as md
import minidl.backend
from minidl import nn, optim
from minidl.ops import conv, elementwise as ew, linalg, math_functions as mf, nn_ops, pool
from opaque_backend import NAME, LeakError, OpaqueArray, OpaqueBackend, register

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "autograd"))
from gradcheck_helpers import check_gradients  # noqa: E402

register()


@pytest.fixture(autouse=True)
def reference_cpu():
    """CPU tensors compute on the NumPy reference, the opaque backend's engine underneath."""
    minidl.backend.use_cpu_backend("numpy")
    OpaqueBackend.reset()
    yield
    minidl.backend.use_cpu_backend(None)


def assert_no_leaks(from_numpy=0, to_numpy=0):
    assert OpaqueBackend.violations == []
    assert OpaqueBackend.transfers["from_numpy"] == from_numpy, OpaqueBackend.transfers
    assert OpaqueBackend.transfers["to_numpy"] == to_numpy, OpaqueBackend.transfers


def test_opaque_arrays_refuse_everything_but_the_metadata():
    box = OpaqueArray(np.zeros((2, 3), np.float32))
    assert (box.shape, box.dtype, box.ndim, box.size) == ((2, 3), np.float32, 2, 6)
    with pytest.raises(TypeError):
        box + 1
    with pytest.raises(TypeError):
        np.ones(3) * box
    with pytest.raises(TypeError):
        box[0]
    with pytest.raises(LeakError):
        np.asarray(box)
    assert getattr(box, "flags", None) is None
    # NumPy's probes for other array protocols are recorded too.
    assert {"conversion to NumPy", "attribute 'flags'"} <= set(OpaqueBackend.violations)
    OpaqueBackend.reset()


T = np.array([0, 2, 1, 3, 2, 0], np.int64)
rng = np.random.default_rng(0)


def normal(*shape):
    return rng.standard_normal(shape).astype(np.float32)


constants_made = []


def const(device, values):
    """A constant index/target tensor made on ``device``: one explicit host-to-device copy."""
    constants_made.append(values)
    return md.tensor(values, device=device)


# name -> (function of (device, *tensors), input arrays); constants are made on ``device``.
OPS = {
    "arithmetic": (lambda d, a, b: ((a + b) * a / (b.abs() + 1) - 2) ** 2,
                   [normal(3, 4), normal(4)]),
    "unary": (lambda d, a: (a.exp() + 1).log().sqrt() + a.tanh() + a.sigmoid() + a.relu()
              + a.gelu() + ew.gelu(a, "tanh"), [normal(4, 5)]),
    # Computed on the device, as every op: no host round trip for an imported model's Sin or Erf.
    "math_functions": (lambda d, a: mf.sin(a) * mf.cos(a) + mf.tan(a * 0.5) + mf.asin(a * 0.3)
                       + mf.acos(a * 0.3) + mf.atan(a) + mf.sinh(a) + mf.cosh(a) + mf.asinh(a)
                       + mf.acosh(a * a + 1.5) + mf.atanh(a * 0.3) + mf.erf(a), [normal(3, 4)]),
    "clamp_max_min": (lambda d, a, b: a.clamp(-0.5, 0.5) + ew.maximum(a, b) - ew.minimum(a, b)
                      + a.clamp(min=0.1), [normal(3, 4), normal(4)]),
    "reductions": (lambda d, a: a.sum(0) + a.mean(1).sum() + a.max(-1).values.sum() + a.var(axis=0)
                   + a.min(), [normal(4, 4)]),
    "shape": (lambda d, a, b: md.where(a[:, ::-1] > 0, md.cat([a, b], 1)[:, :3],
                                       b.T.reshape(2, 3)), [normal(2, 3), normal(2, 3)]),
    "getitem_tensor_and_mask": (lambda d, a: md.stack([a[const(d, [0, 0, 2])],
                                                       a[const(d, [1, 2, 0])]], 1)
                                + a[(a > 0.5) & (a < 5)].sum(), [np.abs(normal(3, 2))]),
    "matmul_linear": (lambda d, a, w, b: linalg.linear(a @ w.T @ w, w, b),
                      [normal(3, 4), normal(2, 4), normal(2)]),
    "conv_pool": (lambda d, x, w, b: pool.avg_pool2d(pool.max_pool2d(
        conv.conv2d(x, w, b, stride=1, padding=1, groups=1), 2, ceil_mode=True), 2, 1, 1),
        [normal(2, 3, 7, 6), normal(4, 3, 3, 3), normal(4)]),
    "softmax": (lambda d, x: x.softmax(0) * x.log_softmax(-1), [normal(3, 5)]),
    "losses": (lambda d, x, y: nn_ops.cross_entropy(x, const(d, T), ignore_index=3,
                                                    label_smoothing=0.1)
               + nn_ops.nll_loss(x.log_softmax(-1), const(d, T), ignore_index=2)
               + nn_ops.mse_loss(x, y) + nn_ops.binary_cross_entropy_with_logits(x, y.sigmoid())
               + nn_ops.cross_entropy(x, y.softmax(-1)),
               [normal(6, 4), normal(6, 4)]),
    "pytorch_semantics": (lambda d, a, b: (a // (b.abs() + 1) + a % 1.5 + a.amax(0) - a.min(1,
                          keepdim=True).values + md.where(a > 0, a, 2) + md.index_put(
                          a * 1.0, (const(d, [0, 2]),), b * 3, accumulate=True)
                          + a.std(dim=0, correction=0) + a.clamp(min=b[0]) * a.all().float()),
                          [normal(3, 4), normal(4)]),
    "in_place": (lambda d, a, b: _edited(a * 1.0, b), [normal(3, 4), normal(4)]),
    "weighted_losses": (lambda d, x, y: nn_ops.cross_entropy(x, const(d, T), const(d, W),
                                                             ignore_index=3, label_smoothing=0.1)
                        + nn_ops.nll_loss(x.log_softmax(-1), const(d, T), const(d, W))
                        + nn_ops.binary_cross_entropy_with_logits(x, y.sigmoid(),
                                                                  pos_weight=const(d, W)),
                        [normal(6, 4), normal(6, 4)]),
    "conv_same_adaptive_pool": (lambda d, x, w: pool.adaptive_avg_pool2d(
        conv.conv2d(x, w, padding="same"), (3, 4)), [normal(2, 3, 7, 6), normal(4, 3, 2, 3)]),
    "embedding_padding": (lambda d, w: nn_ops.embedding(const(d, [[0, 2], [2, 1]]), w,
                                                        padding_idx=2), [normal(3, 4)]),
    "norms_embedding": (lambda d, x, w, b: nn_ops.layer_norm(x, (4,), w, b).sum()
                        + nn_ops.batch_norm(x.reshape(3, 4, 1), None, None, w, b, training=True)
                        .sum() + nn_ops.embedding(const(d, [[0, 2], [2, 2]]), x).sum(),
                        [normal(3, 4), normal(4), normal(4)]),
}


W = np.array([0.5, 1.0, 2.0, 1.5], np.float32)


def _edited(y, b):
    """In-place edits: each is an op on the device plus one write into the tensor's memory."""
    y += b
    y.mul_(b)
    y[0] = b * 2
    y[1:, 1] = 0.5
    y.clamp_(-3.0, 3.0)
    return y


def run(name, device, table=None):
    """Output and inputs (with their gradients) of ``table[name]`` (default ``OPS``) on device."""
    f, arrays = (OPS if table is None else table)[name][:2]
    tensors = [md.tensor(a, device=device, requires_grad=True) for a in arrays]
    out = f(device, *tensors)
    weights = np.random.default_rng(1).standard_normal(out.shape).astype(np.float32)
    out.backward(md.tensor(weights, device=device))
    return out, tensors


@pytest.mark.parametrize("name", sorted(OPS))
def test_values_and_gradients_match_the_reference_on_opaque_arrays(name):
    expected, expected_inputs = run(name, "cpu")
    OpaqueBackend.reset()
    constants_made.clear()
    out, inputs = run(name, NAME)
    # The only crossings: each input, each constant and the backward weights, explicitly.
    assert_no_leaks(from_numpy=len(inputs) + len(constants_made) + 1)
    np.testing.assert_array_equal(out.numpy(), expected.numpy())
    for tensor, reference in zip(inputs, expected_inputs):
        np.testing.assert_array_equal(tensor.grad.numpy(), reference.grad.numpy())


# Ops whose gradient is deliberately not the derivative: an embedding's padding row receives
# none (as in PyTorch).
STOPS_GRADIENT = {"embedding_padding"}


@pytest.mark.parametrize("name", sorted(set(OPS) - STOPS_GRADIENT))
def test_gradients_match_finite_differences_on_opaque_arrays(name):
    f, arrays = OPS[name]
    check_gradients(lambda *tensors: f(NAME, *tensors), *arrays, device=NAME, rtol=1e-5,
                    atol=1e-7)
    assert OpaqueBackend.violations == []


def test_python_scalars_cross_as_kernel_arguments_not_as_copies():
    x = md.tensor(normal(3, 4), device=NAME, requires_grad=True)
    OpaqueBackend.reset()
    y = ((x * 2 + 1) / 3 - 0.5).mean()  # four scalar operands and mean's 1/count
    y.backward()
    assert_no_leaks()


def conv_model():
    return nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(),
                         nn.MaxPool2d(2), nn.Flatten(), nn.Dropout(0.3), nn.Linear(4 * 4 * 4, 3))


class TextModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(10, 6, padding_idx=0)
        self.norm = nn.LayerNorm(6)
        self.head = nn.Linear(6, 3)

    def forward(self, indices):
        return self.head(self.norm(self.embed(indices)).mean(axis=1))


CASES = {
    "conv_bn_dropout_adam": (conv_model, lambda p: optim.Adam(p, lr=1e-2),
                             normal(5, 1, 8, 8), np.array([0, 1, 2, 0, 1])),
    "embedding_layernorm_sgd": (TextModel, lambda p: optim.SGD(p, lr=0.1, momentum=0.9),
                                np.array([[0, 3, 4], [5, 0, 9], [1, 1, 0]]), np.array([0, 2, 1])),
}


def train(case, device, steps, state=None):
    """Train ``steps`` steps on ``device`` (after ``state(model, opt)`` if given); returns
    (losses, model, optimizer)."""
    build, make_optimizer, x_host, labels = CASES[case]
    md.manual_seed(3)
    model = build()
    model.to(device)
    opt = make_optimizer(model.parameters())
    x, y = md.tensor(x_host).to(device), md.tensor(labels).to(device)
    if state is not None:
        state(model, opt)
    OpaqueBackend.reset()
    losses = []
    for _ in range(steps):
        opt.zero_grad(set_to_none=False)
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, model, opt


@pytest.mark.parametrize("case", sorted(CASES))
def test_training_steps_run_on_opaque_arrays_with_no_implicit_copy(case):
    expected, expected_model, _ = train(case, "cpu", 3)
    losses, model, _ = train(case, NAME, 3)
    assert_no_leaks(to_numpy=3)  # the three loss.item() calls, nothing else
    assert losses == expected
    for (name, value), reference in zip(model.state_dict().items(),
                                        expected_model.state_dict().values()):
        np.testing.assert_array_equal(value, reference, err_msg=name)


@pytest.mark.parametrize("case", sorted(CASES))
def test_checkpoint_save_and_restore_on_opaque_arrays(case, tmp_path):
    path = tmp_path / "run.ckpt"
    uninterrupted, _, _ = train(case, NAME, 4)
    _, model, opt = train(case, NAME, 2)
    arrays = len(list(model.named_parameters())) + len(list(model.named_buffers())) + sum(
        1 for slots in opt.state.values() for value in slots.values() if hasattr(value, "shape"))
    OpaqueBackend.reset()
    md.Checkpoint(model=model, optimizer=opt).save(path, step=2)
    assert_no_leaks(to_numpy=arrays)  # each array read once, to be written to the file

    def restore(fresh_model, fresh_opt):
        OpaqueBackend.reset()
        md.Checkpoint(model=fresh_model, optimizer=fresh_opt).restore(path)
        # Each array read from the file moves to the device once. Reads the other way are the
        # checkpoint's own (the current values, kept to roll back should a later object fail to
        # load): file I/O, bounded, and no violation of the contract.
        assert OpaqueBackend.violations == []
        assert OpaqueBackend.transfers["from_numpy"] == arrays
        assert OpaqueBackend.transfers["to_numpy"] <= 2 * arrays

    resumed, _, _ = train(case, NAME, 2, state=restore)
    assert resumed == uninterrupted[2:]


def test_random_draws_happen_on_the_device_and_match_the_cpu_stream():
    md.manual_seed(11)
    expected = [md.rand(3, 4).numpy(), md.randn(5).numpy(),
                nn.Dropout(0.5)(md.ones(8)).numpy()]
    state = md.get_rng_state()
    md.manual_seed(11)
    OpaqueBackend.reset()
    draws = [md.rand(3, 4, device=NAME), md.randn(5, device=NAME),
             nn.Dropout(0.5)(md.ones(8).to(NAME))]
    assert_no_leaks(from_numpy=1)  # the ones(8) moved explicitly
    for draw, reference in zip(draws, expected):
        assert draw.device == f"{NAME}:0"
        np.testing.assert_array_equal(draw.numpy(), reference)
    assert md.get_rng_state() == state


def test_init_draws_on_the_parameters_device():
    weight = nn.Parameter(np.zeros((4, 3), np.float32)).to(NAME)
    OpaqueBackend.reset()
    nn.init.kaiming_uniform_(weight)
    nn.init.normal_(weight, 0.0, 2.0)
    assert_no_leaks()


def test_devices_with_an_index_are_kept_apart():
    a = md.tensor([1.0, 2.0], device=f"{NAME}:0")
    b = md.tensor([1.0, 2.0], device=f"{NAME}:1")
    assert (a.device, b.device) == (f"{NAME}:0", f"{NAME}:1")
    assert md.tensor([1.0], device=NAME).device == f"{NAME}:0"
    with pytest.raises(ValueError, match="different devices"):
        a + b
    np.testing.assert_array_equal((a + b.to(f"{NAME}:0")).numpy(), [2.0, 4.0])


def test_a_parameter_made_from_a_device_tensor_is_copied_on_the_device():
    source = md.tensor(normal(2, 3), device=NAME)
    OpaqueBackend.reset()
    parameter = nn.Parameter(source)
    assert_no_leaks()
    assert parameter.device == f"{NAME}:0" and parameter.requires_grad
    assert parameter.data is not source.data


def test_loading_a_state_dict_of_device_tensors_stays_on_the_device():
    source, target = conv_model().to(NAME), conv_model().to(NAME)
    tensors = dict(source.named_parameters()) | dict(source.named_buffers())
    OpaqueBackend.reset()
    target.load_state_dict(tensors)
    assert_no_leaks()
    for name, value in target.named_parameters():
        np.testing.assert_array_equal(value.numpy(), tensors[name].numpy(), err_msg=name)


def test_a_compiled_plan_runs_on_opaque_arrays_through_the_backends_plan_steps():
    md.manual_seed(8)
    model = nn.Sequential(nn.Conv2d(2, 3, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Flatten(), nn.Linear(12, 4), nn.ReLU()).eval()
    x = md.randn(1, 2, 4, 4)
    with md.no_grad():
        want = model(x).numpy()
    model, x = model.to(NAME), x.to(NAME)
    OpaqueBackend.reset()
    compiled = md.compile(model, x)
    lowered = [line for line in compiled.steps if "# plan step" in line]
    assert [line.split(" = ")[1].split("(")[0] for line in lowered] == \
        ["Conv2dFunction", "MaxPool2dFunction", "LinearFunction"], compiled
    assert sum("fused into" in line for line in compiled.steps) == 2, compiled  # both ReLUs
    got = [compiled(x) for _ in range(2)]
    assert_no_leaks()  # the plan's buffers and steps never left the device
    for result in got:
        np.testing.assert_allclose(result.numpy(), want, rtol=1e-6, atol=1e-7)
