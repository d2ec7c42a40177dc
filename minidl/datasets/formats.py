"""Reading the files of the standard image data sets, checking every length first.

IDX (MNIST, Fashion-MNIST; LeCun et al.): a big-endian header -- two zero bytes, a type code
(0x08 = unsigned byte), the number of dimensions -- then one 4-byte size per dimension and the
values, row-major. The CIFAR-10 binary batches: records of one label byte followed by
3 × 32 × 32 pixel bytes (the red plane, then green, then blue, each row by row).

These are read as data only (never unpickled, unlike CIFAR's Python batches), and a header
that does not describe exactly the bytes that follow is refused with the file's name.
"""

from __future__ import annotations

import gzip

import numpy as np

IDX_UNSIGNED_BYTE = 0x08
CIFAR_IMAGE_SHAPE = (3, 32, 32)
CIFAR_RECORD_BYTES = 1 + int(np.prod(CIFAR_IMAGE_SHAPE))


def read_idx(data: bytes, name: str, ndim: int) -> np.ndarray:
    """The uint8 array an IDX file holds (gzip-compressed or not), which must have ``ndim``
    dimensions; ``ValueError`` naming ``name`` otherwise."""
    if data[:2] == b"\x1f\x8b":
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError) as error:
            raise ValueError(f"{name}: not a readable gzip file ({error})") from None
    if len(data) < 4 or data[:2] != b"\x00\x00" or data[2] != IDX_UNSIGNED_BYTE:
        raise ValueError(f"{name}: not an IDX file of unsigned bytes (header "
                         f"{data[:4].hex()})")
    if data[3] != ndim:
        raise ValueError(f"{name}: holds {data[3]} dimensions, expected {ndim}")
    header = 4 + 4 * ndim
    if len(data) < header:
        raise ValueError(f"{name}: the header is cut short")
    shape = tuple(int(s) for s in np.frombuffer(data[4:header], dtype=">u4"))
    expected = header + int(np.prod(shape, dtype=np.int64))
    if len(data) != expected:
        raise ValueError(f"{name}: the header describes {shape} ({expected} bytes in all), "
                         f"the file has {len(data)} bytes")
    return np.frombuffer(data, dtype=np.uint8, offset=header).reshape(shape).copy()


def read_cifar_batch(data: bytes, name: str) -> tuple[np.ndarray, np.ndarray]:
    """``(images, labels)`` of a CIFAR-10 binary batch: uint8 (N, 3, 32, 32) and int64 (N,)."""
    if len(data) % CIFAR_RECORD_BYTES:
        raise ValueError(f"{name}: {len(data)} bytes is not a whole number of "
                         f"{CIFAR_RECORD_BYTES}-byte CIFAR records")
    records = np.frombuffer(data, dtype=np.uint8).reshape(-1, CIFAR_RECORD_BYTES)
    labels = records[:, 0].astype(np.int64)
    if labels.size and labels.max() > 9:
        raise ValueError(f"{name}: label {labels.max()} is not one of CIFAR-10's 10 classes")
    return records[:, 1:].reshape(-1, *CIFAR_IMAGE_SHAPE).copy(), labels
