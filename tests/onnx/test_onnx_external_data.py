"""Weights in a side file, and hostile external-data references refused before any read."""

import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import minidl as md
from minidl import nn
from minidl.onnx import UnsafeExternalDataError, export_onnx, import_model

from onnx_checks import ATOL, RTOL, run_onnxruntime, validate

rng = np.random.default_rng(3)


def mlp():
    md.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 32), nn.ReLU(), nn.Linear(32, 3)).eval()


def test_large_weights_go_to_a_side_file_with_a_relative_name(tmp_path):
    model = mlp()
    path = tmp_path / "mlp.onnx"
    export_onnx(model, path, md.tensor(np.zeros((1, 6), np.float32)),
                external_data_threshold=256)
    assert (tmp_path / "mlp.onnx.data").is_file()
    proto = onnx.load(str(path), load_external_data=False)
    external = {t.name: {e.key: e.value for e in t.external_data}
                for t in proto.graph.initializer if t.data_location == TensorProto.EXTERNAL}
    assert set(external) == {"0.weight", "2.weight"}  # the small biases stay inline
    assert {e["location"] for e in external.values()} == {"mlp.onnx.data"}
    validate(path)
    x = rng.standard_normal((5, 6)).astype(np.float32)
    expected = model(md.tensor(x)).numpy()
    np.testing.assert_allclose(run_onnxruntime(path, [x])[0], expected, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(import_model(path)(md.tensor(x)).numpy(), expected,
                               rtol=RTOL, atol=ATOL)
    # The pair moves together: a copy in another directory still loads.
    moved = tmp_path / "elsewhere"
    moved.mkdir()
    os.replace(path, moved / "mlp.onnx")
    os.replace(tmp_path / "mlp.onnx.data", moved / "mlp.onnx.data")
    np.testing.assert_allclose(import_model(moved / "mlp.onnx")(md.tensor(x)).numpy(),
                               expected, rtol=RTOL, atol=ATOL)


def test_small_models_stay_in_one_file_by_default(tmp_path):
    export_onnx(mlp(), tmp_path / "m.onnx", md.tensor(np.zeros((1, 6), np.float32)))
    assert os.listdir(tmp_path) == ["m.onnx"]


def test_export_refuses_a_side_file_symlinked_out_of_the_directory(tmp_path):
    outside, inside = tmp_path / "outside", tmp_path / "models"
    outside.mkdir()
    inside.mkdir()
    target = outside / "victim.bin"
    target.write_bytes(b"precious")
    os.symlink(target, inside / "m.onnx.data")
    with pytest.raises(UnsafeExternalDataError, match="outside"):
        export_onnx(mlp(), inside / "m.onnx", md.tensor(np.zeros((1, 6), np.float32)),
                    external_data_threshold=0)
    assert target.read_bytes() == b"precious" and not (inside / "m.onnx").exists()


def hostile_model(directory, location, offset=0, length=None, size=2):
    """A one-initializer model whose weight (``size`` floats) claims to live at ``location``."""
    tensor = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[size])
    tensor.data_location = TensorProto.EXTERNAL
    entries = [("location", location), ("offset", str(offset))]
    entries += [] if length is None else [("length", str(length))]
    for key, value in entries:
        entry = tensor.external_data.add()
        entry.key, entry.value = key, value
    graph = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [size])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [size])],
                              initializer=[tensor])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path = directory / "evil.onnx"
    path.write_bytes(model.SerializeToString())
    return path


@pytest.fixture
def layout(tmp_path):
    models, secrets = tmp_path / "models", tmp_path / "secrets"
    models.mkdir()
    secrets.mkdir()
    (secrets / "key.bin").write_bytes(np.arange(2, dtype=np.float32).tobytes())
    return models, secrets


@pytest.mark.parametrize("location", [
    "../secrets/key.bin", "sub/../../secrets/key.bin", "..", "a\\..\\..\\key.bin",
    "C:key.bin", ""])
def test_import_refuses_locations_that_climb_out(layout, location):
    models, _ = layout
    with pytest.raises(UnsafeExternalDataError):
        import_model(hostile_model(models, location))


def test_import_refuses_absolute_locations(layout):
    models, secrets = layout
    with pytest.raises(UnsafeExternalDataError, match="absolute"):
        import_model(hostile_model(models, str(secrets / "key.bin")))


def test_import_refuses_symlinks_that_escape(layout):
    models, secrets = layout
    os.symlink(secrets / "key.bin", models / "weights.bin")
    with pytest.raises(UnsafeExternalDataError, match="symlink"):
        import_model(hostile_model(models, "weights.bin"))
    os.symlink(secrets, models / "linked_dir")
    with pytest.raises(UnsafeExternalDataError, match="outside"):
        import_model(hostile_model(models, "linked_dir/key.bin"))


