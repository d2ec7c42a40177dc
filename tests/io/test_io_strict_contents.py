"""What the format forbids is refused: 32-bit floats and over-long encodings in the header,
unknown kinds, bool bytes other than 0/1, non-zero padding in encrypted files."""

import struct

import msgpack
import numpy as np
import pytest

import minidl.io as mio
from io_file_crafting import craft, entry, values_header
from minidl.io.header import TensorRef


def write(tmp_path, data, name="f.mdl"):
    path = tmp_path / name
    path.write_bytes(data)
    return path


def test_a_32_bit_float_in_the_header_is_refused(tmp_path):
    raw = msgpack.packb({"kind": "values", "metadata": {"value": 0.5}, "tensors": []},
                        use_bin_type=True, use_single_float=True)
    with pytest.raises(mio.CorruptFileError, match="32-bit float"):
        mio.load(write(tmp_path, craft(header_bytes=raw)))


def test_an_over_long_integer_encoding_is_refused(tmp_path):
    canonical = msgpack.packb({"kind": "values", "metadata": {"value": 7}, "tensors": []},
                              use_bin_type=True)
    over_long = canonical.replace(b"\xa5value\x07", b"\xa5value\xcf" + struct.pack(">Q", 7))
    assert over_long != canonical
    with pytest.raises(mio.CorruptFileError, match="shortest form"):
        mio.load(write(tmp_path, craft(header_bytes=over_long)))
    assert mio.load(write(tmp_path, craft(header_bytes=canonical), "ok.mdl")) == 7


@pytest.mark.parametrize("kind", ["weights", "Values", "x" * 64])
def test_an_unknown_kind_is_refused(tmp_path, kind):
    header = values_header(1, [])
    header["kind"] = kind
    with pytest.raises(mio.CorruptFileError, match="'kind'"):
        mio.read_header(write(tmp_path, craft(header)))
    with pytest.raises(ValueError, match="kind"):
        mio.write_file(tmp_path / "w.mdl", {}, {}, kind=kind)


@pytest.mark.parametrize("options", [{}, {"mmap": True}])
def test_bool_bytes_other_than_0_and_1_are_refused(tmp_path, options):
    data = bytes([0, 1, 2, 1])
    path = write(tmp_path, craft(values_header(TensorRef("b"), [entry("b", "bool", [4], 0, data)]),
                                 data))
    with pytest.raises(mio.CorruptFileError, match="bool tensor 'b'"):
        mio.load(path, **options)


def test_encrypted_files_padding_is_checked(tmp_path):
    pytest.importorskip("cryptography")
    key = bytes(range(16))
    path = tmp_path / "e.mdl"
    mio.save({"a": np.ones(3, np.float32), "b": np.ones(5, np.float32)}, path, key=key)
    info = mio.read_header(path, key=key)
    first = info.entries[0]
    gap = info.prelude.data_start + first.offset + first.length  # padding before "b"
    assert info.entries[1].offset > first.offset + first.length
    data = bytearray(path.read_bytes())
    data[gap] = 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(mio.CorruptFileError, match="padding"):
        mio.load(path, key=key)
