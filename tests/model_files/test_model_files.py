"""save_model/load_model: topology as data, weights as tensors, no code from the file."""

import sys
import types

import numpy as np
import pytest

import minidl as md
import minidl.io as mio
from minidl import model_files


def small_model():
    nn = md.nn
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))


def test_model_round_trip_computes_the_same_function(tmp_path):
    md.manual_seed(0)
    model = small_model()
    path = tmp_path / "m.mdl"
    model_files.save_model(model, path)
    rebuilt = model_files.load_model(path)
    assert type(rebuilt) is type(model)
    for (k1, v1), (k2, v2) in zip(model.state_dict().items(), rebuilt.state_dict().items()):
        assert k1 == k2
        np.testing.assert_array_equal(v1, v2)
    x = md.tensor(np.random.default_rng(0).standard_normal((2, 4)).astype(np.float32))
    np.testing.assert_allclose(model(x).numpy(), rebuilt(x).numpy())


def test_buffers_are_saved(tmp_path):
    model = md.nn.Sequential(md.nn.Linear(3, 3), md.nn.BatchNorm1d(3))
    model.state_dict()  # running_mean, running_var, num_batches_tracked included
    model_files.save_model(model, tmp_path / "bn.mdl")
    names = [e.name for e in mio.read_header(tmp_path / "bn.mdl").entries]
    assert names == list(model.state_dict())
    assert any("running_mean" in n for n in names)


def test_user_layer_loads_only_after_registration(tmp_path):
    from minidl.nn.registry import unregister_module

    class Scale(md.nn.Module):
        def __init__(self, factor=2.0):
            super().__init__()
            self.factor = factor

        def get_config(self):
            return {"factor": self.factor}

        def forward(self, x):
            return x * self.factor

    md.nn.register_module(Scale)
    try:
        model_files.save_model(md.nn.Sequential(md.nn.Linear(2, 2), Scale(3.0)), tmp_path / "s.mdl")
        assert model_files.load_model(tmp_path / "s.mdl")[1].factor == 3.0
        unregister_module("Scale")
        with pytest.raises(mio.ModelSpecError, match="Scale"):
            model_files.load_model(tmp_path / "s.mdl")
    finally:
        unregister_module("Scale")


def _model_file(path, spec, tensors=None):
    mio.write_file(path, {"spec": spec}, tensors or {}, kind="model")


def test_file_naming_code_to_import_is_refused_and_nothing_is_imported(tmp_path):
    spec = {"type": "minidl_evil_payload.Exploit", "args": {}, "children": []}
    _model_file(tmp_path / "evil.mdl", spec)
    with pytest.raises(mio.ModelSpecError, match="minidl_evil_payload"):
        model_files.load_model(tmp_path / "evil.mdl")
    assert "minidl_evil_payload" not in sys.modules


@pytest.mark.parametrize("spec", [
    {"type": "Linear", "args": {"in_features": "x", "out_features": 2}, "children": []},
    {"type": "Linear", "args": {"nope": 1}, "children": []},
    {"type": 5, "args": {}, "children": []},
    {"args": {}},
])
def test_bad_topologies_raise_checkpoint_errors(tmp_path, spec):
    _model_file(tmp_path / "bad.mdl", spec)
    with pytest.raises(mio.CheckpointError):
        model_files.load_model(tmp_path / "bad.mdl")


def test_weights_that_do_not_fit(tmp_path):
    model = md.nn.Linear(2, 3)
    from minidl.nn.spec import module_to_spec
    _model_file(tmp_path / "w.mdl", module_to_spec(model),
                {"weight": np.zeros((5, 5), np.float32), "bias": np.zeros(3, np.float32)})
    with pytest.raises(mio.ModelSpecError, match="weight"):
        model_files.load_model(tmp_path / "w.mdl")


# ------------------------------------------------ tests that need no engine

def test_model_file_without_spec(tmp_path):
    mio.write_file(tmp_path / "m.mdl", {}, {}, kind="model")
    with pytest.raises(mio.CorruptFileError, match="spec"):
        model_files.load_model(tmp_path / "m.mdl")


def test_load_model_refuses_values_files(tmp_path):
    mio.save({"w": np.zeros(2)}, tmp_path / "v.mdl")
    with pytest.raises(mio.WrongKindError):
        model_files.load_model(tmp_path / "v.mdl")


def test_load_model_errors_for_bad_files(tmp_path):
    with pytest.raises(mio.MissingFileError):
        model_files.load_model(tmp_path / "none.mdl")
    (tmp_path / "junk.mdl").write_bytes(b"\x00junk")
    with pytest.raises(mio.NotAMinidlFileError):
        model_files.load_model(tmp_path / "junk.mdl")


def test_load_on_a_model_file_gives_spec_and_state_dict(tmp_path):
    spec = {"type": "Linear", "args": {"in_features": 1, "out_features": 1}, "children": []}
    _model_file(tmp_path / "m.mdl", spec, {"weight": np.ones((1, 1), np.float32)})
    out = md.load(tmp_path / "m.mdl")
    assert out["spec"] == spec and list(out["state_dict"]) == ["weight"]


def test_load_on_a_model_file_without_spec_names_what_is_missing(tmp_path):
    mio.write_file(tmp_path / "m.mdl", {}, {}, kind="model")
    with pytest.raises(mio.CorruptFileError, match="no topology"):
        md.load(tmp_path / "m.mdl")


def test_the_file_format_floor_leaves_model_files_to_model_files(tmp_path):
    # minidl.io knows values and checkpoints; what a model file's spec means is read one
    # floor up, so io's own load refuses it by kind instead of guessing at its layout.
    spec = {"type": "Linear", "args": {"in_features": 1, "out_features": 1}, "children": []}
    _model_file(tmp_path / "m.mdl", spec, {"weight": np.ones((1, 1), np.float32)})
    with pytest.raises(mio.WrongKindError, match="'model' file without a stored value"):
        mio.load(tmp_path / "m.mdl")


def test_onnx_files_are_dispatched_to_the_onnx_importer(tmp_path, monkeypatch):
    calls = []
    fake = types.ModuleType("minidl.onnx")
    fake.import_model = lambda path: calls.append(path) or "imported"
    monkeypatch.setitem(sys.modules, "minidl.onnx", fake)
    (tmp_path / "m.onnx").write_bytes(b"\x08\x07")
    assert model_files.load_model(tmp_path / "m.onnx") == "imported"
    (tmp_path / "renamed.bin").write_bytes(b"\x08\x07")
    assert model_files.load_model(tmp_path / "renamed.bin") == "imported"
    assert calls == [str(tmp_path / "m.onnx"), str(tmp_path / "renamed.bin")]


def test_the_public_loaders_are_the_model_files_ones():
    # One load_model (device= included) and one md.load, owned by model_files: no second
    # wrapper that could drift from them.
    assert md.load_model is model_files.load_model
    assert md.load is model_files.load


def test_load_model_checks_its_device_before_opening_the_file(tmp_path):
    with pytest.raises(ValueError, match="unknown device 'gpu:0'"):
        model_files.load_model(tmp_path / "missing.mdl", device="gpu:0")


def test_load_model_on_the_cpu_device_gives_the_module_as_read(tmp_path):
    model = small_model()
    model_files.save_model(model, tmp_path / "m.mdl")
    rebuilt = model_files.load_model(tmp_path / "m.mdl", device=md.device("cpu"))
    assert {p.device for p in rebuilt.parameters()} == {"cpu"}
    np.testing.assert_array_equal(rebuilt[0].weight.numpy(), model[0].weight.numpy())
