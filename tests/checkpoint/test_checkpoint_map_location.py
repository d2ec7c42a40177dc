"""``Checkpoint.restore(map_location=...)`` and the manager's restores take what ``md.load``
takes: a device name, a dict from where the tracked tensors are to where they go, or a callable
``f(tensor, location)`` whose result's device decides; a bad one changes nothing."""

from __future__ import annotations

import numpy as np
import pytest

import minidl as md
from minidl import nn, optim

pytestmark = pytest.mark.skipif(not md.cuda.is_available(),
                                reason="no CUDA device and no numba CUDA simulator")
GPU = "cuda:0"


def build(device, seed=4):
    md.manual_seed(seed)
    model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2)).to(device)
    opt = optim.Adam(model.parameters(), lr=0.05)
    x = md.tensor(np.ones((2, 3), np.float32)).to(device)
    model(x).sum().backward()
    opt.step()  # the optimizer has moments, which must follow the parameters
    return model, opt


def saved(tmp_path, device):
    model, opt = build(device)
    path = tmp_path / "run.ckpt"
    md.Checkpoint(model=model, optimizer=opt).save(path, step=1)
    return path, {name: value.copy() for name, value in model.state_dict().items()}


def devices_of(model, opt) -> set:
    slots = [s for slots in opt.state.values() for s in slots.values() if hasattr(s, "shape")]
    backends = {type(slot).__name__ for slot in slots}
    return {p.device for p in model.parameters()} | {f"slots:{b}" for b in backends}


@pytest.mark.parametrize("map_location, start, end", [
    ({"cpu": GPU}, "cpu", GPU),
    ({GPU: "cpu"}, GPU, "cpu"),
    ({"cuda:1": "cpu"}, GPU, GPU),                      # a location nothing is on: stays
    (lambda tensor, location: tensor.to(GPU), "cpu", GPU),
    (lambda tensor, location: tensor, GPU, GPU),        # PyTorch's "keep it where it is"
    (lambda tensor, location: np.zeros(1), GPU, "cpu"),  # an array means the host
])
def test_restore_maps_the_tracked_tensors_as_md_load_maps_arrays(tmp_path, map_location, start,
                                                                 end):
    path, values = saved(tmp_path, "cpu")
    model, opt = build(start, seed=9)
    md.Checkpoint(model=model, optimizer=opt).restore(path, map_location=map_location)
    assert {p.device for p in model.parameters()} == {end}
    moments = [s for slots in opt.state.values() for s in slots.values() if hasattr(s, "shape")]
    expected_type = type(md.backend.get_backend(end).zeros((1,), np.float32))
    assert moments and all(isinstance(slot, expected_type) for slot in moments)
    for name, value in model.state_dict().items():
        np.testing.assert_array_equal(value, values[name], err_msg=name)


def test_the_callable_sees_each_tensor_and_where_it_is(tmp_path):
    path, _ = saved(tmp_path, "cpu")
    model, opt = build(GPU, seed=9)
    seen = []
    md.Checkpoint(model=model, optimizer=opt).restore(
        path, map_location=lambda tensor, location: seen.append((tensor.shape, location)) or tensor)
    assert sorted(seen) == sorted((tuple(p.shape), GPU) for p in model.parameters())


@pytest.mark.parametrize("map_location, error, match", [
    ({"cpu": "cuda:x"}, ValueError, r"map_location: entry 'cpu'"),
    (3, TypeError, "map_location must be a device name"),
])
def test_a_bad_map_location_is_refused_before_the_file_is_read(tmp_path, map_location, error,
                                                               match):
    model, opt = build("cpu")
    with pytest.raises(error, match=match):
        md.Checkpoint(model=model, optimizer=opt).restore(tmp_path / "absent.ckpt",
                                                          map_location=map_location)


def test_a_callable_that_returns_nonsense_changes_nothing(tmp_path):
    path, _ = saved(tmp_path, "cpu")
    model, opt = build(GPU, seed=9)
    before = {name: value.copy() for name, value in model.state_dict().items()}
    with pytest.raises(md.CheckpointError, match="map_location: the callable returned str"):
        md.Checkpoint(model=model, optimizer=opt).restore(
            path, map_location=lambda tensor, location: "cpu")
    assert {p.device for p in model.parameters()} == {GPU}
    for name, value in model.state_dict().items():
        np.testing.assert_array_equal(value, before[name], err_msg=name)


def test_the_managers_restores_pass_a_dict_through(tmp_path):
    model, opt = build("cpu")
    manager = md.CheckpointManager(md.Checkpoint(model=model, optimizer=opt), tmp_path)
    manager.save(1)
    assert manager.restore_latest(map_location={"cpu": GPU}) == 1
    assert {p.device for p in model.parameters()} == {GPU}
    assert manager.restore(manager.latest, map_location=lambda t, loc: t.to("cpu")) == 1
    assert {p.device for p in model.parameters()} == {"cpu"}


@pytest.mark.skipif(md.cuda.device_count() < 2, reason="needs two CUDA devices")
def test_a_model_on_the_second_gpu_restores_onto_the_first(tmp_path):
    path, values = saved(tmp_path, "cuda:1")
    model, opt = build("cuda:1", seed=9)
    md.Checkpoint(model=model, optimizer=opt).restore(path, map_location={"cuda:1": "cuda:0"})
    assert {p.device for p in model.parameters()} == {"cuda:0"}
    for name, value in model.state_dict().items():
        np.testing.assert_array_equal(value, values[name], err_msg=name)
