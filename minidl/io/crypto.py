"""AES-GCM encryption of minidl files (needs the optional ``cryptography`` package).

Layout: the header and every tensor are encrypted separately, tensors in chunks of
``ENCRYPTION_CHUNK`` plaintext bytes, each chunk followed by its 16-byte GCM tag.  Each
file gets a random 96-bit nonce base (stored in the prelude); the header uses the nonce
``base XOR 0`` and the chunks, numbered 1, 2, ... in file order, use ``base XOR n``.
Binding each chunk's position into its nonce means chunks cannot be reordered, moved
between tensors, or spliced in from another file without the tag check failing.  The
header's authenticated data is the prelude's first 16 bytes (magic, version, flags).
Chunks being independent is what lets a large tensor be encrypted while streaming it
to disk, with memory bounded by one chunk.
"""

from __future__ import annotations

import os
from typing import Iterable, Iterator

from .errors import DecryptionError
from .header import ENCRYPTION_CHUNK
from .layout import NONCE_SIZE

KEY_SIZES = (16, 24, 32)


def check_key(key) -> bytes:
    """Validate a user key on save (TypeError/ValueError for programming mistakes)."""
    if not isinstance(key, (bytes, bytearray, memoryview)):
        raise TypeError(f"key must be bytes of length 16, 24 or 32, not {type(key).__name__}")
    key = bytes(key)
    if len(key) not in KEY_SIZES:
        raise ValueError(f"key must be 16, 24 or 32 bytes long (AES-128/192/256), got {len(key)}")
    return key


def new_cipher(key: bytes):
    """An AESGCM object; the import happens here so ``import minidl`` stays light."""
    try:
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError("encrypted minidl files need the 'cryptography' package: "
                          "pip install 'minidl[crypto]'") from exc
    return AESGCM(key)


def new_nonce_base() -> bytes:
    """Random per-file nonce base."""
    return os.urandom(NONCE_SIZE)


def chunk_nonce(base: bytes, counter: int) -> bytes:
    """Nonce of chunk number ``counter`` (0 is the header)."""
    return (int.from_bytes(base, "big") ^ counter).to_bytes(NONCE_SIZE, "big")


def rechunk(pieces: Iterable, size: int) -> Iterator[bytes]:
    """Regroup a stream of byte pieces into pieces of exactly ``size`` bytes (last may be shorter)."""
    pending = bytearray()
    for piece in pieces:
        view = memoryview(piece).cast("B")
        while len(view):
            if not pending and len(view) >= size:
                yield view[:size]
                view = view[size:]
                continue
            take = min(size - len(pending), len(view))
            pending += view[:take]
            view = view[take:]
            if len(pending) == size:
                yield bytes(pending)
                pending.clear()
    if pending:
        yield bytes(pending)


def encrypt_stream(cipher, base: bytes, first_counter: int, pieces: Iterable) -> Iterator[bytes]:
    """Encrypt a tensor's plaintext stream chunk by chunk (ciphertext + tag per chunk)."""
    for index, chunk in enumerate(rechunk(pieces, ENCRYPTION_CHUNK)):
        yield cipher.encrypt(chunk_nonce(base, first_counter + index), bytes(chunk), None)


def decrypt_chunk(path, cipher, base: bytes, counter: int, stored, what: str,
                  associated_data: bytes | None = None) -> bytes:
    """Decrypt and authenticate one chunk; DecryptionError on a wrong key or tampering."""
    try:
        return cipher.decrypt(chunk_nonce(base, counter), bytes(stored), associated_data)
    except Exception:  # cryptography raises InvalidTag
        raise DecryptionError(path, f"cannot decrypt {what}: wrong key, or the file was "
                                    "altered") from None
