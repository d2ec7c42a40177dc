"""Checking reader states before trusting them.

A reader's state is a plain dict: ``kind`` (which reader wrote it), ``version`` (of that layout),
the settings that decide *which* batches come out (batch size, seed, ...), and the progress
(epoch, position, ...). Restoring a state into a reader with different settings would not fail
loudly on its own -- it would just hand out different batches -- so every setting is compared
and the first mismatch is reported by name.
"""

from __future__ import annotations

import hashlib
import os

from ..validation import check_non_negative_int

STATE_VERSION = 1

# Bytes hashed at each end of a file to recognise it again without reading all of it.
FINGERPRINT_BYTES = 64 * 1024


def check_state(state, kind: str, settings: dict, progress_fields) -> None:
    """Raise ``ValueError`` naming the field when ``state`` was not written by an equal reader."""
    if not isinstance(state, dict):
        raise ValueError(f"state: expected a dict, got {type(state).__name__}")
    if state.get("kind") != kind:
        raise ValueError(f"state field 'kind' is {state.get('kind')!r}, this reader is {kind!r}")
    if state.get("version") != STATE_VERSION:
        raise ValueError(
            f"state field 'version' is {state.get('version')!r}, this reader reads {STATE_VERSION}"
        )
    for name, expected in settings.items():
        if name not in state:
            raise ValueError(f"state field {name!r} is missing")
        if state[name] != expected:
            raise ValueError(
                f"state field {name!r} is {state[name]!r} but this reader has {expected!r}"
            )
    for name in progress_fields:
        if name not in state:
            raise ValueError(f"state field {name!r} is missing")


def check_shard(rank, world_size) -> tuple[int, int]:
    """Validate a data-parallel ``(rank, world_size)`` pair."""
    world_size = check_non_negative_int("world_size", world_size, minimum=1)
    rank = check_non_negative_int("rank", rank)
    if rank >= world_size:
        raise ValueError(f"rank must be < world_size ({world_size}), got {rank}")
    return rank, world_size


def file_fingerprint(path: str) -> tuple[int, str]:
    """Return ``(size, hex digest of the first and last FINGERPRINT_BYTES)`` of a file.

    Modification times change when a file is copied, so they are left out; size plus both ends
    catch the usual accidents (a regenerated, truncated or appended file) in constant time.
    """
    size = os.path.getsize(path)
    digest = hashlib.sha256(str(size).encode())
    with open(path, "rb") as f:
        digest.update(f.read(FINGERPRINT_BYTES))
        if size > FINGERPRINT_BYTES:
            f.seek(max(FINGERPRINT_BYTES, size - FINGERPRINT_BYTES))
            digest.update(f.read())
    return size, digest.hexdigest()[:32]
