"""SPEC.md is enough to read a minidl file: a reader written from the spec alone, using
only msgpack and NumPy (no minidl import inside it), reads and verifies a minidl file."""

import struct

import msgpack
import numpy as np

import minidl.io as mio


def independent_read(path):
    """Read a minidl file following SPEC.md; returns (kind, value tree, tensors)."""
    with open(path, "rb") as f:
        blob = f.read()
    magic, major, minor, flags, hlen, hsum, nonce, prelude_sum, reserved = struct.unpack_from(
        "<8sHHIQQ12sQ12s", blob, 0)
    assert magic == b"\x89MINIDL\n" and major == 2 and flags == 0 and reserved == bytes(12)

    def mix(z):
        z = z ^ (z >> np.uint64(30))
        z = z * np.uint64(0xBF58476D1CE4E5B9)
        z = z ^ (z >> np.uint64(27))
        z = z * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))

    def digest(data: bytes) -> int:
        n = len(data)
        words = np.frombuffer(data + b"\0" * (-n % 8), dtype="<u8")
        with np.errstate(over="ignore"):
            positions = np.arange(len(words), dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
            acc = np.sum(mix(words ^ positions), dtype=np.uint64)
            return int(mix(np.array([acc ^ np.uint64(n)], dtype=np.uint64))[0])

    def bound(data_sum: int, name: str, dtype: str, shape) -> int:
        descriptor = "\0".join([name, dtype, ",".join(map(str, shape))]).encode()
        mixed = mix(np.array([data_sum ^ digest(descriptor)], dtype=np.uint64))
        return int(mixed[0])

    assert digest(blob[:44]) == prelude_sum
    header_bytes = blob[64:64 + hlen]
    assert digest(header_bytes) == hsum
    refs = {}

    def ext_hook(code, data):
        assert code == 1
        return ("tensor", data.decode())

    header = msgpack.unpackb(header_bytes, raw=False, ext_hook=ext_hook)
    data_start = (64 + hlen + 63) // 64 * 64
    for t in header["tensors"]:
        raw = blob[data_start + t["offset"]:data_start + t["offset"] + t["length"]]
        assert bound(digest(raw), t["name"], t["dtype"], t["shape"]) == t["checksum"], t["name"]
        refs[t["name"]] = np.frombuffer(raw, dtype=np.dtype(t["dtype"]).newbyteorder("<")
                                        ).reshape(t["shape"])

    def resolve(node):
        if isinstance(node, tuple) and node[:1] == ("tensor",):
            return refs[node[1]]
        if isinstance(node, dict):
            return {k: resolve(v) for k, v in node.items()}
        if isinstance(node, list):
            return [resolve(v) for v in node]
        return node

    return header["kind"], resolve(header["metadata"]["value"]), refs


def test_a_reader_written_from_the_spec_reads_minidl_files(tmp_path):
    value = {"w": np.arange(12, dtype=">f4").reshape(3, 4), "b": np.array([True, False]),
             "e": np.zeros((2, 0), np.int64), "s": np.array(3, np.uint16), "step": 5,
             "names": ["a", b"b"], "m": {"x": 1.5}}
    path = tmp_path / "v.mdl"
    mio.save(value, path)
    kind, tree, tensors = independent_read(path)
    assert kind == "values"
    assert tree["step"] == 5 and tree["names"] == ["a", b"b"] and tree["m"] == {"x": 1.5}
    np.testing.assert_array_equal(tree["w"], value["w"])
    assert tree["w"].dtype == np.float32 and tree["e"].shape == (2, 0)
    assert tree["s"].shape == () and tree["s"] == 3
    assert list(tensors) == ["w", "b", "e", "s"]
