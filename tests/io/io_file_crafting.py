"""Build minidl files byte by byte, so tests can forge exactly the damage they want."""

import struct

import msgpack

from minidl.io.checksum import checksum, tensor_checksum
from minidl.io.header import TensorRef

MAGIC = b"\x89MINIDL\n"


def ref_default(obj):
    if isinstance(obj, TensorRef):
        return msgpack.ExtType(1, obj.name.encode())
    raise TypeError(obj)


def pack(tree) -> bytes:
    return msgpack.packb(tree, use_bin_type=True, default=ref_default)


def entry(name, dtype, shape, offset, data: bytes, **extra):
    """An index entry for ``data`` with the version-2 checksum (bytes bound to name, dtype, shape)."""
    return {"name": name, "dtype": dtype, "shape": list(shape), "offset": offset,
            "length": len(data), "checksum": tensor_checksum(checksum(data), name, dtype, shape),
            **extra}


def craft(header=None, data: bytes = b"", *, header_bytes=None, magic=MAGIC, major=2, minor=0,
          flags=0, header_length=None, header_checksum=None, nonce=bytes(12),
          reserved=None, prelude_checksum=None, padding=None) -> bytes:
    """A file from a header tree (or raw header bytes) and the data section's bytes.

    Version 2 preludes get their checksum (of bytes 0..43) at bytes 44..51 unless
    ``prelude_checksum`` says otherwise; ``reserved`` is bytes 52..63 (version 1: 44..63).
    """
    raw = header_bytes if header_bytes is not None else pack(header)
    length = len(raw) if header_length is None else header_length
    check = checksum(raw) if header_checksum is None else header_checksum
    checked = struct.pack("<8sHHIQQ12s", magic, major, minor, flags, length, check, nonce)
    if major == 1:
        prelude = checked + (bytes(20) if reserved is None else reserved)
    else:
        stored = checksum(checked) if prelude_checksum is None else prelude_checksum
        prelude = checked + struct.pack("<Q", stored) + (bytes(12) if reserved is None else reserved)
    pad = padding if padding is not None else bytes(-(64 + len(raw)) % 64)
    return prelude + raw + pad + data


def values_header(value, entries):
    return {"kind": "values", "metadata": {"value": value}, "tensors": entries}


def one_tensor_file(**entry_overrides) -> bytes:
    """A valid file holding {"w": float32[4]} whose index entry can be overridden."""
    data = struct.pack("<4f", 1, 2, 3, 4)
    e = entry("w", "float32", [4], 0, data)
    e.update(entry_overrides)
    return craft(values_header({"w": TensorRef("w")}, [e]), data)


def reseal_prelude(data: bytearray) -> bytearray:
    """Recompute a version-2 prelude's checksum after a test edited bytes 0..43 (a forger's move)."""
    data[44:52] = struct.pack("<Q", checksum(bytes(data[:44])))
    return data
