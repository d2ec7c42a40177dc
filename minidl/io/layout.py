"""Byte layout of a minidl file (the constants ``SPEC.md`` describes).

    offset  size  field
    0       8     magic  b"\\x89MINIDL\\n"
    8       2     major version   (uint16 little-endian)
    10      2     minor version   (uint16 little-endian)
    12      4     flags           (uint32 little-endian; bit 0: encrypted)
    16      8     header length H (uint64 little-endian)
    24      8     header checksum (uint64 little-endian, over the H stored header bytes)
    32      12    nonce base      (AES-GCM; zero when not encrypted)
    44      8     prelude checksum (uint64 little-endian, over bytes 0..43; version 2)
    52      12    reserved, zero
    64      H     header (msgpack map; AES-GCM ciphertext when encrypted)
    ...           zero padding up to a multiple of 64
    D             data section: tensors at D + offset, each offset a multiple of 64

The fixed 64-byte prelude keeps the header, and therefore the data section, aligned;
every tensor starting on a 64-byte boundary lets readers map it into memory in place.

Version 1 files had no prelude checksum (bytes 44..63 were all reserved) and index
checksums over the tensor bytes alone; readers still accept them.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from .checksum import checksum

MAGIC = b"\x89MINIDL\n"
MAJOR_VERSION = 2
MINOR_VERSION = 0
# Major versions this reader understands: 1 (no prelude checksum, index checksums over
# the bytes alone) and 2 (this writer's).
READABLE_MAJOR_VERSIONS = (1, 2)
# Bytes 0..43 (magic to nonce base) are covered by the prelude checksum at 44..51.
CHECKED_PRELUDE_SIZE = 44
PRELUDE_SIZE = 64
ALIGNMENT = 64
FLAG_ENCRYPTED = 1
KNOWN_FLAGS = FLAG_ENCRYPTED
NONCE_SIZE = 12

# Caps that bound what a hostile file can make a reader allocate or compute.
MAX_HEADER_BYTES = 256 << 20
MAX_NDIM = 64
MAX_TENSORS = 1 << 20
MAX_NESTING = 64

_PRELUDE = struct.Struct("<8sHHIQQ12s20s")
_CHECKED_FIELDS = struct.Struct("<8sHHIQQ12s")
assert _PRELUDE.size == PRELUDE_SIZE and _CHECKED_FIELDS.size == CHECKED_PRELUDE_SIZE


def align_up(n: int, alignment: int = ALIGNMENT) -> int:
    """Smallest multiple of ``alignment`` that is >= n."""
    return (n + alignment - 1) // alignment * alignment


@dataclass(frozen=True)
class Prelude:
    """The fixed-size fields at the start of every minidl file."""

    major: int
    minor: int
    flags: int
    header_length: int
    header_checksum: int
    nonce_base: bytes
    reserved: bytes = bytes(20)

    @property
    def encrypted(self) -> bool:
        return bool(self.flags & FLAG_ENCRYPTED)

    @property
    def data_start(self) -> int:
        """Where the data section begins: right after the header, rounded up to 64."""
        return align_up(PRELUDE_SIZE + self.header_length)

    def pack(self) -> bytes:
        """The 64 bytes on disk; from version 2 on, with the prelude checksum filled in."""
        checked = _CHECKED_FIELDS.pack(MAGIC, self.major, self.minor, self.flags,
                                       self.header_length, self.header_checksum, self.nonce_base)
        if self.major < 2:
            return checked + self.reserved
        return checked + checksum(checked).to_bytes(8, "little") + bytes(12)

    @property
    def stored_checksum(self) -> int:
        """The prelude checksum as read from bytes 44..51 (version 2 and later)."""
        return int.from_bytes(self.reserved[:8], "little")

    @property
    def unused_bytes(self) -> bytes:
        """The bytes that must be zero: 44..63 in version 1, 52..63 from version 2 on."""
        return self.reserved if self.major < 2 else self.reserved[8:]

    @staticmethod
    def unpack(raw: bytes) -> tuple[bytes, "Prelude"]:
        """Split 64 raw bytes into (magic, Prelude); the caller validates the fields.

        ``reserved`` keeps bytes 44..63 as they are (the prelude checksum included).
        """
        magic, major, minor, flags, length, check, nonce, reserved = _PRELUDE.unpack(raw)
        return magic, Prelude(major, minor, flags, length, check, nonce, reserved)


def computed_prelude_checksum(raw: bytes) -> int:
    """The checksum a version-2 prelude must carry, from its first 44 bytes."""
    return checksum(raw[:CHECKED_PRELUDE_SIZE])
