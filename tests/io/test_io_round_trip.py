"""Values round-trip exactly through save/load, in every reading mode."""

import os

import numpy as np
import pytest

import minidl.io as mio
from minidl.testing import as_saved, assert_same_value


def sample_value():
    return {
        "w": np.arange(12, dtype=np.float32).reshape(3, 4),
        "big_endian": np.arange(6, dtype=">i4").reshape(2, 3),
        "fortran": np.asfortranarray(np.arange(15, dtype=np.int16).reshape(3, 5)),
        "strided": np.arange(40.0)[::3],
        "transposed": np.arange(24, dtype=np.uint8).reshape(2, 3, 4).transpose(2, 0, 1),
        "empty": np.zeros((0, 3), np.float64),
        "zero_d": np.array(5, np.uint64),
        "bools": np.array([True, False, True]),
        "half": np.array([1.5, -np.inf, np.nan], np.float16),
        "scalar": np.float32(2.5),
        "step": 7, "neg": -(2**63), "huge": 2**64 - 1, "note": "héllo", "blob": b"\x00\xff",
        "floats": [float("nan"), float("inf"), -0.0, 1e-310],
        "flags": [True, False, None],
        "tuple": (1, (2, 3)),
        "nested": {"a": [{"b": np.ones(2, np.int8)}], "": {}},
        "empty_list": [],
    }


@pytest.mark.parametrize("mode", [dict(), dict(mmap=True), dict(mmap=True, verify=True),
                                  dict(verify=False)])
def test_sample_round_trips_exactly(tmp_path, mode):
    path = tmp_path / "v.mdl"
    value = sample_value()
    mio.save(value, path)
    assert_same_value(mio.load(path, **mode), as_saved(value))


@pytest.mark.parametrize("value", [None, 3, "s", b"", [], {}, 1.5, np.zeros(()), np.zeros(0)])
def test_top_level_values(tmp_path, value):
    mio.save(value, tmp_path / "v.mdl")
    assert_same_value(mio.load(tmp_path / "v.mdl"), as_saved(value))


def test_tuples_come_back_as_lists(tmp_path):
    mio.save((1, 2), tmp_path / "t.mdl")
    assert mio.load(tmp_path / "t.mdl") == [1, 2]


def test_array_holders_are_saved_as_arrays_whatever_their_class_is_called(tmp_path):
    class Holder:  # any class that follows the state-tree protocol
        def __state_array__(self):
            return np.arange(3, dtype=np.float32)

    class Tensor:  # a look-alike by name and method only: not recognised
        def numpy(self):
            return np.arange(3, dtype=np.float32)

    mio.save({"t": Holder()}, tmp_path / "t.mdl")
    out = mio.load(tmp_path / "t.mdl")["t"]
    assert isinstance(out, np.ndarray) and out.dtype == np.float32
    with pytest.raises(TypeError, match="value/t: cannot save a Tensor"):
        mio.save({"t": Tensor()}, tmp_path / "u.mdl")


def test_minidl_tensor_is_saved_as_array(tmp_path):
    import minidl as md
    mio.save({"t": md.tensor(np.arange(4, dtype=np.float32).reshape(2, 2))}, tmp_path / "t.mdl")
    loaded = mio.load(tmp_path / "t.mdl")["t"]
    assert type(loaded) is np.ndarray and loaded.dtype == np.float32
    np.testing.assert_array_equal(loaded, np.arange(4).reshape(2, 2))


def test_parameters_and_tensor_subclasses_are_saved_as_arrays(tmp_path):
    from minidl import nn
    layer = nn.Linear(3, 2)
    mio.save({"w": layer.weight, "params": list(layer.parameters())}, tmp_path / "p.mdl")
    out = mio.load(tmp_path / "p.mdl")
    np.testing.assert_array_equal(out["w"], layer.weight.numpy())
    np.testing.assert_array_equal(out["params"][1], layer.bias.numpy())


def test_mmap_arrays_are_read_only_views(tmp_path):
    mio.save({"w": np.arange(1000, dtype=np.float32)}, tmp_path / "m.mdl")
    w = mio.load(tmp_path / "m.mdl", mmap=True)["w"]
    assert not w.flags.writeable
    assert w.ctypes.data % 64 == 0  # aligned in the mapping
    with pytest.raises(ValueError):
        w[0] = 1


