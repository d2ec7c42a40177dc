"""Resuming training on the GPU: ``CheckpointManager`` with ``map_location`` and ``fit``.

A manager's checkpoint written from the GPU restores onto the CPU and the other way round, a
restore that fails leaves the model and the optimizer's state on the device they were on with
the values they had, and ``fit`` trains a model on the GPU and resumes it bit for bit.
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cuda_helpers import requires_cuda  # noqa: E402

import minidl as md  # noqa: E402
from minidl import nn, optim  # noqa: E402

pytestmark = requires_cuda
GPU = "cuda:0"

INPUTS = np.random.default_rng(1).standard_normal((8, 3)).astype(np.float32)
TARGETS = np.array([0, 1, 1, 0, 1, 0, 0, 1])


def build(device, seed=4):
    md.manual_seed(seed)
    model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2)).to(device)
    return model, optim.Adam(model.parameters(), lr=0.05)


def train(model, opt, count, device):
    x, y = md.tensor(INPUTS).to(device), md.tensor(TARGETS).to(device)
    for _ in range(count):
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
    return loss.item()


def slots_of(opt):
    """Every optimizer slot array, as the backend holds it."""
    return [value for slots in opt.state.values() for value in slots.values()
            if hasattr(value, "shape")]


def manager_for(directory, model, opt, **options):
    return md.CheckpointManager(md.Checkpoint(model=model, optimizer=opt), directory, **options)


@pytest.mark.parametrize("source, target", [(GPU, "cpu"), ("cpu", GPU)])
def test_a_managers_checkpoint_restores_onto_the_other_device(tmp_path, source, target):
    model, opt = build(source)
    train(model, opt, 2, source)
    manager_for(tmp_path, model, opt).save(2)
    expected_next = train(model, opt, 1, source)

    fresh, fresh_opt = build(source, seed=9)  # starts where the writer was, moved on restore
    manager = manager_for(tmp_path, fresh, fresh_opt)
    assert manager.restore_latest(map_location=target) == 2
    assert {p.device for p in fresh.parameters()} == {target}
    for (name, value), saved in zip(fresh.state_dict().items(),
                                    md.load(manager.latest)["objects"]["model"].values()):
        np.testing.assert_array_equal(value, saved, err_msg=name)
    # The optimizer's moments followed the parameters, so training goes on on the new device.
    backend = md.backend.get_backend(target)
    assert all(isinstance(slot, type(backend.zeros((1,), np.float32)))
               for slot in slots_of(fresh_opt))
    np.testing.assert_allclose(train(fresh, fresh_opt, 1, target), expected_next, rtol=1e-5)


def test_restore_and_restore_best_take_map_location_too(tmp_path):
    model, opt = build(GPU)
    manager = manager_for(tmp_path, model, opt, monitor="loss")
    manager.save(1, metrics={"loss": 0.5})
    path = manager.save(2, metrics={"loss": 0.9})
    assert manager.restore_best(map_location="cpu") == 1
    assert {p.device for p in model.parameters()} == {"cpu"}
    assert manager.restore(path, map_location="cuda") == 2
    assert {p.device for p in model.parameters()} == {GPU}
    with pytest.raises(ValueError, match="cuda:x|device"):
        manager.restore_latest(map_location="cuda:x")
    assert {p.device for p in model.parameters()} == {GPU}


class Refusing:
    """A tracked object whose saved state is refused, after the model and optimizer loaded."""

    def state_dict(self):
        return {"count": 1}

    def load_state_dict(self, state):
        raise ValueError("refused")


@pytest.mark.parametrize("device, elsewhere", [(GPU, "cpu"), ("cpu", GPU)])
def test_a_failed_manager_restore_leaves_model_and_optimizer_where_and_as_they_were(
        tmp_path, device, elsewhere):
    model, opt = build(device)
    train(model, opt, 2, device)
    md.CheckpointManager(md.Checkpoint(model=model, optimizer=opt, other=Refusing()),
                         tmp_path).save(2)
    train(model, opt, 1, device)  # the live state moves on past the file's
    values = {k: v.copy() for k, v in model.state_dict().items()}
    moments = [np.array(v, copy=True) for v in _host_slots(opt)]
    slot_types = {type(slot) for slot in slots_of(opt)}

    manager = md.CheckpointManager(md.Checkpoint(model=model, optimizer=opt, other=Refusing()),
                                   tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # "skipping unusable checkpoint"
        with pytest.raises(md.CheckpointError, match="refused"):
            manager.restore_latest(map_location=elsewhere)
    assert {p.device for p in model.parameters()} == {device}
    assert {type(slot) for slot in slots_of(opt)} == slot_types
    for name, value in model.state_dict().items():
        np.testing.assert_array_equal(value, values[name], err_msg=name)
    for after, before in zip(_host_slots(opt), moments):
        np.testing.assert_array_equal(after, before)
    train(model, opt, 1, device)  # and it still trains where it is


def _host_slots(opt):
    state = opt.state_dict()["state"]
    return [value for slots in state.values() for value in slots.values()
            if isinstance(value, np.ndarray)]


# -- fit -------------------------------------------------------------------------------------------

def fit_on(device, directory, steps):
    model, opt = build(device)
    md.fit(model, nn.functional.cross_entropy, opt, (INPUTS, TARGETS), batch_size=4,
           steps=steps, checkpoint=md.CheckpointConfig(directory, save_every_steps=1),
           progress=False)
    return model


def test_fit_trains_a_model_on_the_gpu_and_resumes_it_bit_for_bit(tmp_path):
    on_cpu = fit_on("cpu", tmp_path / "cpu", 3)
    uninterrupted = fit_on(GPU, tmp_path / "whole", 3)
    assert {p.device for p in uninterrupted.parameters()} == {GPU}
    for (name, value), reference in zip(uninterrupted.state_dict().items(),
                                        on_cpu.state_dict().values()):
        np.testing.assert_allclose(value, reference, rtol=1e-5, atol=1e-6, err_msg=name)

    fit_on(GPU, tmp_path / "split", 1)  # stops after one step; the run below resumes it
    resumed = fit_on(GPU, tmp_path / "split", 3)
    assert {p.device for p in resumed.parameters()} == {GPU}
    for (name, value), reference in zip(resumed.state_dict().items(),
                                        uninterrupted.state_dict().values()):
        np.testing.assert_array_equal(value, reference, err_msg=name)

    scores = md.predict(resumed, INPUTS, batch_size=4)
    assert isinstance(scores, np.ndarray) and scores.shape == (8, 2)
    assert set(md.evaluate(resumed, (INPUTS, TARGETS), loss_fn=nn.functional.cross_entropy,
                           batch_size=4)) == {"loss", "accuracy"}
