"""Ops, training, checkpoints and the user surface on the CUDA backend.

Values and gradients of every op family match the CPU; a few training steps of a
Conv/BN/ReLU/Pool/Linear/GELU/LayerNorm/Dropout model match the CPU to 1e-5 and move nothing
between host and device but the loss the user reads; checkpoints written from the GPU restore on
the CPU and the other way round, and a resumed run on the GPU equals the uninterrupted one bit
for bit.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE.parents[1] / "autograd"))
from cuda_helpers import requires_cuda  # noqa: E402
from gradcheck_helpers import check_gradients  # noqa: E402

import minidl as md  # noqa: E402
from minidl import nn, optim  # noqa: E402

pytestmark = requires_cuda
GPU = "cuda:0"


def transfers():
    from minidl.backend.cuda.device import transfers as counter
    return counter


# -- ops -------------------------------------------------------------------------------------------

def op_cases():
    import test_backend_opaque as opaque  # the op table the opaque backend is proved on
    return opaque


@pytest.mark.parametrize("name", ["arithmetic", "unary", "reductions", "shape",
                                  "getitem_tensor_and_mask", "matmul_linear", "softmax", "losses",
                                  "norms_embedding", "clamp_max_min"])  # conv: in training
def test_op_values_and_gradients_match_the_cpu(name):
    opaque = op_cases()
    expected, expected_inputs = opaque.run(name, "cpu")
    out, inputs = opaque.run(name, GPU)
    assert out.device == GPU
    np.testing.assert_allclose(out.numpy(), expected.numpy(), rtol=1e-5, atol=1e-6)
    for tensor, reference in zip(inputs, expected_inputs):
        assert tensor.grad.device == GPU
        np.testing.assert_allclose(tensor.grad.numpy(), reference.grad.numpy(), rtol=1e-4,
                                   atol=1e-5)


@pytest.mark.parametrize("name", ["arithmetic", "softmax"])
def test_gradients_match_finite_differences_on_the_gpu(name):
    f, arrays = op_cases().OPS[name]
    small = [a[..., :2] for a in arrays]  # the simulator is slow: few elements
    check_gradients(lambda *tensors: f(GPU, *tensors), *small, device=GPU, rtol=1e-5, atol=1e-7)


# -- training --------------------------------------------------------------------------------------

def conv_model():
    return nn.Sequential(
        # No conv bias before batch norm: BN cancels it, so its gradient is rounding noise that
        # Adam would blow up into full-size steps differing between any two devices.
        nn.Conv2d(1, 2, 3, padding=1, bias=False), nn.BatchNorm2d(2), nn.ReLU(),
        nn.MaxPool2d(2), nn.Flatten(), nn.Linear(2 * 2 * 2, 4), nn.GELU(), nn.LayerNorm(4),
        nn.Dropout(0.2), nn.Linear(4, 3))


IMAGES = np.random.default_rng(0).standard_normal((3, 1, 4, 4)).astype(np.float32)
LABELS = np.array([0, 2, 1])


def build(device, seed=5):
    md.manual_seed(seed)
    model = conv_model().to(device)
    return model, optim.Adam(model.parameters(), lr=1e-2)


def steps(model, opt, count, device):
    x, y = md.tensor(IMAGES).to(device), md.tensor(LABELS).to(device)
    losses = []
    for _ in range(count):
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def test_training_steps_match_the_cpu_and_copy_nothing_implicitly():
    cpu_model, cpu_opt = build("cpu")
    expected = steps(cpu_model, cpu_opt, 3, "cpu")
    model, opt = build(GPU)
    x, y = md.tensor(IMAGES).to(GPU), md.tensor(LABELS).to(GPU)
    transfers().clear()
    losses = []
    for _ in range(3):
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    # Only the three loss.item() reads cross; the targets' range check that cross_entropy must
    # raise on is read with them (deferred_checks), never as a wait of its own.
    assert transfers()["to_numpy"] == 3 and transfers()["from_numpy"] == 0, transfers()
    assert transfers()["checks"] == 0 and transfers()["deferred_checks"] == 3, transfers()
    np.testing.assert_allclose(losses, expected, rtol=1e-5, atol=1e-5)
    for (name, value), reference in zip(model.state_dict().items(),
                                        cpu_model.state_dict().values()):
        np.testing.assert_allclose(value, reference, rtol=1e-5, atol=1e-5, err_msg=name)


def test_dropout_draws_the_cpus_mask_on_the_device():
    md.manual_seed(3)
    expected = nn.Dropout(0.5)(md.ones(4, 8)).numpy()
    md.manual_seed(3)
    ones = md.ones(4, 8).to(GPU)
    transfers().clear()
    dropped = nn.Dropout(0.5)(ones)
    assert transfers()["from_numpy"] == 0 and transfers()["to_numpy"] == 0
    np.testing.assert_array_equal(dropped.numpy(), expected)


def test_a_resumed_gpu_run_equals_the_uninterrupted_one_bit_for_bit(tmp_path):
    model, opt = build(GPU)
    uninterrupted = steps(model, opt, 2, GPU)  # (on the simulator every step costs seconds)
    model, opt = build(GPU)
    steps(model, opt, 1, GPU)
    md.Checkpoint(model=model, optimizer=opt).save(tmp_path / "run.ckpt", step=1)
    md.manual_seed(99)  # the checkpoint must bring the generator back
    fresh, fresh_opt = build(GPU, seed=1)
    md.Checkpoint(model=fresh, optimizer=fresh_opt).restore(tmp_path / "run.ckpt")
    assert steps(fresh, fresh_opt, 1, GPU) == uninterrupted[1:]


def test_a_gpu_checkpoint_restores_on_the_cpu_and_a_cpu_one_on_the_gpu(tmp_path):
    model, opt = build(GPU)
    steps(model, opt, 1, GPU)  # one step gives the optimizer its moments to carry across
    md.Checkpoint(model=model, optimizer=opt).save(tmp_path / "gpu.ckpt", step=1)

    on_cpu, cpu_opt = build("cpu", seed=1)
    md.Checkpoint(model=on_cpu, optimizer=cpu_opt).restore(tmp_path / "gpu.ckpt")
    for (name, value), saved in zip(on_cpu.state_dict().items(), model.state_dict().values()):
        np.testing.assert_array_equal(value, saved, err_msg=name)
    assert {p.device for p in on_cpu.parameters()} == {"cpu"}
    steps(on_cpu, cpu_opt, 1, "cpu")  # and it trains on from there

    md.Checkpoint(model=on_cpu, optimizer=cpu_opt).save(tmp_path / "cpu.ckpt", step=3)
    back, back_opt = build("cpu", seed=2)
    md.Checkpoint(model=back, optimizer=back_opt).restore(tmp_path / "cpu.ckpt",
                                                          map_location="cuda")
    assert {p.device for p in back.parameters()} == {GPU}
    for (name, value), saved in zip(back.state_dict().items(), on_cpu.state_dict().values()):
        np.testing.assert_array_equal(value, saved, err_msg=name)
    steps(back, back_opt, 1, GPU)  # the optimizer state followed the parameters


def test_a_failed_restore_onto_the_gpu_leaves_the_model_where_and_as_it_was(tmp_path):
    class Refusing:
        def state_dict(self):
            return {"count": 1}

        def load_state_dict(self, state):
            raise ValueError("refused")

    md.Checkpoint(model=nn.Linear(2, 2), other=Refusing()).save(tmp_path / "a.ckpt")
    target = nn.Linear(2, 2)
    before = {k: v.copy() for k, v in target.state_dict().items()}
    with pytest.raises(md.CheckpointError, match="refused"):  # after the model was loaded
        md.Checkpoint(model=target, other=Refusing()).restore(tmp_path / "a.ckpt",
                                                              map_location=GPU)
    assert {p.device for p in target.parameters()} == {"cpu"}
    for name, value in target.state_dict().items():
        np.testing.assert_array_equal(value, before[name], err_msg=name)


def test_files_written_from_device_tensors_are_the_same_bytes(tmp_path):
    model, _ = build(GPU)
    twin = conv_model()
    twin.load_state_dict(model.state_dict())
    md.save_model(model, tmp_path / "gpu.mdl")
    md.save_model(twin, tmp_path / "cpu.mdl")
    assert (tmp_path / "gpu.mdl").read_bytes() == (tmp_path / "cpu.mdl").read_bytes()
    md.save({"w": model[0].weight.detach()}, tmp_path / "gpu.bin")
    md.save({"w": twin[0].weight.detach()}, tmp_path / "cpu.bin")
    assert (tmp_path / "gpu.bin").read_bytes() == (tmp_path / "cpu.bin").read_bytes()


# -- user surface ----------------------------------------------------------------------------------

def test_tensors_and_modules_move_between_devices():
    assert md.cuda.is_available() and md.cuda.device_count() >= 1
    x = md.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
    on_gpu = x.cuda()
    assert on_gpu.device == GPU and x.to("cuda:0").device == GPU
    back = on_gpu.cpu()
    assert back.device == "cpu"
    np.testing.assert_array_equal(back.numpy(), x.numpy())
    (on_gpu * 3).sum().backward()  # the move is differentiable
    np.testing.assert_array_equal(x.grad.numpy(), np.full((2, 2), 3.0))
    model = nn.Linear(2, 3).to("cuda")
    assert {p.device for p in model.parameters()} == {GPU}
    assert model(on_gpu.detach()).device == GPU
    with pytest.raises(ValueError, match="different devices"):
        model(x)
    with pytest.raises(RuntimeError, match="cuda:7"):
        x.to("cuda:7")


def test_load_with_map_location_and_load_model_with_device(tmp_path):
    md.save({"w": np.arange(3.0, dtype=np.float32), "n": 2}, tmp_path / "v.bin")
    on_gpu = md.load(tmp_path / "v.bin", map_location="cuda:0")
    assert on_gpu["w"].device == GPU and on_gpu["n"] == 2
    np.testing.assert_array_equal(on_gpu["w"].numpy(), np.arange(3.0))
    assert isinstance(md.load(tmp_path / "v.bin", map_location="cpu")["w"], np.ndarray)
    md.save_model(nn.Sequential(nn.Linear(2, 2), nn.ReLU()), tmp_path / "m.mdl")
    model = md.load_model(tmp_path / "m.mdl", device="cuda")
    assert {p.device for p in model.parameters()} == {GPU}
    assert model(md.tensor([[1.0, -1.0]], device="cuda")).device == GPU


def run_python(code, **environment):
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    env.update(environment)
    env["PYTHONPATH"] = str(HERE.parents[2]) + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, timeout=120)


def test_asking_for_cuda_without_a_device_names_it_and_the_way_out():
    result = run_python(
        "import sys, minidl as md\n"
        "assert 'numba.cuda' not in sys.modules  # import minidl never touches CUDA\n"
        "assert not md.cuda.is_available() and md.cuda.device_count() == 0\n"
        "md.cuda.empty_cache()  # the memory functions answer without starting CUDA\n"
        "assert md.cuda.memory_allocated() == md.cuda.memory_reserved() == 0\n"
        "assert md.cuda.memory_stats() == {} and 'minidl.backend.cuda' not in sys.modules\n"
        "try:\n    md.tensor([1.0]).to('cuda:1')\n"
        "except RuntimeError as error:\n    print(error)\n",
        NUMBA_DISABLE_CUDA="1")
    assert result.returncode == 0, result.stderr
    message = result.stdout
    assert "'cuda:1'" in message
    assert "pip install minidl[cuda]" in message and "NUMBA_ENABLE_CUDASIM=1" in message