def test_full_load_gives_writable_arrays(tmp_path):
    mio.save({"w": np.arange(10.0)}, tmp_path / "w.mdl")
    w = mio.load(tmp_path / "w.mdl")["w"]
    assert w.flags.writeable
    w[0] = 5  # the array's own memory: the file is not written through it
    assert w[0] == 5
    np.testing.assert_array_equal(mio.load(tmp_path / "w.mdl")["w"], np.arange(10.0))


@pytest.mark.parametrize("bad,error", [
    ({1: 2}, TypeError), ({"a": {(1,): 2}}, TypeError), ({"o": np.array([object()])}, TypeError),
    ({"s": np.array(["x"])}, TypeError), ({"c": np.zeros(2, np.complex64)}, TypeError),
    ({"i": 2**64}, ValueError), ({"i": -(2**63) - 1}, ValueError), ({"x": object()}, TypeError),
    ({"set": {1}}, TypeError)])
def test_unstorable_values_raise_before_writing(tmp_path, bad, error):
    path = tmp_path / "bad.mdl"
    with pytest.raises(error):
        mio.save(bad, path)
    assert not path.exists()
    assert os.listdir(tmp_path) == []


def test_too_deep_values_are_refused_on_save(tmp_path):
    deep = 0
    for _ in range(100):
        deep = [deep]
    with pytest.raises(ValueError, match="nested"):
        mio.save(deep, tmp_path / "d.mdl")


def test_tensor_names_follow_the_path_and_stay_unique(tmp_path):
    value = {"a/b": np.zeros(1), "a": {"b": np.ones(1)}, "l": [np.zeros(2)]}
    mio.save(value, tmp_path / "n.mdl")
    names = [e.name for e in mio.read_header(tmp_path / "n.mdl").entries]
    assert names == ["a/b", "a/b#2", "l/0"]
    assert_same_value(mio.load(tmp_path / "n.mdl"), value)


def test_layout_is_aligned_and_packed(tmp_path):
    value = {"a": np.zeros(3, np.int8), "b": np.zeros((5, 7), np.float64), "c": np.zeros(0)}
    mio.save(value, tmp_path / "l.mdl")
    info = mio.read_header(tmp_path / "l.mdl")
    assert info.prelude.data_start % 64 == 0
    assert [e.offset for e in info.entries] == [0, 64, 64 + 320]
    assert info.file_size == info.prelude.data_start + 384


def test_write_file_and_read_file_for_other_kinds(tmp_path):
    path = tmp_path / "c.ckpt"
    ref = mio.TensorRef("opt/m")
    mio.write_file(path, {"step": 3, "state": {"m": ref}}, {"opt/m": np.ones(4)}, kind="checkpoint")
    metadata, tensors = mio.read_file(path, kind="checkpoint")
    assert metadata == {"step": 3, "state": {"m": ref}}
    assert mio.decode_value(path, metadata["state"], tensors)["m"].sum() == 4
    assert mio.read_header(path).kind == "checkpoint"


def test_save_overwrites_atomically(tmp_path):
    path = tmp_path / "v.mdl"
    mio.save({"v": 1}, path)
    mio.save({"v": 2}, path)
    assert mio.load(path) == {"v": 2}
    assert os.listdir(tmp_path) == ["v.mdl"]


def test_save_accepts_str_and_pathlike(tmp_path):
    mio.save(1, str(tmp_path / "s.mdl"))
    assert mio.load(str(tmp_path / "s.mdl")) == 1


def test_lazy_open_reads_only_the_header(tmp_path, monkeypatch):
    mio.save({"w": np.ones(1 << 16)}, tmp_path / "big.mdl")
    from minidl.io import reader
    calls = []
    real = reader.checksum
    monkeypatch.setattr(reader, "checksum", lambda data: calls.append(len(data)) or real(data))
    mio.load(tmp_path / "big.mdl", mmap=True, verify=False)
    assert len(calls) == 1 and calls[0] < 1000  # the header only