def test_import_checks_byte_ranges_and_existence(layout):
    models, _ = layout
    (models / "w.bin").write_bytes(np.ones(2, np.float32).tobytes())
    with pytest.raises(UnsafeExternalDataError, match="outside"):
        import_model(hostile_model(models, "w.bin", offset=4))
    with pytest.raises(UnsafeExternalDataError, match="bytes"):
        import_model(hostile_model(models, "w.bin", length=4))
    with pytest.raises(UnsafeExternalDataError, match="not a regular file"):
        import_model(hostile_model(models, "missing.bin"))
    with pytest.raises(UnsafeExternalDataError):
        import_model(hostile_model(models, "w.bin", offset=-8))
    # The same model with a sound reference loads and runs.
    module = import_model(hostile_model(models, "w.bin"))
    np.testing.assert_array_equal(module(md.tensor(np.zeros(2, np.float32))).numpy(), [1, 1])


def test_a_symlink_inside_the_directory_is_fine(layout):
    models, _ = layout
    (models / "real.bin").write_bytes(np.full(2, 3, np.float32).tobytes())
    os.symlink("real.bin", models / "alias.bin")
    module = import_model(hostile_model(models, "alias.bin"))
    np.testing.assert_array_equal(module(md.tensor(np.zeros(2, np.float32))).numpy(), [3, 3])


def test_automatic_threshold_moves_weights_out_only_past_the_protobuf_limit():
    from minidl.onnx.external_data import plan_external
    small = {"w": np.zeros((256, 256), np.float32), "b": np.zeros(3, np.float32)}
    assert plan_external(small, None) == set()
    # Broadcast views report the size of a 3 GB tensor without allocating it.
    huge = dict(small, big=np.broadcast_to(np.float32(0), (3 * 2**28,)))
    assert plan_external(huge, None) == {"w", "big"}
    assert plan_external(small, 0) == {"w", "b"}


def sparse_file(path, size: int):
    with open(path, "wb") as file:
        file.truncate(size)  # no blocks written: only a read would cost memory
    return path


@pytest.mark.parametrize("length", [None, 64 << 20])
def test_external_data_beyond_the_tensor_bound_is_refused_before_it_is_read(layout, length):
    """A tiny model with a 64 MiB sparse side file used to import with max_tensor_bytes=1 MiB."""
    models, _ = layout
    sparse_file(models / "big.bin", 64 << 20)
    path = hostile_model(models, "big.bin", length=length, size=16 << 20)
    assert path.stat().st_size < 200
    with pytest.raises(UnsafeExternalDataError, match=r"'w'.*67108864 bytes.*bound of 1048576"):
        import_model(path, max_tensor_bytes=1 << 20)
    assert import_model(path, max_tensor_bytes=64 << 20).w.shape == (16 << 20,)


def test_a_huge_sparse_side_file_is_refused_without_allocating(layout):
    """20 GB declared: refused by the default bound, not by the address space running out."""
    import resource

    models, _ = layout
    sparse_file(models / "huge.bin", 20 * 10**9)
    path = hostile_model(models, "huge.bin", size=5 * 10**9)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(UnsafeExternalDataError, match="beyond the bound"):
        import_model(path)
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 64 << 10  # KiB


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_a_side_file_swapped_for_a_fifo_after_the_checks_is_refused(layout, monkeypatch):
    from minidl.onnx import external_data

    models, _ = layout
    (models / "w.bin").write_bytes(np.ones(2, np.float32).tobytes())
    path = hostile_model(models, "w.bin")
    real_size = os.path.getsize

    def swapped_after_the_checks(name):  # the last check measures the file: then it changes
        size = real_size(name)
        os.remove(name)
        os.mkfifo(name)
        return size
    monkeypatch.setattr(external_data.os.path, "getsize", swapped_after_the_checks)
    with pytest.raises(UnsafeExternalDataError, match="not a regular file"):
        import_model(path)


IMPORT_PEAK = """
import sys, tracemalloc
import onnx, minidl.onnx.interpreter  # imported before measuring: not the import's cost
from minidl.onnx import import_model
tracemalloc.start()
before = tracemalloc.get_traced_memory()[0]
module = import_model(sys.argv[1])
print(tracemalloc.get_traced_memory()[1] - before)
"""


def test_importing_external_weights_holds_them_about_once(tmp_path):
    """The bytes used to be read, copied into the message, serialized and parsed again by the
    checker, and copied out: about four times the weights at the peak. (tracemalloc sees the
    Python and NumPy part of that, in a fresh process.)"""
    import subprocess
    import sys

    weights = 32 << 20
    export_onnx(md.nn.Linear(4096, 2048), tmp_path / "m.onnx",
                md.tensor(np.zeros((1, 4096), np.float32)), external_data_threshold=1024)
    project = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    done = subprocess.run([sys.executable, "-c", IMPORT_PEAK, str(tmp_path / "m.onnx")],
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": project})
    assert done.returncode == 0, done.stderr[-2000:]
    assert int(done.stdout.split()[-1]) < 1.5 * weights
