"""Version 2 of the format: the prelude has its own checksum, and each tensor checksum binds
the bytes to the name, dtype and shape that say how to read them.  Version 1 files still load."""

import struct

import numpy as np
import pytest

import minidl.io as mio
from io_file_crafting import craft, values_header
from minidl.io.checksum import checksum
from minidl.io.header import TensorRef
from minidl.testing.forging import rewrite_header


def saved(tmp_path, value=None):
    path = tmp_path / "v.mdl"
    mio.save({"w": np.arange(6, dtype=np.float32).reshape(2, 3)} if value is None else value, path)
    return path


@pytest.mark.parametrize("byte", [10, 11, 12, 13, 14, 15, 16, 24, 33, 43])
def test_a_flipped_prelude_bit_is_damage(tmp_path, byte):
    """The minor version (bytes 10-11) was covered by nothing before version 2."""
    path = saved(tmp_path)
    data = bytearray(path.read_bytes())
    data[byte] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(mio.ChecksumMismatchError, match="prelude checksum"):
        mio.load(path)


def test_a_damaged_prelude_checksum_is_damage(tmp_path):
    path = saved(tmp_path)
    data = bytearray(path.read_bytes())
    data[47] ^= 0x80
    path.write_bytes(bytes(data))
    with pytest.raises(mio.ChecksumMismatchError, match="prelude"):
        mio.load(path)


def test_a_version_2_file_damaged_to_claim_version_1_is_refused(tmp_path):
    path = saved(tmp_path)
    data = bytearray(path.read_bytes())
    data[8] = 1
    path.write_bytes(bytes(data))
    with pytest.raises(mio.CorruptFileError, match="reserved"):
        mio.load(path)


@pytest.mark.parametrize("change", [
    lambda t: t["tensors"][0].update(dtype="int32"),     # same size, same bytes, other meaning
    lambda t: t["tensors"][0].update(shape=[3, 2]),
])
def test_the_tensor_checksum_covers_dtype_and_shape(tmp_path, change):
    path = saved(tmp_path)
    rewrite_header(path, change)
    with pytest.raises(mio.ChecksumMismatchError, match="'w'"):
        mio.load(path)
    with pytest.raises(mio.ChecksumMismatchError):
        mio.load(path, mmap=True)


def test_swapped_tensor_names_are_caught(tmp_path):
    path = saved(tmp_path, {"a": np.zeros(4, np.float32), "b": np.ones(4, np.float32)})

    def swap(tree):
        first, second = tree["tensors"]
        first["name"], second["name"] = second["name"], first["name"]
        first["offset"], second["offset"] = first["offset"], second["offset"]
        tree["tensors"] = [first, second]
    rewrite_header(path, swap)
    with pytest.raises(mio.ChecksumMismatchError):
        mio.load(path)


def test_version_1_files_are_still_read(tmp_path):
    data = struct.pack("<4f", 1, 2, 3, 4)
    entry = {"name": "w", "dtype": "float32", "shape": [4], "offset": 0, "length": 16,
             "checksum": checksum(data)}  # version 1: the bytes alone
    path = tmp_path / "old.mdl"
    path.write_bytes(craft(values_header({"w": TensorRef("w")}, [entry]), data, major=1))
    np.testing.assert_array_equal(mio.load(path)["w"], [1, 2, 3, 4])
    assert mio.read_header(path).version == "1.0"
    bad = bytearray(path.read_bytes())
    bad[-1] ^= 1
    path.write_bytes(bytes(bad))
    with pytest.raises(mio.ChecksumMismatchError):
        mio.load(path)


def test_files_are_written_as_version_2(tmp_path):
    path = saved(tmp_path)
    raw = path.read_bytes()
    assert struct.unpack_from("<HH", raw, 8) == (2, 0)
    assert struct.unpack_from("<Q", raw, 44)[0] == checksum(raw[:44])
    assert raw[52:64] == bytes(12)
