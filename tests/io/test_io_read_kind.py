"""``read_file(kind=)``: the kind is checked on the very header the tensors are read under."""

import os

import numpy as np
import pytest

import minidl.io as mio
from minidl.io import reader


def _checkpoint(path, value: float):
    mio.write_file(path, {"step": 1}, {"w": np.full(3, value)}, kind="checkpoint")


def test_read_file_with_a_kind_parses_the_header_once(tmp_path, monkeypatch):
    path = tmp_path / "c.mdl"
    _checkpoint(path, 1.0)
    parses, opens = [], []
    unpack, open_file = reader.unpack_header, reader.open_regular_file
    monkeypatch.setattr(reader, "unpack_header",
                        lambda *args: parses.append(args[0]) or unpack(*args))
    monkeypatch.setattr(reader, "open_regular_file",
                        lambda name: opens.append(name) or open_file(name))
    metadata, tensors = mio.read_file(path, kind="checkpoint")
    assert metadata == {"step": 1} and list(tensors) == ["w"]
    assert (len(parses), len(opens)) == (1, 1)


def test_a_file_replaced_after_its_kind_was_checked_is_not_read_in_its_place(
        tmp_path, monkeypatch):
    # Saving replaces a file by renaming a new one over it; a reader that opened the file
    # twice (once for the kind, once for the tensors) mixed two files' contents.
    path, newer = tmp_path / "c.mdl", tmp_path / "newer.mdl"
    _checkpoint(path, 1.0)
    _checkpoint(newer, 2.0)
    validate = reader.validate_header

    def validate_then_replace(*args):
        header = validate(*args)
        if newer.exists():
            os.replace(newer, path)  # the next save lands between the check and the read
        return header

    monkeypatch.setattr(reader, "validate_header", validate_then_replace)
    _, tensors = mio.read_file(path, kind="checkpoint")
    np.testing.assert_array_equal(tensors["w"], np.full(3, 1.0))


def test_a_file_of_another_kind_is_refused_before_any_tensor_is_read(tmp_path, monkeypatch):
    mio.save({"w": np.zeros(2)}, tmp_path / "v.mdl")
    monkeypatch.setattr(reader, "_read_plain", lambda *args: pytest.fail("tensors were read"))
    with pytest.raises(mio.WrongKindError, match="holds a 'values' file, not a 'checkpoint'"):
        mio.read_file(tmp_path / "v.mdl", kind="checkpoint")
