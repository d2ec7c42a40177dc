"""AES-GCM encrypted files: the right key reads them, anything else is a DecryptionError."""

import numpy as np
import pytest

pytest.importorskip("cryptography")

import minidl.io as mio  # noqa: E402
from minidl.io import header  # noqa: E402
from minidl.testing import as_saved, assert_same_value  # noqa: E402

KEY = bytes(range(32))


def value():
    return {"w": np.arange(1000, dtype=np.float32), "empty": np.zeros((0, 2)), "note": "secret",
            "fortran": np.asfortranarray(np.ones((3, 4), ">f8"))}


@pytest.mark.parametrize("key", [KEY[:16], KEY[:24], KEY])
def test_round_trip_with_every_key_size(tmp_path, key):
    path = tmp_path / "e.mdl"
    mio.save(value(), path, key=key)
    assert b"secret" not in path.read_bytes()
    assert_same_value(mio.load(path, key=key), as_saved(value()))
    assert_same_value(mio.load(path, key=key, mmap=True), as_saved(value()))  # decrypted to memory


def test_tensors_spanning_several_chunks(tmp_path, monkeypatch):
    monkeypatch.setattr(header, "ENCRYPTION_CHUNK", 1000)
    from minidl.io import crypto, reader
    monkeypatch.setattr(crypto, "ENCRYPTION_CHUNK", 1000)
    monkeypatch.setattr(reader, "ENCRYPTION_CHUNK", 1000)
    v = {"a": np.arange(2501, dtype=np.uint8), "b": np.arange(300, dtype=np.int64)}
    mio.save(v, tmp_path / "c.mdl", key=KEY)
    assert_same_value(mio.load(tmp_path / "c.mdl", key=KEY), v)


def test_missing_key(tmp_path):
    mio.save(value(), tmp_path / "e.mdl", key=KEY)
    with pytest.raises(mio.DecryptionError, match="encrypted"):
        mio.load(tmp_path / "e.mdl")


@pytest.mark.parametrize("key", [bytes(32), KEY[:16], b"short", "a string"])
def test_wrong_or_unusable_key(tmp_path, key):
    mio.save(value(), tmp_path / "e.mdl", key=KEY)
    with pytest.raises(mio.DecryptionError):
        mio.load(tmp_path / "e.mdl", key=key)


def test_key_for_an_unencrypted_file_is_refused(tmp_path):
    mio.save(value(), tmp_path / "p.mdl")
    with pytest.raises(mio.DecryptionError, match="not encrypted"):
        mio.load(tmp_path / "p.mdl", key=KEY)


def test_bad_keys_on_save_are_programming_errors(tmp_path):
    with pytest.raises(ValueError):
        mio.save(1, tmp_path / "x.mdl", key=b"123")
    with pytest.raises(TypeError):
        mio.save(1, tmp_path / "x.mdl", key="a" * 16)


def test_tampering_with_fixed_checksums_is_caught_by_gcm(tmp_path):
    """A forger who also recomputes the (non-secret) checksums still fails authentication."""
    import struct
    from io_file_crafting import reseal_prelude
    from minidl.io.checksum import checksum
    path = tmp_path / "e.mdl"
    mio.save({"w": np.zeros(64, np.float32)}, path, key=KEY)
    data = bytearray(path.read_bytes())
    header_length = struct.unpack_from("<Q", data, 16)[0]
    data[64 + 5] ^= 1  # inside the encrypted header
    struct.pack_into("<Q", data, 24, checksum(bytes(data[64:64 + header_length])))
    path.write_bytes(bytes(reseal_prelude(data)))
    with pytest.raises(mio.DecryptionError, match="altered"):
        mio.load(path, key=KEY)


def test_swapping_chunks_between_files_fails(tmp_path):
    a, b = tmp_path / "a.mdl", tmp_path / "b.mdl"
    mio.save({"w": np.zeros(16, np.float32)}, a, key=KEY)
    mio.save({"w": np.ones(16, np.float32)}, b, key=KEY)
    da, db = a.read_bytes(), b.read_bytes()
    assert len(da) == len(db)
    forged = tmp_path / "f.mdl"
    forged.write_bytes(da[:-80] + db[-80:])  # b's tensor under a's header
    with pytest.raises(mio.CheckpointError):
        mio.load(forged, key=KEY)


def test_nonces_differ_between_saves(tmp_path):
    mio.save(1, tmp_path / "a.mdl", key=KEY)
    mio.save(1, tmp_path / "b.mdl", key=KEY)
    assert (tmp_path / "a.mdl").read_bytes()[32:44] != (tmp_path / "b.mdl").read_bytes()[32:44]
