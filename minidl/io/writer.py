"""Writing a minidl file: prelude, header, then the tensors streamed to disk.

The header holds every tensor's checksum, yet comes first.  Rather than building the
file in memory, the writer makes two passes over the tensors: the first computes the
checksums (fast: the checksum runs at memory speed), the second streams the bytes into
the file.  Contiguous little-endian arrays are written straight from their own memory;
other arrays (big-endian, Fortran-order, strided views) are converted a bounded buffer
at a time, so saving needs little memory beyond the tensors themselves.
"""

from __future__ import annotations

import os
from typing import Iterator, Mapping

import numpy as np

from . import crypto, layout
from .atomic import write_atomically
from .checksum import StreamingChecksum, checksum, tensor_checksum
from .dtypes import ALLOWED_DTYPES, dtype_name
from .header import (
    GCM_TAG_SIZE, KINDS, encryption_chunk_count, pack_header, stored_length)
from .state_tree import as_array

# Elements converted per step for arrays that are not already contiguous little-endian.
CONVERSION_BUFFER_BYTES = 8 << 20


def c_order_pieces(array: np.ndarray) -> Iterator[memoryview]:
    """The array's bytes in C order and little-endian, as a few contiguous pieces."""
    target = ALLOWED_DTYPES[dtype_name(array.dtype)]
    if array.size == 0:
        return
    if array.flags.c_contiguous and array.dtype == target:
        yield memoryview(array.reshape(-1).view(np.uint8))
        return
    # A buffered iterator visits the elements in C order and casts (byte-swaps) them
    # into a small reusable buffer: the conversion never needs a full copy.
    buffer_elements = max(1, CONVERSION_BUFFER_BYTES // target.itemsize)
    iterator = np.nditer(array, flags=["external_loop", "buffered", "zerosize_ok"],
                         op_dtypes=[target], order="C", casting="equiv",
                         buffersize=buffer_elements)
    for chunk in iterator:
        yield memoryview(np.ascontiguousarray(chunk).view(np.uint8))


class _PlannedTensor:
    """A tensor on its way to disk, with where and how it will be stored."""

    def __init__(self, name: str, array: np.ndarray, offset: int, first_counter: int,
                 encrypted: bool):
        self.name, self.array, self.offset = name, array, offset
        self.first_counter = first_counter
        self.dtype = dtype_name(array.dtype)
        self.length = stored_length(array.nbytes, encrypted)

    def stored_pieces(self, cipher, nonce_base) -> Iterator:
        pieces = c_order_pieces(self.array)
        if cipher is None:
            return pieces
        return crypto.encrypt_stream(cipher, nonce_base, self.first_counter, pieces)


def _plan(tensors: Mapping, encrypted: bool) -> list[_PlannedTensor]:
    """Where each tensor goes: in the given order, each at the next 64-byte boundary."""
    planned, offset, counter = [], 0, 1
    for name, value in tensors.items():
        if not isinstance(name, str) or not 0 < len(name) <= 4096:
            raise TypeError(f"tensor names must be non-empty str, got {name!r}")
        array = as_array(value)
        if array is None:
            raise TypeError(f"tensor {name!r} is a {type(value).__name__}, not a NumPy array "
                            "or a Tensor")
        item = _PlannedTensor(name, array, offset, counter, encrypted)
        planned.append(item)
        offset = layout.align_up(offset + item.length)
        counter += encryption_chunk_count(array.nbytes)
    if len(planned) > layout.MAX_TENSORS:
        raise ValueError(f"a file holds at most {layout.MAX_TENSORS} tensors")
    return planned


def write_file(path, metadata: dict, tensors: Mapping, kind: str = "values", *,
               key: bytes | None = None, durable: bool = True) -> None:
    """Atomically write a minidl file holding ``tensors`` and a ``metadata`` tree.

    ``metadata`` is plain msgpack data (str keys) and may contain ``TensorRef``s naming
    entries of ``tensors``; ``kind`` says what the file is for ("values", "model",
    "checkpoint", "checkpoint-shard").  With ``key`` (16/24/32 bytes) the header and tensors
    are AES-GCM encrypted.  The file appears complete at ``path`` or not at all.

    Everything that can be refused is refused before the file is opened: the steps are
    plan the tensors, checksum them (pass 1), seal the header, then stream (pass 2).
    """
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {', '.join(map(repr, KINDS))}, got {kind!r}")
    if not isinstance(metadata, dict):
        raise TypeError("metadata must be a dict")
    cipher = crypto.new_cipher(crypto.check_key(key)) if key is not None else None
    nonce_base = crypto.new_nonce_base() if cipher is not None else bytes(layout.NONCE_SIZE)
    planned = _plan(tensors, cipher is not None)
    entries = _index_entries(planned, cipher, nonce_base)
    prelude, header = _sealed_header(kind, metadata, entries, cipher, nonce_base)

    def write(file) -> None:
        _stream_contents(file, prelude, header, planned, cipher, nonce_base)

    # An encrypted file's bytes are secret; by default only its owner may read them.
    write_atomically(os.fspath(path), write, durable=durable,
                     mode=0o600 if cipher is not None else None)


def _index_entries(planned: list[_PlannedTensor], cipher, nonce_base) -> list[dict]:
    """Pass 1: each tensor's index entry, with the checksum of its bytes as stored."""
    entries = []
    for item in planned:
        stream = StreamingChecksum()
        for piece in item.stored_pieces(cipher, nonce_base):
            stream.update(piece)
        entries.append({"name": item.name, "dtype": item.dtype, "shape": list(item.array.shape),
                        "offset": item.offset, "length": item.length,
                        "checksum": tensor_checksum(stream.digest(), item.name, item.dtype,
                                                    item.array.shape)})
    return entries


def _sealed_header(kind: str, metadata: dict, entries: list[dict], cipher,
                   nonce_base: bytes) -> tuple[layout.Prelude, bytes]:
    """The header as stored (packed, encrypted when there is a cipher) and the prelude that
    describes it, its checksum included."""
    header = pack_header(kind, metadata, entries)
    flags = layout.FLAG_ENCRYPTED if cipher is not None else 0
    header_length = len(header) + (GCM_TAG_SIZE if cipher is not None else 0)
    if header_length > layout.MAX_HEADER_BYTES:
        raise ValueError(f"header of {header_length} bytes exceeds the {layout.MAX_HEADER_BYTES} cap; "
                         "store large data as arrays, not in metadata")
    prelude = layout.Prelude(layout.MAJOR_VERSION, layout.MINOR_VERSION, flags, header_length,
                             0, nonce_base)
    if cipher is not None:
        # The prelude's first 16 bytes (magic, version, flags, length) are authenticated too.
        header = cipher.encrypt(crypto.chunk_nonce(nonce_base, 0), header, prelude.pack()[:16])
    prelude = layout.Prelude(prelude.major, prelude.minor, flags, header_length,
                             checksum(header), nonce_base)
    return prelude, header


def _stream_contents(file, prelude: layout.Prelude, header: bytes,
                     planned: list[_PlannedTensor], cipher, nonce_base: bytes) -> None:
    """Pass 2: prelude, header, zero padding up to the data section, then each tensor at its
    offset."""
    file.write(prelude.pack())
    file.write(header)
    file.write(bytes(prelude.data_start - layout.PRELUDE_SIZE - len(header)))
    position = 0
    for item in planned:
        file.write(bytes(item.offset - position))
        for piece in item.stored_pieces(cipher, nonce_base):
            file.write(piece)
        position = item.offset + item.length
